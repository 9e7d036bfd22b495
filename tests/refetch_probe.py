"""A test-only extension: asks for the first page of a crawl again, with ``dont_filter=True``.

On the first response of a page the frontier handed out, it queues
``Request(response.url, dont_filter=True)`` through the engine, as a spider
that wants a refetch would; the crawl's ledger then shows whether the page
was fetched a second time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy import Request, signals

from crawler.lease import ticket_of

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response


class RefetchProbe:
    """Queues the crawl's first frontier page again, once, with dont_filter=True."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.done = False
        crawler.signals.connect(self.received, signal=signals.response_received)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RefetchProbe:
        return cls(crawler)

    def received(self, response: Response, request: Request, spider: Spider) -> None:
        if self.done or ticket_of(request.meta) is None or response.status != 200:
            return
        self.done = True
        assert self.crawler.engine is not None and self.crawler.stats is not None
        self.crawler.stats.set_value("test/refetch_asked", response.url)
        self.crawler.engine.crawl(Request(response.url, dont_filter=True))
