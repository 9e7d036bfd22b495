"""Downloader middleware: a redirect off the crawl's scope is not fetched.

A redirect passes no spider middleware, so :class:`ScopeMiddleware` never sees
it as a link. Under the frontier scheduler its intake asks the scope before
the redirect reaches Redis; under any other scheduler this middleware asks
it before the request is sent, as Scrapy's own ``OffsiteMiddleware`` does
for ``allowed_domains``. Its decision is :meth:`ScopeMiddleware.redirected`'s.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.exceptions import IgnoreRequest, NotConfigured

from crawler.middlewares.scope import scope_of
from crawler.scheduling.scheduler import uses_frontier

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


class ScopeRedirectMiddleware:
    """Refuse a redirected request the crawl's scope does not take."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ScopeRedirectMiddleware:
        if uses_frontier(crawler.settings):
            # (by design: Scrapy would log a reason given to NotConfigured as a WARNING)
            logger.debug("Disabled %s.%s: the frontier's intake decides redirects",
                         __name__, cls.__name__)
            raise NotConfigured
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        if not request.meta.get("redirect_urls"):
            return
        scope = scope_of(self.crawler)
        if scope is None:
            return
        rule = scope.redirected(request)
        if rule is not None:
            raise IgnoreRequest(f"redirect off the crawl's scope ({rule}): {request.url}")
