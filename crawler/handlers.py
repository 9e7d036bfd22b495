"""Download handler: Scrapy's HTTP/1.1 handler with a connect timeout of its
own and without Twisted's silent retry.

Twisted's connection pool quietly sends an idempotent request a second time
when a reused keep-alive connection fails before the answer
(``HTTPConnectionPool.retryAutomatically``). For a crawler that counts every
attempt against a host (retries with backoff, circuit breakers, what the
server was sent), that hidden second request is wrong twice: the host sees
more requests than the policy allows, and the failure is counted once. The
frontier's retry policy (:mod:`crawler.middlewares.retry`) decides instead.
So a request must not be written on a connection that cannot carry it:

- a kept-alive connection the server closed while it sat in the pool is
  dropped before the request is written on it, if the close has arrived and
  the reactor has not read it yet (a stalled reactor: :func:`_closed_by_peer`,
  the check urllib3 makes before it reuses a connection);
- an HTTP/1.0 answer's connection is not pooled at all: Twisted keeps it
  unless the server said ``Connection: close``, but RFC 9112 (9.3) says it
  does not persist, and a plain HTTP/1.0 server closes it right after the
  answer, under the next request (:meth:`_SentAtOnce.request`).

Scrapy 2.19 connects with the whole ``DOWNLOAD_TIMEOUT``: a host whose SYNs go
unanswered holds a slot for 30 s before anything is known. A broad crawl wants
that verdict in seconds (``DOWNLOAD_CONNECT_TIMEOUT``), while a slow but
working page keeps the whole download timeout. Scrapy has no public hook for
it, so :class:`crawler.compat.ConnectTimeoutAgent` narrows the one private
method (``_ScrapyAgent._get_agent``) that passes the timeout to Twisted's endpoint;
``tests/test_retry_crawl.py`` pins it against a host that never completes the
handshake.

It is also the frontier's last word on politeness: once a request's
connection is ready, the last moment before Twisted writes it, a request
whose turn at the start gate went stale (the reactor stalled after the gate,
or while connecting) passes the gate again (:class:`_GatedPool`,
:func:`crawler.middlewares.pacing.turn_is_stale`), its turn is looked at once
more in the callback that writes it, and a request on a fresh turn is sent to
the socket at once, not on the reactor's next turn (:class:`_SentAtOnce`),
over HTTPS too: directly or through a CONNECT proxy's tunnel, Twisted's TLS
layer holds small writes for a turn of its own, and is flushed first. A
request still stale after three passes goes back to its queue.

A closing crawl (Ctrl-C, SIGTERM, a ``CLOSESPIDER_*`` limit) waits for its
downloads in flight, and Scrapy waits for each until its answer or its
``DOWNLOAD_TIMEOUT``: a crawl with hung downloads took minutes to stop, or
was killed without its summary. So a closing crawl gives them
:data:`STOP_GRACE_S`, then cuts the rest: each URL goes back to its queue
untouched (:meth:`crawler.lease.Ticket.abandon`, no attempt counted), and the
next run fetches it.

Every private Scrapy and Twisted name this takes (the agent's ``_get_agent``,
the handler's attributes, the TLS layers) is reached through
:mod:`crawler.compat`, whose :func:`~crawler.compat.check` runs when the
handler starts (and, in ``EXTENSIONS``, before the crawl does).
"""

from __future__ import annotations

import logging
import socket
import time
from typing import TYPE_CHECKING
from weakref import WeakSet

from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet import tcp as tcp_transports
from twisted.internet.task import LoopingCall
from twisted.protocols.tls import TLSMemoryBIOProtocol

from crawler import compat
from crawler.lease import ticket_of
from crawler.middlewares.pacing import (
    give_back_stale,
    note_sent,
    note_time_to_socket,
    pass_gate,
    turn_is_stale,
)
from crawler.wiretap import open_tap

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.internet.defer import Deferred
    from twisted.internet.interfaces import IStreamClientEndpoint
    from twisted.web.client import HTTPConnectionPool
    from twisted.web.client import Request as TxRequest
    from twisted.web.client import Response as TxResponse

    from crawler.compat import ClientProtocol

logger = logging.getLogger(__name__)


class _GatedPool:
    """The handler's connection pool as one request sees it.

    Once a connection is ready, a request whose turn at the frontier's start
    gate has gone stale passes the gate again, and the turn is looked at once
    more in the very callback that writes the request: passing the gate is
    asynchronous, and the reactor turns between its answer and the write can
    stall too, for long enough that another worker's on-time turn comes
    first. In the normal case the connection is
    handed on, and the request written, in the same reactor turn. Everything
    but ``getConnection`` is the shared pool.
    """

    #: Passes of the gate at most; after a stall behind every one, the URL goes back
    #: to its queue (a reactor that busy is better off sending nothing).
    MAX_TRIES = 3

    def __init__(self, pool: HTTPConnectionPool, crawler: Crawler, request: Request,
                 carried: WeakSet[ClientProtocol] | None = None) -> None:
        self._pool = pool
        self._crawler = crawler
        self._request = request
        self._tries = 0
        #: The connections that carried a request before (the handler's, shared).
        self._carried: WeakSet[ClientProtocol] = WeakSet() if carried is None else carried

    def __getattr__(self, name: str) -> object:
        return getattr(self._pool, name)

    def getConnection(  # Twisted's name
        self, key: object, endpoint: IStreamClientEndpoint
    ) -> Deferred[ClientProtocol]:
        d = self._pool.getConnection(key, endpoint)
        return d.addCallback(self._ready, key, endpoint)

    def _ready(self, proto: ClientProtocol, key: object,
               endpoint: IStreamClientEndpoint) -> object:
        """The connection, to be written on now (synchronously), or after the gate again."""
        if proto in self._carried and _closed_by_peer(proto):
            self._crawler.stats.inc_value("downloader/closed_connections_skipped")
            proto.transport.abortConnection()
            d = self._pool.getConnection(key, endpoint)  # another one, or a new one
            return d.addCallback(self._ready, key, endpoint)
        if self._tries == 0:
            note_time_to_socket(self._crawler, self._request)
        if not turn_is_stale(self._request):
            self._carried.add(proto)
            note_sent(self._crawler, self._request)
            return _SentAtOnce(proto, self._request)
        if self._tries >= self.MAX_TRIES:
            proto.transport.loseConnection()
            give_back_stale(self._crawler, self._request)
        self._tries += 1
        self._crawler.stats.inc_value("frontier/pacing/stale_turns")
        d = deferred_from_coro(self._gate_again(proto, key, endpoint))
        return d.addCallback(self._ready, key, endpoint)

    async def _gate_again(self, proto: ClientProtocol, key: object,
                          endpoint: IStreamClientEndpoint) -> ClientProtocol:
        try:
            await pass_gate(self._crawler, self._request)
        except BaseException:  # given back to the frontier, or the download cancelled
            proto.transport.loseConnection()
            raise
        if compat.connection_is_idle(proto):
            return proto
        # The server closed the idle connection while the request waited.
        return await maybe_deferred_to_future(self._pool.getConnection(key, endpoint))


class _SentAtOnce:
    """A ready connection whose request goes to the socket when it is written.

    Twisted buffers what a protocol writes and sends it when the reactor next
    polls the socket, after every other callback of the current turn: one
    slow callback there (a large page's links, a starved CPU) and a request
    that passed the gate on time leaves a quarter of a second later, right
    before another worker's request to the same host. Over HTTPS the TLS
    layer holds the request
    for one more turn before it even reaches the TCP transport. ``request``
    writes it, then flushes every TLS layer and has the TCP transport send it
    at once (``IWriteDescriptor.doWrite``, what the reactor itself would
    call; :func:`_send_buffered`). Only Twisted's ``Agent`` sees this object,
    and only to call ``request``; the pool keeps the protocol itself.
    """

    def __init__(self, proto: ClientProtocol, scrapy_request: Request) -> None:
        self._proto = proto
        self._scrapy_request = scrapy_request

    def __getattr__(self, name: str) -> object:
        return getattr(self._proto, name)

    def request(self, request: TxRequest) -> Deferred[TxResponse]:
        inner = compat.unwrap_client_protocol(self._proto)
        d = compat.tapped_request(inner, request, open_tap(self._scrapy_request))
        _send_buffered(getattr(inner, "transport", None))
        return d.addCallback(self._persist_1_1_only, request)

    def _persist_1_1_only(self, response: TxResponse, request: TxRequest) -> TxResponse:
        """Close an HTTP/1.0 answer's connection once its body is read.

        HTTP/1.0 keep-alive is rare enough that it is not worth reading
        Twisted's private connection headers for: a new connection per
        request to such a server costs little at a polite rate. A body-less
        answer (HEAD, 204, 304, ``Content-Length: 0``) is finished before
        this runs and its connection already pooled: it is closed there.
        """
        if response.version < (b"HTTP", 1, 1):
            request.persistent = False  # Twisted's own flag: close after this answer
            if response.length == 0:
                self._proto.transport.loseConnection()
        return response


#: Transports between a protocol and its TCP socket, at most (TLS adds one).
_MAX_LAYERS = 4


def _closed_by_peer(proto: ClientProtocol) -> bool:
    """Whether the server closed an idle connection and the reactor has not
    read the close yet: a peek at the TCP socket under any TLS layer.

    Bytes waiting there are not a close (over TLS they can be a late session
    ticket); Twisted reads them as usual. A transport of a kind not known
    here is taken to be open, as Twisted would take it.
    """
    layer = proto.transport
    for _ in range(_MAX_LAYERS):
        if isinstance(layer, TLSMemoryBIOProtocol):
            layer = layer.transport
        elif isinstance(layer, tcp_transports.Connection):
            sock = layer.socket  # the socket itself, also under startTLS (getHandle is TLS's)
            try:
                return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
            except BlockingIOError:
                return False  # nothing to read: open and idle
            except OSError:
                return True  # reset
        else:
            return False
    return False


def _send_buffered(transport: object) -> None:
    """Send what the protocol above ``transport`` wrote to the socket now.

    Over HTTPS the bytes are not in the TCP transport yet: Twisted's TLS layer
    holds small writes for one reactor turn (``callLater(0)``) before it
    encrypts them, so each TLS layer on the way down is flushed first; the
    ciphertext lands in the TCP transport's buffer, which is then written.
    A transport of a kind not known here is left to the reactor, as is any
    error: the data stays buffered and the reactor's own write meets it (and
    closes the connection as usual). Nothing here may raise into the
    callback that wrote the request.
    """
    try:
        tcp = compat.flush_tls_layers(transport)
        if tcp is not None and tcp.connected and not tcp.disconnecting:
            tcp.doWrite()  # the instance's: a no-op once the connection is aborted
    except Exception:
        logger.debug("a request could not be sent at once; the reactor sends it", exc_info=True)


#: How long a closing crawl lets its downloads in flight run before it cuts them.
STOP_GRACE_S = 2.0


class CountedHTTP11DownloadHandler(HTTP11DownloadHandler):
    """Every attempt is one the retry policy decided on; connecting has its
    own, shorter timeout (``DOWNLOAD_CONNECT_TIMEOUT``; 0 = Scrapy's). It will
    not start on a Scrapy or Twisted whose private parts it does not know
    (:func:`crawler.compat.check`)."""

    def __init__(self, crawler: Crawler) -> None:
        compat.check()
        super().__init__(crawler)
        self.pool: HTTPConnectionPool = compat.handler_pool(self)
        self.pool.retryAutomatically = False
        connect = crawler.settings.getfloat("DOWNLOAD_CONNECT_TIMEOUT")
        self.connect_timeout = connect if connect > 0 else float("inf")
        self._carried: WeakSet[ClientProtocol] = WeakSet()
        self._downloads: dict[Request, Deferred[Response]] = {}
        self._cut: set[Request] = set()
        self._closing_since: float | None = None
        self._closing = LoopingCall(self._watch_closing)
        self._closing.start(0.5, now=False)

    async def download_request(self, request: Request) -> Response:
        pool = _GatedPool(self.pool, self.crawler, request, self._carried)
        agent = compat.scrapy_agent(self, pool=pool, connect_timeout=self.connect_timeout)
        download = self._downloads[request] = agent.download_request(request)
        try:
            with compat.scrapy_download_errors(self, request):
                return await maybe_deferred_to_future(download)
        except BaseException:  # (a cut one may end as an asyncio cancellation)
            if request not in self._cut:
                raise
            ticket = ticket_of(request.meta)
            if ticket is not None:
                ticket.abandon()
            raise IgnoreRequest("cut: the crawl closed during its download") from None
        finally:
            self._downloads.pop(request, None)
            self._cut.discard(request)

    def _watch_closing(self) -> None:
        """Cut the downloads still in flight :data:`STOP_GRACE_S` after the crawl
        began to close."""
        engine = self.crawler.engine
        if engine is None or not compat.engine_closing(engine):
            return
        now = time.monotonic()
        if self._closing_since is None:
            self._closing_since = now
        elif now - self._closing_since >= STOP_GRACE_S and self._downloads:
            logger.info("Closing: %d download(s) still in flight after %.0f s cut; their URLs "
                        "go back to their queues", len(self._downloads), STOP_GRACE_S)
            for request, download in list(self._downloads.items()):
                self._cut.add(request)
                download.cancel()

    async def close(self) -> None:
        if self._closing.running:
            self._closing.stop()
        await super().close()
