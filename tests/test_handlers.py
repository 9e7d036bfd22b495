"""The download handler's connection pool: a request leaves when it is written.

Twisted sends what a protocol writes only when the reactor next polls the
socket, after every other callback of the turn; the handler sends a request
at once instead (``crawler.handlers._SentAtOnce``, through the TLS layers
``crawler.compat`` knows), so a slow callback right after the start gate
cannot hold a request that is on time: over plain HTTP
and HTTPS (whose TLS layer holds small writes for a turn of its own),
directly and through a proxy (:mod:`tests.realweb.proxy`, CONNECT for
HTTPS), all on loopback sockets. The connect timeout and the stale-turn check
have crawl tests (``tests/test_retry_crawl.py``,
``tests/test_frontier_soak_fixes.py``).
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
import twisted
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.test import get_crawler
from twisted.internet import _newtls, reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import Protocol
from twisted.internet.task import deferLater
from twisted.protocols.tls import TLSMemoryBIOFactory, TLSMemoryBIOProtocol
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.iweb import IResponse

from crawler import settings as project_settings
from crawler.compat import CompatibilityError
from crawler.handlers import CountedHTTP11DownloadHandler, _GatedPool
from crawler.wiretap import tap_of
from tests.realweb.proxy import LoopbackProxy
from tests.realweb.tls import TestCA

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


class KeepAliveServer:
    """One loopback connection at a time, plain or TLS; stamps when each request head arrives."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.tls = tls
        self.connections = 0
        self.arrivals: list[float] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self._accepted(conn)

    def _accepted(self, conn: socket.socket) -> None:
        """One connection at a time: answered before the next is accepted."""
        try:
            with self.tls.wrap_socket(conn, server_side=True) if self.tls else conn as c:
                self._answer(c)
        except OSError:  # a TLS handshake or a connection that failed: the next one
            conn.close()

    def _answer(self, conn: socket.socket) -> None:
        buffered = b""
        while chunk := conn.recv(65536):
            buffered += chunk
            while b"\r\n\r\n" in buffered:
                _, buffered = buffered.split(b"\r\n\r\n", 1)
                self.arrivals.append(time.time())
                conn.sendall(ANSWER)


class _Body(Protocol):
    """Collects a response body (``readBody`` warns about the reactor's transport)."""

    def __init__(self) -> None:
        self.done: Deferred[bytes] = Deferred()
        self.data = b""

    def dataReceived(self, data: bytes) -> None:  # Twisted's name
        self.data += data

    def connectionLost(self, reason: Failure) -> None:  # Twisted's name
        self.done.callback(self.data)


async def _body(response: IResponse) -> bytes:
    collector = _Body()
    response.deliverBody(collector)
    return await maybe_deferred_to_future(collector.done)


@contextlib.contextmanager
def serving(tls: ssl.SSLContext | None = None, *,
            server: KeepAliveServer | None = None) -> Iterator[KeepAliveServer]:
    srv = server or KeepAliveServer(tls)
    srv.thread.start()
    try:
        yield srv
    finally:
        with contextlib.suppress(OSError):
            srv.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        srv.sock.close()
        srv.thread.join(5)


@pytest.fixture
def server() -> Iterator[KeepAliveServer]:
    with serving() as srv:
        yield srv


@pytest.mark.parametrize("retrying", [False, True], ids=["handler-pool", "retrying-pool"])
@pytest_twisted.ensureDeferred
async def test_a_request_leaves_when_written_not_on_the_reactor_s_next_turn(
        server: KeepAliveServer, retrying: bool) -> None:
    pool = HTTPConnectionPool(reactor, persistent=True)
    pool.retryAutomatically = retrying  # the handler's pool does not retry
    agent = Agent(reactor, pool=_GatedPool(pool, get_crawler(), Request("http://a.test/")))
    url = f"http://127.0.0.1:{server.port}/".encode()
    try:
        await _body(await maybe_deferred_to_future(agent.request(b"GET", url + b"1")))
        await deferLater(reactor, 0.05, lambda: None)  # the connection is back in the pool
        d = agent.request(b"GET", url + b"2")  # on the pooled connection: written right here
        written = time.time()
        time.sleep(0.3)  # ...and the rest of this reactor turn is slow
        body = await _body(await maybe_deferred_to_future(d))
    finally:
        await maybe_deferred_to_future(pool.closeCachedConnections())
    assert body == b"ok"
    assert len(server.arrivals) == 2
    assert server.arrivals[1] - written < 0.15, server.arrivals[1] - written


#: The crawler's own settings, as a project crawl has them.
PROJECT = {k: getattr(project_settings, k) for k in dir(project_settings) if k.isupper()}


@pytest.mark.parametrize(("scheme", "proxied"), [
    ("http", False), ("http", True), ("https", False), ("https", True),
], ids=["http", "http-proxy", "https", "https-connect"])
@pytest_twisted.ensureDeferred
async def test_the_handler_sends_a_written_request_at_once_over_tls_and_proxies_too(
        scheme: str, proxied: bool, tmp_path: Path) -> None:
    """Over HTTPS the request passes through Twisted's TLS layer, which holds
    small writes for the reactor's next turn (and, through a CONNECT proxy,
    sits on the tunnel's TCP transport); it must reach the server during the
    slow turn all the same, as plain HTTP does, directly or through a proxy."""
    tls = TestCA(tmp_path).server_context(["a.test"], ["127.0.0.1"]) if scheme == "https" else None
    with serving(tls) as server, LoopbackProxy() as proxy:
        url = f"{scheme}://127.0.0.1:{server.port}/"
        meta = {"proxy": proxy.url} if proxied else {}
        handler = CountedHTTP11DownloadHandler(get_crawler(settings_dict=PROJECT))
        try:
            requests = [Request(url + "1", meta=dict(meta)), Request(url + "2", meta=dict(meta))]
            first = await handler.download_request(requests[0])
            await deferLater(reactor, 0.05, lambda: None)  # the connection is back in the pool
            # On the pooled connection: written right here...
            written = time.time()
            d = deferred_from_coro(handler.download_request(requests[1]))
            time.sleep(0.3)  # ...and the rest of this reactor turn is slow
            second = await maybe_deferred_to_future(d)
        finally:
            await handler.close()
    assert first.body == second.body == b"ok"
    assert (server.connections, len(server.arrivals)) == (1, 2)  # one connection, reused
    through = {"http": f"GET {url}1", "https": f"CONNECT 127.0.0.1:{server.port}"}[scheme]
    assert proxy.seen == ([f"{through} HTTP/1.1".encode()] if proxied else [])
    assert server.arrivals[1] - written < 0.15, server.arrivals[1] - written
    # The archive's view of both: the heads as they went over the wire.
    target = url if proxied and scheme == "http" else "/"
    for n, request in enumerate(requests, 1):
        tap = tap_of(request)
        assert tap is not None and tap.head == ANSWER.removesuffix(b"ok")
        assert tap.sent.startswith(f"GET {target}{n} HTTP/1.1\r\n".encode())
        assert tap.sent.endswith(b"\r\n\r\n")


class OneShotServer(KeepAliveServer):
    """Answers one request per connection: as HTTP/1.0 (no ``Connection``
    header) and leaves the connection open, or as kept-alive HTTP/1.1 and
    closes the connection ``close_after`` seconds later, while it is idle."""

    def __init__(self, answer: bytes, close_after: float | None = None) -> None:
        super().__init__()
        self.answer = answer
        self.close_after = close_after
        self.heads: list[bytes] = []

    def _accepted(self, conn: socket.socket) -> None:
        threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            buffered = b""
            while chunk := conn.recv(65536):
                buffered += chunk
                if b"\r\n\r\n" not in buffered:
                    continue
                head, buffered = buffered.split(b"\r\n\r\n", 1)
                self.heads.append(head.split(b"\r\n", 1)[0])
                conn.sendall(self.answer)
                if self.close_after is not None:
                    time.sleep(self.close_after)
                    return


def one_shot(answer: bytes, close_after: float | None = None
             ) -> contextlib.AbstractContextManager[Any]:  # an OneShotServer
    return serving(server=OneShotServer(answer, close_after))


def _counting_crawler() -> Crawler:
    crawler = get_crawler(settings_dict=PROJECT)
    crawler.stats.open_spider()
    return crawler


@pytest.mark.parametrize("answer", [
    b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.0 204 No Content\r\n\r\n",
], ids=["body", "no-body"])
@pytest_twisted.ensureDeferred
async def test_an_http_1_0_answer_s_connection_is_not_kept_for_the_next_request(
        answer: bytes) -> None:
    """RFC 9112 9.3: an HTTP/1.0 answer without keep-alive ends its
    connection. The server here leaves it open, so only the client's
    choice decides: a second request on it would get no answer."""
    with one_shot(answer) as server:
        url = f"http://127.0.0.1:{server.port}/"
        handler = CountedHTTP11DownloadHandler(_counting_crawler())
        try:
            first = await handler.download_request(Request(url + "1"))
            await deferLater(reactor, 0.05, lambda: None)
            second = await handler.download_request(Request(url + "2"))
        finally:
            await handler.close()
    assert first.status == second.status
    assert server.heads == [b"GET /1 HTTP/1.1", b"GET /2 HTTP/1.1"]
    assert server.connections == 2


@pytest_twisted.ensureDeferred
async def test_a_pooled_connection_the_server_closed_under_a_stalled_reactor_is_not_used(
        ) -> None:
    """The server closes the idle connection while the reactor is busy, so
    the pool has not heard of it; the next request must not be written on it
    (it would fail, and count against a healthy host)."""
    crawler = _counting_crawler()
    with one_shot(ANSWER, close_after=0.1) as server:
        url = f"http://127.0.0.1:{server.port}/"
        handler = CountedHTTP11DownloadHandler(crawler)
        try:
            first = await handler.download_request(Request(url + "1"))
            await deferLater(reactor, 0.02, lambda: None)  # the connection is back in the pool
            time.sleep(0.4)  # a stalled reactor: the server's close arrives unread
            second = await handler.download_request(Request(url + "2"))
        finally:
            await handler.close()
    assert first.body == second.body == b"ok"
    assert server.heads == [b"GET /1 HTTP/1.1", b"GET /2 HTTP/1.1"]
    assert server.connections == 2
    assert crawler.stats.get_value("downloader/closed_connections_skipped") == 1


@pytest.mark.parametrize("change", ["no _BypassTLS", "TLS layer without aggregator"])
def test_the_handler_refuses_to_start_on_a_twisted_whose_tls_internals_it_does_not_know(
        change: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What another Twisted release might do to the internals the handler
    reaches into (through crawler.compat); it must fail at start-up, not send
    HTTPS requests late. (The crawler is made first: its extensions would
    refuse already, tests/test_compat.py.)"""
    crawler = get_crawler(settings_dict=PROJECT)
    if change == "no _BypassTLS":
        monkeypatch.delattr(_newtls, "_BypassTLS")
    else:  # a TLS factory building the plain layer, without _aggregator
        monkeypatch.setattr(TLSMemoryBIOFactory, "protocol", TLSMemoryBIOProtocol)
    with pytest.raises(CompatibilityError, match=rf"Twisted {re.escape(twisted.__version__)}\b"):
        CountedHTTP11DownloadHandler(crawler)
