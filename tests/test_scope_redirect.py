"""The scope's redirect check under Scrapy's own scheduler
(crawler/middlewares/scoperedirect.py): an in-process crawl against a real
HTTP server on two loopback addresses. A redirect stays on the seed's host
or is not sent; the frontier's intake makes the same decision under the
frontier scheduler (tests/test_realweb_scope.py)."""

from __future__ import annotations

from typing import Any

import pytest_twisted
from scrapy import Request, Spider
from scrapy.crawler import CrawlerRunner
from scrapy.http import Response
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.test import get_reactor_settings
from twisted.internet import reactor
from twisted.web import resource, server

from crawler.middlewares.scope import scope_of


class _Site(resource.Resource):
    """``/`` links to ``/in`` and ``/out``; ``/in`` redirects to ``/page`` on
    the same host, ``/out`` to 127.0.0.2; every request is noted as (address,
    path)."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str]] = []
        self.port = 0

    def render_GET(self, request: Any) -> bytes:
        path = request.path.decode()
        self.seen.append((request.getHost().host, path))
        if path == "/in":
            request.redirect(b"/page")
        elif path == "/out":
            request.redirect(f"http://127.0.0.2:{self.port}/elsewhere".encode())
        elif path == "/":
            return b'<html><body><a href="/in">in</a> <a href="/out">out</a></body></html>'
        return b"<html><body>page</body></html>"


class _Seeds(Spider):
    name = "seeds"

    async def start(self) -> Any:
        yield Request(f"http://127.0.0.1:{self.port}/")

    def parse(self, response: Response) -> Any:
        self.pages.append(response.url)
        yield from response.follow_all(css="a")


@pytest_twisted.ensureDeferred
async def test_a_redirect_off_the_scope_is_not_sent_and_one_on_it_is() -> None:
    site = _Site()
    first = reactor.listenTCP(0, server.Site(site), interface="127.0.0.1")
    site.port = first.getHost().port
    second = reactor.listenTCP(site.port, server.Site(site), interface="127.0.0.2")
    try:
        runner = CrawlerRunner({
            **get_reactor_settings(), "TELNETCONSOLE_ENABLED": False, "LOG_LEVEL": "INFO",
            "ROBOTSTXT_OBEY": False, "SCOPE": "host", "SCOPE_SETTLE_SECONDS": 0,
            "SPIDER_MIDDLEWARES": {"crawler.middlewares.scope.ScopeMiddleware": 550},
            "DOWNLOADER_MIDDLEWARES": {
                "crawler.middlewares.scoperedirect.ScopeRedirectMiddleware": 100}})
        crawler = runner.create_crawler(_Seeds)
        pages: list[str] = []
        await maybe_deferred_to_future(runner.crawl(crawler, port=site.port, pages=pages))
    finally:
        await maybe_deferred_to_future(first.stopListening())
        await maybe_deferred_to_future(second.stopListening())
    # (a seed's own redirect would make its target a seed: these are links)
    assert sorted(site.seen) == [("127.0.0.1", "/"), ("127.0.0.1", "/in"),
                                 ("127.0.0.1", "/out"), ("127.0.0.1", "/page")]
    assert sorted(pages) == [f"http://127.0.0.1:{site.port}{p}" for p in ("/", "/page")]
    assert crawler.stats.get_value("scope/redirects_dropped") == 1
    middleware = scope_of(crawler)  # (Scrapy's lookup, no registry of ours)
    assert middleware is not None and middleware.off_scope == {"127.0.0.2": 1}
