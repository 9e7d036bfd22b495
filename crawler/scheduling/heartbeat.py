"""The worker's heartbeat: its leases renewed and its presence announced.

Three beats a lease: a worker that stops beating (killed, frozen, cut off)
loses its leases within one lease time and its URLs go to the others.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from crawler.frontier.store import Frontier
from crawler.frontier.values import Lease
from crawler.frontier.workers import Heartbeat, beat_interval
from crawler.scheduling.health import RedisHealth
from crawler.scheduling.leases import LeaseTable

logger = logging.getLogger("crawler.scheduling.scheduler")


def beat_delay(lease_ms: int, ok: bool) -> float:
    """Seconds to the next heartbeat: three a lease, or soon after a failed one."""
    interval = beat_interval(lease_ms / 1000)
    return interval if ok else min(interval, 0.5)


class AnswerRate:
    """Answers a second this worker received between two beats (the crawl's
    current pace, summed over workers: crawler/frontier/capacity.py)."""

    def __init__(self, stats: Any) -> None:
        self.stats = stats
        self._last: tuple[float, int] | None = None
        self._rate: float | None = None

    def now(self) -> float | None:
        """The rate since the previous call a second or more ago (None at first)."""
        count = int(self.stats.get_value("response_received_count", 0) or 0)
        at = time.monotonic()
        if self._last is None:
            self._last = (at, count)
        elif at - self._last[0] >= 1.0:
            self._rate = round((count - self._last[1]) / (at - self._last[0]), 2)
            self._last = (at, count)
        return self._rate


class Heartbeats:
    """This worker's beats: its held leases renewed, its presence announced."""

    def __init__(self, store: Frontier, worker: str, leases: LeaseTable, stats: Any,
                 health: RedisHealth, paused: Callable[[], str],
                 lost: Callable[[list[str]], None] = lambda tokens: None) -> None:
        self.store = store
        self.worker = worker
        self.leases = leases
        self.stats = stats
        self.health = health
        #: Why this worker claims nothing now ("": it claims), for status.
        self.paused = paused
        #: Told the tokens of leases the frontier no longer holds for this
        #: worker (expired while it stood still, and given to another): what of
        #: them has not started must not start, nor wait here for ever.
        self.lost = lost

    async def run(self, closing: Callable[[], bool]) -> None:
        """Announce the worker (at once, so status and metrics see it from the
        start) and renew its held leases, until ``closing()``.

        After a failed beat (Redis away) the next comes within half a second,
        not a whole interval later: Redis's clock ran on while it was away, and
        every moment between its return and the renewal eats into the leases of
        downloads still in flight.
        """
        lease_ms = self.store.limits.lease_ms
        delay = 0.0
        pace = AnswerRate(self.stats)
        while not closing():
            await asyncio.sleep(delay)
            delay = beat_delay(lease_ms, ok=False)
            try:
                await self.beat(pace.now())
                self.health.ok()
                delay = beat_delay(lease_ms, ok=True)
            except (RedisError, OSError) as exc:
                self.health.trouble(exc)

    async def quietly(self) -> None:
        """Announce the worker out of turn (it paused or resumed), leases untouched:
        a failure is the next regular beat's to see."""
        try:
            await self.announce()
        except (RedisError, OSError):
            return

    async def beat(self, rate: float | None = None) -> None:
        """One heartbeat: renew every held lease, then note the worker as seen."""
        leases = self.leases.leases()
        renewed = await self.store.renew(leases, self.worker)
        if renewed < len(leases):
            self.stats.inc_value("frontier/leases/lost", len(leases) - renewed)
            places = await self._places(leases)
            missed = [(lease, place) for lease, place in zip(leases, places, strict=True)
                      if place != "leased"]
            logger.warning("Frontier: %d lease(s) expired before this worker renewed "
                           "them; their URLs may be fetched twice%s", len(leases) - renewed,
                           _where(missed))
            self.lost([lease.token for lease, _ in missed])
        await self.announce(rate)

    async def _places(self, leases: list[Lease]) -> list[str]:
        """Where each lease is now (``Frontier.lease_places``; all "leased" when
        Redis does not say: nothing is dropped on a guess)."""
        try:
            return await self.store.lease_places(leases, self.worker)
        except (RedisError, OSError):
            return ["leased"] * len(leases)

    async def announce(self, rate: float | None = None) -> None:
        """Note the worker as seen, with what it holds and whether it is paused."""
        beat = Heartbeat(time.time(), held=len(self.leases), pid=os.getpid(),
                         host=socket.gethostname(), lease=self.store.limits.lease_ms / 1000,
                         rate=rate, paused=self.paused() or None)
        client, keys = self.store.client, self.store.keys
        await client.hset(keys.workers(), self.worker, beat.to_json())
        await client.set(keys.seen_at(), int(beat.seen))


def _where(missed: list[tuple[Lease, str]]) -> str:
    """Where the first few leases the renewal missed went (for the log: a lease
    taken from under its worker is a bug or a clock jump to explain)."""
    shown = "; ".join(f"{lease.host} {lease.fingerprint.hex()[:12]} {place}"
                      for lease, place in missed[:5])
    return f" ({shown}{' ...' if len(missed) > 5 else ''})" if missed else ""
