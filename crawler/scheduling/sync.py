"""Admissions and releases, batched and sent to Redis in the background.

The engine calls the scheduler synchronously, so nothing waits for Redis on
the reactor: enqueued URLs and ended leases pile up here and one background
task sends them, a page's links and its lease's end in one round trip.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from crawler.deadletter import DeadReason
from crawler.frontier.keys import site_of
from crawler.frontier.store import Frontier
from crawler.frontier.values import (
    Admission,
    AdmitResult,
    BreakerEvent,
    Limits,
    Release,
    ReleaseResult,
)
from crawler.scheduling.health import RedisHealth
from crawler.scheduling.replay import ReplayWindow
from crawler.scheduling.tasks import Tasks

logger = logging.getLogger("crawler.scheduling.scheduler")

#: A release held back for its host's reservation goes this long after at most
#: (s), and within a third of a lease (its lease is not renewed meanwhile).
HOLD_BACK_S = 5.0


@dataclass
class SyncHooks:
    """What the rest of the worker answers for, and learns from, a flush."""

    #: Whether this worker still holds reserved URLs of a group of hosts.
    holds_reserved: Callable[[str], bool]
    #: URLs may be claimable: admitted, or a lease ended.
    changed: Callable[[], None]
    #: Canonical URLs the frontier did not take: offered again, not known.
    forget: Callable[[Iterable[str]], None]
    #: The site's claimed URLs not started yet go back (its breaker opened).
    give_back_site: Callable[[str], None]
    #: A flush is over.
    flushed: Callable[[], None]
    #: A host's group: a reservation's releases are held back and sent together
    #: by group (the registered domain: a domain's reservation spans its hosts).
    group_of: Callable[[str], str] = str


class Sync:
    """What this worker still has to tell the frontier, and the task telling it."""

    def __init__(self, store: Frontier, worker: str, stats: Any, health: RedisHealth,
                 tasks: Tasks, hooks: SyncHooks, replay_s: float = 10.0) -> None:
        self.store = store
        self.worker = worker
        self.stats = stats
        self.health = health
        self.tasks = tasks
        self.hooks = hooks
        self.limits: Limits = store.limits
        self.admissions: list[Admission] = []
        self.releases: list[Release] = []
        self.flushing = False
        self.replay = ReplayWindow(replay_s)
        #: Flushes done: the frontier's counts are current once read after the last.
        self.epoch = 0
        #: Releases of groups of hosts this worker still holds reserved URLs
        #: of, by group: they go with the group's next release that is not
        #: held back, or when the group's timer says so.
        self.held_back: dict[str, list[Release]] = {}
        self._hold_timers: dict[str, asyncio.TimerHandle] = {}

    def __bool__(self) -> bool:
        return bool(self.admissions or self.releases or self.held_back)

    def admit(self, admission: Admission) -> None:
        self.admissions.append(admission)
        self.schedule()

    def release(self, release: Release) -> None:
        """Send ``release``; a finished page of a group (a registered domain)
        with reserved URLs still to start waits for the group's next release,
        so that a reservation, a domain's included, is released in one go.
        The site and the domain count it in flight meanwhile, and the
        reservation holds their next turns past its end either way. What the
        other workers must learn at once goes at once: a hold, a failure, a
        URL given back."""
        group = self.hooks.group_of(release.host)
        if (release.op in ("done", "dead") and not release.hold_ms and release.health != "fail"
                and self.hooks.holds_reserved(group)):
            if group not in self.held_back:
                self.held_back[group] = []
                wait = min(HOLD_BACK_S, self.limits.lease_ms / 3000)
                self._hold_timers[group] = asyncio.get_event_loop().call_later(
                    wait, self.let_go, group)
            self.held_back[group].append(release)
            return
        self._take_held(group)
        self.releases.append(release)
        self.schedule()

    def let_go(self, group: str | None = None) -> None:
        """Send what is held back (of ``group``, or all)."""
        for g in [group] if group is not None else list(self.held_back):
            self._take_held(g)
        self.schedule()

    def _take_held(self, group: str) -> None:
        """The group's held-back releases join those to send; its timer is off."""
        self.releases += self.held_back.pop(group, ())
        timer = self._hold_timers.pop(group, None)
        if timer is not None:
            timer.cancel()

    def schedule(self) -> None:
        if not self.flushing and not self.tasks.closing:
            self.flushing = True
            self.tasks.spawn(self._loop(), flush=True)

    async def _loop(self) -> None:
        try:
            await asyncio.sleep(0)  # let the engine queue the rest of this page's links
            await self.flush_all()
        finally:
            self.flushing = False
        self.hooks.flushed()

    async def flush_all(self) -> None:
        """Send pending admissions, then pending releases, until none is left
        (one round trip for both: ``Frontier.admit_and_release``).

        Admissions go first so that a page's links are in Redis before its
        lease ends: a crash in between refetches the page instead of losing
        its links. Both steps are idempotent, so a failed batch is retried
        whole after Redis comes back.
        """
        delay = 0.2
        while self.admissions or self.releases:  # (not what is held back)
            admissions, self.admissions = self.admissions, []
            releases, self.releases = self.releases, []
            try:
                admitted, released = await self.store.admit_and_release(
                    admissions, releases, self.worker)
            except asyncio.CancelledError:
                self._put_back(admissions, releases)
                raise
            except (RedisError, OSError) as exc:
                self._put_back(admissions, releases)
                self.health.trouble(exc)
                if self.health.refused:
                    return  # no retry brings a permission: the crawl is ending
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            self.replay.sent(admissions)
            self.health.ok()
            self.epoch += 1
            if admitted.added or releases:
                self.hooks.changed()
            self._count(admitted, released)
            if admitted.blocked:  # not in the seen set: may come back (recent.py)
                self.hooks.forget(a.canon for a in admissions)
            for event in released.events:
                await self._breaker_event(event)

    def resend(self, same_outage: bool = False) -> None:
        """Redis answers again after failing: admit again what the window holds
        (:mod:`crawler.scheduling.replay`); said once an outage."""
        again = self.replay.take()
        if not again:
            return
        self.stats.inc_value("frontier/replayed", len(again))
        if not same_outage:
            logger.warning("Frontier: admitting again the %d URL(s) sent in the last %.0f s, which "
                           "a failover to a replica may have lost (the rest count as "
                           "duplicates)", len(again), self.replay.seconds)
        self.admissions[:0] = again
        self.schedule()

    def _put_back(self, admissions: list[Admission], releases: list[Release]) -> None:
        self.admissions[:0] = admissions
        self.releases[:0] = releases

    def _count(self, admitted: AdmitResult, released: ReleaseResult) -> None:
        inc = self.stats.inc_value
        inc("frontier/admitted", admitted.added)
        self.count_duplicates(admitted.duplicates)
        if admitted.refused:
            inc("frontier/refused/host-budget", admitted.refused)
        if admitted.blocked:
            inc("frontier/refused/dropped-host", admitted.blocked)
        if admitted.parked:
            inc("frontier/parked", admitted.parked)
        if admitted.spent:
            inc("frontier/refused/budget", admitted.spent)
        if admitted.forward:
            inc("revisit/lastmod", admitted.forward)
        if released.stale:
            inc("frontier/leases/stale", released.stale)

    def count_duplicates(self, n: int, *, local: bool = False) -> None:
        """``n`` offers were of URLs already seen (``local``: known in this worker,
        :mod:`crawler.scheduling.recent`, without asking Redis)."""
        if n:
            self.stats.inc_value("frontier/duplicates", n)
            self.stats.inc_value("dedup/exact", n)
            if local:
                self.stats.inc_value("frontier/duplicates/local", n)

    async def _breaker_event(self, event: BreakerEvent) -> None:
        """Log a host's breaker transition once (this worker's release caused it)."""
        extra = {"host": event.host, "breaker": event.event}
        self.stats.inc_value(f"breaker/{event.event}")
        if event.event in ("open", "park"):
            # (its reserved URLs would start during the cool-down)
            self.hooks.give_back_site(site_of(event.host))
        if event.event == "open":
            logger.warning("Breaker open for %s: no requests for %.0f s", event.host,
                           event.ms / 1000, extra={**extra, "cooldown_s": event.ms / 1000})
        elif event.event == "close":
            logger.info("Breaker closed for %s: the probe succeeded", event.host, extra=extra)
        else:
            await self._park(event, extra)

    async def _park(self, event: BreakerEvent, extra: dict[str, str]) -> None:
        """A host whose breaker kept opening: its queued URLs become dead letters."""
        reason = DeadReason.now("host-unreachable", "breaker opened "
                                f"{self.limits.breaker.max_openings} times")
        try:
            parked = await self.store.park_host(event.host, reason.json(), whole_site=True)
        except (RedisError, OSError) as exc:
            self.health.trouble(exc)
            return
        logger.warning(
            "Host %s parked: its breaker kept opening; %d queued URL(s) are dead letters "
            "(requeue with: scrapy frontier requeue --reason host-unreachable --host %s)",
            event.host, parked, site_of(event.host), extra=extra)
