"""A proxy that is every web server itself, for crawling the URL test suite.

The web-platform-tests URL cases name hosts no test can own (``example.org``,
``192.168.0.1``, ``[2001::1]``), so a crawl of them goes through this proxy,
on 127.0.0.1, which answers every request itself and keeps its target
exactly as received: the absolute-form target of a proxied ``http`` request,
or ``https://`` + the ``CONNECT`` authority + the origin-form target of a
request inside a tunnel (TLS with a certificate of the test CA for that
name). Pages it was given are served as HTML; ``/robots.txt`` is 404; any
other target gets a short text/plain answer, which has no links.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from pathlib import Path
from types import TracebackType
from typing import Self

from tests.realweb.tls import TestCA

_HEAD_MAX = 256 * 1024
_TIMEOUT_S = 10.0


class SuiteWeb:
    """The proxy, in threads of the test process (one per connection)."""

    def __init__(self, pages: dict[str, bytes], ca_folder: Path) -> None:
        #: The HTML of each page, by the URL the crawler requests it as.
        self.pages = pages
        self._ca = TestCA(ca_folder)
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        #: Every request target received, in order, as described above.
        self.targets: list[str] = []
        self._lock = threading.Lock()
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(_TIMEOUT_S)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(_TIMEOUT_S)
        try:
            self._answer_all(conn, origin=None)
        except (OSError, ssl.SSLError, ValueError):
            pass
        finally:
            conn.close()

    def _answer_all(self, conn: socket.socket, origin: str | None) -> None:
        """Answer requests on ``conn`` until it closes (``origin``: inside a tunnel)."""
        buffered = b""
        while True:
            head, buffered = _read_head(conn, buffered)
            if head is None:
                return
            method, target = head.split(b"\r\n", 1)[0].split(b" ")[:2]
            if method == b"CONNECT" and origin is None:
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                authority = target.decode("ascii")
                self._tunnel(conn, authority)
                return
            url = target.decode("latin-1") if origin is None else origin + target.decode("latin-1")
            with self._lock:
                self.targets.append(url)
            conn.sendall(self._response(url))

    def _tunnel(self, conn: socket.socket, authority: str) -> None:
        port = authority.rpartition(":")[2]
        shown = authority if port != "443" else authority.rpartition(":")[0]
        with self._context(authority).wrap_socket(conn, server_side=True) as tls:
            self._answer_all(tls, origin=f"https://{shown}")

    def _context(self, authority: str) -> ssl.SSLContext:
        host = authority.rpartition(":")[0].strip("[]")
        with self._lock:  # one certificate a name, issued one at a time
            if host not in self._contexts:
                names, addresses = ([], [host]) if _is_address(host) else ([host], [])
                self._contexts[host] = self._ca.server_context(names, addresses)
            return self._contexts[host]

    def _response(self, url: str) -> bytes:
        page = self.pages.get(url)
        if url.split("?")[0].endswith("/robots.txt"):
            status, kind, body = b"404 Not Found", b"text/plain", b""
        elif page is not None:
            status, kind, body = b"200 OK", b"text/html; charset=utf-8", page
        else:
            status, kind, body = b"200 OK", b"text/plain", b"ok"
        return (b"HTTP/1.1 " + status + b"\r\nContent-Type: " + kind
                + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def _read_head(conn: socket.socket, buffered: bytes) -> tuple[bytes | None, bytes]:
    while b"\r\n\r\n" not in buffered:
        if len(buffered) > _HEAD_MAX:
            raise ValueError("request head too long")
        data = conn.recv(65536)
        if not data:
            return None, b""
        buffered += data
    head, _, rest = buffered.partition(b"\r\n\r\n")
    return head, rest


def _is_address(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:
        return False
    return True
