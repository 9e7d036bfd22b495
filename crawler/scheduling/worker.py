"""This worker's open frontier: the one object that owns its side of the crawl.

It holds the Redis client and keys, the store, and the parts that talk to
them: the claims and their reservations, the sync of admissions and releases,
the leases held, robots.txt and DNS jobs, the IP scope, learning, the health
of the connection and the heartbeat. Each part gets the narrow collaborators
it needs (the store, the stats, the tasks, a few callbacks), never this
object; the scheduler (:mod:`.scheduler`) adapts it to Scrapy's engine, and
middlewares and extensions reach it with :func:`frontier_of`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy import Request, Spider

from crawler.frontier.dnsstate import DNSRetry
from crawler.frontier.ipgates import IpGates
from crawler.frontier.keys import Count, Keys, domain_of, site_of
from crawler.frontier.leftover import Leftover, LeftoverReader
from crawler.frontier.records import DEFAULT_META_KEYS, RecordError, from_record, to_record
from crawler.frontier.seedfeed import SeedFeed
from crawler.frontier.store import Frontier
from crawler.frontier.values import ClaimResult, Lease, Limits, Release
from crawler.learning.worker import SiteLearning, learning_for
from crawler.lease import ticket_of
from crawler.proxies import ProxyRoutes
from crawler.robots.policy import RobotsPolicy
from crawler.scheduling.budgetjobs import BudgetJobs
from crawler.scheduling.budgetwatch import BudgetWatch
from crawler.scheduling.claims import ClaimHooks, Claims
from crawler.scheduling.controlwatch import ControlWatch
from crawler.scheduling.counts import FrontierCounts
from crawler.scheduling.dnsoutcomes import DnsOutcomes
from crawler.scheduling.health import RedisHealth
from crawler.scheduling.heartbeat import Heartbeats
from crawler.scheduling.intake import Intake
from crawler.scheduling.ipscope import IpScope
from crawler.scheduling.leases import LeaseTable
from crawler.scheduling.offers import Offers
from crawler.scheduling.pending import PendingWork
from crawler.scheduling.recent import RecentOffers
from crawler.scheduling.refusalnotes import RefusalNotes
from crawler.scheduling.revisits import keep_state, revisits_for
from crawler.scheduling.robotsjobs import RobotsJobs
from crawler.scheduling.siteruleswatch import SiteRulesWatch
from crawler.scheduling.sync import Sync, SyncHooks
from crawler.scheduling.tasks import Tasks
from crawler.scheduling.wakes import PartitionWakes
from crawler.scheduling.watchdog import Watchdog
from crawler.siterules import SiteRules
from crawler.urls import canonical_url, stripper_from_settings

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger("crawler.scheduling.scheduler")


def frontier_of(crawler: Crawler) -> WorkerFrontier | None:
    """The open frontier of a crawl's worker, for its middlewares and extensions
    (None: the crawl does not use the frontier scheduler, or it is not open)."""
    try:
        scheduler = crawler.engine.scheduler
    except RuntimeError:  # Crawler.engine before the crawl starts
        return None
    frontier = getattr(scheduler, "frontier", None)
    return frontier if isinstance(frontier, WorkerFrontier) else None


class EngineLink:
    """What the frontier asks of Scrapy's engine (the scheduler supplies it)."""

    def __init__(self, wake: Callable[[], None], downloads: Callable[[], int],
                 end_crawl: Callable[[], None]) -> None:
        #: Have the engine ask for requests now, not at its next heartbeat.
        self.wake = wake
        #: Requests in the downloader now.
        self.downloads = downloads
        #: End the crawl (Redis refuses this worker).
        self.end_crawl = end_crawl


class WorkerFrontier:
    """This worker's open frontier (see the module docstring)."""

    def __init__(self, crawler: Crawler, spider: Spider, client: Any, keys: Keys,
                 worker: str, engine: EngineLink, sync_client: Callable[..., Any]) -> None:
        s = crawler.settings
        self.spider = spider
        self.client = client
        #: A blocking client on the frontier's Redis, for threads (metrics, WARC
        #: digests); keyword arguments override the connection's options.
        self.sync_client = sync_client
        self.worker = worker
        self.engine = engine
        self.stats = stats = crawler.stats
        self.limits = limits = Limits.from_settings(s)
        self.robots: RobotsPolicy | None = None
        if s.getbool("ROBOTSTXT_OBEY"):
            self.robots = RobotsPolicy(crawler)
            limits.robots_ms = self.robots.fetch_lease_ms
        self.store = store = Frontier(client, keys, limits)
        if self.robots is not None:
            self.robots.frontier = store
        self.stripper = stripper_from_settings(s)
        self.meta_keys = tuple(s.getlist("FRONTIER_META_KEYS", list(DEFAULT_META_KEYS)))
        self.concurrency = s.getint("CONCURRENT_REQUESTS")
        self.tasks = tasks = Tasks()
        self.health = health = RedisHealth(stats, engine.end_crawl, self._redis_back)
        self.intake = Intake(crawler, limits, self.stripper, self.meta_keys)
        self.recent = RecentOffers(s.getint("FRONTIER_RECENT_OFFERS", 65536))
        self.refusals = RefusalNotes(client, keys)
        self.intake.on_refused = self.refusals.note
        self.leases = leases = LeaseTable(stats, limits, self._record_again,
                                          self.refusals.example)
        self.learning: SiteLearning | None = learning_for(s, stats, client, keys)
        self.intake.learning = self.learning
        proxies = ProxyRoutes.from_settings(s)
        #: Hosts whose names do not resolve: held or parked (pages, robots and DNS jobs).
        self.dns = DnsOutcomes(store, DNSRetry.from_settings(s), proxies, stats)
        self.budgets = BudgetJobs(store, stats, health, tasks)
        self._build_claiming(s, store, leases)
        self._build_jobs(s, client, keys, store, proxies)
        #: What was left in the frontier when the crawl stopped (the summary's).
        self.left: Leftover | None = None
        #: What others save in the frontier when this worker closes, after its
        #: leases and before it leaves the list of workers (the crawl report's
        #: tally): ``await hook(client, keys)``.
        self.on_close: list[Callable[[Any, Keys], Awaitable[None]]] = []
        #: Why this worker claims nothing now, by who paused it (the disk guard).
        self.pauses: dict[str, str] = {}
        self._crawler = crawler

    def _build_claiming(self, s: Any, store: Frontier, leases: LeaseTable) -> None:
        """Claims, counts, the release sync and where an offered request goes."""
        worker, stats, health, tasks, limits = (self.worker, self.stats, self.health,
                                                self.tasks, self.limits)
        self.claims = Claims(store, worker, self.concurrency, leases, stats, health, tasks,
                             ClaimHooks(
                                 to_request=self._request_of, canonical=self._canonical,
                                 busy=self._busy, paused=lambda: self.paused,
                                 give_back=self.give_back,
                                 give_back_site=self.give_back_unstarted,
                                 release=self._release, jobs=self._jobs,
                                 wake=self.wake, drained=self.refresh_counts))
        self.counts = FrontierCounts(store, tasks, health, epoch=lambda: self.sync.epoch,
                                     settled=lambda: not (self.sync.flushing or self.sync),
                                     after=self._counted)
        self.sync = Sync(store, worker, stats, health, tasks, SyncHooks(
            holds_reserved=self.claims.reserved.holds_group, changed=self.claims.changed,
            forget=self.recent.forget, give_back_site=self.give_back_unstarted,
            flushed=self._flushed, group_of=domain_of), s.getfloat("FRONTIER_REPLAY_SECONDS", 10.0))
        self.offers = Offers(self.spider, self.stripper, limits, stats, leases, self.recent,
                             self.intake, self.sync)

    def _build_jobs(self, s: Any, client: Any, keys: Keys, store: Frontier,
                    proxies: ProxyRoutes) -> None:
        """Address gates, robots.txt jobs, seed feed, watchdog, heartbeats, work left."""
        worker, stats, health, tasks, leases = (self.worker, self.stats, self.health,
                                                self.tasks, self.leases)
        gates = IpGates(client, keys, self.limits, store.due)
        self.ips = (IpScope(gates, self.dns, store, proxies, stats, health, tasks,
                            self.claims.now) if gates.on else None)
        self.robots_jobs = None if self.robots is None else RobotsJobs(
            self.robots, store, stats, health, tasks, host_limits=self.host_limits,
            may_gate=self.may_gate, dns=self.dns, ips=self.ips, window=self.claims.window,
            after=self._job_ended)
        self.seed_feed = SeedFeed.from_settings(client, s, self.spider.name, worker)
        self.watchdog = self._watchdog(s, LeftoverReader(client, keys))
        self.beats = Heartbeats(store, worker, leases, stats, health, lambda: self.paused,
                                lost=self.give_back_lost)
        self.pending_work = PendingWork(
            self.claims, self.sync, leases, self.counts, self.robots_jobs, self.watchdog, tasks,
            idle_wait=s.getfloat("FRONTIER_IDLE_WAIT", 0.0), paused=lambda: bool(self.pauses),
            wake=self.wake)

    @property
    def keys(self) -> Keys:
        return self.store.keys

    def _watchdog(self, s: Any, reader: LeftoverReader) -> Watchdog:
        return Watchdog(reader, self.stats, self._poke,
                        interval_s=s.getfloat("FRONTIER_WATCHDOG_INTERVAL", 5.0), grace_ms=10_000,
                        held_wait_ms=round(s.getfloat("FRONTIER_HELD_WAIT", 20.0) * 1000))

    async def start(self) -> dict[str, int]:
        """Start the background work (heartbeat, control watch); the frontier's counts."""
        self.leases.revisits = await revisits_for(self._crawler, self.spider, self.limits,
                                                  self.client)
        counts = await self.store.counts()  # (before any task: a failure here leaves none)
        self.tasks.spawn(self.beats.run(lambda: self.tasks.closing))
        self.tasks.spawn(self.refusals.run(lambda: self.tasks.closing))
        watch = BudgetWatch(self.client, self.keys.budgets(), self.limits)
        self.tasks.spawn(watch.run(lambda: self.tasks.closing))
        rules = SiteRulesWatch(self.client, self.keys.site_rules(), self.intake.site_rules,
                               self._use_site_rules)
        self.tasks.spawn(rules.run(lambda: self.tasks.closing))
        if self.limits.claim_sweep_ms > 0:  # (0: every claim asks every partition)
            wakes = PartitionWakes(self.client, self.keys.wake_channel(), self.store.due,
                                   self.claims.wake_at, self.stats)
            self.tasks.spawn(wakes.run(lambda: self.tasks.closing))
        control = ControlWatch(self.client, self.keys.control_log(),
                               holds=lambda: bool(self.claims.reserved),
                               give_back=self.give_back_unstarted)
        self.tasks.spawn(control.run(lambda: self.tasks.closing))
        return counts

    async def close(self) -> None:
        """Stop claiming, give back what this worker holds and save the rest."""
        self.tasks.closing = True
        self.claims.cancel()
        await self.tasks.close(timeout=30)  # a flush or claim under way holds leases
        returned = self.leases.return_all()
        self.claims.take_unstarted()
        self.sync.let_go()
        self.sync.releases += returned
        await self._save_last_changes()
        if returned:
            self.stats.inc_value("frontier/leases/returned", len(returned))

    async def _save_last_changes(self) -> None:
        if self.health.refused:
            logger.info("Frontier: last changes not saved (Redis refuses this worker); the "
                        "URLs it held go to other workers when their leases expire")
            await self.client.aclose()
            return
        try:
            await asyncio.wait_for(self.sync.flush_all(), timeout=30)
            await self.refusals.flush()
            if self.ips is not None:
                await self.ips.close()
            if self.learning is not None:
                await self.learning.flush()
            if self.seed_feed is not None and self.seed_feed.holding:
                await self.seed_feed.give_back()
            for hook in self.on_close:
                await hook(self.client, self.keys)
            await self.client.hdel(self.keys.workers(), self.worker)
        except (RedisError, OSError, TimeoutError) as exc:
            logger.error("Frontier: could not save the last changes on close: %s", exc)
        else:  # (with this worker's leases given back)
            self.left = await self.watchdog.read_left() or self.left
        await self.client.aclose()

    # ------------------------------------------------------------------ the engine's calls

    def offer(self, request: Request) -> bool:
        """A request the engine enqueues: a retry of a held lease, or a URL to admit."""
        return self.offers(request)

    def pending(self) -> bool:
        """Whether the crawl has work left for this worker (``has_pending_requests``)."""
        return self.pending_work()

    def finished(self, request: Request) -> None:
        """The engine is done with ``request``: its lease ends."""
        self.claims.ended(request)
        # A release the archive holds back is sent later, by the same sync,
        # whose flush wakes the engine (_flushed).
        self.leases.finished(request, self.sync.release)

    def __len__(self) -> int:
        return len(self.claims) + (self.counts.last or {}).get(Count.QUEUED, 0)

    # ------------------------------------------------------------------ for components

    @property
    def paused(self) -> str:
        """Why this worker claims nothing now ("": it claims)."""
        return "; ".join(self.pauses.values())

    def pause(self, source: str, why: str) -> None:
        """Claim nothing until :meth:`resume` (``source``: who asks, e.g. the disk
        guard). Requests in flight finish; claimed ones not started yet go back
        to their queues at once, for workers that can take them. Held leases
        are renewed meanwhile, and the pause shows in ``scrapy frontier status``."""
        self.pauses[source] = why
        self.give_back_unstarted()
        self._beat_now()

    def resume(self, source: str) -> None:
        """End ``source``'s pause; claiming starts again once no pause is left."""
        if self.pauses.pop(source, None) is None:
            return
        self._beat_now()
        if not self.pauses:
            self.claims.now()
            self.wake()

    def _beat_now(self) -> None:
        """Tell the other workers and status now, not at the next heartbeat."""
        if not self.tasks.closing:
            self.tasks.spawn(self.beats.quietly())

    def give_back_unstarted(self, site: str | None = None) -> None:
        """Claimed requests not started yet (of ``site`` only, if given) go back to
        their queues: a pause, a hold or a breaker opening, an operator's change."""
        def of_site(request: Request) -> bool:
            ticket = ticket_of(request.meta)
            host = ticket and self.leases.host_of(ticket.token)
            return host is not None and site_of(host) == site
        self.give_back(self.claims.take_unstarted(None if site is None else of_site))

    def give_back_lost(self, tokens: list[str]) -> None:
        """Leases the frontier gave away while this worker stood still: their
        requests not started yet (reserved, in a chain, buffered) are dropped,
        their leases ended (a release of a lease gone is counted stale and
        changes nothing), so that nothing waits here for a lease that is not
        this worker's any more. A request already under way ends as any other."""
        lost = set(tokens)
        def is_lost(request: Request) -> bool:
            ticket = ticket_of(request.meta)
            return ticket is not None and ticket.token in lost
        dropped = self.claims.take_unstarted(is_lost)
        if dropped:
            self.stats.inc_value("frontier/leases/lost_unstarted", len(dropped))
            self.give_back(dropped)

    def give_back(self, requests: list[Request]) -> None:
        """The leases of claimed requests taken out before they started go back."""
        tokens = [t.token for t in map(ticket_of, (r.meta for r in requests)) if t is not None]
        for release in self.leases.give_back(tokens):
            self.sync.release(release)

    @property
    def may_gate(self) -> bool:
        """Whether any host can have a gap between requests (else no site or
        domain gate needed; the IP scope's gate is :attr:`ips`)."""
        limits = self.limits
        return (limits.delay_ms * (1 - limits.jitter) > 0
                or limits.domain_delay_ms * (1 - limits.jitter) > 0
                or limits.adaptive_factor > 0
                or bool(self.intake.slot_settings)
                or self.robots is not None)  # a Crawl-delay can slow any host down

    def host_of(self, token: str) -> str | None:
        """The host key of a lease this worker holds."""
        return self.leases.host_of(token)

    def lease_of(self, token: str) -> Lease | None:
        """A lease this worker holds, by its token."""
        return self.leases.lease_of(token)

    def host_limits(self, host: str) -> tuple[int, int]:
        return self.intake.host_limits(host)

    def hold_now(self, token: str, seconds: float) -> None:
        """Hold the host of a lease back for every worker at once (a 429 / 503 just
        arrived), without waiting for the lease's release to say so. Best effort:
        if Redis does not answer, the release holds the host when it goes through."""
        host = self.host_of(token)
        if host is None or seconds <= 0:
            return
        self.give_back_unstarted(site_of(host))
        self.tasks.spawn(self._hold(host, round(seconds * 1000)))

    async def _hold(self, host: str, ms: int) -> None:
        try:
            await self.store.hold(host, ms)
        except (RedisError, OSError):
            return
        self.stats.inc_value("frontier/holds/early")

    async def wait_admitted(self) -> bool:
        """Wait until every request enqueued so far is in Redis (False: closing)."""
        while self.sync.admissions or self.sync.flushing:
            if self.tasks.closing:
                return False
            await asyncio.sleep(0.01)
        return not self.tasks.closing

    def wake(self) -> None:
        """Have the engine ask for requests now rather than at its next heartbeat."""
        if not self.tasks.closing:
            self.engine.wake()

    # ------------------------------------------------------------------ the parts' callbacks

    def _request_of(self, lease: Lease) -> Request:
        return from_record(lease.record, self.spider, lease.host, self.meta_keys)

    def _canonical(self, url: str) -> str | None:
        return canonical_url(url, self.stripper)

    def _busy(self) -> int:
        return self.engine.downloads() + (len(self.robots_jobs) if self.robots_jobs else 0)

    def _release(self, release: Release) -> None:
        self.sync.release(release)

    def _jobs(self, result: ClaimResult) -> None:
        """Start what a claim handed out besides URLs."""
        if self.robots_jobs is not None:
            for host in result.robots_jobs:
                self.robots_jobs.start(host)
        if result.budget_jobs:
            self.budgets.start(result.budget_jobs)
        if self.ips is not None:
            if result.ip_waits:
                self.ips.joined(result.ip_waits, result.server_ms)
            if result.dns_jobs:
                self.ips.look_up(result.dns_jobs)
        if result.leases or result.robots_jobs:
            self.pending_work.work_came()

    def _use_site_rules(self, rules: SiteRules) -> None:
        self.intake.site_rules = rules

    def _job_ended(self) -> None:
        self.claims.now()
        self.wake()

    def _redis_back(self, same_outage: bool) -> None:
        self.sync.resend(same_outage)

    def _poke(self) -> None:
        """After a repair: claim again now, in every partition."""
        self.store.due.touch(*range(self.keys.partitions))
        self.claims.now()

    def _record_again(self, request: Request, lease: Lease) -> str:
        """The record of a retried request (its retry count moved on), "" to keep the old."""
        try:
            record = to_record(request, request.url, self.spider, self.meta_keys, lease.host)
            return keep_state(lease.record, record)
        except RecordError:
            return ""

    def refresh_counts(self) -> None:
        self.counts.refresh()

    def _counted(self, counts: dict[str, int] | None) -> None:
        if counts is not None and counts[Count.QUEUED] + counts[Count.DELAYED] > 0:
            self.claims.maybe_claimable()
        self.wake()

    def _flushed(self) -> None:
        self.wake()
        self.claims.want()
        # (A worker with work in hand needs no counts: pending() reads them
        # again once it holds none, before it may call the crawl idle; what
        # other workers queue meanwhile the claims' sweeps find.)
        if not (self.leases or self.claims):
            self.refresh_counts()
