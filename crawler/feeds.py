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
(:meth:`crawler.scheduling.scheduler.FrontierScheduler._finished`), sent to
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
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import IO, TYPE_CHECKING

from scrapy.extensions.feedexport import FileFeedStorage
from twisted.internet.threads import deferToThread

if TYPE_CHECKING:
    from scrapy import Spider
    from twisted.internet.defer import Deferred


class _WriteThrough(io.BufferedWriter):
    """A file whose every ``write`` reaches the OS before it returns.

    A ``BufferedWriter`` flushed after each write, rather than an unbuffered
    ``FileIO``: its ``flush`` writes the whole row even if the kernel takes it
    in pieces, so a row is never cut short by a partial write.
    """

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        written = super().write(data)
        self.flush()
        return written


class WriteThroughFileFeedStorage(FileFeedStorage):
    """Scrapy's local-file feed storage, each row written through to the OS at once."""

    def open(self, spider: Spider) -> IO[bytes]:
        path = Path(self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return _WriteThrough(io.FileIO(path, self.write_mode))

    def store(self, file: IO[bytes]) -> Deferred[None]:
        """Sync and close the finished file on a thread (a big file can take a while)."""
        return deferToThread(_sync_and_close, file)


def _sync_and_close(file: IO[bytes]) -> None:
    if file.closed:  # a post-processing plugin may have closed it already
        return
    try:
        file.flush()
        os.fsync(file.fileno())
    finally:
        file.close()
