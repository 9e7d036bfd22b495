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
``tests/test_retry_crawl.py`` pins it against a host that never completes the
handshake.

It is also the frontier's last word on politeness: once a request's
connection is ready, the last moment before Twisted writes it, a request
whose turn at the start gate went stale (the reactor stalled after the gate,
or while connecting) passes the gate again (:class:`_GatedPool`,
:func:`crawler.frontier.pacing.turn_is_stale`), its turn is looked at once
more in the callback that writes it, and a request on a fresh turn is sent to
the socket at once, not on the reactor's next turn (:class:`_SentAtOnce`). A
request still stale after three passes goes back to its queue.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler, _ScrapyAgent
from scrapy.exceptions import ResponseDataLossError
from scrapy.utils._download_handlers import get_dataloss_msg, wrap_twisted_exceptions
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future

from crawler.frontier.pacing import give_back_stale, pass_gate, turn_is_stale

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.internet.defer import Deferred
    from twisted.internet.interfaces import IStreamClientEndpoint
    from twisted.web._newclient import HTTP11ClientProtocol
    from twisted.web.client import Agent, HTTPConnectionPool

logger = logging.getLogger(__name__)


class _ConnectTimeoutAgent(_ScrapyAgent):
    """Scrapy's agent, connecting within ``connect_timeout`` at most."""

    def __init__(self, *, connect_timeout: float, **kwargs) -> None:
        super().__init__(**kwargs)
        self._connect_cap = connect_timeout

    def _get_agent(self, request: Request, timeout: float) -> Agent:
        return super()._get_agent(request, min(timeout, self._connect_cap))


class _GatedPool:
    """The handler's connection pool as one request sees it.

    Once a connection is ready, a request whose turn at the frontier's start
    gate has gone stale passes the gate again, and the turn is looked at once
    more in the very callback that writes the request: passing the gate is
    asynchronous, and the reactor turns between its answer and the write can
    stall too (the soak saw a request granted, then sent 0.2 s later, after
    another worker's on-time turn). In the normal case the connection is
    handed on, and the request written, in the same reactor turn. Everything
    but ``getConnection`` is the shared pool.
    """

    #: Passes of the gate at most; after a stall behind every one, the URL goes back
    #: to its queue (a reactor that busy is better off sending nothing).
    MAX_TRIES = 3

    def __init__(self, pool: HTTPConnectionPool, crawler: Crawler, request: Request) -> None:
        self._pool = pool
        self._crawler = crawler
        self._request = request
        self._tries = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._pool, name)

    def getConnection(  # Twisted's name
        self, key: object, endpoint: IStreamClientEndpoint
    ) -> Deferred[HTTP11ClientProtocol]:
        d = self._pool.getConnection(key, endpoint)
        return d.addCallback(self._ready, key, endpoint)

    def _ready(self, proto: HTTP11ClientProtocol, key: object,
               endpoint: IStreamClientEndpoint) -> object:
        """The connection, to be written on now (synchronously), or after the gate again."""
        if not turn_is_stale(self._request):
            return _SentAtOnce(proto)
        if self._tries >= self.MAX_TRIES:
            proto.transport.loseConnection()
            give_back_stale(self._crawler, self._request)
        self._tries += 1
        self._crawler.stats.inc_value("frontier/pacing/stale_turns")
        d = deferred_from_coro(self._gate_again(proto, key, endpoint))
        return d.addCallback(self._ready, key, endpoint)

    async def _gate_again(self, proto: HTTP11ClientProtocol, key: object,
                          endpoint: IStreamClientEndpoint) -> HTTP11ClientProtocol:
        try:
            await pass_gate(self._crawler, self._request)
        except BaseException:  # given back to the frontier, or the download cancelled
            proto.transport.loseConnection()
            raise
        if proto.state == "QUIESCENT":
            return proto
        # The server closed the idle connection while the request waited.
        return await maybe_deferred_to_future(self._pool.getConnection(key, endpoint))


class _SentAtOnce:
    """A ready connection whose request goes to the socket when it is written.

    Twisted buffers what a protocol writes and sends it when the reactor next
    polls the socket, after every other callback of the current turn: one
    slow callback there (a large page's links, a starved CPU) and a request
    that passed the gate on time leaves a quarter of a second later, right
    before another worker's request to the same host (the chaos soak saw two
    such gaps of 5 and 17 ms). ``request`` writes it and then has the TCP
    transport send it at once (``IWriteDescriptor.doWrite``, what the reactor
    itself would call). Only Twisted's ``Agent`` sees this object, and only
    to call ``request``; the pool keeps the protocol itself.
    """

    def __init__(self, proto: HTTP11ClientProtocol) -> None:
        self._proto = proto

    def __getattr__(self, name: str) -> object:
        return getattr(self._proto, name)

    def request(self, request: object) -> Deferred[object]:
        d = self._proto.request(request)
        # Through Twisted's retrying wrapper too (a pool with retryAutomatically).
        proto = getattr(self._proto, "_clientProtocol", self._proto)
        _send_buffered(getattr(proto, "transport", None))
        return d


def _send_buffered(transport: object) -> None:
    """Send what ``transport`` buffered now, through a TLS layer if there is one.

    Errors are left where they are: the data stays buffered and the reactor's
    own ``doWrite`` meets the same error and closes the connection as usual.
    """
    while transport is not None and not hasattr(transport, "doWrite"):
        transport = getattr(transport, "transport", None)  # TLS wraps the TCP transport
    if transport is not None and getattr(transport, "connected", False):
        with contextlib.suppress(OSError):
            transport.doWrite()  # type: ignore[attr-defined]


class CountedHTTP11DownloadHandler(HTTP11DownloadHandler):
    """Every attempt is one the retry policy decided on; connecting has its
    own, shorter timeout (``DOWNLOAD_CONNECT_TIMEOUT``; 0 = Scrapy's)."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self._pool.retryAutomatically = False
        connect = crawler.settings.getfloat("DOWNLOAD_CONNECT_TIMEOUT")
        self._connect_timeout = connect if connect > 0 else float("inf")

    async def download_request(self, request: Request) -> Response:
        agent = _ConnectTimeoutAgent(
            connect_timeout=self._connect_timeout,
            contextFactory=self._contextFactory,
            bindAddress=self._bind_address,
            pool=_GatedPool(self._pool, self._crawler, request),
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
