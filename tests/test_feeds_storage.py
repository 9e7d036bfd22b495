"""The feed on a full disk (crawler/feeds.py): no row lost without a word.

On a real small filesystem (a tmpfs, tests/tmpfs.py) filled by a ballast
file, with Scrapy's own exporter and, for what Scrapy sees, its own
FeedExporter fed through the ``item_scraped`` signal as the scraper sends it.
A row bigger than what is left of the file's last page (``BIG``) makes the
kernel take part of it before it says ENOSPC: the torn part must be cut off.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import pytest_twisted
from scrapy import Spider, signals
from scrapy.exporters import JsonLinesItemExporter
from scrapy.extensions.feedexport import FeedExporter
from scrapy.extensions.postprocessing import PostProcessingManager
from scrapy.statscollectors import MemoryStatsCollector, StatsCollector
from scrapy.utils.test import get_crawler

from crawler.feeds import WriteThroughFileFeedStorage, _sync_and_close
from tests.tmpfs import SmallFs, small_fs

#: More than a page: never fits in what is left of the file's last page.
BIG = "x" * 6000
SIZE = 1 << 20
GZIP = "scrapy.extensions.postprocessing.GzipPlugin"
STORAGES = {"": "crawler.feeds.WriteThroughFileFeedStorage",
            "file": "crawler.feeds.WriteThroughFileFeedStorage"}


class _Spider(Spider):
    name = "fulldisk"


@pytest.fixture
def fs() -> Iterator[SmallFs]:
    with small_fs(SIZE) as mounted:
        yield mounted


@pytest.fixture
def stats() -> StatsCollector:
    return MemoryStatsCollector(get_crawler(_Spider))


class _Feed:
    """A JSON-lines feed on the storage under test, as Scrapy's FeedSlot drives it."""

    def __init__(self, path: Path, stats: StatsCollector | None,
                 feed_options: dict[str, Any] | None = None) -> None:
        self.path = path
        options = {"overwrite": True, **(feed_options or {})}
        self.storage = WriteThroughFileFeedStorage(str(path), feed_options=options, stats=stats)
        self.raw = self.storage.open(None)  # type: ignore[arg-type]
        self.file: IO[bytes] = self.raw
        if "postprocessing" in options:
            self.file = PostProcessingManager(options["postprocessing"], self.raw, options)  # type: ignore[assignment]
        self.exporter = JsonLinesItemExporter(self.file)
        self.exporter.start_exporting()

    def row(self, n: int, pad: str = "") -> None:
        self.exporter.export_item({"n": n, "pad": pad})

    def close(self) -> None:
        """What FeedExporter does at close: finish, close the plugins, store."""
        self.exporter.finish_exporting()
        if self.file is not self.raw:
            self.file.close()
        _sync_and_close(self.raw)


def numbers(path: Path) -> list[int]:
    """The rows' ``n``, in file order; every line must be a whole JSON row."""
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), "the file ends in a torn row"
    return [json.loads(line)["n"] for line in data.splitlines()]


def feed_records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "crawler.feeds" and r.levelno == level]


def test_rows_before_the_disk_filled_stay_and_failed_rows_leave_no_trace(
        fs: SmallFs, stats: StatsCollector, caplog: pytest.LogCaptureFixture) -> None:
    feed = _Feed(fs.path / "items.jsonl", stats)
    for n in range(3):
        feed.row(n)
    before = feed.path.read_bytes()
    ballast = fs.fill()
    assert fs.free() == 0
    for n in range(3, 8):
        feed.row(n, BIG)  # the kernel takes part of each, then says ENOSPC
    assert feed.path.read_bytes() == before  # no torn tail, nothing merged
    assert stats.get_value("feed/rows_lost") == 5
    assert feed_records(caplog, logging.ERROR) == [
        f"Feed: could not write to {feed.path}: [Errno 28] No space left on device; "
        "rows are being lost (feed/rows_lost counts them) until it can"]
    ballast.unlink()
    feed.close()
    assert numbers(feed.path) == [0, 1, 2]


def test_writing_resumes_once_room_is_made_and_says_what_was_lost(
        fs: SmallFs, stats: StatsCollector, caplog: pytest.LogCaptureFixture) -> None:
    feed = _Feed(fs.path / "items.jsonl", stats)
    feed.row(0)
    ballast = fs.fill()
    for n in (1, 2, 3):
        feed.row(n, BIG)
    assert feed_records(caplog, logging.WARNING) == []
    ballast.unlink()
    feed.row(4, BIG)
    feed.row(5)
    assert numbers(feed.path) == [0, 4, 5]  # written through at once, as ever
    assert feed_records(caplog, logging.WARNING) == [
        f"Feed: writing to {feed.path} again; 3 rows lost meanwhile"]
    feed.close()
    assert numbers(feed.path) == [0, 4, 5]
    assert stats.get_value("feed/rows_lost") == 3
    assert feed_records(caplog, logging.ERROR)[1:] == [f"Feed: 3 rows missing from {feed.path}"]


def test_each_outage_is_said_once_and_the_total_at_close(
        fs: SmallFs, stats: StatsCollector, caplog: pytest.LogCaptureFixture) -> None:
    """Two outages: an ERROR and a WARNING each (not a line per row); the
    close gives the total of both."""
    feed = _Feed(fs.path / "items.jsonl", stats)
    feed.row(0)
    for first, last in ((1, 4), (6, 6)):
        ballast = fs.fill()
        for n in range(first, last + 1):
            feed.row(n, BIG)
        ballast.unlink()
        feed.row(last + 1)
    feed.close()
    assert numbers(feed.path) == [0, 5, 7]
    assert stats.get_value("feed/rows_lost") == 5
    errors = feed_records(caplog, logging.ERROR)
    assert [e.split(":")[0] + ": " + e.split("; ")[-1] for e in errors[:2]] == [
        "Feed: rows are being lost (feed/rows_lost counts them) until it can"] * 2
    assert errors[2:] == [f"Feed: 5 rows missing from {feed.path}"]
    assert feed_records(caplog, logging.WARNING) == [
        f"Feed: writing to {feed.path} again; 4 rows lost meanwhile",
        f"Feed: writing to {feed.path} again; 1 row lost meanwhile"]


def test_a_feed_that_loses_nothing_says_nothing(
        fs: SmallFs, stats: StatsCollector, caplog: pytest.LogCaptureFixture) -> None:
    feed = _Feed(fs.path / "items.jsonl", stats)
    for n in range(3):
        feed.row(n, BIG)
    feed.close()
    assert numbers(feed.path) == [0, 1, 2]
    assert stats.get_value("feed/rows_lost") is None
    assert feed_records(caplog, logging.WARNING) == feed_records(caplog, logging.ERROR) == []


@pytest_twisted.ensureDeferred
async def test_scrapy_sees_no_error_and_the_crawl_stats_count_the_rows(
        fs: SmallFs, caplog: pytest.LogCaptureFixture) -> None:
    """Through Scrapy's FeedExporter: the storage comes from FEED_STORAGES with
    the crawler's stats, the URI with its parameters; a row that cannot be
    written raises nothing into the item_scraped handler (Scrapy would log a
    traceback per item), and the feed is still stored at close."""
    crawler = get_crawler(_Spider, {
        "FEEDS": {str(fs.path / "%(name)s.jsonl"): {"format": "jsonlines"}},
        "FEED_STORAGES": STORAGES})
    spider = _Spider.from_crawler(crawler)
    exporter = FeedExporter.from_crawler(crawler)
    exporter.open_spider(spider)
    path = fs.path / "fulldisk.jsonl"
    scraped = lambda n, pad="": crawler.signals.send_catch_log(  # noqa: E731
        signals.item_scraped, item={"n": n, "pad": pad}, response=None, spider=spider)
    scraped(0)
    ballast = fs.fill()
    for n in (1, 2):
        scraped(n, BIG)
    ballast.unlink()
    scraped(3)
    await exporter.close_spider(spider)
    assert numbers(path) == [0, 3]
    assert crawler.stats.get_value("feed/rows_lost") == 2
    assert crawler.stats.get_value("feedexport/success_count/WriteThroughFileFeedStorage") == 1
    assert not [r for r in caplog.records if r.exc_info or "signal handler" in r.getMessage()]
    assert feed_records(caplog, logging.ERROR)[1:] == [f"Feed: 2 rows missing from {path}"]


def _noise(n: int) -> str:
    """Incompressible text: gzip gives its output to the file as it goes."""
    return os.urandom(3000).hex() + str(n)


def test_a_compressed_feed_holds_its_output_until_room_is_made(
        fs: SmallFs, stats: StatsCollector, caplog: pytest.LogCaptureFixture) -> None:
    """Dropping a piece of a gzip stream would spoil the rest, so nothing is
    dropped: what the disk did not take is written once it can, in order."""
    feed = _Feed(fs.path / "items.jsonl.gz", stats, {"postprocessing": [GZIP]})
    ballast = fs.fill()
    for n in range(20):
        feed.row(n, _noise(n))
    assert feed_records(caplog, logging.ERROR) == [
        f"Feed: could not write to {feed.path}: [Errno 28] No space left on device; "
        "its compressed output is held in memory until it can (lost only if it still "
        "cannot at close)"]
    ballast.unlink()
    for n in range(20, 40):
        feed.row(n, _noise(n))
    warnings = feed_records(caplog, logging.WARNING)
    assert len(warnings) == 1
    assert warnings[0].startswith(f"Feed: writing to {feed.path} again; the compressed "
                                  "output held meanwhile is written (")
    feed.close()
    rows = [json.loads(line)["n"] for line in gzip.decompress(feed.path.read_bytes()).splitlines()]
    assert rows == list(range(40))
    assert stats.get_value("feed/rows_lost") is None
    assert stats.get_value("feed/bytes_lost") is None
    assert len(feed_records(caplog, logging.ERROR)) == 1


def test_a_compressed_feed_still_full_at_close_says_it_is_cut_short(
        fs: SmallFs, stats: StatsCollector, caplog: pytest.LogCaptureFixture) -> None:
    feed = _Feed(fs.path / "items.jsonl.gz", stats, {"postprocessing": [GZIP]})
    for n in range(10):
        feed.row(n, _noise(n))
    ballast = fs.fill()
    for n in range(10, 20):
        feed.row(n, _noise(n))
    feed.close()
    ballast.unlink()
    lost = stats.get_value("feed/bytes_lost")
    assert lost > 0
    assert feed_records(caplog, logging.ERROR)[1:] == [
        f"Feed: {feed.path} is cut short: the last {lost} bytes of its compressed output "
        "could not be written, so the rows in them are missing (feed/bytes_lost)"]
    # What is there is the stream's beginning, unspoilt: it decompresses up to
    # the cut, the rows in order from the first.
    text = zlib.decompressobj(wbits=31).decompress(feed.path.read_bytes())
    rows = [json.loads(line)["n"] for line in text.split(b"\n")[:-1]]
    assert rows == list(range(len(rows))) and len(rows) > 1
