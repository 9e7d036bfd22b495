"""Spider middleware: links off the crawl's scope are dropped before the frontier.

The scope (:mod:`crawler.scope.rules`) is made of the crawl's seeds: this
worker's own (its file's and those fed through Redis both pass
``process_start``) and, under the frontier scheduler, every other worker's
(:mod:`crawler.frontier.scopestate`: this worker adds its seeds' forms and
reads the others' once a second). The mode, hops and rules come from the
settings or the spider's arguments:

    SCOPE = "any"          # domain | host | prefix | any  (-a scope=...)
    SCOPE_HOPS = 0         # links off scope fetched this far (-a hops=N)
    SCOPE_INCLUDE = []     # re:REGEX, URL or SURT prefix  (-a include=...)
    SCOPE_EXCLUDE = []     # the same, and wins           (-a exclude=...)

A dropped link costs no Redis call; it is counted (``scope/rejected/RULE``)
and its host kept for the report a closing crawl logs: the off-scope hosts
linked most, with their link counts, so that an operator can grow the seed
list. A seed is always fetched, and widens the scope.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy import Request, signals
from scrapy.exceptions import UsageError

from crawler.frontier.scopestate import SharedScope
from crawler.scheduling.worker import WorkerFrontier, frontier_of
from crawler.scope.rules import Scope, ScopeError, host_name, parse_rules
from crawler.seeds import SEED_META

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

#: Request meta: how many links off scope this request's page is (0 or absent: in scope).
HOPS_META = "scope_hops"
#: Off-scope hosts kept for the report at most (the rest are counted only).
HOSTS_KEPT = 10_000
#: How often (s) this worker adds its seeds' forms to the shared scope and reads the others'.
SYNC_S = 1.0


def scope_from_settings(settings: Any) -> Scope:
    """The scope the settings describe, without seeds yet (:class:`ScopeError` if bad)."""
    hops = settings.get("SCOPE_HOPS", 0)
    try:
        hops = int(hops)
    except (TypeError, ValueError):
        raise ScopeError(f"SCOPE_HOPS={hops!r} is not a whole number") from None
    return Scope(mode=str(settings.get("SCOPE", "any")).strip().lower(), hops=hops,
                 include=parse_rules(settings.get("SCOPE_INCLUDE")),
                 exclude=parse_rules(settings.get("SCOPE_EXCLUDE")))


class ScopeMiddleware:
    """Seeds widen the scope; links off it are dropped and counted."""

    def __init__(self, crawler: Crawler, scope: Scope, report_hosts: int) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.scope = scope
        self.report_hosts = report_hosts
        #: Off-scope hosts and how many dropped links named each.
        self.off_scope: Counter[str] = Counter()
        #: Seed forms not yet added to the shared scope.
        self.unshared: list[str] = []
        self._syncing = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ScopeMiddleware:
        try:
            scope = scope_from_settings(crawler.settings)
        except ScopeError as exc:
            # The user's input: one line and exit code 1 (crawler/commands/crawl.py).
            raise UsageError(str(exc)) from None
        middleware = cls(crawler, scope, crawler.settings.getint("SCOPE_REPORT_HOSTS", 20))
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        logger.info("Scope: %s", describe(scope))
        return middleware

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        frontier = frontier_of(self.crawler)
        if frontier is not None and not self._syncing:
            self._syncing = True
            frontier.tasks.spawn(self._share(frontier, SharedScope(frontier.client,
                                                                   frontier.keys)))
        async for item in start:
            if isinstance(item, Request) and item.meta.get(SEED_META):
                self._seed(item.url)
            yield item

    def _seed(self, url: str) -> None:
        self.unshared += self.scope.add_seed(url)

    async def _share(self, frontier: WorkerFrontier, shared: SharedScope) -> None:
        """Until the frontier closes: this worker's seed forms out, everyone's in."""
        while True:
            await self.sync(shared)
            if frontier.tasks.closing:
                return
            await asyncio.sleep(SYNC_S)

    async def sync(self, shared: SharedScope) -> None:
        """Add the seed forms not shared yet, and widen the scope by the others'."""
        forms, self.unshared = self.unshared, []
        try:
            await shared.add(forms)
            for form in await shared.news():
                self.scope.add_form(form)
        except (RedisError, OSError) as exc:
            self.unshared = forms + self.unshared  # again at the next turn
            logger.debug("Scope: cannot reach the shared scope: %s", exc)

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterator[Any]:
        page_hops = response.meta.get(HOPS_META, 0)
        for item in result:
            if not isinstance(item, Request) or not self._drops(item, page_hops):
                yield item

    async def process_spider_output_async(self, response: Response,
                                          result: AsyncIterator[Any]) -> AsyncIterator[Any]:
        page_hops = response.meta.get(HOPS_META, 0)
        async for item in result:
            if not isinstance(item, Request) or not self._drops(item, page_hops):
                yield item

    def _drops(self, request: Request, page_hops: int) -> bool:
        """Whether ``request`` is off scope (counted); else its hops are noted on it."""
        if request.meta.get(SEED_META):
            self._seed(request.url)
            return False
        verdict = self.scope.decide(request.url, page_hops)
        if not verdict.fetch:
            self.stats.inc_value(f"scope/rejected/{verdict.rule}")
            host = host_name(request.url)
            if host in self.off_scope or len(self.off_scope) < HOSTS_KEPT:
                self.off_scope[host] += 1
            return True
        if verdict.hops:
            request.meta[HOPS_META] = verdict.hops
            self.stats.inc_value("scope/hops")
        return False

    def spider_closed(self) -> None:
        if not self.off_scope:
            return
        self.stats.set_value("scope/offsite_hosts", len(self.off_scope))
        top = self.off_scope.most_common(self.report_hosts)
        logger.info("Hosts off scope linked most (links dropped): %s",
                    ", ".join(f"{host} ({n})" for host, n in top))


def describe(scope: Scope) -> str:
    """The scope's mode, hops and rules, for the log line a crawl starts with."""
    parts = [f"scope={scope.mode}"]
    if scope.hops:
        parts.append(f"hops={scope.hops}")
    if scope.include:
        parts.append("include=" + " ".join(rule.text for rule in scope.include))
    if scope.exclude:
        parts.append("exclude=" + " ".join(rule.text for rule in scope.exclude))
    return ", ".join(parts)
