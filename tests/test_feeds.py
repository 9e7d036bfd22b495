"""The write-through feed storage (crawler/feeds.py), with Scrapy's own exporters."""

from __future__ import annotations

import gzip
from pathlib import Path

from scrapy.exporters import CsvItemExporter, JsonLinesItemExporter
from scrapy.extensions.postprocessing import PostProcessingManager

from crawler.feeds import WriteThroughFileFeedStorage, _sync_and_close


def test_each_row_is_in_the_file_before_the_next_is_written(tmp_path: Path) -> None:
    """Another reader (as after a kill -9: only what the OS has) sees every row at once."""
    path = tmp_path / "out" / "items.jsonl"  # the folder is created, as Scrapy's does
    storage = WriteThroughFileFeedStorage(str(path), feed_options={"overwrite": True})
    file = storage.open(None)  # type: ignore[arg-type]
    exporter = JsonLinesItemExporter(file)
    exporter.start_exporting()
    for n in range(3):
        exporter.export_item({"url": f"http://a.test/{n}"})
        assert path.read_bytes().count(b"\n") == n + 1
    _sync_and_close(file)
    assert file.closed and path.read_text().splitlines()[-1] == '{"url": "http://a.test/2"}'


def test_append_mode_and_csv_rows_write_through(tmp_path: Path) -> None:
    path = tmp_path / "items.csv"
    path.write_bytes(b"kept\n")
    file = WriteThroughFileFeedStorage(str(path)).open(None)  # type: ignore[arg-type]
    exporter = CsvItemExporter(file, fields_to_export=["url"])
    exporter.start_exporting()
    exporter.export_item({"url": "http://a.test/"})
    assert path.read_bytes() == b"kept\nurl\r\nhttp://a.test/\r\n"
    exporter.finish_exporting()
    _sync_and_close(file)


def test_postprocessed_feed_is_complete_at_close(tmp_path: Path) -> None:
    """gzip buffers in its compressor (documented); closing still gives a whole file."""
    path = tmp_path / "items.jsonl.gz"
    raw = WriteThroughFileFeedStorage(str(path)).open(None)  # type: ignore[arg-type]
    file = PostProcessingManager(["scrapy.extensions.postprocessing.GzipPlugin"], raw, {})
    exporter = JsonLinesItemExporter(file)
    exporter.export_item({"url": "http://a.test/"})
    file.close()  # what Scrapy's FeedExporter does before store()
    _sync_and_close(raw)
    assert gzip.decompress(path.read_bytes()) == b'{"url": "http://a.test/"}\n'
