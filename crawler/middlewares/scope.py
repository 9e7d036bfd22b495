"""Spider middleware: links off the crawl's scope are dropped before the frontier.

The scope (:mod:`crawler.scope.rules`) is made of the crawl's seeds: this
worker's own (its file's and those fed through Redis both pass
``process_start``) and, under the frontier scheduler, every other worker's
(:mod:`crawler.frontier.scopestate`: this worker adds its seeds' forms and
reads the others' once a second). The mode, hops and rules come from the
settings or the spider's arguments:

    SCOPE = "domain"       # domain | host | prefix | any  (-a scope=...)
    SCOPE_HOPS = 0         # links off scope fetched this far (-a hops=N)
    SCOPE_INCLUDE = []     # re:REGEX, URL or SURT prefix  (-a include=...)
    SCOPE_EXCLUDE = []     # the same, and wins           (-a exclude=...)

A dropped link costs no Redis call; it is counted (``scope/rejected/RULE``)
and its host kept for the report a closing crawl logs: the off-scope hosts
linked most, with their link counts, so that an operator can grow the seed
list. A seed (any start request of any spider, or a request marked as a
seed) is always fetched, and widens the scope.

While the shared scope may still widen (the first ``SCOPE_SETTLE_SECONDS``
of the worker, and as long again after another worker's seeds came), a link
off scope is held in memory rather than dropped (``SCOPE_HELD_MAX`` at
most): workers started together share their seeds within a second or two,
and a worker that parses a page before then must not drop the links to the
others' sites. Each widening decides the held links again; those in scope
go to the engine (``scope/held_admitted``), the others are dropped when the
hold ends. The crawl stays open until then.

A redirect is decided as a link of the page that answered with it (it
passes no spider middleware: the frontier's intake asks :meth:`redirected`,
and under another scheduler :mod:`crawler.middlewares.scoperedirect` does),
with two exceptions an operator expects: a redirect to the same host name
(``http`` to ``https``, a trailing slash) is followed wherever the page was,
and a redirect of a seed makes its target a seed too (``example.com`` to
``www.example.com``: ``scope/seed_redirects``), unless an exclude rule says no.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy import Request, signals
from scrapy.exceptions import DontCloseSpider, UsageError

from crawler.frontier.scopestate import SharedScope, rules_in
from crawler.scheduling.worker import WorkerFrontier, frontier_of
from crawler.scope.rules import Rules, Scope, ScopeError, host_name, parse_rules
from crawler.seeds import SEED_META
from crawler.siterules import load_site_rules

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

#: Request meta: how many links off scope this request's page is (0 or absent: in scope).
HOPS_META = "scope_hops"
#: Off-scope hosts kept for the report at most (the rest are counted only).
HOSTS_KEPT = 10_000
#: How often (s) this worker adds its seeds' forms to the shared scope and reads the
#: others' (while the scope settles: SETTLING_SYNC_S).
SYNC_S = 1.0
SETTLING_SYNC_S = 0.25


def scope_of(crawler: Crawler) -> ScopeMiddleware | None:
    """The crawl's scope middleware, for the parts that see what passes no
    spider middleware (redirects) and for the report (None: not enabled).
    Scrapy's own lookup: call it once the engine is built."""
    return crawler.get_spider_middleware(ScopeMiddleware)


def scope_from_settings(settings: Any) -> Scope:
    """The scope the settings describe, without seeds yet (:class:`ScopeError` if bad)."""
    hops = settings.get("SCOPE_HOPS", 0)
    try:
        hops = int(hops)
    except (TypeError, ValueError):
        raise ScopeError(f"SCOPE_HOPS={hops!r} is not a whole number") from None
    sites = load_site_rules(settings.get("SITE_RULES"))  # (their scope: include / exclude)
    return Scope(mode=str(settings.get("SCOPE", "domain")).strip().lower(), hops=hops,
                 include=parse_rules(settings.get("SCOPE_INCLUDE"))
                 + parse_rules(sites.scope_rules("include")),
                 exclude=parse_rules(settings.get("SCOPE_EXCLUDE"))
                 + parse_rules(sites.scope_rules("exclude")))


class ScopeMiddleware:
    """Seeds widen the scope; links off it are dropped and counted."""

    def __init__(self, crawler: Crawler, scope: Scope, report_hosts: int,
                 settle_s: float = 0.0, held_max: int = 0) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.scope = scope
        #: What this worker's settings and arguments say (an operator's change
        #: replaces it, and its reset brings it back).
        self.settings_rules = scope.rules()
        self.report_hosts = report_hosts
        self.settle_s = settle_s
        self.held_max = held_max
        #: Until when (monotonic) the shared scope may still widen (0: no shared scope).
        self.settle_until = 0.0
        #: Links off scope held while it settles, with their pages' hops.
        self.held: list[tuple[Request, int]] = []
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
        s = crawler.settings
        middleware = cls(crawler, scope, s.getint("SCOPE_REPORT_HOSTS", 20),
                         s.getfloat("SCOPE_SETTLE_SECONDS", 10.0),
                         s.getint("SCOPE_HELD_MAX", 10_000))
        crawler.signals.connect(middleware.spider_idle, signal=signals.spider_idle)
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        logger.info("Scope: %s", scope.rules().describe())
        return middleware

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        frontier = frontier_of(self.crawler)
        if frontier is not None and not self._syncing:
            frontier.intake.redirect_scope = self.redirected
            self._syncing = True
            self.settle_until = time.monotonic() + self.settle_s
            shared = SharedScope(frontier.client, frontier.keys)
            frontier.tasks.spawn(self._share(frontier, shared))
            frontier.on_close.append(lambda *_: self._share_rest(shared))
        async for item in start:
            if isinstance(item, Request):  # any spider's start requests are its seeds
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
            await asyncio.sleep(SETTLING_SYNC_S if self.settling() else SYNC_S)

    async def _share_rest(self, shared: SharedScope) -> None:
        """The seed forms the last turn did not share, as the worker closes: a
        crawl stopped within a second of its start keeps its seeds' scope for
        the next run too. (A Redis fault is said and swallowed: the worker's
        other closing hooks still run.)"""
        if not self.unshared:
            return
        try:
            await shared.add(self.unshared)
        except (RedisError, OSError) as exc:
            logger.warning("Scope: %d seed form(s) not shared as the worker closed: %s",
                           len(self.unshared), exc)
            return
        self.unshared = []

    async def sync(self, shared: SharedScope) -> None:
        """Add the seed forms not shared yet, widen the scope by the others', and
        decide the held links again."""
        forms, self.unshared = self.unshared, []
        try:
            await shared.add(forms)
            news, changes = rules_in(await shared.news())
        except (RedisError, OSError) as exc:
            self.unshared = forms + self.unshared  # again at the next turn
            logger.debug("Scope: cannot reach the shared scope: %s", exc)
            news, changes = [], []
        widened = [form for form in news if self.scope.add_form(form)]
        if changes:
            self._use(changes[-1])
            widened.append("rules")
        if widened and self.settle_until:
            self.settle_until = max(self.settle_until, time.monotonic() + self.settle_s)
        if widened or not self.settling():  # (a held link's verdict changes only then)
            self.decide_held()

    def _use(self, rules: Rules | None) -> None:
        """An operator's rules in force (None: this worker's settings again)."""
        rules = rules or self.settings_rules
        if rules == self.scope.rules():
            return
        self.scope.use(rules)
        self.stats.inc_value("scope/changes")
        logger.info("Scope: %s (changed for every worker by scrapy frontier scope)",
                    rules.describe())

    def settling(self) -> bool:
        """Whether the shared scope may still widen (links off it are held)."""
        return time.monotonic() < self.settle_until

    def decide_held(self) -> None:
        """The held links now in scope go to the engine; the others stay held
        while the scope settles, else are dropped."""
        if not self.held:
            return
        settling = self.settling()
        kept = []
        for request, page_hops in self.held:
            verdict = self.scope.decide(request.url, page_hops)
            if verdict.fetch:
                if verdict.hops:
                    request.meta[HOPS_META] = verdict.hops
                self.crawler.engine.crawl(request)
                self.stats.inc_value("scope/held_admitted")
            elif settling:
                kept.append((request, page_hops))
            else:
                self._reject(request, verdict.rule)
        self.held = kept

    def spider_idle(self) -> None:
        """Links still held keep the crawl open until the scope has settled."""
        if self.held:
            self.decide_held()
        if self.held:
            raise DontCloseSpider

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterator[Any]:
        page_hops = self._page_hops(response)
        for item in result:
            if not isinstance(item, Request) or not self._drops(item, page_hops):
                yield item

    async def process_spider_output_async(self, response: Response,
                                          result: AsyncIterator[Any]) -> AsyncIterator[Any]:
        page_hops = self._page_hops(response)
        async for item in result:
            if not isinstance(item, Request) or not self._drops(item, page_hops):
                yield item

    def _page_hops(self, response: Response) -> int:
        """How many links off scope the page is. A seed's page widens the scope
        (when it does not yet cover it): the seed of an earlier run, given
        back by ``scrapy frontier requeue`` or left queued, is a seed still."""
        if response.meta.get(SEED_META):
            verdict = self.scope.decide(response.url)
            if not verdict.fetch or verdict.hops:
                self._seed(response.url)
            return 0
        return response.meta.get(HOPS_META, 0)

    def _drops(self, request: Request, page_hops: int) -> bool:
        """Whether ``request`` is off scope (counted); else its hops are noted on it."""
        if request.meta.get(SEED_META):
            self._seed(request.url)
            return False
        verdict = self.scope.decide(request.url, page_hops)
        if not verdict.fetch:
            if self.settling() and len(self.held) < self.held_max:
                self.held.append((request, page_hops))
            else:
                self._reject(request, verdict.rule)
            return True
        if verdict.hops:
            request.meta[HOPS_META] = verdict.hops
            self.stats.inc_value("scope/hops")
        return False

    def redirected(self, request: Request) -> str | None:
        """Whether to follow a redirect (``request``, made by a redirect
        middleware): None to follow it (its hops noted on it), else the rule
        that drops it (counted)."""
        chain = request.meta.get("redirect_urls") or ()
        source = chain[-1] if chain else ""
        if host_name(source) == host_name(request.url):
            return None  # the same host: it stays where the page was
        verdict = self.scope.decide(request.url, request.meta.get(HOPS_META, 0))
        # (a seed's depth is 0, and so is its redirects': the depth crosses the
        # frontier, SEED_META does not)
        if not verdict.fetch and verdict.rule != "exclude" and not request.meta.get("depth"):
            self._seed(request.url)  # a seed's redirect: its target is a seed too
            self.stats.inc_value("scope/seed_redirects")
            logger.info("Scope: seed %s redirects to %s, a seed too", chain[0], request.url,
                        extra={"host": host_name(request.url)})
            request.meta.pop(HOPS_META, None)
            return None
        if not verdict.fetch:
            self._reject(request, verdict.rule)
            self.stats.inc_value("scope/redirects_dropped")
            logger.debug("Scope: redirect from %s to %s not followed (%s)", source,
                         request.url, verdict.rule)
            return verdict.rule
        if verdict.hops:
            request.meta[HOPS_META] = verdict.hops
            self.stats.inc_value("scope/hops")
        else:
            request.meta.pop(HOPS_META, None)
        return None

    def _reject(self, request: Request, rule: str) -> None:
        self.stats.inc_value(f"scope/rejected/{rule}")
        host = host_name(request.url)
        if host in self.off_scope or len(self.off_scope) < HOSTS_KEPT:
            self.off_scope[host] += 1

    def spider_closed(self) -> None:
        if self.held:  # a crawl stopped while the scope settled
            self.stats.set_value("scope/held_at_close", len(self.held))
            logger.warning("Scope: %d link(s) off scope were still held when the crawl "
                           "stopped, waiting for other workers' seeds; not followed",
                           len(self.held))
        if not self.off_scope:
            return
        self.stats.set_value("scope/offsite_hosts", len(self.off_scope))
        top = self.off_scope.most_common(self.report_hosts)
        logger.info("Hosts off scope linked most (links dropped): %s",
                    ", ".join(f"{host} ({n})" for host, n in top))
