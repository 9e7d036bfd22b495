"""Item pipeline: the crawl's WARC archive, and where each page went in it.

:class:`Archive` is the crawl's archive: from the settings it builds, when
the spider opens, the rotating WARC files (:mod:`crawler.warc.files`), the
digest index shared through the frontier's Redis and the writer thread
(:mod:`crawler.warc.writer`), and it drains and closes them when the spider
closes - before the frontier closes, since the digest index lives there.
:class:`crawler.middlewares.warc.WarcCaptureMiddleware` feeds it every
response; :class:`WarcPipeline` owns its life cycle and waits for each page's
record, then writes its file name and offset into the item (``warc_file``,
``warc_offset``), so the JSON-lines metadata points into the archive.

Settings (``WARC_*``): ``WARC_ENABLED``; ``WARC_DIR`` (default ``output/warc``,
whatever ``JOBDIR`` is: the archive is the crawl's product, not job state, so
deleting ``JOBDIR`` to start afresh leaves it); ``WARC_PREFIX`` (``%(name)s``: the spider's name);
``WARC_MAX_SIZE`` (rotate past this many bytes, 1 GB); ``WARC_SYNC_INTERVAL``
(fsync the file being written this often, seconds; and at each rotation and
close); ``WARC_QUEUE_MAX_BYTES``
(the writer queue's bound, 64 MiB); ``WARC_REVISITS`` (identical payloads as
``revisit`` records); ``WARC_DIGEST_INDEX`` (a name: crawl ids that give the
same one share their digest index, so a new crawl id does not archive again
what an earlier one holds) and ``WARC_DIGEST_INDEX_MAX`` (its bound, in
entries); ``WARC_OPERATOR`` and ``WARC_DESCRIPTION`` (in each file's
``warcinfo``).

A ``WARC_DIR`` that cannot be written when the spider opens stops the crawl
before its first request: one ERROR line, finish reason ``warc_unwritable``,
exit code 1. A page whose record could not be written later is not counted
done (:mod:`crawler.scheduling.leases`) and has no row in the feed: its item
is dropped here, quietly, and the page comes back when it is fetched again.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import CloseSpider, DropItem, NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.threads import deferToThread

import crawler
from crawler.frontier.keys import Keys, crawl_namespace
from crawler.items import PageItem
from crawler.scheduling.opening import worker_identity
from crawler.scheduling.worker import frontier_of
from crawler.warc.digests import DigestIndex
from crawler.warc.files import WarcFiles, Written
from crawler.warc.writer import ArchiveWriter, condition, probe_writable

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: Where the archive goes when ``WARC_DIR`` is empty: next to the default feed.
DEFAULT_WARC_DIR = Path("output", "warc")
#: The finish reason of a crawl whose WARC_DIR could not be written at start.
WARC_UNWRITABLE = "warc_unwritable"


def warc_dir(settings: Any) -> Path:
    """``WARC_DIR``, else ``output/warc``; never inside ``JOBDIR``.

    ``JOBDIR`` is the job's state (the frontier), and deleting it is the
    documented way to start a crawl afresh: an archive kept there would go
    with it. File names are unique per worker, time and serial, so crawls
    sharing one folder never overwrite each other's files.
    """
    return Path(settings.get("WARC_DIR") or DEFAULT_WARC_DIR)


def warc_dir_problem(settings: Any, worker: str) -> str | None:
    """Why the archive's folder cannot be written, as one line (None: it can, or
    the archive is off). ``scrapy crawl`` asks before the crawl is built, so
    that a crawl that cannot start makes no output; the pipeline asks again."""
    if not settings.getbool("WARC_ENABLED"):
        return None
    directory = warc_dir(settings)
    if directory.exists() and not directory.is_dir():
        return (f"WARC: WARC_DIR {directory.resolve()} is a file, not a folder: give a "
                "folder (-s WARC_DIR=DIR) or turn the archive off (-s WARC_ENABLED=False)")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe_writable(directory, worker)
    except OSError as exc:
        return f"WARC: cannot write to WARC_DIR {directory.resolve()}: {condition(exc)}"
    return None


class Archive:
    """One crawl's archive: its settings, and its writer while the spider is open."""

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        self.crawler = crawler
        self.enabled = s.getbool("WARC_ENABLED")
        self.directory = warc_dir(s)
        self.prefix_template: str = s.get("WARC_PREFIX") or "%(name)s"
        self.max_size = s.getint("WARC_MAX_SIZE")
        self.queue_bytes = s.getint("WARC_QUEUE_MAX_BYTES")
        self.sync_s = s.getfloat("WARC_SYNC_INTERVAL", 10.0)
        self.revisits = s.getbool("WARC_REVISITS")
        self.writer: ArchiveWriter | None = None

    def open(self) -> None:
        """Start the writer; a WARC_DIR that cannot be written stops the crawl
        here, before its first request (one line, exit code 1)."""
        spider = self.crawler.spider
        assert spider is not None
        worker = worker_identity(self.crawler.settings)
        problem = warc_dir_problem(self.crawler.settings, worker)
        if problem is not None:
            logger.error("%s; the crawl stops before its first request", problem,
                         extra={"warc_dir": str(self.directory.resolve())})
            raise CloseSpider(WARC_UNWRITABLE) from None
        files = WarcFiles(self.directory, self.prefix_template % {"name": spider.name},
                          worker, self.max_size, self.info(spider.name, worker))
        self.writer = ArchiveWriter(files, self._digest_index(), self.queue_bytes,
                                    self.crawler.stats, revisits=self.revisits,
                                    sync_s=self.sync_s)
        self.writer.start()
        logger.info("WARC: writing to %s", self.directory.resolve(),
                    extra={"warc_dir": str(self.directory.resolve())})

    async def close(self) -> None:
        writer, self.writer = self.writer, None  # no new records from here on
        if writer is None:
            return
        paths = await maybe_deferred_to_future(deferToThread(writer.close))
        self.crawler.stats.set_value("warc/files", len(paths))
        logger.info("WARC: %d file(s) in %s", len(paths), self.directory.resolve(),
                    extra={"warc_dir": str(self.directory.resolve()), "warc_files": len(paths)})

    def info(self, spider_name: str, worker: str) -> dict[str, str]:
        """The ``warcinfo`` fields at the start of every file."""
        s = self.crawler.settings
        fields = {
            "software": f"broadcrawl/{crawler.__version__} (Scrapy-based)",
            "format": "WARC File Format 1.1",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/"
                          "warc-format/warc-1.1/",
            "isPartOf": spider_name,
            "hostname": socket.gethostname(),
            "worker": worker,
            "http-header-user-agent": s.get("USER_AGENT") or "",
            "robots": "obey (RFC 9309)" if s.getbool("ROBOTSTXT_OBEY") else "ignore",
        }
        for name, setting in (("operator", "WARC_OPERATOR"), ("description", "WARC_DESCRIPTION")):
            if s.get(setting):
                fields[name] = s.get(setting)
        return fields

    def _digest_index(self) -> DigestIndex:
        """In the frontier's Redis (shared by the crawl's workers), else in memory."""
        frontier = frontier_of(self.crawler)
        if frontier is None:
            return DigestIndex()
        s, spider = self.crawler.settings, self.crawler.spider
        shared = s.get("WARC_DIGEST_INDEX") or ""
        key = frontier.keys.warc_digests()
        if shared and spider is not None:
            base = crawl_namespace(s.get("FRONTIER_NAMESPACE", "frontier:%(spider)s"),
                                   spider.name)
            key = Keys.shared_warc_digests(base, shared)
        return DigestIndex(frontier.sync_client(), key, s.getint("WARC_DIGEST_INDEX_MAX"))


class WarcPipeline:
    """Opens and closes the archive; points each page item at its record."""

    def __init__(self, archive: Archive) -> None:
        self.archive = archive

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        archive = Archive(crawler)
        if not archive.enabled:
            raise NotConfigured("WARC_ENABLED is off")
        return cls(archive)

    async def open_spider(self) -> None:
        self.archive.open()

    async def close_spider(self) -> None:
        await self.archive.close()

    async def process_item(self, item: Any) -> Any:
        if not isinstance(item, PageItem) or item.warc is None:
            return item
        record = item.warc
        item.warc = None  # the Deferred is not data
        outcome = await maybe_deferred_to_future(record)
        if isinstance(outcome, Exception):
            # The page goes back to its queue; its row comes when it is archived.
            raise DropItem(f"not archived ({condition(outcome)}): fetched again later",
                           log_level="DEBUG")
        if isinstance(outcome, Written):
            item.warc_file = outcome.name
            item.warc_offset = outcome.offset
        return item


def archive_of(crawler: Crawler) -> Archive | None:
    """The crawl's archive, which its WARC pipeline owns (None: archiving is
    off, or the engine is not made yet: components ask once it is, at
    ``engine_started`` or later)."""
    try:
        pipeline = crawler.get_item_pipeline(WarcPipeline)
    except RuntimeError:  # before the engine
        return None
    return pipeline.archive if pipeline is not None else None
