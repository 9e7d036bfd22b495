"""The archive's writer thread, its bounded queue and the crawl-wide digest index.

Compressing and writing WARC records costs milliseconds a page; on the
reactor thread that would stall every download. :class:`ArchiveWriter` owns
one thread that does it, fed through a queue bounded in *bytes* (bodies, not
items, fill memory). When the disk is slower than the crawl, :meth:`put`
makes its caller wait for room, so downloads slow down instead of memory
growing (backpressure). Callers get a Deferred, fired on the reactor thread,
of where the record went (or of the exception that kept it out: a value,
never an errback, so a result nobody waits for is not an "unhandled error").

That Deferred is the page's acknowledgement: the frontier counts the page
done only once it fires with where the record went, which is after the
record's bytes were handed to the OS (``write(2)``, no user-space buffer)
and the file was seen still linked (a ``WARC_DIR`` removed under the crawl
takes its file with it). A record that could not be written fires with the
exception, and the page goes back to its queue. Acknowledgements come a
batch at a time (one reactor wake-up per batch). The file being written is
fsynced every :data:`SYNC_S` seconds while records come, and at each
rotation and close: a power loss can cost the records of the last seconds
(their pages counted done), never a torn file (see ``docs/operations.md``).
Write failures are logged once per condition, not once per page.

Identical payloads are archived once: the writer asks the digest index
(:mod:`crawler.warc.digests`) whether a payload digest was archived before;
if so the exchange becomes a ``revisit`` record pointing at the first
capture. A ``304 Not Modified`` to a revisit's conditional request is a
``server-not-modified`` revisit of the capture of the digest the frontier
kept for its URL.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred

from crawler.warc.digests import DigestIndex
from crawler.warc.files import Written
from crawler.warc.openwarc import write_all
from crawler.warc.records import payload_digest, warc_date

if TYPE_CHECKING:
    from crawler.warc.exchange import Exchange
    from crawler.warc.files import WarcFiles

logger = logging.getLogger(__name__)

#: Exchanges the writer thread takes from its queue at a time (one digest
#: lookup, one reactor wake-up for all of them).
BATCH = 64
#: How long the writer waits for more after the first exchange of a batch:
#: a page or two at a time would cost a digest look-up (a Redis round trip)
#: and a reactor wake-up each. Not while producers wait for room, nor when closing.
LINGER_S = 0.05
#: Seconds between two fsyncs of the file being written (and at each rotation
#: and close): what a power loss can cost, at most, of pages counted done.
SYNC_S = 10.0


class ArchiveWriter:
    """One writer thread per crawl, behind a queue of at most ``max_bytes``.

    ``put`` is called on the reactor thread; everything else that touches the
    files happens on the writer thread (``WarcFiles`` is thread-confined).
    """

    def __init__(self, files: WarcFiles, digests: DigestIndex, max_bytes: int,
                 stats: Any, revisits: bool = True, sync_s: float = SYNC_S) -> None:
        self.files = files
        self.digests = digests
        self.max_bytes = max_bytes
        self.stats = stats
        self.revisits = revisits
        self._queue: deque[tuple[Exchange, Deferred[Written | Exception]] | None] = deque()
        self._queued_bytes = 0
        self._lock = threading.Condition()
        self._waiters: list[Deferred[None]] = []
        self._thread = threading.Thread(target=self._run, name="warc-writer", daemon=True)
        self._reactor: Any = None
        self.closed_paths: list[Path] = []
        self.sync_s = sync_s
        self._synced_at = time.monotonic()
        self._unsynced = False
        #: Records that could not be written, ever (read by the disk guard,
        #: which pauses the worker when it grows).
        self.failures = 0
        #: What the last failure was ("" once a record is written again).
        self.failing = ""
        self._failed_since_ok = 0

    # ------------------------------------------------------------ reactor side

    def start(self) -> None:
        from twisted.internet import reactor

        self._reactor = reactor
        self._thread.start()

    @property
    def queue_length(self) -> int:
        return len(self._queue)

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    async def put(self, exchange: Exchange) -> Deferred[Written | Exception]:
        """Queue ``exchange``; wait (without blocking the reactor) while the queue is full.

        One exchange larger than the bound still goes through once the queue
        is empty: a body never waits forever.
        """
        from scrapy.utils.defer import maybe_deferred_to_future

        while self._queued_bytes and self._queued_bytes + exchange.size > self.max_bytes:
            self.stats.inc_value("warc/backpressure_waits")
            waiter: Deferred[None] = Deferred()
            self._waiters.append(waiter)
            await maybe_deferred_to_future(waiter)
        result: Deferred[Written | Exception] = Deferred()
        with self._lock:
            self._queue.append((exchange, result))
            self._queued_bytes += exchange.size
            # Woken for a first exchange, and for a full batch: while it
            # lingers for more it wakes by itself (a wake-up per page would
            # cost the reactor a thread switch each).
            if len(self._queue) == 1 or len(self._queue) >= BATCH:
                self._lock.notify()
        self.stats.max_value("warc/queue_max_length", len(self._queue))
        return result

    def close(self, timeout: float | None = None) -> list[Path]:
        """Write what is queued, close the last file and stop the thread (blocking)."""
        with self._lock:
            self._queue.append(None)
            self._lock.notify()
        self._thread.join(timeout)
        return self.closed_paths

    def _done(self, outcomes: list[tuple[Deferred[Written | Exception], Written | Exception]]
              ) -> None:
        """On the reactor: hand out the outcomes, let waiting producers in."""
        for result, outcome in outcomes:
            result.callback(outcome)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.callback(None)

    # ------------------------------------------------------------ writer thread

    def _run(self) -> None:
        closing = False
        while not closing:
            batch, closing = self._take()
            outcomes = self._still_there(self._write_batch([exchange for exchange, _ in batch]))
            self._unsynced = self._unsynced or bool(batch)
            self._sync_due()
            # The archive's own CPU, apart from the reactor's: what it costs a crawl.
            self.stats.set_value("warc/writer_cpu_seconds", round(time.thread_time(), 3))
            with self._lock:
                self._queued_bytes -= sum(exchange.size for exchange, _ in batch)
            if batch:
                self._reactor.callFromThread(
                    self._done, [(result, outcome) for (_, result), outcome
                                 in zip(batch, outcomes, strict=True)])
        try:
            self.closed_paths = self.files.close()
        except OSError as exc:  # its records stay in the .open file, for recover
            self.closed_paths = self.files.paths
            logger.error("WARC: could not complete %s at close: %s; its records are kept "
                         "in the .open file: run `scrapy warc recover`",
                         ", ".join(p.name for p in self.files.abandoned) or "the last file",
                         condition(exc))
        finally:
            self.digests.close()
            self.stats.set_value("warc/writer_cpu_seconds", round(time.thread_time(), 3))

    def _take(self) -> tuple[list[tuple[Exchange, Deferred[Written | Exception]]], bool]:
        """The next batch (after a first exchange, up to LINGER_S more for
        others), and whether the queue ended with it."""
        with self._lock:
            while not self._queue:
                if not self._unsynced:
                    self._lock.wait()
                elif not self._lock.wait(max(0.0, self._synced_at + self.sync_s
                                             - time.monotonic())):
                    return [], False  # idle with records not synced: sync them now
            deadline = time.monotonic() + LINGER_S
            while (len(self._queue) < BATCH and self._queue[-1] is not None
                   and not self._waiters):  # (producers waiting for room: write now)
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(left)
            batch = []
            while self._queue and len(batch) < BATCH:
                job = self._queue.popleft()
                if job is None:
                    return batch, True
                batch.append(job)
        return batch, False

    def _write_batch(self, exchanges: list[Exchange]) -> list[Written | Exception]:
        """Write each exchange (a revisit where its payload was archived before)."""
        digests = [exchange.not_modified_of or payload_digest(exchange.body)
                   for exchange in exchanges]
        earlier: list[tuple[str, str] | None] = [None] * len(exchanges)
        wanted = [i for i, exchange in enumerate(exchanges)
                  if exchange.not_modified_of or (self.revisits and _revisitable(exchange))]
        try:
            found = self.digests.first_captures(
                [(digests[i], "" if exchanges[i].not_modified_of else exchanges[i].url,
                  warc_date(exchanges[i].received_at)) for i in wanted])
        except Exception as exc:  # Redis away: archive in full rather than lose pages
            self.stats.inc_value("warc/digest_index_errors")
            logger.warning("WARC: digest index unavailable (%s); writing full records", exc)
            found = [None] * len(wanted)
        for i, capture in zip(wanted, found, strict=True):
            if capture is not None:
                earlier[i] = (capture.url, capture.date)
                if exchanges[i].not_modified_of:  # the 304 kept a short digest only
                    digests[i] = capture.digest
        for i, exchange in enumerate(exchanges):
            if exchange.not_modified_of and earlier[i] is None:
                # the capture is not known (any more): the revisit names the URL only
                earlier[i], digests[i] = (exchange.url, ""), ""
        return [self._write(exchange, digest, capture)
                for exchange, digest, capture in zip(exchanges, digests, earlier, strict=True)]

    def _write(self, exchange: Exchange, digest: str, earlier: tuple[str, str] | None
               ) -> Written | Exception:
        try:
            written = self.files.write(exchange, revisit_of=earlier, digest=digest)
        except Exception as exc:  # a full disk must not kill the thread
            self._failed(exc)
            return exc
        self._wrote()
        now = time.time()
        self.stats.inc_value("warc/records")
        self.stats.inc_value("warc/revisits" if earlier else f"warc/records/{exchange.kind}")
        if exchange.not_modified_of:
            self.stats.inc_value("warc/revisits/not_modified")
        self.stats.inc_value("warc/payload_bytes", len(exchange.body))
        self.stats.max_value("warc/lag_max_seconds", round(now - exchange.received_at, 3))
        self.stats.set_value("warc/lag_seconds", round(now - exchange.received_at, 3))
        return written


    def _still_there(self, outcomes: list[Written | Exception]) -> list[Written | Exception]:
        """The batch's outcomes, as failures if its file was removed meanwhile
        (``rm -rf WARC_DIR``: writes to an unlinked file succeed, and vanish)."""
        written = sum(isinstance(outcome, Written) for outcome in outcomes)
        if not written:
            return outcomes
        try:
            self.files.check_linked()
        except OSError as exc:
            self._failed(exc, written)
            return [exc] * len(outcomes)
        return outcomes

    def _sync_due(self) -> None:
        """Sync the file being written every ``sync_s`` seconds it has new records."""
        if not self._unsynced or time.monotonic() - self._synced_at < self.sync_s:
            return
        self._synced_at = time.monotonic()
        self._unsynced = False
        try:
            self.files.sync()
        except OSError as exc:  # the file is given up: the next record starts another
            self._failed(exc, 0)
            logger.error("WARC: could not sync %s (%s): records acknowledged in the last %.0f s "
                         "may be lost with a power failure; it is left for `scrapy warc "
                         "recover`", ", ".join(p.name for p in self.files.abandoned) or "a file",
                         condition(exc), self.sync_s)

    def _failed(self, exc: Exception, records: int = 1) -> None:
        """Count records that could not be written; one line per condition.

        The pages go back to their queues (their leases wait for this answer:
        :mod:`crawler.scheduling.leases`), so what the log owes the operator
        is the condition, when it starts and when it ends, not a line a page.
        """
        self.failures += records
        self._failed_since_ok += records
        self.stats.inc_value("warc/errors", records)
        what = condition(exc)
        if what != self.failing:
            self.failing = what
            logger.error("WARC: cannot write to %s: %s. Pages whose records cannot be written "
                         "are not counted done: they go back to their queues and are fetched "
                         "again (warc/errors counts them)", self.files.directory, what,
                         extra={"warc_dir": str(self.files.directory)})

    def _wrote(self) -> None:
        if not self.failing:
            return
        logger.warning("WARC: writing to %s again; %d record(s) could not be written "
                       "meanwhile, their pages went back to their queues",
                       self.files.directory, self._failed_since_ok,
                       extra={"warc_dir": str(self.files.directory)})
        self.failing = ""
        self._failed_since_ok = 0


def condition(exc: BaseException) -> str:
    """What went wrong, without the file name (the same condition on every file)."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"[Errno {exc.errno}] {exc.strerror}"
    return f"{type(exc).__name__}: {exc}"


#: What a probe writes: about a page's records, so that a disk with room for
#: the probe has room for the next page too.
PROBE_BYTES = 64 * 1024


def probe_writable(directory: Path, worker: str) -> None:
    """Create, write, sync and remove a page-sized file in ``directory``
    (OSError: it cannot be written). Blocking: at start, or on a thread."""
    probe = directory / f".probe-{os.getpid()}-{re.sub(r'[^A-Za-z0-9.-]', '-', worker)}"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, bytes(PROBE_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
        probe.unlink(missing_ok=True)


def _revisitable(exchange: Exchange) -> bool:
    """Only complete, non-empty 2xx payloads are worth pointing back to."""
    return 200 <= exchange.status < 300 and bool(exchange.body) and exchange.truncated is None
