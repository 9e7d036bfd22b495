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
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from crawler.frontier.workers import Heartbeat, beat_interval

if TYPE_CHECKING:
    from crawler.scheduling.scheduler import FrontierScheduler

logger = logging.getLogger("crawler.scheduling.scheduler")


def beat_delay(lease_ms: int, ok: bool) -> float:
    """Seconds to the next heartbeat: three a lease, or soon after a failed one."""
    interval = beat_interval(lease_ms / 1000)
    return interval if ok else min(interval, 0.5)


async def heartbeat_loop(scheduler: FrontierScheduler) -> None:
    """Announce the worker (at once, so status and metrics see it from the
    start) and renew its held leases, until it closes.

    After a failed beat (Redis away) the next comes within half a second,
    not a whole interval later: Redis's clock ran on while it was away, and
    every moment between its return and the renewal eats into the leases of
    downloads still in flight.
    """
    lease_ms = scheduler.limits.lease_ms
    delay = 0.0
    pace = AnswerRate(scheduler.stats)
    while not scheduler.closing:
        await asyncio.sleep(delay)
        delay = beat_delay(lease_ms, ok=False)
        try:
            await beat(scheduler, pace.now())
            scheduler.health.ok()
            delay = beat_delay(lease_ms, ok=True)
        except (RedisError, OSError) as exc:
            scheduler.health.trouble(exc)


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


async def beat_quietly(scheduler: FrontierScheduler) -> None:
    """Announce the worker out of turn (it paused or resumed), leases untouched:
    a failure is the next regular beat's to see."""
    try:
        await announce(scheduler)
    except (RedisError, OSError):
        return


async def beat(scheduler: FrontierScheduler, rate: float | None = None) -> None:
    """One heartbeat: renew every held lease, then note the worker as seen."""
    frontier = scheduler.frontier
    assert frontier is not None
    leases = scheduler.leases.leases()
    renewed = await frontier.renew(leases, scheduler.worker)
    if renewed < len(leases):
        scheduler.stats.inc_value("frontier/leases/lost", len(leases) - renewed)
        logger.warning("Frontier: %d lease(s) expired before this worker renewed "
                       "them; their URLs may be fetched twice", len(leases) - renewed)
    await announce(scheduler, rate)


async def announce(scheduler: FrontierScheduler, rate: float | None = None) -> None:
    """Note the worker as seen, with what it holds and whether it is paused."""
    frontier = scheduler.frontier
    assert frontier is not None
    client = scheduler.client
    beat = Heartbeat(time.time(), held=len(scheduler.leases), pid=os.getpid(),
                     host=socket.gethostname(), lease=scheduler.limits.lease_ms / 1000,
                     rate=rate, paused=scheduler.paused or None)
    await client.hset(frontier.keys.workers(), scheduler.worker, beat.to_json())
    await client.set(frontier.keys.seen_at(), int(beat.seen))
