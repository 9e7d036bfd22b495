"""robots.txt fetches the frontier hands out as jobs.

The frontier hands a host's robots.txt to one worker at a time, before any
of the host's URLs: the worker fetches and stores the rules
(:class:`crawler.robots.policy.RobotsPolicy`), and the host's URLs become
claimable. A job whose worker dies runs out and is handed out again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from crawler.frontier.store import Frontier
from crawler.frontier.values import Limits
from crawler.scheduling.ipscope import WAIT_IN_PLACE_MS

if TYPE_CHECKING:
    from crawler.scheduling.ipscope import IpScope
    from crawler.scheduling.scheduler import FrontierScheduler

logger = logging.getLogger("crawler.scheduling.scheduler")


class RobotsJobs:
    """The robots.txt jobs this worker runs now."""

    def __init__(self, scheduler: FrontierScheduler) -> None:
        self.scheduler = scheduler
        self.hosts: set[str] = set()

    def __len__(self) -> int:
        return len(self.hosts)

    def start(self, host: str) -> None:
        self.hosts.add(host)
        self.scheduler.spawn(self._job(host))

    async def _job(self, host: str) -> None:
        """Fetch and store a host's robots.txt; its URLs become claimable after."""
        scheduler = self.scheduler
        assert scheduler.robots is not None and scheduler.frontier is not None
        concurrency, delay_ms = scheduler.host_limits(host)
        try:
            # The host's name first (dnsoutcomes.py): a name that does
            # not resolve is a DNS outcome, not an unreachable robots.txt.
            named = scheduler.dns is None or await scheduler.dns.before_robots(host)
            if named and await robots_turn(scheduler.frontier, scheduler.stats, host,
                                           scheduler.may_gate, scheduler.ips):
                try:
                    await scheduler.robots.resolve(host, concurrency, delay_ms,
                                                   scheduler.limits.jitter)
                finally:
                    if scheduler.ips is not None:
                        scheduler.ips.robots_done(host)
        except (RedisError, OSError) as exc:
            # The job's lease runs out and the host is handed out again.
            scheduler.health.trouble(exc)
        except Exception:
            logger.exception("Robots job for %s failed; it is tried again later", host,
                             extra={"host": host})
            scheduler.stats.inc_value("robots/job_errors")
        finally:
            self.hosts.discard(host)
        scheduler.claims.now()
        scheduler.wake()


async def robots_turn(frontier: Frontier, stats: Any, host: str, may_gate: bool,
                      ips: IpScope | None = None) -> bool:
    """Wait for the host's start gate: a robots.txt fetch is a request to the
    server like a page, spaced from the one before it (maybe of another
    scheme of the same name) and from the one after it; then, with the IP
    scope on, for a place at the server's address (given back by
    :meth:`IpScope.robots_done`); an address with no room parks the host
    and gives the job back (:meth:`IpScope.robots_turn`).

    False when the turn is further off than half the job's lease (a hold
    came after the claim): the job is left to run out and is handed out
    again later, rather than fetched early or taken over mid-wait.
    """
    limits: Limits = frontier.limits
    deadline = time.monotonic() + limits.robots_ms / 2000
    earlier: tuple[int, int, int] | None = None
    while True:
        while may_gate:
            turn = await frontier.start_turn(host, earlier)
            if turn.wait_ms == 0:
                earlier = turn
                break
            if turn.wait_ms < 0 or time.monotonic() + turn.wait_ms / 1000 > deadline:
                stats.inc_value("robots/jobs_deferred")  # < 0: paused
                return False
            await asyncio.sleep(turn.wait_ms / 1000)
        wait_ms = 0 if ips is None else await ips.robots_turn(host, WAIT_IN_PLACE_MS)
        if wait_ms == 0:
            return True
        if wait_ms < 0 or time.monotonic() + wait_ms / 1000 > deadline:
            stats.inc_value("robots/jobs_deferred")
            return False
        await asyncio.sleep(wait_ms / 1000)
