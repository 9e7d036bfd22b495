"""Whether this worker's crawl has work left: the engine's ``has_pending_requests``.

Scrapy ends a crawl the first time its scheduler says nothing is pending, so
the answer is the one decision that ends a finite crawl, and it weighs more
than this worker's own hands: what it claimed, admits or holds leased; the
frontier's counts of what is left for every worker (read again when stale);
``FRONTIER_IDLE_WAIT`` (how long an idle worker waits for work to come); and,
when what is left is held longer than ``FRONTIER_HELD_WAIT`` with nothing
leased anywhere, the watchdog's verdict (:mod:`.watchdog`). The worker's
frontier (:mod:`.worker`) owns the parts read here and asks this on the
engine's behalf.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from crawler.frontier.keys import Count

if TYPE_CHECKING:
    from crawler.scheduling.claims import Claims
    from crawler.scheduling.counts import FrontierCounts
    from crawler.scheduling.leases import LeaseTable
    from crawler.scheduling.robotsjobs import RobotsJobs
    from crawler.scheduling.sync import Sync
    from crawler.scheduling.tasks import Tasks
    from crawler.scheduling.watchdog import Watchdog


class PendingWork:
    """Answers the engine's "is anything pending?" for this worker (see the module
    docstring). ``paused``: whether anyone paused this worker's claims;
    ``wake``: have the engine ask again now (after a watchdog read)."""

    def __init__(self, claims: Claims, sync: Sync, leases: LeaseTable, counts: FrontierCounts,
                 robots_jobs: RobotsJobs | None, watchdog: Watchdog, tasks: Tasks, *,
                 idle_wait: float, paused: Callable[[], bool],
                 wake: Callable[[], None]) -> None:
        self.claims = claims
        self.sync = sync
        self.leases = leases
        self.counts = counts
        self.robots_jobs = robots_jobs
        self.watchdog = watchdog
        self.tasks = tasks
        self.idle_wait = idle_wait
        self.paused = paused
        self.wake = wake
        #: When the frontier was last seen with nothing to do (FRONTIER_IDLE_WAIT).
        self.idle_since: float | None = None

    def work_came(self) -> None:
        """A claim handed out work: FRONTIER_IDLE_WAIT counts from its end."""
        self.idle_since = None

    def __call__(self) -> bool:
        """Whether the crawl has work left for this worker."""
        if self.claims or self.sync or self.leases:
            self.idle_since = None
            self.watchdog.busy()
            return True
        if self.sync.flushing or self.claims.claiming or not self.counts.current():
            self.counts.refresh()
            return True
        c = self.counts.last or {}
        if (c.get(Count.QUEUED, 0) + c.get(Count.LEASED, 0) + c.get(Count.DELAYED, 0) > 0
                or self.robots_jobs):
            # (A robots job in flight is no reason to wait when only held work
            # is left: it is then the next try of a host in a run of failures.)
            self.idle_since = None
            self.counts.refresh(waiting=self.claims.waiting)
            return not self._only_held(c)
        now = time.monotonic()
        self.idle_since = self.idle_since or now
        if now - self.idle_since < self.idle_wait:
            self.counts.refresh()
            return True
        return False

    def _only_held(self, counts: dict[str, int]) -> bool:
        """Whether a finite crawl should end now: this worker is idle, nothing is
        leased anywhere, and what is left is held longer than FRONTIER_HELD_WAIT
        (the watchdog's last read said so). Keeps the watchdog reading meanwhile."""
        watchdog = self.watchdog
        if self.paused() or counts.get(Count.LEASED, 0) > 0:
            # (a paused worker's claims are what keep the frontier's timers moving)
            watchdog.busy()
            return False
        if self.idle_wait <= 0 and watchdog.only_held(counts):
            watchdog.say_held()
            return True
        if watchdog.wants_read(due_in_ms=self.claims.due_in_ms()):
            self.tasks.spawn(self._watch())
        return False

    async def _watch(self) -> None:
        await self.watchdog.look()
        self.wake()  # the engine asks has_pending_requests again, with the verdict
