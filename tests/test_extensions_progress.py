"""The progress line's error share (crawler/extensions/progress.py): what counts as a
download and as an error, from stats alone, and from the stats Scrapy's own
downloader middlewares write when the crawler's middlewares decide.

No crawl: the real ``DownloaderMiddlewareManager`` runs the real ``DownloaderStats``,
address guard and retry policy around a download function the test writes.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from OpenSSL import SSL
from scrapy import Request
from scrapy.core.downloader.middleware import DownloaderMiddlewareManager
from scrapy.downloadermiddlewares.stats import DownloaderStats
from scrapy.exceptions import DownloadCancelledError, IgnoreRequest
from scrapy.http import Response
from scrapy.utils.test import get_crawler
from twisted.internet.error import ConnectionRefusedError, DNSLookupError, TimeoutError

import crawler.settings
from crawler.extensions.progress import ProgressLog, download_totals, exception_kind, progress_text
from crawler.lease import TICKET_META, Ticket
from crawler.middlewares.addressguard import AddressGuardMiddleware
from crawler.middlewares.retry import RetryPolicyMiddleware

EXC = "downloader/exception_type_count/"


def _settings(**values: Any) -> dict[str, Any]:
    base = {k: getattr(crawler.settings, k) for k in dir(crawler.settings) if k.isupper()}
    return {**base, **values}


def test_decisions_are_neither_errors_nor_downloads() -> None:
    """The stats of a minute in which robots.txt denied half the URLs (the line said
    "errors 49.4% of 81 downloads" with no network error at all)."""
    stats = {
        "downloader/request_count": 45,  # counted before the pacing gate and the guard
        "downloader/response_count": 41,
        "downloader/response_status_count/200": 38,
        "downloader/response_status_count/404": 3,
        "downloader/exception_count": 40,
        EXC + "scrapy.exceptions.IgnoreRequest": 38,  # robots.txt, learned rules, pacing
        EXC + "crawler.addressguard.AddressBlocked": 2,  # a subclass: a refusal too
    }
    assert download_totals(stats) == {"useful": 38, "errors": 0, "finished": 41}


def test_network_failures_and_5xx_are_errors_of_the_downloads_that_went_out() -> None:
    stats = {
        "downloader/response_count": 50,
        "downloader/response_status_count/200": 40,
        "downloader/response_status_count/301": 4,
        "downloader/response_status_count/503": 6,
        EXC + "scrapy.exceptions.IgnoreRequest": 300,
        EXC + "twisted.internet.error.TimeoutError": 3,
        EXC + "twisted.internet.error.ConnectionRefusedError": 1,
        EXC + "OpenSSL.SSL.Error": 1,
        EXC + "scrapy.exceptions.DownloadCancelledError": 2,  # too large: out, no failure
        EXC + "no.such.module.WeirdError": 1,  # unknown: a failure, not a decision
        "dns/requests/servfail": 2,  # failed lookups the DNS step took from Scrapy's count
        "dns/requests/nxdomain": 1,
    }
    assert download_totals(stats) == {
        "useful": 40, "errors": 6 + 3 + 1 + 1 + 1 + 3, "finished": 50 + 9 + 2}


@pytest.mark.parametrize(("name", "kind"), [
    ("scrapy.exceptions.IgnoreRequest", "decision"),
    ("crawler.addressguard.AddressBlocked", "decision"),
    ("scrapy.exceptions.DownloadCancelledError", "cut"),
    ("twisted.internet.error.TimeoutError", "failure"),
    ("twisted.internet.error.DNSLookupError", "failure"),
    ("twisted.web._newclient.ResponseNeverReceived", "failure"),
    ("builtins.ValueError", "failure"),
    ("scrapy.exceptions", "failure"),  # a module, not a type
    ("NoDots", "failure"),
])
def test_exception_kinds_by_the_name_scrapy_counts(name: str, kind: str) -> None:
    assert exception_kind(name) == kind


def test_the_line_shows_the_interval_not_the_whole_crawl() -> None:
    ext = ProgressLog.from_crawler(get_crawler(settings_dict={"LOGSTATS_INTERVAL": 60.0}))
    first = {"downloader/response_count": 30, "downloader/response_status_count/200": 30,
             EXC + "scrapy.exceptions.IgnoreRequest": 500}
    assert ext._interval_counts(first, 25) == {
        "pages": 25, "useful": 30, "errors": 0, "finished": 30}
    second = {**first, "downloader/response_count": 70,
              "downloader/response_status_count/200": 60,
              "downloader/response_status_count/500": 10,
              EXC + "scrapy.exceptions.IgnoreRequest": 900,
              EXC + "twisted.internet.error.TimeoutError": 10}
    delta = ext._interval_counts(second, 55)
    assert delta == {"pages": 30, "useful": 30, "errors": 20, "finished": 50}
    assert progress_text(55, delta, 1.0, 60) == (
        "Progress: 55 pages fetched; last 60 s: 30 pages/min (30 2xx answers/min), "
        "errors 40.0% of 50 downloads")


# ---------------------------------------------------------------- Scrapy's own counts


class _RobotsDenial:
    """Stands for the robots policy (order 100): denies before anything is sent."""

    def process_request(self, request: Request) -> None:
        if "/private" in request.url:
            raise IgnoreRequest(f"forbidden by robots.txt: {request.url}")


async def _download(request: Request) -> Response:
    """The network, as the test wants it to answer each path."""
    errors: dict[str, Exception] = {
        "/slow": TimeoutError(), "/refused": ConnectionRefusedError(),
        "/tls": SSL.Error("handshake failure"), "/huge": DownloadCancelledError("too large"),
        "/nxdomain": DNSLookupError("no such name"),
    }
    path = "/" + request.url.split("/", 3)[3]
    if path in errors:
        raise errors[path]
    return Response(request.url, status=503 if path == "/busy" else 200)


def test_what_scrapy_counts_when_the_crawler_s_middlewares_decide() -> None:
    """IgnoreRequest from a process_request (robots.txt, the address guard) or from a
    process_exception after the stats saw the real error (the retry policy) is
    counted by Scrapy as a download exception: the progress line must not."""
    settings = _settings(RETRY_TIMES=1, DOWNLOAD_DELAY=0)
    crawl = get_crawler(settings_dict=settings)
    stats = DownloaderStats(crawl.stats)
    # In the project's order: robots 100, retry 550, stats 850, address guard 955.
    chain = DownloaderMiddlewareManager(
        _RobotsDenial(), RetryPolicyMiddleware(crawl), stats, AddressGuardMiddleware(crawl),
        crawler=crawl)
    urls = ["http://a.test/ok", "http://a.test/ok2", "http://a.test/private/1",
            "http://a.test/private/2", "http://127.0.0.1/ok", "http://a.test/slow",
            "http://a.test/refused", "http://a.test/tls", "http://a.test/huge",
            "http://a.test/busy", "http://a.test/nxdomain"]
    loop = asyncio.new_event_loop()
    try:
        for url in urls:
            request = Request(url, meta={TICKET_META: Ticket(url)})
            with contextlib.suppress(Exception):  # a decision or a failure: see the stats
                loop.run_until_complete(chain.download_async(_download, request))
    finally:
        loop.close()
    counted = crawl.stats.get_stats()
    # What made the old line wrong: decisions are Scrapy's download exceptions.
    assert counted[EXC + "scrapy.exceptions.IgnoreRequest"] == 2  # robots.txt only
    assert counted[EXC + "crawler.addressguard.AddressBlocked"] == 1
    assert counted["downloader/exception_count"] == 8
    # The retry policy's IgnoreRequest came after the stats saw the timeout.
    assert counted[EXC + "twisted.internet.error.TimeoutError"] == 1
    # Sent: 2 answered 200, 1 answered 503 (retried), 5 failed or were cut.
    assert download_totals(counted) == {"useful": 2, "errors": 1 + 4, "finished": 3 + 5}
