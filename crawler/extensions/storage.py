"""The disk guard: a worker whose disk is (nearly) full stops claiming URLs.

A page fetched and not archived is a page fetched for nothing, so a worker
does not fetch what it could not keep. Every ``STORAGE_CHECK_INTERVAL``
seconds (one ``statvfs`` per folder, on a thread: a hung network mount must
not stall the reactor) it looks at the folders the crawl writes to: WARC_DIR,
the job folder (JOBDIR, or the embedded frontier's folder: Redis's own files)
and the folders of local feed files. When one has less than ``WARC_MIN_FREE``
free, or the archive could not write a record (a read-only remount, EIO,
permission denied), the worker pauses
(:meth:`crawler.scheduling.scheduler.FrontierScheduler.pause`): it claims
nothing, gives back what it claimed and has not started, finishes what is in
flight and renews its leases. The pause shows in ``scrapy frontier status``,
in ``storage/paused`` and the ``crawler_storage_paused`` gauge; one WARNING
says where and why, one INFO line when it resumes by itself. Other workers,
with room of their own, carry on; a finite crawl waits for the paused one's
work rather than end (the operator makes room, or stops it: its URLs stay in
the frontier).

Records the archive could not write, or feed rows lost, pause the worker the
same way. Such a pause ends when a probe (a page-sized file written, synced
and removed in every folder watched) succeeds, tried after 1 s, then less
often (up to a minute apart); if writing still fails, the next failure
pauses it again.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThread

from crawler.diskspace import RESUME_MARGIN, MinFree, human, parse_min_free
from crawler.pipelines.warc import Archive, archive_of
from crawler.scheduling.opening import embedded_folder, worker_identity
from crawler.scheduling.scheduler import scheduler_of
from crawler.warc.writer import condition, probe_writable

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: Who pauses the frontier (its pause table's key).
SOURCE = "storage"
#: The longest wait between two probes of an archive that failed to write.
PROBE_MAX_S = 60.0


@dataclass(frozen=True, slots=True)
class Place:
    """A folder the crawl writes to, with the setting that names it."""

    label: str  # "WARC_DIR", "JOBDIR", "frontier folder", "feed"
    path: Path


@dataclass(frozen=True, slots=True)
class Reading:
    """One place's free space (``error``: statvfs failed)."""

    place: Place
    free: int = 0
    minimum: int = 0
    error: str = ""


class StorageGuard:
    """Pauses this worker's claims while a folder it writes to is short of room."""

    def __init__(self, crawler: Crawler, min_free: MinFree, interval_s: float) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.min_free = min_free
        self.interval_s = interval_s
        self.places: list[Place] = []
        #: The WARC pipeline's archive, once the spider is open (None: archiving is off).
        self.archive: Archive | None = None
        self.why = ""  # why the worker is paused ("": it is not)
        self.paused_at = 0.0
        self._loop: LoopingCall | None = None
        self._looking = False
        self._seen_records = 0  # the archive's failed records, at the last look
        self._seen_rows = 0  # the feed's lost rows, at the last look
        self._failed = ""  # what could not be written, until a probe writes
        self._failed_at = -PROBE_MAX_S
        self._probe_at = 0.0
        self._probe_gap = 1.0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        s = crawler.settings
        interval = s.getfloat("STORAGE_CHECK_INTERVAL", 1.0)
        if interval <= 0:
            raise NotConfigured("STORAGE_CHECK_INTERVAL is 0")
        try:
            min_free = parse_min_free(s.get("WARC_MIN_FREE", 0))
        except ValueError as exc:
            raise NotConfigured(str(exc)) from exc
        guard = cls(crawler, min_free, interval)
        crawler.signals.connect(guard.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(guard.spider_closed, signal=signals.spider_closed)
        return guard

    def spider_opened(self) -> None:
        self.archive = archive_of(self.crawler)
        if self.archive is not None and self.archive.writer is None:
            return  # WARC_DIR cannot be written: the crawl is stopping already
        self.places = guarded_places(self.crawler, self.archive)
        self.stats.set_value("storage/paused", 0)
        self._loop = LoopingCall(self._look)
        self._loop.start(self.interval_s, now=True)

    def spider_closed(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if self.why:
            self._paused_for(time.monotonic())

    # ------------------------------------------------------------ reactor side

    def _look(self) -> None:
        if self._looking or not self.places:
            return
        self._looking = True
        now = time.monotonic()
        failed = self._new_failures(now)
        if failed:  # pause first; the probe comes after a while
            self._failed = failed
            self._probe_later(now)
        probe = bool(self._failed) and not failed and now >= self._probe_at
        deferToThread(self._read, probe).addBoth(self._judge)

    def _new_failures(self, now: float) -> str:
        """What could not be written since the last look ("": nothing): the
        archive's records, the feed's rows."""
        failed = []
        archive = self.archive
        writer = archive.writer if archive is not None else None
        if archive is not None and writer is not None and writer.failures > self._seen_records:
            self._seen_records = writer.failures
            failed.append(f"WARC_DIR {archive.directory}: cannot write: "
                          f"{writer.failing or 'a record failed'}")
        rows = int(self.stats.get_value("feed/rows_lost") or 0)
        if rows > self._seen_rows:
            failed.append(f"feed: {rows - self._seen_rows} row(s) could not be written")
            self._seen_rows = rows
        if failed:
            if now - self._failed_at > PROBE_MAX_S:  # calm for a while: probe soon again
                self._probe_gap = 1.0
            self._failed_at = now
        return "; ".join(failed)

    def _judge(self, result: Any) -> None:
        self._looking = False
        if not isinstance(result, tuple):  # the thread failed: look again next time
            logger.debug("Storage: could not read free space: %s", result)
            return
        readings, probed = result
        for reading in readings:
            self.stats.set_value(f"storage/free_bytes/{_key(reading.place.label)}", reading.free)
        if probed is not None:
            self._probed(probed)
        short = [r for r in readings if r.error or r.free < r.minimum]
        if short or self._failed:
            self._pause(short)
        elif self.why and all(r.free >= r.minimum * RESUME_MARGIN for r in readings):
            self._resume(readings)

    def _probed(self, error: str) -> None:
        if error:
            self._failed = error
            self._probe_later(time.monotonic())
        else:  # written: let pages come again (a new failure pauses again)
            self._failed = ""

    def _probe_later(self, now: float) -> None:
        """The next probe after the current gap, which doubles (up to PROBE_MAX_S)."""
        self._probe_at = now + self._probe_gap
        self._probe_gap = min(self._probe_gap * 2, PROBE_MAX_S)

    def _pause(self, short: list[Reading]) -> None:
        if self.why:
            return  # said once; the status keeps the first reason
        why = "; ".join(filter(None, [self._failed,
                                      *(_why(r, self.min_free) for r in short)]))
        self.why = why
        self.paused_at = time.monotonic()
        self.stats.set_value("storage/paused", 1)
        self.stats.inc_value("storage/pauses")
        scheduler = scheduler_of(self.crawler)  # (open or not yet: the pause holds)
        if scheduler is not None:
            scheduler.pause(SOURCE, why)
        logger.warning("Storage: %s: this worker claims no new URLs until there is room "
                       "(it finishes what is in flight; other workers carry on)", why,
                       extra={"storage": why})

    def _resume(self, readings: list[Reading]) -> None:
        now = time.monotonic()
        paused_s = self._paused_for(now)
        self.why = ""
        self.stats.set_value("storage/paused", 0)
        scheduler = scheduler_of(self.crawler)
        if scheduler is not None:
            scheduler.resume(SOURCE)
        free = ", ".join(f"{r.place.label} {human(r.free)}" for r in readings)
        logger.info("Storage: room again (%s free): claiming URLs again after %.0f s paused",
                    free, paused_s)

    def _paused_for(self, now: float) -> float:
        paused = now - self.paused_at
        self.stats.inc_value("storage/paused_seconds", round(paused, 1))
        self.paused_at = now
        return paused

    # ------------------------------------------------------------ thread side

    def _read(self, probe: bool) -> tuple[list[Reading], str | None]:
        """Every place's free space, and the probe's outcome ("" written, None: no probe)."""
        readings = [self._reading(place) for place in self.places]
        return readings, self._probe() if probe else None

    def _probe(self) -> str:
        """Write a probe file in every folder watched: "" if each was written, else
        the first that was not, and why."""
        worker = worker_identity(self.crawler.settings)
        for place in self.places:
            try:
                place.path.mkdir(parents=True, exist_ok=True)
                probe_writable(place.path, worker)
            except OSError as exc:
                return f"{place.label} {place.path}: cannot write: {condition(exc)}"
        return ""

    def _reading(self, place: Place) -> Reading:
        try:
            st = os.statvfs(_existing(place.path))
        except OSError as exc:
            return Reading(place, error=condition(exc))
        free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
        return Reading(place, free, self.min_free.of(total))


def guarded_places(crawler: Crawler, archive: Archive | None) -> list[Place]:
    """The folders this crawl writes to, one per filesystem and label."""
    s = crawler.settings
    places: list[Place] = []
    if archive is not None:
        places.append(Place("WARC_DIR", archive.directory))
    scheduler = scheduler_of(crawler)
    jobdir = s.get("JOBDIR")
    if jobdir:
        places.append(Place("JOBDIR", Path(jobdir)))
    elif scheduler is not None and scheduler.embedded is not None and crawler.spider:
        places.append(Place("frontier folder", embedded_folder(None, crawler.spider.name)))
    for uri in s.getdict("FEEDS"):
        folder = feed_folder(str(uri))
        if folder is not None:
            places.append(Place("feed", folder))
    return _one_per_filesystem(places)


def feed_folder(uri: str) -> Path | None:
    """The local folder of a feed URI (None: not a local file), up to its
    first templated part (``output/%(name)s/...`` -> ``output``)."""
    if "://" in uri:
        if not uri.startswith("file://"):
            return None
        uri = uri.removeprefix("file://")
    parts = Path(uri).parent.parts
    kept = []
    for part in parts:
        if "%(" in part:
            break
        kept.append(part)
    return Path(*kept) if kept else Path()


def _one_per_filesystem(places: list[Place]) -> list[Place]:
    """One place per (filesystem, label): several feeds on one disk are one
    room, read once."""
    seen: set[tuple[int, str]] = set()
    kept = []
    for place in places:
        try:
            device = os.stat(_existing(place.path)).st_dev
        except OSError:
            device = -1
        if (device, place.label) not in seen:
            seen.add((device, place.label))
            kept.append(place)
    return kept


def _existing(path: Path) -> Path:
    """``path``, or the nearest folder above it that exists (a folder not made
    yet, or removed, is on its parent's filesystem)."""
    path = path.absolute()
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def _why(reading: Reading, min_free: MinFree) -> str:
    where = f"{reading.place.label} {reading.place.path}"
    if reading.error:
        return f"{where}: cannot read its free space ({reading.error})"
    return f"{where}: {human(reading.free)} free, below WARC_MIN_FREE ({min_free})"


def _key(label: str) -> str:
    return label.lower().replace(" ", "_")
