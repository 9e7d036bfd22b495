"""A worker's watch over a frontier that has work and does none of it.

While URLs are queued or delayed and nothing is leased anywhere, a worker
with nothing of its own to do reads what is left (:mod:`crawler.frontier.leftover`)
every few seconds. The read answers two questions:

- **Is anything stalled?** A host waiting for nothing ("lost"), a partition
  whose timer field is later than its timed sets, or a host whose wake
  (its domain's, its address's) or turn (the ready set) passed longer ago
  than the grace is repaired on the spot: put back where it belongs, woken
  now. The scripts are meant never to leave one, so each repair is counted
  (``frontier/stalls_repaired``, a Prometheus counter) and logged in one
  WARNING line saying what was found: a safety net, not the mechanism.
- **Is only held work left?** Everything left waits for a hold longer than
  ``FRONTIER_HELD_WAIT`` (a name that does not resolve, an open breaker, a
  long Retry-After, an unreachable robots.txt; not a site an operator paused,
  whose resume is waited for). A finite crawl
  (``FRONTIER_IDLE_WAIT`` 0) then ends; the held URLs stay in the frontier
  for the next run with the same job folder or crawl id.

While this worker knows when the frontier's next thing is due, and that is
sooner than ``FRONTIER_HELD_WAIT`` (a host's Crawl-delay, a domain's turn: a
wait, not a hold), neither question needs a read: nothing can look stalled
before that time, and what is left is not held. A read then costs Redis a
scan of the partitions for nothing, every few seconds of every wait, so
the watchdog reads only every ``WAITING_GAP_S`` meanwhile: the net for a
host that waits for nothing stays, at a slower pace.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from crawler.frontier.keys import Count
from crawler.frontier.leftover import Leftover, LeftoverReader

logger = logging.getLogger(__name__)

#: Seconds a worker is idle, with nothing leased anywhere, before its first read.
SETTLE_S = 1.0
#: The gap between two reads is at least this many times the last read's time.
GAP_PER_READ = 10
#: Seconds the closing worker spends reading what is left, host by host (about
#: 500,000 hosts); a larger frontier's summary gives its counts only.
LEFTOVER_READ_S = 10.0
#: Repairs named in the WARNING line, at most.
SHOWN = 5
#: Seconds between two reads while the worker knows its next due time and it
#: is sooner than the held wait (see above).
WAITING_GAP_S = 60.0


class Watchdog:
    """Reads what is left while the frontier idles; repairs stalls, judges holds.

    ``poke`` is called after a repair: the worker claims again at once, in
    every partition. ``interval_s`` (0: off) spaces the reads; ``grace_ms`` is
    how long past its time a wake may be before it counts as missed.
    """

    def __init__(self, reader: LeftoverReader, stats: Any, poke: Callable[[], None], *,
                 interval_s: float, grace_ms: int, held_wait_ms: int) -> None:
        self.reader = reader
        self.stats = stats
        self.poke = poke
        self.interval_s = interval_s
        self.grace_ms = grace_ms
        self.held_wait_ms = held_wait_ms
        self.last: Leftover | None = None
        self._last_at = 0.0
        self._gap_s = interval_s
        self._idle_since: float | None = None
        self._reading = False
        self._held_said = False

    @property
    def on(self) -> bool:
        return self.interval_s > 0

    def busy(self) -> None:
        """The worker or the frontier has work in flight: no read."""
        self._idle_since = None

    def wants_read(self, now: float | None = None, due_in_ms: float | None = None) -> bool:
        """Whether the idle worker should read now (then call :meth:`look`);
        ``due_in_ms``: how soon the worker's next claim is due, if it knows."""
        if not self.on or self._reading:
            return False
        now = time.monotonic() if now is None else now
        if self._idle_since is None:
            self._idle_since = now
        gap = self._gap_s
        if due_in_ms is not None and due_in_ms < self.held_wait_ms:
            gap = max(gap, WAITING_GAP_S)
        return now - self._idle_since >= SETTLE_S and now - self._last_at >= gap

    def only_held(self, counts: dict[str, int], now: float | None = None) -> bool:
        """The last read, if it is recent and the counts have not moved since, found
        only work held longer than ``FRONTIER_HELD_WAIT``."""
        last = self.last
        now = time.monotonic() if now is None else now
        if last is None or now - self._last_at > max(self._gap_s, 2.0):
            return False
        if any(counts.get(k, 0) != last.counts.get(k, 0) for k in (Count.QUEUED, Count.DELAYED)):
            return False
        return last.only_held(self.held_wait_ms)

    def say_held(self) -> None:
        """Log, once, that only held work is left and the crawl ends on it."""
        left = self.last
        if left is None or self._held_said:
            return
        self._held_said = True
        why = ", ".join(f"{state} {len(hosts)}" for state, hosts in left.held_by_state().items())
        logger.info("Frontier: only held work is left (%d URL(s) queued on %d host(s): %s; "
                    "%d delayed): the crawl ends, and the next run with this frontier takes "
                    "them up when due (FRONTIER_HELD_WAIT; the summary names them)",
                    left.queued, len(left.hosts), why, left.delayed)

    async def look(self) -> Leftover | None:
        """Read what is left, repairing as it goes (None: Redis did not answer)."""
        self._reading = True
        started = time.monotonic()
        try:
            left = await self.reader.read(repair=True, grace_ms=self.grace_ms)
        except (RedisError, OSError) as exc:
            logger.debug("Frontier watchdog: could not read the frontier: %s", exc)
            return None
        finally:
            self._reading = False
            self._last_at = time.monotonic()
            # A large frontier (a read takes 2 s per 100,000 hosts): read it at
            # most a tenth of the time, whatever the interval.
            self._gap_s = max(self.interval_s, GAP_PER_READ * (self._last_at - started))
        self.last = left
        self._repaired(left)
        return left

    async def read_left(self) -> Leftover | None:
        """What is left in the frontier as the crawl ends, for its summary, also
        set as ``frontier/left/*`` stats (None: Redis did not answer). A scan of
        the host queues, bounded: a very large frontier gives its counts only."""
        try:
            try:
                left = await asyncio.wait_for(self.reader.read(), timeout=LEFTOVER_READ_S)
            except TimeoutError:
                left = await asyncio.wait_for(self.reader.counts_only(),
                                              timeout=LEFTOVER_READ_S)
        except (RedisError, OSError, TimeoutError) as exc:
            logger.debug("Frontier: could not read what is left: %s", exc)
            return None
        for key, value in (("queued", left.queued), ("delayed", left.delayed),
                           ("held", sum(h.queued for h in left.held())),
                           ("dead", left.counts.get(Count.DEAD, 0))):
            if value:
                self.stats.set_value(f"frontier/left/{key}", value)
        return left

    def _repaired(self, left: Leftover) -> None:
        lost = [h for h in left.lost() if h.detail == "repaired"]
        woken = [h for h in left.hosts if h.detail.endswith("(woken)")]
        found = len(lost) + len(woken) + left.timers_repaired
        if not found:
            if any(h.state == "ready" for h in left.hosts):
                # Due now and nobody claims it: the worker may have missed that
                # (its reckoning of what is due is its own). Not a stall of
                # the frontier's: claim again, without counting.
                self.poke()
            return
        self.stats.inc_value("frontier/stalls_repaired", found)
        parts = []
        if lost:
            parts.append(f"{len(lost)} host(s) waiting for nothing ({_names(lost)})")
        if woken:
            parts.append(f"{len(woken)} host(s) whose wake was missed ({_names(woken)})")
        if left.timers_repaired:
            parts.append(f"{left.timers_repaired} partition timer(s) set too late")
        logger.warning("Frontier watchdog: URLs queued, none in flight, and %s; repaired "
                       "and woken now (frontier/stalls_repaired). This is a bug of the "
                       "frontier: please report it with this log", "; ".join(parts),
                       extra={"stalls": found})
        self.poke()


def _names(hosts: list[Any]) -> str:
    shown = ", ".join(f"{h.host} {h.state} {h.detail}".strip() for h in hosts[:SHOWN])
    return shown + (", ..." if len(hosts) > SHOWN else "")


__all__ = ["Watchdog"]
