"""Download handler: Scrapy's HTTP/1.1 handler with a connect timeout of its
own and without Twisted's silent retry.

Twisted's connection pool quietly sends an idempotent request a second time
when a reused keep-alive connection fails before the answer
(``HTTPConnectionPool.retryAutomatically``). For a crawler that counts every
attempt against a host (retries with backoff, circuit breakers, what the
server was sent), that hidden second request is wrong twice: the host sees
more requests than the policy allows, and the failure is counted once. The
frontier's retry policy (:mod:`crawler.middlewares.retry`) decides instead.

Scrapy 2.19 connects with the whole ``DOWNLOAD_TIMEOUT``: a host whose SYNs go
unanswered holds a slot for 30 s before anything is known. A broad crawl wants
that verdict in seconds (``DOWNLOAD_CONNECT_TIMEOUT``), while a slow but
working page keeps the whole download timeout. Scrapy has no public hook for
it, so :class:`_ConnectTimeoutAgent` narrows the one private method
(``_ScrapyAgent._get_agent``) that passes the timeout to Twisted's endpoint;
``tests/test_handlers.py`` pins it against a listener that never accepts.

It is also the frontier's last word on politeness: a request that reaches it
long after passing the start gate (a stalled reactor) passes the gate again
(:func:`crawler.frontier.pacing.pass_gate_again_if_stale`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler, _ScrapyAgent
from scrapy.exceptions import ResponseDataLossError
from scrapy.utils._download_handlers import get_dataloss_msg, wrap_twisted_exceptions
from scrapy.utils.defer import maybe_deferred_to_future

from crawler.frontier.pacing import pass_gate_again_if_stale

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.web.client import Agent

logger = logging.getLogger(__name__)


class _ConnectTimeoutAgent(_ScrapyAgent):
    """Scrapy's agent, connecting within ``connect_timeout`` at most."""

    def __init__(self, *, connect_timeout: float, **kwargs) -> None:
        super().__init__(**kwargs)
        self._connect_cap = connect_timeout

    def _get_agent(self, request: Request, timeout: float) -> Agent:
        return super()._get_agent(request, min(timeout, self._connect_cap))


class CountedHTTP11DownloadHandler(HTTP11DownloadHandler):
    """Every attempt is one the retry policy decided on; connecting has its
    own, shorter timeout (``DOWNLOAD_CONNECT_TIMEOUT``; 0 = Scrapy's)."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self._pool.retryAutomatically = False
        connect = crawler.settings.getfloat("DOWNLOAD_CONNECT_TIMEOUT")
        self._connect_timeout = connect if connect > 0 else float("inf")

    async def download_request(self, request: Request) -> Response:
        await pass_gate_again_if_stale(self._crawler, request)
        agent = _ConnectTimeoutAgent(
            connect_timeout=self._connect_timeout,
            contextFactory=self._contextFactory,
            bindAddress=self._bind_address,
            pool=self._pool,
            maxsize=self._default_maxsize,
            warnsize=self._default_warnsize,
            fail_on_dataloss=self._fail_on_dataloss,
            crawler=self._crawler,
            tls_verbose_logging=self._tls_verbose_logging,
        )
        try:
            with wrap_twisted_exceptions():
                return await maybe_deferred_to_future(agent.download_request(request))
        except ResponseDataLossError:
            if not self._fail_on_dataloss_warned:
                logger.warning(get_dataloss_msg(request.url))
                self._fail_on_dataloss_warned = True
            raise
