"""The Scrapy scheduler on top of the Redis frontier.

``SCHEDULER = "crawler.frontier.scheduler.FrontierScheduler"``.

The engine talks to a scheduler synchronously (``enqueue_request`` and
``next_request`` return at once), so nothing here waits for Redis on the
reactor thread: requests to admit and leases to release are batched and
flushed by a background task, and claimed URLs wait in a small local buffer
sized to the free download slots. Per-host politeness lives in Redis, so the
limits hold across every worker; Scrapy's own download slots are made
pass-through so they neither add a second delay nor hold requests that
another host could use.

Lease life cycle: a claimed URL's lease is released exactly once, when the
engine is done with the request it became (response parsed and its links
queued, or failure handled): ``done``, ``dead`` (a download error) or, on
shutdown, ``return``. A retry of the same URL releases it as ``retry``
(delayed by the host's delay); a redirect to another URL admits the new URL
and the old lease ends as ``done``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
import weakref
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError
from scrapy import Request, Spider, signals
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.project import data_path
from scrapy.utils.reactor import is_asyncio_reactor_installed

from crawler import compat
from crawler.addressguard import BLOCKED_REASON, AddressPolicy
from crawler.admission import TrapRules
from crawler.frontier.connection import async_client, sync_client
from crawler.frontier.dnsstate import dns_step_of
from crawler.frontier.embedded import EmbeddedRedis
from crawler.frontier.keys import Count, Keys, crawl_namespace, layout_json, older_layout
from crawler.frontier.records import DEFAULT_META_KEYS, RecordError, from_record, to_record
from crawler.frontier.seedfeed import SeedFeed
from crawler.frontier.store import (
    Admission,
    Breaker,
    BreakerEvent,
    Frontier,
    Lease,
    Limits,
    Release,
)
from crawler.frontier.workers import Heartbeat, beat_interval
from crawler.redaction import safe_url
from crawler.robots.policy import RobotsPolicy
from crawler.seedrefusals import SeedRefusals, is_seed
from crawler.urls import (
    canonical_host_key,
    canonical_url,
    stripper_from_settings,
    url_fingerprint,
    url_forms,
)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)

LEASE_META = "_frontier_lease"
ERROR_META = "_frontier_error"
#: Set by the robots middleware on a request it refused: "denied" or "unknown".
ROBOTS_META = "_frontier_robots"
#: Set by the retry middleware: {"op", "arg", "hold_ms", "health"} for the release.
OUTCOME_META = "_frontier_outcome"
#: Set by a guard that refused a request: the reason it ends as done with.
REASON_META = "_frontier_reason"

_SCHEDULERS: weakref.WeakKeyDictionary[Any, FrontierScheduler] = weakref.WeakKeyDictionary()


def beat_delay(lease_ms: int, ok: bool) -> float:
    """Seconds to the next heartbeat: three a lease, or soon after a failed one."""
    interval = beat_interval(lease_ms / 1000)
    return interval if ok else min(interval, 0.5)


class FrontierUnavailable(RuntimeError):
    """The frontier's Redis did not answer when the worker started."""


def scheduler_of(crawler: Crawler) -> FrontierScheduler | None:
    """The frontier scheduler of a crawl (for its middlewares), if it uses one."""
    return _SCHEDULERS.get(crawler)


def redis_client(url: str, params: dict[str, Any], cluster: bool = False
                 ) -> Redis | RedisCluster:
    """The scheduler's client (see :func:`crawler.frontier.connection.async_client`)."""
    return async_client(url, params, cluster)


def worker_identity(settings: Any) -> str:
    """``FRONTIER_WORKER_ID``, else ``hostname:pid``: unique per live process."""
    return settings.get("FRONTIER_WORKER_ID") or f"{socket.gethostname()}:{os.getpid()}"


class FrontierScheduler:
    """A Scrapy scheduler whose queues, dedup and politeness live in Redis."""

    def __init__(self, crawler: Crawler) -> None:
        if not is_asyncio_reactor_installed():
            raise NotConfigured("the frontier scheduler needs Scrapy's asyncio reactor")
        self.crawler = crawler
        self.stats = crawler.stats
        s = crawler.settings
        self.worker = worker_identity(s)
        self.redis_url: str | None = s.get("REDIS_URL")
        self.redis_params: dict[str, Any] = s.getdict("REDIS_PARAMS")
        self.cluster = s.getbool("REDIS_CLUSTER")
        self.partitions = s.getint("FRONTIER_PARTITIONS", 16)
        self.seen_buckets = s.getint("FRONTIER_SEEN_BUCKETS", 4096)
        self.namespace_template = s.get("FRONTIER_NAMESPACE", "frontier:%(spider)s")
        self.crawl_id: str = s.get("FRONTIER_CRAWL_ID") or ""
        self.idle_wait = s.getfloat("FRONTIER_IDLE_WAIT", 0.0)
        self.connect_wait = s.getfloat("FRONTIER_CONNECT_WAIT", 60.0)
        self.meta_keys = tuple(s.getlist("FRONTIER_META_KEYS", list(DEFAULT_META_KEYS)))
        self.concurrency = s.getint("CONCURRENT_REQUESTS")
        self.limits = Limits(
            concurrency=s.getint("CONCURRENT_REQUESTS_PER_DOMAIN"),
            delay_ms=round(s.getfloat("DOWNLOAD_DELAY") * 1000),
            jitter=s.getfloat("DOWNLOAD_DELAY_JITTER", 0.5),
            budget=s.getint("ADMISSION_MAX_PAGES_PER_HOST", 0),
            lease_ms=round(s.getfloat("FRONTIER_LEASE_SECONDS", 60) * 1000),
            breaker=Breaker(
                threshold=s.getint("BREAKER_THRESHOLD", 5),
                base_ms=round(s.getfloat("BREAKER_COOLDOWN", 30.0) * 1000),
                cap_ms=round(s.getfloat("BREAKER_COOLDOWN_MAX", 3600.0) * 1000),
                max_openings=s.getint("BREAKER_MAX_OPENINGS", 6),
            ),
        )
        self.robots: RobotsPolicy | None = None
        if s.getbool("ROBOTSTXT_OBEY"):
            self.robots = RobotsPolicy.from_crawler(crawler)
            self.limits.robots_ms = self.robots.fetch_lease_ms
        self.robots_jobs: set[str] = set()
        self.slot_settings: dict[str, dict[str, Any]] = s.getdict("DOWNLOAD_SLOTS")
        self.traps = TrapRules.from_settings(s)
        # Refused when queued (links, redirects, seeds): no robots fetch for them either.
        self.address_policy = AddressPolicy.from_settings(s)
        self.stripper = stripper_from_settings(s)
        self.jobdir = s.get("JOBDIR")
        self.seeds_key_template: str = s.get("REDIS_START_URLS_KEY") or ""
        self.seeds_batch = s.getint("REDIS_START_URLS_BATCH_SIZE", 100)
        self.embedded: EmbeddedRedis | None = None
        self.url: str | None = None
        self.frontier: Frontier | None = None
        self.seed_feed: SeedFeed | None = None
        self.spider: Spider | None = None
        self.buffer: deque[Request] = deque()
        # token -> (lease, the URL's identity: canonical_url of what was sent)
        self.held: dict[str, tuple[Lease, str | None]] = {}
        self.transferred: set[str] = set()
        self.pending_admissions: list[Admission] = []
        self.pending_releases: list[Release] = []
        self.counts: dict[str, int] | None = None
        self._counts_epoch = -1
        self._flush_epoch = 0
        self._idle_since: float | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._flushing = self._claiming = self._closing = False
        # False once a claim found nothing due and nothing pending: claiming
        # again is pointless until something is admitted, released or due.
        self._claimable = True
        self._wakeup: asyncio.TimerHandle | None = None
        self._redis_down_since: float | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierScheduler:
        compat.check()  # the engine hooks below need Scrapy's private names
        scheduler = cls(crawler)
        _SCHEDULERS[crawler] = scheduler
        crawler.signals.connect(scheduler._reached_downloader,
                                signal=signals.request_reached_downloader)
        return scheduler

    # ------------------------------------------------------------------ open / close

    def open(self, spider: Spider) -> Deferred[None]:
        self.spider = spider
        return deferred_from_coro(self._open())

    async def _open(self) -> None:
        assert self.spider is not None
        url = self.redis_url or self._start_embedded()
        self.url = url  # for components with their own connections (the WARC writer)
        cluster = self.cluster and self.redis_url is not None  # the embedded one is not
        self.client = redis_client(url, self.redis_params, cluster)
        crawl_id = getattr(self.spider, "crawl_id", None) or self.crawl_id
        namespace = crawl_namespace(self.namespace_template, self.spider.name, crawl_id)
        keys = Keys(namespace, self.partitions, self.seen_buckets)
        await self._wait_for_redis(url)
        await self._check_layout(keys)
        self.frontier = Frontier(self.client, keys, self.limits)
        if self.robots is not None:
            self.robots.frontier = self.frontier
        if self.seeds_key_template:
            key = self.seeds_key_template % {"name": self.spider.name}
            self.seed_feed = SeedFeed(self.client, key, self.worker, self.seeds_batch)
        self._install_engine_hooks()
        self._spawn(self._heartbeat_loop())
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
        folder = Path(self.jobdir) / "frontier" if self.jobdir else Path(
            data_path(f"frontier/{self.spider.name}", createdir=True))
        self.embedded = EmbeddedRedis(folder)
        return self.embedded.start()

    async def _wait_for_redis(self, url: str) -> None:
        """A worker started while Redis restarts (a scrapyd job, a supervisor) waits
        for it, up to ``FRONTIER_CONNECT_WAIT`` seconds, rather than dying at once."""
        assert self.client is not None
        deadline = time.monotonic() + self.connect_wait
        pause, warned = 0.2, False
        while True:
            try:
                await self.client.ping()
            except (RedisError, OSError) as exc:
                if time.monotonic() + pause > deadline:
                    raise FrontierUnavailable(
                        f"Redis at {safe_url(url)} did not answer for {self.connect_wait:.0f} s "
                        f"(FRONTIER_CONNECT_WAIT): {exc}") from exc
                if not warned:
                    logger.warning("Frontier: Redis at %s unreachable (%s); waiting up to %.0f s",
                                   safe_url(url), exc, self.connect_wait)
                    warned = True
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)
                continue
            if warned:
                logger.warning("Frontier: Redis at %s answers", safe_url(url))
            return

    async def _check_layout(self, keys: Keys) -> None:
        """All workers of a frontier must agree on its partitioning."""
        meta_key = keys.layout()
        layout = layout_json(keys.partitions, keys.seen_buckets)
        await self.client.set(meta_key, layout, nx=True)
        stored = (await self.client.get(meta_key) or b"").decode()
        if stored == layout:
            return
        older = older_layout(stored)
        if older is not None:
            raise NotConfigured(f"frontier {keys.namespace}: {older} (stored layout {stored})")
        raise NotConfigured(
            f"frontier {keys.namespace} was created with {stored}; this worker has {layout}")

    def _install_engine_hooks(self) -> None:
        """Hook the engine where the frontier needs it (:mod:`crawler.compat`).

        A lease ends when the engine is done with its request, claimed URLs
        wake the engine at once instead of on its 5 s heartbeat, and Scrapy's
        download slots add no delay: the frontier paces every host for all
        workers (claims here, starts in :mod:`crawler.frontier.pacing`), and a
        request it handed out must never wait in a slot while its turn passes.
        """
        engine = self.crawler.engine
        compat.hook_request_done(engine, self._finished)
        self._wake_engine = compat.engine_wakeup(engine)
        compat.pass_through_download_slots(engine.downloader)

    @property
    def may_gate(self) -> bool:
        """Whether any host can have a gap between requests (else no gate needed)."""
        return (self.limits.delay_ms * (1 - self.limits.jitter) > 0 or bool(self.slot_settings)
                or self.robots is not None)  # a Crawl-delay can slow any host down

    def hold_now(self, token: str, seconds: float) -> None:
        """Hold the host of a lease back for every worker at once (a 429 / 503 just
        arrived), without waiting for the lease's release to say so. Best effort:
        if Redis does not answer, the release holds the host when it goes through."""
        host = self.host_of(token)
        if host is None or self.frontier is None or seconds <= 0:
            return
        self._spawn(self._hold(host, round(seconds * 1000)))

    async def _hold(self, host: str, ms: int) -> None:
        try:
            await self.frontier.hold(host, ms)  # type: ignore[union-attr]
        except (RedisError, OSError):
            return
        self.stats.inc_value("frontier/holds/early")

    def host_of(self, token: str) -> str | None:
        """The host key of a lease this worker holds."""
        held = self.held.get(token)
        return held[0].host if held else None

    def _reached_downloader(self, request: Request, spider: Spider) -> None:
        claimed = request.meta.get("_frontier_claimed")
        if claimed is not None:
            ms = round((time.monotonic() - claimed) * 1000)
            self.stats.max_value("frontier/claim_to_download_ms/max", ms)
            if ms > 20:
                self.stats.inc_value("frontier/claim_to_download_ms/over_20")

    def close(self, reason: str) -> Deferred[None]:
        return deferred_from_coro(self._close(reason))

    async def _close(self, reason: str) -> None:
        self._closing = True
        if self._wakeup:
            self._wakeup.cancel()
        flushes = [t for t in self._tasks if getattr(t, "flush", False)]
        for task in list(self._tasks):
            if task not in flushes:
                task.cancel()
        if flushes:  # let a flush under way finish: it holds releases in hand
            await asyncio.wait(flushes, timeout=30)
        returned = [Release(lease.host, lease.fingerprint, "return")
                    for lease, _ in self.held.values()]
        self.held.clear()
        self.buffer.clear()
        self.pending_releases += returned
        if self.frontier is not None:
            try:
                await asyncio.wait_for(self._flush_all(), timeout=30)
                if self.seed_feed is not None and self.seed_feed.holding:
                    await self.seed_feed.give_back()
                await self.client.hdel(self.frontier.keys.workers(), self.worker)
            except (RedisError, OSError, TimeoutError) as exc:
                logger.error("Frontier: could not save the last changes on close: %s", exc)
            await self.client.aclose()
        if returned:
            self.stats.inc_value("frontier/leases/returned", len(returned))
        if self.embedded is not None and not self.embedded.leave():
            logger.info("Frontier: leaving the embedded Redis running: "
                        "another process uses it")
        logger.info("Frontier closed (%s)", reason)

    # ------------------------------------------------------------------ scheduler API

    def enqueue_request(self, request: Request) -> bool:
        forms = url_forms(request.url, self.stripper)
        sent, canon = forms if forms is not None else (None, None)
        token = request.meta.pop(LEASE_META, None)
        if token is not None and token in self.held and self.held[token][1] == canon:
            return self._retry(request, token)
        if sent is None or canon is None:
            return self._refuse(request, "not-http-url")
        if self._redirect_loop(request, canon):
            return self._refuse(request, "redirect-loop")
        trap = self.traps.check(canon)
        if trap is not None:
            return self._refuse(request, trap)
        blocked = self.address_policy.check_url(canon)
        if blocked is not None:
            self.stats.inc_value(f"guard/blocked/{blocked}")
            return self._refuse(request, BLOCKED_REASON, blocked)
        assert self.spider is not None
        host = canonical_host_key(canon)
        try:
            record = to_record(request, sent, self.spider, self.meta_keys, host)
        except RecordError as exc:
            logger.error("Frontier refused %s: %s", request.url, exc)
            return self._refuse(request, "unserializable")
        self.pending_admissions.append(Admission(
            canon, host, url_fingerprint(canon), record, request.priority,
            self._host_config(request),
        ))
        self.stats.inc_value("frontier/offered")
        self._schedule_flush()
        return True

    def _retry(self, request: Request, token: str) -> bool:
        """The same URL again (a retry): release its lease as delayed."""
        lease, _ = self.held.pop(token)
        self.transferred.add(token)
        record = self._record_again(request, lease)
        self.pending_releases.append(
            Release(lease.host, lease.fingerprint, "retry", str(self.limits.delay_ms), record))
        self.stats.inc_value("frontier/leases/retried")
        self._schedule_flush()
        return True

    def _redirect_loop(self, request: Request, canon: str) -> bool:
        """A redirect back to a URL of its own chain (a -> b -> a): never worth a fetch."""
        chain = request.meta.get("redirect_urls")
        return bool(chain) and canon in {canonical_url(u, self.stripper) for u in chain}

    def _refuse(self, request: Request, reason: str, guard_reason: str | None = None) -> bool:
        self.stats.inc_value(f"frontier/refused/{reason}")
        if is_seed(request):  # the operator asked for it: say so (crawler/seedrefusals.py)
            SeedRefusals.of(self.crawler).refused(request, reason, guard_reason)
        logger.debug("Frontier refused (%s): %s", reason, request.url)
        return False

    def _host_config(self, request: Request) -> str:
        """"conc:delay_ms" for a host with its own DOWNLOAD_SLOTS entry, else ""."""
        limits = self._slot_limits(request.meta.get("download_slot") or _hostname(request))
        return f"{limits[0]}:{limits[1]}" if limits else ""

    def _slot_limits(self, slot_name: str) -> tuple[int, int] | None:
        slot = self.slot_settings.get(slot_name) if self.slot_settings else None
        if not slot:
            return None
        return (int(slot.get("concurrency", self.limits.concurrency)),
                round(float(slot.get("delay", self.limits.delay_ms / 1000)) * 1000))

    def next_request(self) -> Request | None:
        if not self.buffer:
            self._want_claim()
            return None
        request = self.buffer.popleft()
        if len(self.buffer) < self.concurrency // 4:
            self._want_claim()
        return request

    def has_pending_requests(self) -> bool:
        if (self.buffer or self.pending_admissions or self.pending_releases or self.held
                or self.robots_jobs):
            self._idle_since = None
            return True
        if self._flushing or self._claiming or self._counts_epoch != self._flush_epoch:
            self._refresh_counts()
            return True
        c = self.counts or {}
        if c.get(Count.QUEUED, 0) + c.get(Count.LEASED, 0) + c.get(Count.DELAYED, 0) > 0:
            self._idle_since = None
            self._refresh_counts()
            return True
        now = time.monotonic()
        self._idle_since = self._idle_since or now
        if now - self._idle_since < self.idle_wait:
            self._refresh_counts()
            return True
        return False

    async def wait_admitted(self) -> bool:
        """Wait until every request enqueued so far is in Redis (False: closing)."""
        while self.pending_admissions or self._flushing:
            if self._closing:
                return False
            await asyncio.sleep(0.01)
        return not self._closing

    def __len__(self) -> int:
        return len(self.buffer) + (self.counts or {}).get(Count.QUEUED, 0)

    # ------------------------------------------------------------------ lease endings

    def _finished(self, request: Request) -> None:
        token = request.meta.get(LEASE_META)
        if token is None:
            return
        if token in self.transferred:
            self.transferred.discard(token)
            return
        held = self.held.pop(token, None)
        if held is None:
            return
        self.pending_releases.append(self._release_of(request, held[0]))
        self._schedule_flush()

    def _release_of(self, request: Request, lease: Lease) -> Release:
        """How a finished request's lease ends (the middlewares left the why in its meta)."""
        meta = request.meta
        outcome = meta.get(OUTCOME_META)
        robots = meta.get(ROBOTS_META)
        if robots == "denied" or meta.get(REASON_META):
            self.stats.inc_value("frontier/leases/done")
            return Release(lease.host, lease.fingerprint, "done",
                           "robots" if robots == "denied" else str(meta[REASON_META]))
        if robots is not None:  # rules missing: try again later
            self.stats.inc_value("frontier/leases/retried")
            return Release(lease.host, lease.fingerprint, "retry", str(self.limits.lease_ms))
        if outcome is not None:
            op = outcome["op"]
            self.stats.inc_value(f"frontier/leases/{'retried' if op == 'retry' else op}")
            return Release(lease.host, lease.fingerprint, op, outcome.get("arg", ""),
                           self._record_again(request, lease) if op == "retry" else "",
                           outcome.get("hold_ms", 0), outcome.get("health", ""))
        error = meta.get(ERROR_META)
        if error is not None:
            self.stats.inc_value("frontier/leases/dead")
            reason = json.dumps({"reason": "download-error", "error": error,
                                 "t": round(time.time())})
            return Release(lease.host, lease.fingerprint, "dead", reason)
        self.stats.inc_value("frontier/leases/done")
        return Release(lease.host, lease.fingerprint, "done", health="ok")

    def _record_again(self, request: Request, lease: Lease) -> str:
        """The record of a retried request (its retry count moved on), "" to keep the old."""
        assert self.spider is not None
        try:
            return to_record(request, request.url, self.spider, self.meta_keys, lease.host)
        except RecordError:
            return ""

    async def _breaker_event(self, event: BreakerEvent) -> None:
        """Log a host's breaker transition once (this worker's release caused it)."""
        extra = {"host": event.host, "breaker": event.event}
        self.stats.inc_value(f"breaker/{event.event}")
        if event.event == "open":
            logger.warning("Breaker open for %s: no requests for %.0f s", event.host,
                           event.ms / 1000, extra={**extra, "cooldown_s": event.ms / 1000})
        elif event.event == "close":
            logger.info("Breaker closed for %s: the probe succeeded", event.host, extra=extra)
        else:
            assert self.frontier is not None
            reason = json.dumps({"reason": "host-unreachable", "error": "breaker opened "
                                 f"{self.limits.breaker.max_openings} times",
                                 "t": round(time.time())})
            try:
                parked = await self.frontier.park_host(event.host, reason, whole_site=True)
            except (RedisError, OSError) as exc:
                self._redis_trouble(exc)
                return
            logger.warning(
                "Host %s parked: its breaker kept opening; %d queued URL(s) are dead letters "
                "(requeue with: scrapy frontier requeue --reason host-unreachable --host %s)",
                event.host, parked, event.host, extra=extra)

    # ------------------------------------------------------------------ background work

    def _spawn(self, coro: Any, *, flush: bool = False) -> None:
        task = asyncio.ensure_future(coro)
        task.flush = flush  # type: ignore[attr-defined]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _schedule_flush(self) -> None:
        if not self._flushing and not self._closing:
            self._flushing = True
            self._spawn(self._flush_loop(), flush=True)

    async def _flush_loop(self) -> None:
        try:
            await asyncio.sleep(0)  # let the engine queue the rest of this page's links
            await self._flush_all()
        finally:
            self._flushing = False
        self._wake()
        self._want_claim()
        self._refresh_counts()

    async def _flush_all(self) -> None:
        """Send pending admissions, then pending releases, until none is left.

        Admissions go first so that a page's links are in Redis before its
        lease ends: a crash in between refetches the page instead of losing
        its links. Both steps are idempotent, so a failed batch is retried
        whole after Redis comes back.
        """
        assert self.frontier is not None
        delay = 0.2
        while self.pending_admissions or self.pending_releases:
            admissions, self.pending_admissions = self.pending_admissions, []
            releases, self.pending_releases = self.pending_releases, []
            try:
                result = await self.frontier.admit(admissions)
                released = await self.frontier.release(releases, self.worker)
            except asyncio.CancelledError:
                self.pending_admissions[:0] = admissions
                self.pending_releases[:0] = releases
                raise
            except (RedisError, OSError) as exc:
                self.pending_admissions[:0] = admissions
                self.pending_releases[:0] = releases
                self._redis_trouble(exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            self._redis_ok()
            self._flush_epoch += 1
            if result.added or releases:
                self._claimable = True
            self.stats.inc_value("frontier/admitted", result.added)
            self.stats.inc_value("frontier/duplicates", result.duplicates)
            if result.refused:
                self.stats.inc_value("frontier/refused/host-budget", result.refused)
            if result.blocked:
                self.stats.inc_value("frontier/refused/dropped-host", result.blocked)
            if result.parked:
                self.stats.inc_value("frontier/parked", result.parked)
            if released.stale:
                self.stats.inc_value("frontier/leases/stale", released.stale)
            for event in released.events:
                await self._breaker_event(event)

    def _want_claim(self) -> None:
        if self._claiming or self._closing or self.frontier is None or not self._claimable:
            return
        active = len(self.crawler.engine.downloader.active)
        free = self.concurrency - active - len(self.buffer) - len(self.robots_jobs)
        if free > 0:
            self._claiming = True
            self._spawn(self._claim(free))

    async def _claim(self, n: int) -> None:
        assert self.frontier is not None and self.spider is not None
        try:
            result = await self.frontier.claim(n, self.worker)
        except (RedisError, OSError) as exc:
            self._redis_trouble(exc)
            self._claiming = False
            self._schedule_wakeup(1.0)
            return
        self._redis_ok()
        self._claiming = False
        for lease in result.leases:
            request = from_record(lease.record, self.spider, lease.host)
            request.meta[LEASE_META] = lease.token
            request.meta["_robots_v"] = lease.robots_version
            request.meta["_frontier_claimed"] = time.monotonic()
            self.held[lease.token] = (lease, canonical_url(request.url, self.stripper))
            self.buffer.append(request)
        for host in result.robots_jobs:
            self.robots_jobs.add(host)
            self._spawn(self._robots_job(host))
        if result.leases or result.robots_jobs:
            self.stats.inc_value("frontier/leases/claimed", len(result.leases))
            self._wake()
        elif result.next_ready_ms is not None:
            self._schedule_wakeup((result.next_ready_ms - result.server_ms) / 1000)
        else:
            self._claimable = False
            self._refresh_counts()

    async def _robots_job(self, host: str) -> None:
        """Fetch and store a host's robots.txt; its URLs become claimable after."""
        assert self.robots is not None
        concurrency, delay_ms = self._host_limits(host)
        try:
            # The host's name first (crawler/middlewares/dns.py): a name that does
            # not resolve is a DNS outcome, not an unreachable robots.txt.
            step = dns_step_of(self.crawler)
            named = step is None or await step.before_robots(host)
            if named and await self._robots_turn(host):
                await self.robots.resolve(host, concurrency, delay_ms, self.limits.jitter)
        except (RedisError, OSError) as exc:
            # The job's lease runs out and the host is handed out again.
            self._redis_trouble(exc)
        except Exception:
            logger.exception("Robots job for %s failed; it is tried again later", host,
                             extra={"host": host})
            self.stats.inc_value("robots/job_errors")
        finally:
            self.robots_jobs.discard(host)
        self._claimable = True
        self._want_claim()
        self._wake()

    async def _robots_turn(self, host: str) -> bool:
        """Wait for the host's start gate: a robots.txt fetch is a request to the
        server like a page, spaced from the one before it (maybe of another
        scheme of the same name) and from the one after it.

        False when the turn is further off than half the job's lease (a hold
        came after the claim): the job is left to run out and is handed out
        again later, rather than fetched early or taken over mid-wait.
        """
        assert self.frontier is not None
        if not self.may_gate:
            return True
        deadline = time.monotonic() + self.limits.robots_ms / 2000
        while (wait_ms := await self.frontier.start_gate(host)) > 0:
            if time.monotonic() + wait_ms / 1000 > deadline:
                self.stats.inc_value("robots/jobs_deferred")
                return False
            await asyncio.sleep(wait_ms / 1000)
        return True

    def _host_limits(self, host: str) -> tuple[int, int]:
        """The project's concurrency and delay (ms) for a host key (DOWNLOAD_SLOTS first)."""
        limits = self._slot_limits(_hostname_of_key(host))
        return limits or (self.limits.concurrency, self.limits.delay_ms)

    def _schedule_wakeup(self, seconds: float) -> None:
        if self._closing:
            return
        if self._wakeup:
            self._wakeup.cancel()
        delay = min(max(seconds, 0.005), 1.0)
        self._wakeup = asyncio.get_event_loop().call_later(delay, self._on_wakeup)

    def _on_wakeup(self) -> None:
        self._wakeup = None
        self._claimable = True
        self._want_claim()
        self._wake()

    def _wake(self) -> None:
        if not self._closing:
            self._wake_engine()

    def _refresh_counts(self) -> None:
        if self._closing or self.frontier is None or getattr(self, "_counting", False):
            return
        self._counting = True
        self._spawn(self._count())

    async def _count(self) -> None:
        assert self.frontier is not None
        epoch = self._flush_epoch
        try:
            self.counts = await self.frontier.counts()
            if self.counts[Count.QUEUED] + self.counts[Count.DELAYED] > 0:
                self._claimable = True
            if not self._flushing and not self.pending_admissions and not self.pending_releases:
                self._counts_epoch = epoch
        except (RedisError, OSError) as exc:
            self._redis_trouble(exc)
        finally:
            self._counting = False
        self._wake()

    async def _heartbeat_loop(self) -> None:
        """Announce this worker (at once, so status and metrics see it from the
        start) and renew its held leases, a few times per lease.

        After a failed beat (Redis away) the next comes within half a second,
        not a whole interval later: Redis's clock ran on while it was away, and
        every moment between its return and the renewal eats into the leases
        of downloads still in flight (the chaos soak caught leases expiring
        under live downloads 3.5 s after a restart)."""
        assert self.frontier is not None
        delay = 0.0
        while not self._closing:
            await asyncio.sleep(delay)
            delay = beat_delay(self.limits.lease_ms, ok=False)
            try:
                leases = [lease for lease, _ in self.held.values()]
                renewed = await self.frontier.renew(leases, self.worker)
                if renewed < len(leases):
                    self.stats.inc_value("frontier/leases/lost", len(leases) - renewed)
                    logger.warning("Frontier: %d lease(s) expired before this worker renewed "
                                   "them; their URLs may be fetched twice",
                                   len(leases) - renewed)
                beat = Heartbeat(time.time(), held=len(self.held), pid=os.getpid(),
                                 host=socket.gethostname(), lease=self.limits.lease_ms / 1000)
                await self.client.hset(self.frontier.keys.workers(), self.worker, beat.to_json())
                await self.client.set(self.frontier.keys.seen_at(), int(beat.seen))
                self._redis_ok()
                delay = beat_delay(self.limits.lease_ms, ok=True)
            except (RedisError, OSError) as exc:
                self._redis_trouble(exc)

    def _redis_trouble(self, exc: Exception) -> None:
        self.stats.inc_value("frontier/redis_errors")
        if self._redis_down_since is None:
            self._redis_down_since = time.monotonic()
            logger.warning("Frontier: Redis unreachable (%s); waiting for it", exc)

    def _redis_ok(self) -> None:
        if self._redis_down_since is not None:
            down = time.monotonic() - self._redis_down_since
            logger.warning("Frontier: Redis is back after %.1f s", down)
            self._redis_down_since = None


class FrontierOutcomeMiddleware:
    """Downloader middleware that notes a request's download error for its lease.

    Placed next to the downloader, its ``process_exception`` sees every
    exception first (before retries turn it into a new request). An
    ``IgnoreRequest`` (robots, limits) is a decision, not an error: the lease
    ends as done.
    """

    def process_exception(self, request: Request, exception: Exception) -> None:
        if not isinstance(exception, IgnoreRequest):
            request.meta[ERROR_META] = type(exception).__name__


def _hostname_of_key(host: str) -> str:
    """``example.com`` of the host key ``https://example.com:443``."""
    netloc = host.partition("://")[2]
    return netloc.rsplit(":", 1)[0].strip("[]")


def _hostname(request: Request) -> str:
    from scrapy.utils.httpobj import urlparse_cached

    return urlparse_cached(request).hostname or ""
