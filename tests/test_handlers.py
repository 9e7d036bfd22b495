"""The download handler's connection pool: a request leaves when it is written.

Twisted sends what a protocol writes only when the reactor next polls the
socket, after every other callback of the turn; the handler sends a request
at once instead (``crawler.handlers._SentAtOnce``), so a slow callback right
after the start gate cannot hold a request that is on time. The connect
timeout and the stale-turn check have crawl tests (``tests/test_retry_crawl.py``,
``tests/test_frontier_soak_fixes.py``).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator

import pytest
import pytest_twisted
from scrapy import Request
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.test import get_crawler
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import Protocol
from twisted.internet.task import deferLater
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.iweb import IResponse

from crawler.handlers import _GatedPool

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
def serving(tls: ssl.SSLContext | None = None) -> Iterator[KeepAliveServer]:
    srv = KeepAliveServer(tls)
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

