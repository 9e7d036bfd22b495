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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from crawler.frontier.store import Frontier
from crawler.frontier.values import Limits
from crawler.lease import GATE_PASS_META, GatePass
from crawler.scheduling.health import RedisHealth
from crawler.scheduling.ipscope import WAIT_IN_PLACE_MS, IpScope
from crawler.scheduling.startwindow import StartWindow
from crawler.scheduling.tasks import Tasks

if TYPE_CHECKING:
    from crawler.robots.policy import RobotsPolicy
    from crawler.scheduling.dnsoutcomes import DnsOutcomes

logger = logging.getLogger("crawler.scheduling.scheduler")


class RobotsJobs:
    """The robots.txt jobs this worker runs now."""

    def __init__(self, policy: RobotsPolicy, store: Frontier, stats: Any, health: RedisHealth,
                 tasks: Tasks, *, host_limits: Callable[[str], tuple[int, int]],
                 may_gate: bool, dns: DnsOutcomes | None, ips: IpScope | None,
                 window: StartWindow, after: Callable[[], None]) -> None:
        self.policy = policy
        self.store = store
        self.stats = stats
        self.health = health
        self.tasks = tasks
        self.host_limits = host_limits
        self.may_gate = may_gate
        self.dns = dns
        self.ips = ips
        #: How long a pass of the start gate stands (the claims' window).
        self.window = window
        #: A job ended: the host's URLs may be claimable.
        self.after = after
        self.hosts: set[str] = set()

    def __len__(self) -> int:
        return len(self.hosts)

    def start(self, host: str) -> None:
        self.hosts.add(host)
        self.tasks.spawn(self._job(host))

    async def _job(self, host: str) -> None:
        """Fetch and store a host's robots.txt; its URLs become claimable after."""
        concurrency, delay_ms = self.host_limits(host)
        try:
            # The host's name first (dnsoutcomes.py): a name that does
            # not resolve is a DNS outcome, not an unreachable robots.txt.
            named = self.dns is None or await self.dns.before_robots(host)
            gate_pass = named and await robots_turn(self.store, self.stats, host, self.may_gate,
                                                    self.ips, self.window.gate_ms)
            if gate_pass:
                try:
                    await self.policy.resolve(host, concurrency, delay_ms,
                                              self.store.limits.jitter,
                                              meta={GATE_PASS_META: gate_pass})
                finally:
                    if self.ips is not None:
                        self.ips.robots_done(host)
        except (RedisError, OSError) as exc:
            # The job's lease runs out and the host is handed out again.
            self.health.trouble(exc)
        except Exception:
            logger.exception("Robots job for %s failed; it is tried again later", host,
                             extra={"host": host})
            self.stats.inc_value("robots/job_errors")
        finally:
            self.hosts.discard(host)
        self.after()


async def robots_turn(frontier: Frontier, stats: Any, host: str, may_gate: bool,
                      ips: IpScope | None = None, window_ms: int = 0) -> GatePass | None:
    """Wait for the host's start gate: a robots.txt fetch is a request to the
    server like a page, spaced from the one before it (maybe of another
    scheme of the same name, or another site of its domain) and from the one
    after it; then, with the IP scope on, for a place at the server's
    address (given back by :meth:`IpScope.robots_done`); an address with no
    room parks the host and gives the job back (:meth:`IpScope.robots_turn`).

    The pass stands ``window_ms`` (the next start of the site and domain
    waits that much longer): a fetch that reaches its socket later passes
    the gate again there (``middlewares/pacing.py``, :func:`gate_again`), as
    a page does.

    None when the turn is further off than half the job's lease (a hold
    came after the claim): the job is left to run out and is handed out
    again later, rather than fetched early or taken over mid-wait.
    """
    limits: Limits = frontier.limits
    deadline = time.monotonic() + limits.robots_ms / 2000
    gate_pass = GatePass(host)
    while True:
        while may_gate:
            asked = time.monotonic()
            turn = await frontier.start_turn(host, gate_pass.turn, window_ms=window_ms)
            if turn.wait_ms == 0:
                gate_pass.turn, gate_pass.start_by = turn, asked + window_ms / 1000
                break
            if turn.wait_ms < 0 or time.monotonic() + turn.wait_ms / 1000 > deadline:
                stats.inc_value("robots/jobs_deferred")  # < 0: paused
                return None
            await asyncio.sleep(turn.wait_ms / 1000)
        wait_ms = 0 if ips is None else await ips.robots_turn(host, WAIT_IN_PLACE_MS)
        if wait_ms == 0:
            return gate_pass
        if wait_ms < 0 or time.monotonic() + wait_ms / 1000 > deadline:
            stats.inc_value("robots/jobs_deferred")
            return None
        await asyncio.sleep(wait_ms / 1000)
