"""The Scrapy scheduler on top of the Redis frontier.

``SCHEDULER = "crawler.scheduling.scheduler.FrontierScheduler"``.

The engine talks to a scheduler synchronously (``enqueue_request`` and
``next_request`` return at once), so nothing here waits for Redis on the
reactor thread: requests to admit and leases to release are batched and
flushed by a background task (:mod:`.sync`), and claimed URLs wait in a small
local buffer sized to the free download slots (:mod:`.claims`). Per-host
politeness lives in Redis, so the limits hold across every worker; Scrapy's
own download slots are made pass-through so they neither add a second delay
nor hold requests that another host could use.

A claimed URL's lease ends exactly once, when the engine is done with the
request it became (:mod:`.leases`). A retry of the same URL ends it as
``retry`` (delayed by the host's delay); a redirect to another URL admits the
new URL and the old lease ends as ``done``.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import time
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy import Request, Spider, signals
from scrapy.exceptions import CloseSpider, NotConfigured
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.misc import load_object
from scrapy.utils.reactor import is_asyncio_reactor_installed

from crawler import compat
from crawler.frontier.connection import ConnectError, async_client, configured_url, sync_client
from crawler.frontier.dnsstate import DNSRetry
from crawler.frontier.embedded import EmbeddedRedis
from crawler.frontier.ipgates import IpGates
from crawler.frontier.keys import Count, Keys, crawl_namespace, site_of
from crawler.frontier.leftover import Leftover, LeftoverReader
from crawler.frontier.records import DEFAULT_META_KEYS, RecordError, to_record
from crawler.frontier.seedfeed import SeedFeed
from crawler.frontier.store import Frontier
from crawler.frontier.values import Breaker, Lease, Limits
from crawler.learning.worker import SiteLearning, learning_for
from crawler.lease import TICKET_META, Ticket, ticket_of
from crawler.proxies import ProxyRoutes
from crawler.redaction import one_line, safe_url, url_password
from crawler.robots.policy import RobotsPolicy
from crawler.scheduling.claims import Claims
from crawler.scheduling.controlwatch import ControlWatch
from crawler.scheduling.dnsoutcomes import DnsOutcomes
from crawler.scheduling.health import RedisHealth, refusal
from crawler.scheduling.heartbeat import beat_quietly, heartbeat_loop
from crawler.scheduling.intake import Intake
from crawler.scheduling.ipscope import IpScope
from crawler.scheduling.leases import LeaseTable
from crawler.scheduling.opening import (
    FRONTIER_UNAVAILABLE,
    check_layout,
    embedded_folder,
    wait_for_redis,
    worker_identity,
)
from crawler.scheduling.recent import RecentOffers
from crawler.scheduling.revisits import keep_state, revisits_for
from crawler.scheduling.robotsjobs import RobotsJobs
from crawler.scheduling.sync import Sync
from crawler.scheduling.watchdog import Watchdog
from crawler.urls import stripper_from_settings, url_forms

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)

#: Seconds between two reads of the frontier's counts (refresh_counts).
COUNTS_INTERVAL = 0.5
#: Seconds the closing worker spends reading what is left, host by host (about
#: 500,000 hosts); a larger frontier's summary gives its counts only.
LEFTOVER_READ_S = 10.0


def scheduler_of(crawler: Crawler) -> FrontierScheduler | None:
    """The frontier scheduler of a crawl (for its middlewares), if it uses one and
    the crawl has started (the engine makes its scheduler when it opens the spider)."""
    try:
        scheduler = crawler.engine.scheduler
    except RuntimeError:  # Crawler.engine before the crawl starts
        return None
    return scheduler if isinstance(scheduler, FrontierScheduler) else None


def uses_frontier(settings: Any) -> bool:
    """Whether a crawl's ``SCHEDULER`` is the frontier scheduler (or a subclass)."""
    scheduler = settings.get("SCHEDULER")
    try:
        cls = load_object(scheduler) if isinstance(scheduler, str) else scheduler
    except (ImportError, ValueError, NameError, AttributeError):
        return False
    return isinstance(cls, type) and issubclass(cls, FrontierScheduler)


def limits_from_settings(s: Any) -> Limits:
    """The frontier's per-host limits and lease times, from the crawl's settings."""
    return Limits(
        concurrency=s.getint("CONCURRENT_REQUESTS_PER_DOMAIN"),
        delay_ms=round(s.getfloat("DOWNLOAD_DELAY") * 1000),
        jitter=s.getfloat("DOWNLOAD_DELAY_JITTER", 0.5),
        budget=s.getint("ADMISSION_MAX_PAGES_PER_HOST", 0),
        lease_ms=round(s.getfloat("FRONTIER_LEASE_SECONDS", 60) * 1000),
        domain_concurrency=s.getint("FRONTIER_DOMAIN_CONCURRENCY", 0),
        domain_delay_ms=round(s.getfloat("FRONTIER_DOMAIN_DELAY", 0) * 1000),
        adaptive_factor=s.getfloat("FRONTIER_ADAPTIVE_FACTOR", 0.0),
        adaptive_max_ms=round(s.getfloat("FRONTIER_ADAPTIVE_MAX_DELAY", 30.0) * 1000),
        ip_concurrency=s.getint("FRONTIER_IP_CONCURRENCY", 0),
        ip_delay_ms=round(s.getfloat("FRONTIER_IP_DELAY", 0) * 1000),
        claim_sweep_ms=round(s.getfloat("FRONTIER_CLAIM_SWEEP", 1.0) * 1000),
        reserve_ms=round(s.getfloat("FRONTIER_RESERVE_SECONDS", 0) * 1000),
        breaker=Breaker(
            threshold=s.getint("BREAKER_THRESHOLD", 5),
            base_ms=round(s.getfloat("BREAKER_COOLDOWN", 30.0) * 1000),
            cap_ms=round(s.getfloat("BREAKER_COOLDOWN_MAX", 3600.0) * 1000),
            max_openings=s.getint("BREAKER_MAX_OPENINGS", 6),
        ),
    )


class FrontierScheduler:
    """A Scrapy scheduler whose queues, dedup and politeness live in Redis."""

    def __init__(self, crawler: Crawler) -> None:
        if not is_asyncio_reactor_installed():
            raise NotConfigured("the frontier scheduler needs Scrapy's asyncio reactor")
        self.crawler = crawler
        self.stats = crawler.stats
        s = crawler.settings
        self.worker = worker_identity(s)
        #: The shared Redis's URL (None: the embedded one), known once opening began.
        self.redis_url: str | None = None
        self.redis_params: dict[str, Any] = s.getdict("REDIS_PARAMS")
        self.cluster = s.getbool("REDIS_CLUSTER")
        self.partitions = s.getint("FRONTIER_PARTITIONS", 16)
        self.seen_buckets = s.getint("FRONTIER_SEEN_BUCKETS", 4096)
        self.namespace_template = s.get("FRONTIER_NAMESPACE", "frontier:%(spider)s")
        self.crawl_id: str = s.get("FRONTIER_CRAWL_ID") or ""
        self.idle_wait = s.getfloat("FRONTIER_IDLE_WAIT", 0.0)
        self.held_wait_ms = round(s.getfloat("FRONTIER_HELD_WAIT", 20.0) * 1000)
        self.watchdog_interval = s.getfloat("FRONTIER_WATCHDOG_INTERVAL", 5.0)
        self.connect_wait = s.getfloat("FRONTIER_CONNECT_WAIT", 60.0)
        self.meta_keys = tuple(s.getlist("FRONTIER_META_KEYS", list(DEFAULT_META_KEYS)))
        self.concurrency = s.getint("CONCURRENT_REQUESTS")
        self.limits = limits_from_settings(s)
        self.robots: RobotsPolicy | None = None
        if s.getbool("ROBOTSTXT_OBEY"):
            self.robots = RobotsPolicy(crawler)
            self.limits.robots_ms = self.robots.fetch_lease_ms
        self.stripper = stripper_from_settings(s)
        self.jobdir = s.get("JOBDIR")
        self.seeds_key_template: str = s.get("REDIS_START_URLS_KEY") or ""
        self.seeds_batch = s.getint("REDIS_START_URLS_BATCH_SIZE", 100)
        self.intake = Intake(crawler, self.limits, self.stripper, self.meta_keys)
        self.recent = RecentOffers(s.getint("FRONTIER_RECENT_OFFERS", 65536))
        self.leases = LeaseTable(self.stats, self.limits, self._record_again)
        self.health = RedisHealth(self.stats, self._refused, self._redis_back)
        self._closer: asyncio.Future[None] | None = None
        self.sync = Sync(self)
        self.claims = Claims(self)
        self.robots_jobs = RobotsJobs(self)
        self.embedded: EmbeddedRedis | None = None
        self.url: str | None = None
        self.frontier: Frontier | None = None
        self.ips: IpScope | None = None
        #: Hosts whose names do not resolve: held or parked (pages, robots and DNS jobs).
        self.dns: DnsOutcomes | None = None
        self.learning: SiteLearning | None = None
        self.seed_feed: SeedFeed | None = None
        self.spider: Spider | None = None
        self.counts: dict[str, int] | None = None
        self._counts_epoch = -1
        self._counting = False
        self._counted_at = 0.0
        #: When the frontier was last seen with nothing to do (FRONTIER_IDLE_WAIT).
        self.idle_since: float | None = None
        self.watchdog: Watchdog | None = None
        #: What was left in the frontier when the crawl stopped (the summary's).
        self.left: Leftover | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closing = False
        #: The frontier could not be opened: the spider is closed once open.
        self.unopened = False
        #: Why this worker claims nothing now, by who paused it (the disk guard).
        self.pauses: dict[str, str] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierScheduler:
        compat.check()  # the engine hooks need Scrapy's private names
        scheduler = cls(crawler)
        crawler.signals.connect(scheduler._reached_downloader,
                                signal=signals.request_reached_downloader)
        crawler.signals.connect(scheduler._close_if_unopened, signal=signals.spider_opened)
        return scheduler

    # ------------------------------------------------------------------ open / close

    def open(self, spider: Spider) -> Deferred[None]:
        self.spider = spider
        return deferred_from_coro(self._open_or_close())

    async def _open_or_close(self) -> None:
        """Open the frontier, or have the spider closed with one line saying why.

        A Redis that cannot be reached or refuses the worker, or a frontier laid
        out for other workers, is the operator's to fix, not a bug: one ERROR
        line (the URL without its password, what to check), then the spider
        closes with ``frontier_unavailable``, which ``scrapy crawl`` turns into
        exit code 1. The close is asked for once
        the spider is open (:meth:`_close_if_unopened`): an exception here, or
        a ``CloseSpider`` before the rest of the engine has started, ends in a
        traceback from every component that expected an open spider.
        """
        try:
            await self._open()
        except (ConnectError, NotConfigured) as exc:  # NotConfigured: a foreign layout
            logger.error("Frontier: %s", exc)
        except (RedisError, OSError) as exc:
            where = safe_url(self.url) if self.url else "Redis"
            hint = refusal(exc)
            logger.error("Frontier: %s refused to open the frontier: %s%s", where,
                         one_line(exc, url_password(self.url) if self.url else None),
                         f"; {hint}" if hint else "")
        else:
            return
        self.unopened = True

    def _redis_back(self, same_outage: bool) -> None:
        self.sync.resend(same_outage)

    def _refused(self) -> None:
        """Redis refuses this worker's commands (:class:`RedisHealth` said why):
        end the crawl rather than lease URLs it cannot give back."""
        engine = self.crawler.engine
        if self._closer is None and engine is not None and engine.spider is not None:
            self._closer = asyncio.ensure_future(
                engine.close_spider_async(reason=FRONTIER_UNAVAILABLE))

    def _close_if_unopened(self) -> None:
        if self.unopened:
            raise CloseSpider(FRONTIER_UNAVAILABLE)

    async def _open(self) -> None:
        assert self.spider is not None
        self.redis_url = configured_url(self.crawler.settings)
        # Starting or adopting the embedded server waits on a file lock and on
        # the server's start: in a thread, so the reactor runs on meanwhile.
        url = self.redis_url or await asyncio.to_thread(self._start_embedded)
        self.url = url  # for components with their own connections (the WARC writer)
        cluster = self.cluster and self.redis_url is not None  # the embedded one is not
        self.client = async_client(url, self.redis_params, cluster)
        crawl_id = getattr(self.spider, "crawl_id", None) or self.crawl_id
        namespace = crawl_namespace(self.namespace_template, self.spider.name, crawl_id)
        keys = Keys(namespace, self.partitions, self.seen_buckets)
        await wait_for_redis(self.client, url, self.connect_wait)
        await check_layout(self.client, keys)
        self.leases.revisits = await revisits_for(self.crawler, self.spider, self.limits,
                                                  self.client)
        self.frontier = Frontier(self.client, keys, self.limits)
        self.learning = self.intake.learning = learning_for(
            self.crawler.settings, self.stats, self.client, keys)
        settings = self.crawler.settings
        self.dns = DnsOutcomes(self.frontier, DNSRetry.from_settings(settings),
                               ProxyRoutes.from_settings(settings), self.stats)
        gates = IpGates(self.client, keys, self.limits, self.frontier.due)
        self.ips = IpScope(self, gates, self.dns) if gates.on else None
        if self.robots is not None:
            self.robots.frontier = self.frontier
        if self.seeds_key_template:
            key = self.seeds_key_template % {"name": self.spider.name}
            self.seed_feed = SeedFeed(self.client, key, self.worker, self.seeds_batch)
        self.watchdog = Watchdog(
            LeftoverReader(self.client, keys), self.stats, self._poke,
            interval_s=self.watchdog_interval,
            grace_ms=max(10_000, 4 * self.limits.claim_sweep_ms),
            held_wait_ms=self.held_wait_ms)
        self._install_engine_hooks()
        self.spawn(heartbeat_loop(self))
        if self.limits.reserve_ms > 0:
            control = ControlWatch(self.client, keys.control_log(),
                                   holds=lambda: bool(self.claims.reserved),
                                   give_back=self.give_back_unstarted)
            self.spawn(control.run(lambda: self.closing))
        counts = await self.frontier.counts()
        logger.info(
            "Frontier %s on %s: %s queued, %s leased, %s delayed, %s done, %s dead; worker %s",
            namespace, safe_url(url), counts[Count.QUEUED], counts[Count.LEASED],
            counts[Count.DELAYED], counts[Count.DONE], counts[Count.DEAD], self.worker,
            extra={"worker": self.worker, "namespace": namespace},
        )

    def sync_client(self, **overrides: Any) -> Any:
        """A blocking client on the frontier's Redis, for threads (metrics, WARC digests)."""
        assert self.url is not None, "the frontier is not open"
        return sync_client(self.url, self.redis_params,
                           self.cluster and self.redis_url is not None, **overrides)

    def _start_embedded(self) -> str:
        assert self.spider is not None
        self.embedded = EmbeddedRedis(embedded_folder(self.jobdir, self.spider.name))
        return self.embedded.start()

    def _install_engine_hooks(self) -> None:
        """Hook the engine where the frontier needs it (:mod:`crawler.compat`).

        A lease ends when the engine is done with its request, claimed URLs
        wake the engine at once instead of on its 5 s heartbeat, and Scrapy's
        download slots add no delay: the frontier paces every host for all
        workers (claims here, starts in :mod:`crawler.middlewares.pacing`), and a
        request it handed out must never wait in a slot while its turn passes.
        """
        engine = self.crawler.engine
        compat.hook_request_done(engine, self._finished)
        self._wake_engine = compat.engine_wakeup(engine)
        compat.pass_through_download_slots(engine.downloader)

    def close(self, reason: str) -> Deferred[None]:
        return deferred_from_coro(self._close(reason))

    async def _close(self, reason: str) -> None:
        self.closing = True
        self.claims.cancel()
        flushes = [t for t in self._tasks if getattr(t, "flush", False)]
        for task in list(self._tasks):
            if task not in flushes:
                task.cancel()
        if flushes:  # let a flush or claim under way finish: it holds leases in hand
            await asyncio.wait(flushes, timeout=30)
        returned = self.leases.return_all()
        self.claims.take_unstarted()
        self.sync.let_go()
        self.sync.releases += returned
        if self.frontier is not None:
            await self._save_last_changes()
        if returned:
            self.stats.inc_value("frontier/leases/returned", len(returned))
        if self.embedded is not None and not await asyncio.to_thread(self.embedded.leave):
            logger.info("Frontier: leaving the embedded Redis running: "
                        "another process uses it")
        logger.info("Frontier closed (%s)", reason)

    async def _read_leftover(self) -> None:
        """What is left in the frontier, for the end-of-crawl summary (a scan of
        the host queues: bounded, the summary says less when it runs out)."""
        if self.health.refused or self.watchdog is None:
            return
        reader = self.watchdog.reader
        try:
            try:
                left = await asyncio.wait_for(reader.read(), timeout=LEFTOVER_READ_S)
            except TimeoutError:  # a very large frontier: its counts, not its hosts
                left = await asyncio.wait_for(reader.counts_only(), timeout=LEFTOVER_READ_S)
        except (RedisError, OSError, TimeoutError) as exc:
            logger.debug("Frontier: could not read what is left: %s", exc)
            return
        self.left = left
        for key, value in (("queued", left.queued), ("delayed", left.delayed),
                           ("held", sum(h.queued for h in left.held())),
                           ("dead", left.counts.get(Count.DEAD, 0))):
            if value:
                self.stats.set_value(f"frontier/left/{key}", value)

    def continue_command(self) -> str:
        """The command that takes this crawl up where it stopped (its frontier:
        the job folder's embedded Redis, or the shared one and the crawl id)."""
        assert self.spider is not None
        words = ["scrapy", "crawl", self.spider.name]
        crawl_id = getattr(self.spider, "crawl_id", None) or self.crawl_id
        if crawl_id:
            words += ["-a", f"crawl_id={crawl_id}"]
        if self.redis_url is None and self.jobdir:
            words += ["-s", f"JOBDIR={self.jobdir}"]
        command = shlex.join(words)
        return command if self.redis_url is None else f"{command} (with the same Redis)"

    async def _save_last_changes(self) -> None:
        assert self.frontier is not None
        if self.health.refused:
            logger.info("Frontier: last changes not saved (Redis refuses this worker); the "
                        "URLs it held go to other workers when their leases expire")
            await self.client.aclose()
            return
        try:
            await asyncio.wait_for(self.sync.flush_all(), timeout=30)
            if self.learning is not None:
                await self.learning.flush()
            if self.seed_feed is not None and self.seed_feed.holding:
                await self.seed_feed.give_back()
            await self.client.hdel(self.frontier.keys.workers(), self.worker)
        except (RedisError, OSError, TimeoutError) as exc:
            logger.error("Frontier: could not save the last changes on close: %s", exc)
        else:
            await self._read_leftover()  # with this worker's leases given back
        await self.client.aclose()

    # ------------------------------------------------------------------ scheduler API

    def enqueue_request(self, request: Request) -> bool:
        forms = url_forms(request.url, self.stripper)
        sent, canon = forms if forms is not None else (None, None)
        ticket = request.meta.pop(TICKET_META, None)
        token = ticket.token if isinstance(ticket, Ticket) else None
        if token is not None and self.leases.is_retry(token, canon):
            self.sync.release(self.leases.retry(request, token))
            return True
        if request.dont_filter and token is None:
            self.intake.dont_filter(request)
        if token is None and canon is not None and self.recent.known(canon):
            self.stats.inc_value("frontier/offered")
            self.sync.count_duplicates(1, local=True)
            return False
        assert self.spider is not None
        admission = self.intake.admission(request, sent, canon, self.spider)
        if admission is None:
            return False
        self.stats.inc_value("frontier/offered")
        if token is None and canon is not None:  # a redirect target is no link: not kept
            self.recent.offered(canon)
        self.sync.admit(admission)
        return True

    def next_request(self) -> Request | None:
        return self.claims.pop()

    def has_pending_requests(self) -> bool:
        if self.claims or self.sync or self.leases:
            self.idle_since = None
            if self.watchdog is not None:
                self.watchdog.busy()
            return True
        if self.sync.flushing or self.claims.claiming or self._counts_epoch != self.sync.epoch:
            self.refresh_counts()
            return True
        c = self.counts or {}
        if (c.get(Count.QUEUED, 0) + c.get(Count.LEASED, 0) + c.get(Count.DELAYED, 0) > 0
                or self.robots_jobs):
            # (A robots job in flight is no reason to wait when only held work
            # is left: it is then the next try of a host in a run of failures.)
            self.idle_since = None
            self.refresh_counts()
            return not self._only_held(c)
        now = time.monotonic()
        self.idle_since = self.idle_since or now
        if now - self.idle_since < self.idle_wait:
            self.refresh_counts()
            return True
        return False

    def _only_held(self, counts: dict[str, int]) -> bool:
        """Whether a finite crawl should end now: this worker is idle, nothing is
        leased anywhere, and what is left is held longer than FRONTIER_HELD_WAIT
        (the watchdog's last read said so). Keeps the watchdog reading meanwhile."""
        watchdog = self.watchdog
        if self.pauses:  # (its claims are what keep the frontier's timers moving)
            if watchdog is not None:
                watchdog.busy()
            return False
        if watchdog is None or counts.get(Count.LEASED, 0) > 0:
            if watchdog is not None:
                watchdog.busy()
            return False
        if self.idle_wait <= 0 and watchdog.only_held(counts):
            watchdog.say_held()
            return True
        if watchdog.wants_read():
            self.spawn(self._watch())
        return False

    async def _watch(self) -> None:
        assert self.watchdog is not None
        await self.watchdog.look()
        self.wake()  # the engine asks has_pending_requests again, with the verdict

    def _poke(self) -> None:
        """After a repair: claim again now, in every partition."""
        if self.frontier is not None:
            self.frontier.due.touch(*range(self.frontier.keys.partitions))
        self.claims.now()

    def __len__(self) -> int:
        return len(self.claims) + (self.counts or {}).get(Count.QUEUED, 0)

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

    def give_back_unstarted(self, site: str | None = None) -> None:
        """Claimed requests not started yet (of ``site`` only, if given) go back to
        their queues: a pause, a hold or a breaker opening, an operator's change."""
        def of_site(request: Request) -> bool:
            ticket = ticket_of(request.meta)
            host = ticket and self.leases.host_of(ticket.token)
            return host is not None and site_of(host) == site
        self.give_back(self.claims.take_unstarted(None if site is None else of_site))

    def give_back(self, requests: list[Request]) -> None:
        """The leases of claimed requests taken out before they started go back."""
        tokens = [t.token for t in map(ticket_of, (r.meta for r in requests)) if t is not None]
        for release in self.leases.give_back(tokens):
            self.sync.release(release)

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
        if self.frontier is not None and not self.closing:
            self.spawn(beat_quietly(self))

    @property
    def may_gate(self) -> bool:
        """Whether any host can have a gap between requests (else no site or
        domain gate needed; the IP scope's gate is :attr:`ips`)."""
        return (self.limits.delay_ms * (1 - self.limits.jitter) > 0
                or self.limits.domain_delay_ms * (1 - self.limits.jitter) > 0
                or self.limits.adaptive_factor > 0
                or bool(self.intake.slot_settings)
                or self.robots is not None)  # a Crawl-delay can slow any host down

    @property
    def slot_settings(self) -> dict[str, dict[str, Any]]:
        return self.intake.slot_settings

    def host_of(self, token: str) -> str | None:
        """The host key of a lease this worker holds."""
        return self.leases.host_of(token)

    def host_limits(self, host: str) -> tuple[int, int]:
        return self.intake.host_limits(host)

    def hold_now(self, token: str, seconds: float) -> None:
        """Hold the host of a lease back for every worker at once (a 429 / 503 just
        arrived), without waiting for the lease's release to say so. Best effort:
        if Redis does not answer, the release holds the host when it goes through."""
        host = self.host_of(token)
        if host is None or self.frontier is None or seconds <= 0:
            return
        self.give_back_unstarted(site_of(host))
        self.spawn(self._hold(host, round(seconds * 1000)))

    async def _hold(self, host: str, ms: int) -> None:
        try:
            await self.frontier.hold(host, ms)  # type: ignore[union-attr]
        except (RedisError, OSError):
            return
        self.stats.inc_value("frontier/holds/early")

    async def wait_admitted(self) -> bool:
        """Wait until every request enqueued so far is in Redis (False: closing)."""
        while self.sync.admissions or self.sync.flushing:
            if self.closing:
                return False
            await asyncio.sleep(0.01)
        return not self.closing

    # ------------------------------------------------------------------ internals

    def _finished(self, request: Request) -> None:
        self.claims.ended(request)
        # A release the archive holds back is sent later, by the same sync,
        # whose flush wakes the engine (after_flush).
        self.leases.finished(request, self.sync.release)

    def _record_again(self, request: Request, lease: Lease) -> str:
        """The record of a retried request (its retry count moved on), "" to keep the old."""
        assert self.spider is not None
        try:
            record = to_record(request, request.url, self.spider, self.meta_keys, lease.host)
            return keep_state(lease.record, record)
        except RecordError:
            return ""

    def _reached_downloader(self, request: Request, spider: Spider) -> None:
        ticket = ticket_of(request.meta)
        if ticket is not None:
            ms = round((time.monotonic() - ticket.claimed) * 1000)
            self.stats.max_value("frontier/claim_to_download_ms/max", ms)
            if ms > 20:
                self.stats.inc_value("frontier/claim_to_download_ms/over_20")

    def spawn(self, coro: Any, *, flush: bool = False) -> None:
        """Run ``coro`` in the background; close cancels it (a flush it lets finish)."""
        task = asyncio.ensure_future(coro)
        task.flush = flush  # type: ignore[attr-defined]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def after_flush(self) -> None:
        self.wake()
        self.claims.want()
        # (A worker with work in hand needs no counts: has_pending_requests
        # reads them again once it holds none, before it may call the crawl
        # idle; what other workers queue meanwhile the claims' sweeps find.)
        if not (self.leases or self.claims):
            self.refresh_counts()

    def wake(self) -> None:
        """Have the engine ask for requests now rather than at its next heartbeat."""
        if not self.closing:
            self._wake_engine()

    def refresh_counts(self) -> None:
        """Read the frontier's counts again, at most every COUNTS_INTERVAL
        seconds: a read is one HGETALL per partition, and the engine asks
        whether anything is pending many times a second."""
        if self.closing or self.frontier is None or self._counting:
            return
        self._counting = True
        wait = self._counted_at + COUNTS_INTERVAL - time.monotonic()
        if wait > 0:
            asyncio.get_event_loop().call_later(wait, self._count_now)
        else:
            self._count_now()

    def _count_now(self) -> None:
        if self.closing:
            self._counting = False
            return
        self._counted_at = time.monotonic()
        self.spawn(self._count())

    async def _count(self) -> None:
        assert self.frontier is not None
        epoch = self.sync.epoch
        try:
            self.counts = await self.frontier.counts()
            if self.counts[Count.QUEUED] + self.counts[Count.DELAYED] > 0:
                self.claims.maybe_claimable()
            if not self.sync.flushing and not self.sync:
                self._counts_epoch = epoch
        except (RedisError, OSError) as exc:
            self.health.trouble(exc)
        finally:
            self._counting = False
        self.wake()
