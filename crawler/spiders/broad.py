"""The broad spider: crawl outward from a seed list, one item per page.

Usage::

    scrapy crawl broad -a seeds=seeds.txt
    producer | scrapy crawl broad -a seeds=-
    scrapy crawl broad          # resume the frontier, or join a shared one
    redis-cli RPUSH broad:start_urls https://example.com/   # feed running workers

The spider knows nothing of politeness, robots or storage: those are the
frontier's, the middlewares' and the pipelines' concerns. It turns seed lines
into requests, responses into :class:`~crawler.items.PageItem` and HTML links
into more requests.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from scrapy import Request, Spider
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import HtmlResponse, Response, XmlResponse
from scrapy.utils.gz import gunzip, gzip_magic_number
from scrapy.utils.sitemap import Sitemap

from crawler.items import PageItem
from crawler.links import LinkFinder
from crawler.middlewares.warc import WARC_META
from crawler.revisit import NOT_MODIFIED
from crawler.scheduling.scheduler import uses_frontier
from crawler.seeds import SEED_META, Seed, SeedError, read_seeds, seed_request
from crawler.signals import robots_sitemaps_found
from crawler.sitemaps import LASTMOD_META, entry_lastmod, entry_priority, is_sitemap_url
from crawler.spiders.args import (
    PASSED_THROUGH,
    BroadArgs,
    SpiderArgumentError,
    describe,
    unknown,
)
from crawler.urls import VERBATIM_META, request_url, stripper_from_settings, url_forms

logger = logging.getLogger(__name__)

#: The default feed: page metadata as JSON lines, without the body.
DEFAULT_FEED_OPTIONS = {
    "format": "jsonlines",
    "encoding": "utf-8",
    "fields": [
        "url", "final_url", "status", "content_type", "length", "fetched_at",
        "depth", "referrer", "redirects", "headers", "not_modified", "warc_file",
        "warc_offset",
    ],
}

_NOFOLLOW_META = "//meta[translate(@name, 'ROBTS', 'robts') = 'robots']/@content"


class BroadSpider(Spider):
    """Crawl every http(s) page reachable from the seeds, within the limits.

    Spider arguments (strings, as scrapyd passes them; checked at once, see
    :mod:`crawler.spiders.args`): ``seeds`` (a file path, or ``-`` for
    standard input); optional with the frontier scheduler, which resumes its
    crawl and reads seed lines pushed onto ``REDIS_START_URLS_KEY`` while the
    crawl runs. ``part`` (the seed partition, a label for logs and metrics),
    ``sitemaps`` (yes/no), ``depth_limit`` and ``max_pages_per_host`` (this
    job's ``DEPTH_LIMIT`` and ``ADMISSION_MAX_PAGES_PER_HOST``).
    Settings: ``BROAD_SEEDS_ADD_SCHEME`` (give ``http://`` to seed lines that
    have no scheme), ``BROAD_LINK_RELS`` (``<link rel=...>`` values followed as
    links), ``BROAD_DENY_EXTENSIONS`` (link extensions never followed) and
    ``BROAD_OBEY_NOFOLLOW`` (skip ``rel=nofollow`` links and pages marked
    ``<meta name=robots content=nofollow>``). Limits are the ``DEPTH_LIMIT``,
    ``URLLENGTH_LIMIT`` and ``ADMISSION_*`` settings. With ``-a sitemaps=1``
    (or ``ROBOTS_SITEMAPS`` and no ``sitemaps`` argument) the sitemaps listed
    in each host's robots.txt seed the crawl too (:meth:`parse_sitemap`);
    ``-a sitemaps=URL`` (or a seed line whose path ends in ``.xml`` or
    ``.xml.gz``) seeds it from that sitemap or sitemap index. A sitemap's
    pages are queued by what it says of them (``priority``, ``lastmod``:
    :mod:`crawler.sitemaps`).
    """

    name = "broad"
    #: Every request of this spider has this errback: the frontier's records
    #: leave it out (16 bytes on each of millions of queued URLs).
    frontier_errback = "on_error"

    @classmethod
    def update_settings(cls, settings: Any) -> None:
        """Add the default metadata feed unless the operator configured one.

        Scrapy merges ``-o``/``-O`` into ``FEEDS``, so a feed in the project
        settings would always be written too; adding it here, only when
        ``FEEDS`` is empty, keeps ``-O pages.jsonl`` meaning "write there".
        """
        super().update_settings(settings)
        uri = settings.get("BROAD_DEFAULT_FEED")
        if uri and not settings.getdict("FEEDS"):
            settings.set("FEEDS", {uri: dict(DEFAULT_FEED_OPTIONS)}, priority="spider")

    def __init__(
        self,
        seeds: str | None = None,
        sitemaps: str | bool | None = None,
        part: str | int | None = None,
        depth_limit: str | int | None = None,
        max_pages_per_host: str | int | None = None,
        crawl_id: str | None = None,
        revisit: str | float | None = None,
        revisit_seeds: str | float | None = None,
        scope: str | None = None,
        hops: str | int | None = None,
        include: str | None = None,
        exclude: str | None = None,
        **kwargs: Any,
    ) -> None:
        # Every value may be a string (scrapyd passes nothing else): convert
        # and check them all before anything starts (crawler/spiders/args.py).
        parsed = BroadArgs.parse(seeds=seeds, part=part, sitemaps=sitemaps,
                                 depth_limit=depth_limit, max_pages_per_host=max_pages_per_host,
                                 crawl_id=crawl_id, revisit=revisit, revisit_seeds=revisit_seeds,
                                 scope=scope, hops=hops, include=include, exclude=exclude)
        refusal = unknown(kwargs)
        if refusal:
            raise SpiderArgumentError(refusal)
        super().__init__(**kwargs)
        self.args = parsed
        self.seeds_path = self.args.seeds
        self.follow_sitemaps = bool(self.args.sitemaps)
        #: The seed partition as text ("0", "1", ...), for logs and metric labels.
        self.part = None if self.args.part is None else str(self.args.part)
        #: Read by the frontier scheduler: the crawl's namespace (FRONTIER_CRAWL_ID).
        self.crawl_id = self.args.crawl_id
        #: Read by the frontier scheduler: FRONTIER_REVISIT_AFTER / _SEEDS for this job.
        self.revisit = self.args.revisit
        self.revisit_seeds = self.args.revisit_seeds
        self._extra_args = {k: v for k, v in kwargs.items() if k not in PASSED_THROUGH}

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> BroadSpider:
        try:
            spider = super().from_crawler(crawler, *args, **kwargs)
            spider.args.apply(crawler.settings)
        except SpiderArgumentError as exc:
            # One line that says it all; `scrapy crawl` (crawler/commands/crawl.py)
            # collects the exception, so no traceback follows it, and exits with 1.
            logger.error("Cannot start the %s spider: %s", cls.name, exc)
            raise
        spider._configure(crawler.settings)
        if spider.follow_sitemaps:
            crawler.signals.connect(spider.sitemaps_found, signal=robots_sitemaps_found)
        logger.info("Spider arguments: %s", describe(spider.args, spider._extra_args))
        return spider

    def _configure(self, settings: Any) -> None:
        if not self.seeds_path and not uses_frontier(settings):
            raise NotConfigured("the broad spider needs seeds: scrapy crawl broad -a seeds=FILE")
        if self.args.sitemaps is None:  # an explicit sitemaps=0 turns the setting off
            self.follow_sitemaps = settings.getbool("ROBOTS_SITEMAPS")
        self.sitemap_max_size = settings.getint("DOWNLOAD_MAXSIZE")
        self.add_scheme = settings.getbool("BROAD_SEEDS_ADD_SCHEME", False)
        self.link_rels = {r.lower() for r in settings.getlist("BROAD_LINK_RELS", [])}
        self.obey_nofollow = settings.getbool("BROAD_OBEY_NOFOLLOW", True)
        self.stripper = stripper_from_settings(settings)
        self.link_finder = LinkFinder(
            tags=("a", "area"),
            deny_extensions=settings.getlist("BROAD_DENY_EXTENSIONS", []),
        )

    async def start(self) -> AsyncIterator[Request]:
        """Yield one request per valid seed of the file; report bad lines.

        Seed lines pushed onto the shared Redis list follow these, from the
        seed feed middleware (:mod:`crawler.middlewares.seedfeed`).
        """
        for url in self.args.sitemap_urls:
            self.crawler.stats.inc_value("broad/sitemaps/seeded")
            yield Request(url, callback=self.parse_sitemap, errback=self.on_error,
                          meta={SEED_META: True})
        for parsed in self._read_seeds():
            sitemap = isinstance(parsed, Seed) and is_sitemap_url(parsed.url)
            request = seed_request(parsed, self.crawler.stats,
                                   callback=self.parse_sitemap if sitemap else self.parse,
                                   errback=self.on_error)
            if request is not None:
                if sitemap:
                    self.crawler.stats.inc_value("broad/sitemaps/seeded")
                yield request

    def _read_seeds(self) -> Iterator[Seed | SeedError]:
        if self.seeds_path is None:
            return
        try:
            yield from read_seeds(self.seeds_path, add_scheme=self.add_scheme,
                                  stripper=self.stripper)
        except OSError as exc:
            logger.error("Cannot read seeds from %s: %s", self.seeds_path, exc)
            self.crawler.stats.set_value("seeds/unreadable", 1)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[PageItem | Request]:
        yield page_item(response)
        if isinstance(response, HtmlResponse) and 200 <= response.status < 300:
            for url in self.links(response):
                yield Request(url, callback=self.parse, errback=self.on_error,
                              meta={"referrer": response.url, VERBATIM_META: True})

    def sitemaps_found(self, host: str, urls: list[str]) -> None:
        """Queue the sitemaps a host's robots.txt lists (signal ``robots_sitemaps_found``)."""
        for url in urls:
            self.crawler.engine.crawl(Request(url, callback=self.parse_sitemap,
                                              errback=self.on_error))
            self.crawler.stats.inc_value("broad/sitemaps/queued")

    def parse_sitemap(self, response: Response, **kwargs: Any) -> Iterator[Request]:
        """Follow a sitemap (XML, possibly gzipped): pages to ``parse``, sitemaps here.

        Scrapy's sitemap parser (``scrapy.utils.sitemap.Sitemap``, safe
        against XML entity tricks) does the reading; what is not a sitemap
        is counted and left alone.
        """
        body = self._sitemap_body(response)
        if body is None:
            self.crawler.stats.inc_value("broad/sitemaps/unreadable")
            return
        try:
            sitemap = Sitemap(body)
        except Exception:  # lxml raises several kinds on junk
            self.crawler.stats.inc_value("broad/sitemaps/unreadable")
            return
        nested = sitemap.type == "sitemapindex"
        self.crawler.stats.inc_value("broad/sitemaps/read")
        now = dt.datetime.now(dt.UTC)
        for entry in sitemap:
            url = request_url(str(entry.get("loc", "")), self.stripper)
            if url is None:
                continue
            if nested:
                yield Request(url, callback=self.parse_sitemap, errback=self.on_error,
                              meta={VERBATIM_META: True})
            else:  # the site's word on each page: important and fresh ones first
                lastmod = entry_lastmod(entry, now)
                yield Request(url, callback=self.parse, errback=self.on_error,
                              priority=entry_priority(entry, now),
                              meta={VERBATIM_META: True} if lastmod is None
                              else {VERBATIM_META: True, LASTMOD_META: lastmod})

    def _sitemap_body(self, response: Response) -> bytes | None:
        if gzip_magic_number(response):
            try:
                return gunzip(response.body, max_size=self.sitemap_max_size)
            except Exception:  # corrupt, or bigger than DOWNLOAD_MAXSIZE unpacked
                return None
        if isinstance(response, XmlResponse) or response.body.lstrip()[:5] == b"<?xml":
            return response.body
        return None

    def links(self, response: HtmlResponse) -> list[str]:
        """The http(s) URLs this page links to, as they will be sent, in page order, one per page.

        A page Scrapy cannot read - a ``<base href>`` that is no URL, a charset
        that is no text encoding - has no links (counted), rather than an error.
        """
        try:
            return self._links(response)
        except (ValueError, LookupError) as exc:  # UnicodeError is a ValueError
            self.crawler.stats.inc_value("broad/unreadable_pages")
            logger.info("No links read from %s: %s", response.url, exc,
                        extra={"url": response.url})
            return []

    def _links(self, response: HtmlResponse) -> list[str]:
        if self.obey_nofollow and _meta_nofollow(response):
            self.crawler.stats.inc_value("broad/nofollow_pages")
            return []
        found = [link.url for link in self.link_finder.links(response)
                 if not (self.obey_nofollow and link.nofollow)]
        found += self._rel_links(response)
        return self._unique(found)

    def _unique(self, urls: Iterable[str]) -> list[str]:
        """The URLs to send (``request_url``), once per identity (``canonical_url``), in order."""
        seen: dict[str, str] = {}
        for url in urls:
            forms = url_forms(url, self.stripper)
            if forms is not None and forms[1] not in seen:
                seen[forms[1]] = forms[0]
        return list(seen.values())

    def _rel_links(self, response: HtmlResponse) -> list[str]:
        if not self.link_rels:
            return []
        return self.link_finder.rel_links(response, self.link_rels)

    def on_error(self, failure: Any) -> None:
        """Count download failures by type; the page has no item."""
        if failure.check(IgnoreRequest):
            # A policy said no (robots, limits, retry later); it counts and logs
            # that itself, except Scrapy's RedirectMiddleware at REDIRECT_MAX_TIMES.
            if "max redirections" in str(failure.value):
                self.crawler.stats.inc_value("broad/redirect_max_reached")
                logger.info("Dropped after REDIRECT_MAX_TIMES redirects: %s",
                            failure.request.url, extra={"url": failure.request.url,
                                                        "reason": "redirect-max"})
            return
        name = type(failure.value).__name__
        self.crawler.stats.inc_value(f"broad/download_error/{name}")
        logger.info("Download failed: %s (%s)", failure.request.url, name,
                    extra={"url": failure.request.url, "error": name})


def _meta_nofollow(response: HtmlResponse) -> bool:
    content = " ".join(response.xpath(_NOFOLLOW_META).getall()).lower()
    return "nofollow" in content or "none" in content.split()


def page_item(response: Response) -> PageItem:
    """Build the item of one response, with its redirect chain."""
    chain = [*response.meta.get("redirect_urls", []), response.url]
    content_type = response.headers.get(b"Content-Type")
    return PageItem(
        url=chain[0],
        final_url=response.url,
        status=response.status,
        headers=_decode_headers(response),
        body=response.body,
        length=len(response.body),
        content_type=content_type.decode("latin-1") if content_type else None,
        fetched_at=dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        depth=response.meta.get("depth", 0),
        referrer=response.meta.get("referrer"),
        redirects=chain if len(chain) > 1 else [],
        not_modified=NOT_MODIFIED in response.flags,
        warc=response.meta.get(WARC_META),
    )


def _decode_headers(response: Response) -> dict[str, list[str]]:
    return {
        key.decode("latin-1"): [v.decode("latin-1") for v in values]
        for key, values in response.headers.items()
    }
