"""Download handler: Scrapy's HTTP/1.1 handler, without Twisted's silent retry.

Twisted's connection pool quietly sends an idempotent request a second time
when a reused keep-alive connection fails before the answer
(``HTTPConnectionPool.retryAutomatically``). For a crawler that counts every
attempt against a host (retries with backoff, circuit breakers, what the
server was sent), that hidden second request is wrong twice: the host sees
more requests than the policy allows, and the failure is counted once. The
frontier's retry policy (:mod:`crawler.middlewares.retry`) decides instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


class CountedHTTP11DownloadHandler(HTTP11DownloadHandler):
    """Every attempt is one the retry policy decided on."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self._pool.retryAutomatically = False
