"""The archive's writer thread, its bounded queue and the crawl-wide digest index.

Compressing and writing WARC records costs milliseconds a page; on the
reactor thread that would stall every download. :class:`ArchiveWriter` owns
one thread that does it, fed through a queue bounded in *bytes* (bodies, not
items, fill memory). When the disk is slower than the crawl, :meth:`put`
makes its caller wait for room, so downloads slow down instead of memory
growing (backpressure). Callers get a Deferred, fired on the reactor thread,
of where the record went (or of the exception that kept it out: a value,
never an errback, so a result nobody waits for is not an "unhandled error").

Identical payloads are archived once: the writer asks :class:`DigestIndex`,
kept in the frontier's Redis so every worker shares it, whether a payload
digest was archived before; if so the exchange becomes a ``revisit`` record
pointing at the first capture.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred

from crawler.warc.records import payload_digest, warc_date

if TYPE_CHECKING:
    from pathlib import Path

    import redis

    from crawler.warc.exchange import Exchange
    from crawler.warc.files import WarcFiles, Written

logger = logging.getLogger(__name__)

# Returns the earlier capture's JSON, or stores this one and returns nil:
# one round trip, atomic across workers.
_FIRST_CAPTURE = """
local earlier = redis.call('HGET', KEYS[1], ARGV[1])
if earlier then return earlier end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return false
"""


class DigestIndex:
    """Payload digest -> first capture (URL, WARC-Date), for revisit records.

    In the frontier's Redis (hash ``{NAMESPACE/warc}:digests``, one slot on a
    Cluster) when there is one, so that a page archived by one worker is a
    revisit for every other; in memory for crawls without a frontier.
    """

    def __init__(self, client: redis.Redis | None = None, key: str = "") -> None:
        self.client = client
        self.key = key
        self._local: dict[str, tuple[str, str]] = {}
        self._script = client.register_script(_FIRST_CAPTURE) if client is not None else None

    def first_capture(self, digest: str, url: str, date: str) -> tuple[str, str] | None:
        """The earlier capture of ``digest``, or ``None`` (and this one is recorded)."""
        if self._script is None:
            earlier = self._local.get(digest)
            if earlier is None:
                self._local[digest] = (url, date)
            return earlier
        earlier = self._script(keys=[self.key], args=[digest, json.dumps([url, date])])
        if earlier is None:
            return None
        earlier_url, earlier_date = json.loads(earlier)
        return earlier_url, earlier_date

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


class ArchiveWriter:
    """One writer thread per crawl, behind a queue of at most ``max_bytes``.

    ``put`` is called on the reactor thread; everything else that touches the
    files happens on the writer thread (``WarcFiles`` is thread-confined).
    """

    def __init__(self, files: WarcFiles, digests: DigestIndex, max_bytes: int,
                 stats: Any, revisits: bool = True) -> None:
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

    def _done(self, result: Deferred[Written | Exception], outcome: Written | Exception) -> None:
        """On the reactor: hand out the outcome, let waiting producers in."""
        result.callback(outcome)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.callback(None)

    # ------------------------------------------------------------ writer thread

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    self._lock.wait()
                job = self._queue.popleft()
            if job is None:
                break
            exchange, result = job
            outcome: Written | Exception
            try:
                outcome = self._write(exchange)
            except Exception as exc:  # a full disk must not kill the thread
                self.stats.inc_value("warc/errors")
                logger.error("WARC: could not archive %s: %s", exchange.url, exc,
                             extra={"url": exchange.url})
                outcome = exc
            with self._lock:
                self._queued_bytes -= exchange.size
            self._reactor.callFromThread(self._done, result, outcome)
        try:
            self.closed_paths = self.files.close()
        finally:
            self.digests.close()

    def _write(self, exchange: Exchange) -> Written:
        digest = payload_digest(exchange.body)
        earlier = None
        if self.revisits and _revisitable(exchange):
            earlier = self.digests.first_capture(digest, exchange.url,
                                                 warc_date(exchange.received_at))
        written = self.files.write(exchange, revisit_of=earlier, digest=digest)
        self.stats.inc_value("warc/records")
        self.stats.inc_value("warc/revisits" if earlier else f"warc/records/{exchange.kind}")
        self.stats.inc_value("warc/payload_bytes", len(exchange.body))
        self.stats.max_value("warc/lag_max_seconds", round(time.time() - exchange.received_at, 3))
        self.stats.set_value("warc/lag_seconds", round(time.time() - exchange.received_at, 3))
        return written


def _revisitable(exchange: Exchange) -> bool:
    """Only complete, non-empty 2xx payloads are worth pointing back to."""
    return 200 <= exchange.status < 300 and bool(exchange.body) and exchange.truncated is None
