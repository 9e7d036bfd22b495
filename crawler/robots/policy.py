"""The robots policy of a crawl: one decision per authority, shared by every worker.

The frontier hands a host out as a *robots job* when its robots.txt is
unknown or due (``claim.lua``); the worker that got the job fetches the file
(:mod:`crawler.robots.fetch`), classifies the outcome (:func:`classify`),
and stores the decision in the frontier (``robots.lua``): the prepared text
compressed, with its status, fetch time, expiry and a hash of the body, plus
the host's pacing derived from Crawl-delay / Request-rate. Every worker then
checks page URLs against the same rules, parsed once per version into a
bounded in-process cache (:meth:`RobotsPolicy.rules_for`).

Decisions where RFC 9309 leaves a choice are the ``ROBOTS_*`` settings in
``crawler/settings.py`` and the table in the README.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crawler.addressguard import SeenOnce
from crawler.deadletter import DeadReason
from crawler.frontier.store import Frontier
from crawler.frontier.values import RobotsOutcome, RobotsRetry
from crawler.robots.fetch import Fetched, RobotsFetcher
from crawler.robots.rules import MAX_ROBOTS_BYTES, Rules, classify, prepare
from crawler.signals import crawl_delay_applied, host_blocked, robots_sitemaps_found
from crawler.urls import host_origin

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

_BLOB_MAGIC = b"R1"
_PARSE_IN_THREAD = 64 * 1024  # prepare and parse bigger files off the reactor thread
_MAX_SITEMAPS = 50  # per robots.txt: a file listing thousands is not a seed list


@dataclass(frozen=True, slots=True)
class RobotsSettings:
    """The ``ROBOTS_*`` settings, in the units the policy uses."""

    agent: str
    cache_s: int
    min_cache_s: int
    timeout: float
    max_bytes: int
    max_delay_s: float
    cache_size: int
    retry: RobotsRetry

    @classmethod
    def from_settings(cls, s: Any) -> RobotsSettings:
        agent = s.get("ROBOTSTXT_USER_AGENT") or str(s.get("USER_AGENT") or "*").split("/")[0]
        return cls(
            agent=agent.strip() or "*",
            cache_s=s.getint("ROBOTS_CACHE_SECONDS", 86400),
            min_cache_s=s.getint("ROBOTS_CACHE_MIN_SECONDS", 900),
            timeout=s.getfloat("ROBOTS_TIMEOUT", 10.0),
            max_bytes=s.getint("ROBOTS_MAX_BYTES", MAX_ROBOTS_BYTES),
            max_delay_s=s.getfloat("ROBOTS_MAX_CRAWL_DELAY", 60.0),
            cache_size=s.getint("ROBOTS_CACHE_SIZE", 10_000),
            retry=RobotsRetry(
                base_ms=round(s.getfloat("ROBOTS_RETRY_BASE", 60.0) * 1000),
                cap_ms=round(s.getfloat("ROBOTS_RETRY_MAX", 3600.0) * 1000),
                max_attempts=s.getint("ROBOTS_UNREACHABLE_MAX_ATTEMPTS", 8),
                stale_max_ms=round(s.getfloat("ROBOTS_STALE_MAX_DAYS", 30.0) * 86_400_000),
            ),
        )


@dataclass(frozen=True, slots=True)
class Pacing:
    """A host's concurrency and delays once its robots.txt is known, in ms."""

    concurrency: int
    delay_ms: int
    floor_ms: int  # a robots delay: never cut by jitter
    first_gap_ms: int  # from the robots fetch to the first page


class RobotsPolicy:
    """Fetch, decide, store and look up robots rules for one crawl.

    The worker's frontier owns the crawl's one policy (``WorkerFrontier.robots``,
    found through ``crawler.engine.scheduler``): it runs the robots jobs, and
    the robots middleware asks it for a host's rules.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.settings = RobotsSettings.from_settings(crawler.settings)
        self.fetcher = RobotsFetcher(crawler, self.settings.timeout, self.settings.max_bytes)
        self.frontier: Frontier | None = None
        self._cache: OrderedDict[str, tuple[int, Rules]] = OrderedDict()
        self._logged = SeenOnce()

    @property
    def fetch_lease_ms(self) -> int:
        """How long a robots job may take before another worker may try."""
        return round(self.settings.timeout * 1000 * 3) + 30_000

    # ------------------------------------------------------------- resolving

    async def resolve(self, host: str, concurrency: int, delay_ms: int,
                      jitter: float, meta: dict[str, Any] | None = None) -> RobotsOutcome:
        """Fetch a host's robots.txt and store the decision in the frontier
        (``meta``: what the request to the host itself carries, its gate pass)."""
        assert self.frontier is not None
        fetched = await self.fetcher.fetch(host_origin(host), meta)
        kind = self._count(fetched)
        if kind == "unreachable":
            wait_ms = round(min(fetched.retry_after or 0.0, 1e12) * 1000)
            outcome = await self.frontier.store_robots(host, None, 0, 0, 0, 0, 0,
                                                       self.settings.retry, wait_ms)
            await self._unreachable(host, fetched, outcome)
            return outcome
        text = await self._prepare(fetched.body) if kind == "rules" else ""
        rules = await self._parse(text) if text else Rules.allow_all()
        pacing = self.pacing(host, rules, concurrency, delay_ms, jitter)
        outcome = await self.frontier.store_robots(
            host, encode_blob(kind, fetched, text), self._ttl_ms(fetched), pacing.concurrency,
            pacing.delay_ms, pacing.floor_ms, pacing.first_gap_ms, self.settings.retry)
        self._remember(host, outcome.version, rules)
        self._announce_sitemaps(host, rules)
        logger.debug("robots.txt of %s: %s (HTTP %s), stored as version %d", host, kind,
                     fetched.status, outcome.version, extra={"host": host})
        return outcome

    def _announce_sitemaps(self, host: str, rules: Rules) -> None:
        """Tell whoever listens which sitemaps the robots.txt lists (signal
        :data:`crawler.signals.robots_sitemaps_found`); following them is the spider's call."""
        if not rules.sitemaps:
            return
        urls = list(rules.sitemaps[:_MAX_SITEMAPS])
        self.stats.inc_value("robots/sitemaps_listed", len(urls))
        self.crawler.signals.send_catch_log(robots_sitemaps_found, host=host, urls=urls)

    def _count(self, fetched: Fetched) -> str:
        """Count the fetch in the stats; return its RFC 9309 class."""
        if fetched.status is None:
            self.stats.inc_value(f"robots/fetch/error/{fetched.error}")
        else:
            self.stats.inc_value(f"robots/fetch/status/{fetched.status}")
        if fetched.redirects:
            self.stats.inc_value("robots/fetch/redirected")
        if fetched.truncated:
            self.stats.inc_value("robots/fetch/truncated")
        kind = classify(fetched.status)
        self.stats.inc_value(f"robots/{kind}")
        return kind

    async def _unreachable(self, host: str, fetched: Fetched, outcome: RobotsOutcome) -> None:
        why = fetched.error or f"HTTP {fetched.status}"
        extra = {"host": host, "robots_attempts": outcome.attempts, "robots_state": outcome.state}
        if outcome.state == "stale":
            self.stats.inc_value("robots/stale_served")
            logger.info("robots.txt of %s unreachable (%s): its last good copy still applies",
                        host, why, extra=extra)
            return
        # One INFO line per host: a host whose robots.txt stays unreachable is
        # tried again and again (its URLs wait); the later tries at DEBUG.
        logger.log(logging.INFO if self._logged.first(host) else logging.DEBUG,
                   "robots.txt of %s unreachable (%s), attempt %d: its URLs wait",
                   host, why, outcome.attempts, extra=extra)
        if outcome.state == "park" or fetched.blocked is not None:
            assert self.frontier is not None
            blocked = fetched.blocked is not None  # never reachable: park at once
            reason = DeadReason.now("address-blocked" if blocked else "robots-unreachable",
                                    fetched.detail or why)
            parked = await self.frontier.park_host(host, reason.json())
            self.stats.inc_value("guard/hosts_parked" if blocked else "robots/hosts_parked")
            self.stats.inc_value(f"frontier/dead/{reason.reason}", parked)
            if blocked:
                self.crawler.signals.send_catch_log(host_blocked, host=host,
                                                    blocked=fetched.blocked)
            why_parked = (fetched.detail if blocked
                          else f"robots.txt unreachable {outcome.attempts} times")
            logger.warning(
                "Host %s parked, %s: %d queued URL(s) are dead letters (requeue with: "
                "scrapy frontier requeue --host %s)", host, why_parked, parked, host, extra=extra)

    def _ttl_ms(self, fetched: Fetched) -> int:
        """Cache for a day at most, less when Cache-Control says so [2.4]."""
        ttl = self.settings.cache_s
        if fetched.max_age is not None:
            ttl = min(ttl, max(fetched.max_age, self.settings.min_cache_s))
        return ttl * 1000

    def pacing(self, host: str, rules: Rules, concurrency: int, delay_ms: int,
               jitter: float) -> Pacing:
        """The host's pacing: the project's, slowed down by Crawl-delay / Request-rate.

        A robots delay becomes the host's floor (jitter never cuts it) and its
        concurrency drops to 1. Above ``ROBOTS_MAX_CRAWL_DELAY`` the delay is
        clamped to it (the host is still crawled, slowly) and counted.
        """
        asked = rules.delay
        if not asked or asked <= 0:
            gap = round(delay_ms * (1 - jitter))
            return Pacing(concurrency, delay_ms, 0, gap)
        if asked > self.settings.max_delay_s:
            self.stats.inc_value("robots/crawl_delay/clamped")
            logger.info("robots.txt of %s asks for %.0f s between requests; using %.0f s "
                        "(ROBOTS_MAX_CRAWL_DELAY)", host, asked, self.settings.max_delay_s,
                        extra={"host": host})
            asked = self.settings.max_delay_s
        floor = round(asked * 1000)
        self.stats.inc_value("robots/crawl_delay/hosts")
        self.crawler.signals.send_catch_log(crawl_delay_applied, host=host, seconds=asked)
        # The project's own delay keeps its jitter; the Crawl-delay is waited exactly
        # (a floor: jitter never cuts it, nor stretches it by half on average).
        return Pacing(1, delay_ms, floor, floor)

    # ------------------------------------------------------------- looking up

    async def rules_for(self, host: str, version: int) -> Rules | None:
        """The rules of ``host`` at ``version`` or later (None: none stored)."""
        cached = self._cache.get(host)
        if cached is not None and cached[0] >= version:
            self._cache.move_to_end(host)
            return cached[1]
        assert self.frontier is not None
        blob = await self.frontier.robots_blob(host)
        if blob is None:
            return None
        kind, text = decode_blob(blob)
        rules = await self._parse(text) if kind == "rules" and text else Rules.allow_all()
        self._remember(host, version, rules)
        return rules

    async def _prepare(self, body: bytes) -> str:
        if len(body) > _PARSE_IN_THREAD:
            return await asyncio.to_thread(prepare, body, self.settings.max_bytes)
        return prepare(body, self.settings.max_bytes)

    async def _parse(self, text: str) -> Rules:
        if len(text) > _PARSE_IN_THREAD:
            return await asyncio.to_thread(Rules.parse, text, self.settings.agent)
        return Rules.parse(text, self.settings.agent)

    def _remember(self, host: str, version: int, rules: Rules) -> None:
        self._cache[host] = (version, rules)
        self._cache.move_to_end(host)
        while len(self._cache) > self.settings.cache_size:
            self._cache.popitem(last=False)


def encode_blob(kind: str, fetched: Fetched, text: str) -> bytes:
    """The stored form: a JSON header line, then the prepared text, compressed."""
    header = {
        "k": kind,
        "s": fetched.status,
        "u": fetched.url,
        "t": round(time.time()),
        "h": hashlib.sha256(fetched.body).hexdigest()[:16],
        "n": len(fetched.body),
    }
    return _BLOB_MAGIC + json.dumps(header).encode() + b"\n" + zlib.compress(text.encode())


def decode_blob(blob: bytes) -> tuple[str, str]:
    """(kind, prepared text) of a stored blob; an unreadable one allows nothing."""
    try:
        head, body = blob[len(_BLOB_MAGIC):].split(b"\n", 1)
        kind = json.loads(head)["k"]
        if not isinstance(kind, str):
            raise TypeError(kind)
        return kind, zlib.decompress(body).decode()
    except (ValueError, KeyError, TypeError, zlib.error):
        logger.error("Unreadable robots rules in the frontier; disallowing")
        return "rules", "User-agent: *\nDisallow: /\n"
