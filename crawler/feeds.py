"""Feed storage for local files whose rows survive a ``kill -9`` of the crawl.

``FEED_STORAGES = {"": ..., "file": "crawler.feeds.WriteThroughFileFeedStorage"}``
(set in :mod:`crawler.settings`, so ``-o``, ``-O``, ``FEEDS`` and the default
feed all use it).

Why: Scrapy's :class:`~scrapy.extensions.feedexport.FileFeedStorage` opens
the file with Python's default 8 KiB buffer, so the rows the exporter writes
stay in the process until the buffer fills or the feed closes; a ``kill -9``
drops them. The frontier meanwhile counts those pages as done and never
hands them out again, so no later run writes their rows either.

What makes writing each row through to the operating system enough, with no
other coupling to the frontier: Scrapy writes a row in the ``item_scraped``
signal (:class:`~scrapy.extensions.feedexport.FeedExporter`), which the
scraper sends while it processes the callback's output; the engine calls
``remove_request`` for the request only after that processing is complete,
and that hook is where the frontier queues the lease's release
(:meth:`crawler.scheduling.worker.WorkerFrontier.finished`), sent to
Redis later by a background flush. So when a page can first count as done in
Redis, its row is already in the kernel's page cache, which a killed process
cannot lose. A ``kill -9`` loses at most rows of pages whose lease was not
released: those leases expire and the pages are fetched again, their rows
written by the run that resumes (a page may then have a row in both runs'
files: at least once, never lost).

Cost: one ``write(2)`` per row, a few microseconds; nothing is synced on the
reactor thread. Each file is fsynced once, when Scrapy closes it (the end of
the crawl, or of each ``batch_item_count`` batch), on a thread. Not covered:
a power loss can still lose rows written since the last close (the embedded
frontier's own append-only file is synced every second, the WARC writer at
each file's end), and a feed with ``postprocessing`` (gzip, ...) buffers in
its compressor, so its rows are complete only at close.

On a full disk (or any other error writing): a row is written whole or not at
all - what part of it the OS took is cut back off (as the WARC files do,
:meth:`crawler.warc.openwarc.OpenWarc.append`), so the file never holds a torn
row, nor one merged with the next (as a buffer that kept a failed row's rest
would write it). A row that cannot be written is lost, but never without a
word: it is counted (stats ``feed/rows_lost``), one ERROR line says so when
writing starts failing (one per kind of error, not one per row), one WARNING
when rows are written again says how many were lost meanwhile, and one ERROR
at close gives the total. Nothing raises into Scrapy's ``item_scraped``
handler, which would log a traceback per item. Why the row is lost rather than
the crawl stopped: the WARC archive is the crawl's product and this feed its
metadata (the archive pipeline has written the page's record before its row
comes here), and the disk guard (:mod:`crawler.extensions.storage`, which
watches the feeds' folders too) pauses claiming pages before the disk fills,
so this is the last line: a disk filled by something else, or faster than the
guard looks. "A row" is one ``write`` of the exporter: a whole row for JSON
lines and CSV (the crawl's feeds); JSON and XML write a row in pieces, so a
lost piece can leave those documents malformed.

A feed with ``postprocessing`` writes compressed output, where dropping a piece
would spoil everything after it: what the OS does not take is instead held in
memory, in order, and written before the next piece or at close (one ERROR line
when holding starts, one WARNING when it is written). Only what still cannot be
written at close is lost: the file is then cut short, said in an ERROR line
(stats ``feed/bytes_lost``).
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from scrapy.extensions.feedexport import FileFeedStorage
from twisted.internet.threads import deferToThread

from crawler.warc.openwarc import write_all

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector
    from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)

_Bytes = bytes | bytearray | memoryview


class WriteThroughFileFeedStorage(FileFeedStorage):
    """Scrapy's local-file feed storage, each row written through to the OS at once."""

    def __init__(self, uri: str, *, feed_options: dict[str, Any] | None = None,
                 stats: StatsCollector | None = None) -> None:
        super().__init__(uri, feed_options=feed_options)
        self.stats = stats
        # Set when Scrapy wraps the file in compressors (PostProcessingManager).
        self.compressed = bool((feed_options or {}).get("postprocessing"))

    @classmethod
    def from_crawler(cls, crawler: Crawler, uri: str, *,
                     feed_options: dict[str, Any] | None = None) -> Self:
        """With the crawler's stats, where the rows lost are counted. ``uri``
        comes with its parameters (``FEED_URI_PARAMS``) already applied."""
        return cls(uri, feed_options=feed_options, stats=crawler.stats)

    def open(self, spider: Spider) -> IO[bytes]:
        path = Path(self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return _WriteThrough(path, self.write_mode, _Losses(self.path, self.stats),
                             compressed=self.compressed)

    def store(self, file: IO[bytes]) -> Deferred[None]:
        """Sync and close the finished file on a thread (a big file can take a while)."""
        return deferToThread(_sync_and_close, file)


class _WriteThrough(io.FileIO):
    """A feed file whose every ``write`` reaches the OS before it returns.

    A row goes in ``write(2)`` calls straight from the caller's bytes (a
    partial write is continued), never through a buffer that could keep a
    failed row's rest and write it in front of the next row. A failed row is
    cut back off and reported to :class:`_Losses`; ``write`` then returns 0
    and raises nothing. Compressed output (``compressed``) is a stream rather
    than rows: what the OS does not take is held and written first next time.
    """

    def __init__(self, path: Path, mode: str, losses: _Losses, *, compressed: bool) -> None:
        super().__init__(path, mode)
        self._losses = losses
        self._compressed = compressed
        self._held = bytearray()  # compressed output not written yet, in order
        self._torn_at: int | None = None  # where a torn row starts that is not cut off yet

    def write(self, data: _Bytes) -> int:  # type: ignore[override]
        """Write ``data`` through: its length, or 0 for a row lost (counted and said)."""
        self.fileno()  # a closed file raises, as FileIO's write does
        if self._compressed:
            return self._write_stream(data)
        return self._write_row(data)

    def _write_row(self, data: _Bytes) -> int:
        view = memoryview(data).cast("B")
        if not view:
            return 0
        fd = self.fileno()
        try:
            self._cut_torn_row()
            # Where the row begins: the file's end now, not a count kept here,
            # so a cut does not take what another writer appended before.
            start = os.lseek(fd, 0, os.SEEK_END)
        except OSError as error:
            self._losses.row_lost(error)
            return 0
        try:
            write_all(fd, view)
        except OSError as error:
            self._cut_back(start)
            self._losses.row_lost(error)
            return 0
        self._losses.written()
        return len(view)

    def _cut_back(self, start: int) -> None:
        """Cut the failed row's written part off (or before the next row, if this fails)."""
        self._torn_at = start
        with contextlib.suppress(OSError):  # else the next row's write tries again
            self._cut_torn_row()

    def _cut_torn_row(self) -> None:
        if self._torn_at is None:
            return
        os.ftruncate(self.fileno(), self._torn_at)
        os.lseek(self.fileno(), self._torn_at, os.SEEK_SET)
        self._torn_at = None

    def _write_stream(self, data: _Bytes) -> int:
        self._held += data
        self._write_held()
        return memoryview(data).nbytes

    def _write_held(self) -> bool:
        """Write the held compressed output; whether all of it is written."""
        held = len(self._held)
        try:
            while self._held:
                del self._held[:os.write(self.fileno(), self._held)]
        except OSError as error:
            self._losses.holding(error)
            return False
        self._losses.written(held)
        return True

    def tell(self) -> int:
        """The file's position, counting the output held (Scrapy's
        PostProcessingManager answers ``tell`` with this file's)."""
        return super().tell() + len(self._held)

    def flush(self) -> None:
        """Write what is held (rows have no buffer: each is through already)."""
        super().flush()  # a closed file raises
        if self._held:
            self._write_held()

    def close(self) -> None:
        """Close, after a last try at what is held; say what the file lacks."""
        if self.closed:
            return
        try:
            super().close()  # flushes first: the last try at what is held
        finally:
            self._losses.closed(len(self._held))


class _Losses:
    """What one feed file could not write, said once per condition, not once per row.

    A condition is the kind of error (``ENOSPC``, ``EIO``, ...): an ERROR line
    when it starts (or changes), a WARNING when writing works again.
    """

    def __init__(self, path: str, stats: StatsCollector | None) -> None:
        self.path = path
        self.stats = stats
        self.rows = 0  # rows lost since the file was opened
        self.rows_meanwhile = 0  # ... since writing last failed
        self.failing: int | None = None  # errno of the failure under way

    def row_lost(self, error: OSError) -> None:
        self.rows += 1
        self.rows_meanwhile += 1
        if self.stats is not None:
            self.stats.inc_value("feed/rows_lost")
        if self._starts(error):
            logger.error("Feed: could not write to %s: %s; rows are being lost "
                         "(feed/rows_lost counts them) until it can", self.path, error)

    def holding(self, error: OSError) -> None:
        if self._starts(error):
            logger.error("Feed: could not write to %s: %s; its compressed output is "
                         "held in memory until it can (lost only if it still cannot "
                         "at close)", self.path, error)

    def _starts(self, error: OSError) -> bool:
        """Whether ``error`` starts a new condition (and so is said)."""
        kind = error.errno if error.errno is not None else errno.EIO
        starts, self.failing = kind != self.failing, kind
        return starts

    def written(self, held: int = 0) -> None:
        """A write went through: said once, if writing had been failing."""
        if self.failing is None:
            return
        if held:
            logger.warning("Feed: writing to %s again; the compressed output held "
                           "meanwhile is written (%d bytes), nothing lost", self.path, held)
        else:
            logger.warning("Feed: writing to %s again; %s lost meanwhile",
                           self.path, _rows(self.rows_meanwhile))
        self.failing, self.rows_meanwhile = None, 0

    def closed(self, held: int) -> None:
        """At close: the rows (or compressed bytes) the file lacks, if any."""
        if self.rows:
            logger.error("Feed: %s missing from %s", _rows(self.rows), self.path)
        if held:
            if self.stats is not None:
                self.stats.inc_value("feed/bytes_lost", held)
            logger.error("Feed: %s is cut short: the last %d bytes of its compressed "
                         "output could not be written, so the rows in them are missing "
                         "(feed/bytes_lost)", self.path, held)


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def _sync_and_close(file: IO[bytes]) -> None:
    if file.closed:  # a post-processing plugin may have closed it already
        return
    try:
        file.flush()
        os.fsync(file.fileno())
    finally:
        file.close()
