"""The ``/metrics`` HTTP endpoint, on the first free port of a range.

Several workers on one machine (scrapyd runs one process per job) share one
``PROMETHEUS_PORT`` setting; a range such as ``9410-9430`` gives each the
first port nobody holds, and the worker logs (and, if asked, writes into a
file-based service discovery folder) where it listens.

The server is a threading :mod:`wsgiref` server of our own rather than
prometheus_client's ``start_http_server``: that one takes TLS options but
no WSGI app, and basic auth (:mod:`crawler.metrics.auth`) has to wrap the
app. With TLS, each connection is wrapped as it is accepted and its
handshake runs in that connection's thread, under a timeout: a client that
stalls in the handshake (or speaks plain HTTP) holds up nobody else.
"""

from __future__ import annotations

import errno
import logging
import socket
import ssl
import threading
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import make_wsgi_app
from prometheus_client.registry import CollectorRegistry

from crawler.metrics.auth import Credentials, require_basic_auth

if TYPE_CHECKING:
    from wsgiref.types import WSGIApplication

logger = logging.getLogger(__name__)

#: Seconds a connection may take for its TLS handshake, and then per read or write.
CONNECTION_TIMEOUT = 10.0


class NoFreePort(OSError):
    """Every port of the range is taken."""


def parse_ports(value: str | int) -> range:
    """``9410`` or ``"9410-9430"`` (inclusive) as a range; ``0``: any free port."""
    text = str(value).strip()
    first, _, last = text.partition("-")
    try:
        low = int(first)
        high = int(last) if last else low
    except ValueError:
        raise ValueError(f"PROMETHEUS_PORT must be a port or a range like 9410-9430: {value!r}"
                         ) from None
    if not (0 <= low <= high <= 65535):
        raise ValueError(f"PROMETHEUS_PORT out of range: {value!r}")
    return range(low, high + 1)


class _Handler(WSGIRequestHandler):
    """One connection: the TLS handshake (if any) first, and no access log."""

    timeout = CONNECTION_TIMEOUT

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            # Before super().setup() opens its files: a failed handshake leaves
            # only the socket, which the server closes.
            self.request.settimeout(self.timeout)
            self.request.do_handshake()
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every few seconds would flood the crawl's log."""


class MetricsServer(ThreadingMixIn, WSGIServer):
    """A thread per connection, optionally TLS; serves ``app``."""

    daemon_threads = True  # a scrape in progress does not hold up the crawl's exit

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily,
                 app: WSGIApplication, tls: ssl.SSLContext | None) -> None:
        self.address_family = family  # read by TCPServer.__init__ to make the socket
        self.tls = tls
        super().__init__(address, _Handler)
        self.set_app(app)

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = super().get_request()
        if self.tls is None:
            return conn, address
        try:
            return self.tls.wrap_socket(conn, server_side=True,
                                        do_handshake_on_connect=False), address
        except OSError:
            conn.close()
            raise

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A refused handshake or a client gone mid-answer is the client's affair:
        no traceback on the crawl's stderr."""
        logger.debug("Metrics: connection from %s failed", client_address, exc_info=True)


def serve(registry: CollectorRegistry, host: str, ports: range, *,
          tls: ssl.SSLContext | None = None, credentials: Credentials | None = None
          ) -> tuple[WSGIServer, threading.Thread, int]:
    """Serve ``registry`` on the first free port of ``ports``, over TLS with ``tls``
    and behind basic auth with ``credentials``; return the server, its thread
    and the port."""
    app = make_wsgi_app(registry)
    if credentials is not None:
        app = require_basic_auth(app, credentials)
    return serve_app(app, host, ports, tls=tls, name="metrics")


def serve_app(app: WSGIApplication, host: str, ports: range, *,
              tls: ssl.SSLContext | None = None, name: str = "metrics"
              ) -> tuple[WSGIServer, threading.Thread, int]:
    """Serve a WSGI ``app`` on the first free port of ``ports`` (over TLS with
    ``tls``) in a thread; return the server, its thread and the port."""
    # The family of the address (IPv4 or IPv6), as http.server does it.
    family, _, _, _, sockaddr = socket.getaddrinfo(
        host or None, ports.start, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    for port in ports:
        try:
            server = MetricsServer((sockaddr[0], port), family, app, tls)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                continue
            raise
        thread = threading.Thread(target=server.serve_forever, daemon=True,
                                  name=f"{name}:{server.server_address[1]}")
        thread.start()
        return server, thread, server.server_address[1]
    raise NoFreePort(errno.EADDRINUSE,
                     f"no free port for {name} on {host} in {ports.start}-{ports.stop - 1}")


def stop(server: WSGIServer, thread: threading.Thread) -> None:
    """Stop accepting, close the socket and wait (a little) for the thread."""
    server.shutdown()
    server.server_close()
    thread.join(5)
