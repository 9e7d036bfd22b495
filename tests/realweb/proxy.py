"""A forwarding HTTP proxy on 127.0.0.1 for tests, to loopback destinations only.

It does the two things a crawler asks of a proxy: ``CONNECT host:port``
opens a tunnel (what HTTPS through a proxy uses; the TLS inside it is the
client's and the server's), and an absolute-form request (``GET
http://host:port/path``) is forwarded to that host. Either way the proxy
then relays bytes unchanged in both directions until one side closes, so a
keep-alive connection to the proxy stays tied to its first destination,
as it does through a real proxy for one host. A destination that is not a
loopback address (127.0.0.0/8, ``::1``; names are not resolved) is refused
with 403: nothing sent through it can leave the machine.

The first request line of every client connection is kept
(:attr:`LoopbackProxy.seen`), so a test can check that it went through.

>>> with LoopbackProxy() as proxy:
...     proxy.url   # "http://127.0.0.1:PORT", what Request.meta["proxy"] takes
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit

_HEAD_MAX = 65536
_TIMEOUT_S = 10.0


class LoopbackProxy:
    """An HTTP proxy in threads of the test process; one thread per direction of a connection."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        #: The first request line of each client connection, as received.
        self.seen: list[bytes] = []
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting and close every connection still open."""
        _end(self._sock)  # a blocked accept() wakes up on shutdown, not on close
        with self._lock:
            for sock in self._open:
                _end(sock)
            self._open.clear()
        self._thread.join(_TIMEOUT_S)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:  # stopped
                return
            self._track(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.add(sock)

    def _close(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)
        sock.close()

    def _serve(self, client: socket.socket) -> None:
        try:
            head, rest = _read_head(client)
            line = head.split(b"\r\n", 1)[0]
            self.seen.append(line)
            target, forward = _destination(line, head, rest)
            if target is None:
                client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            upstream = socket.create_connection(target, timeout=_TIMEOUT_S)
        except OSError:
            self._close(client)
            return
        self._track(upstream)
        try:
            if line.startswith(b"CONNECT "):
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            upstream.sendall(forward)
            back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
            back.start()
            _pipe(client, upstream)
            back.join(_TIMEOUT_S)
        except OSError:
            pass
        finally:
            self._close(upstream)
            self._close(client)


def _end(sock: socket.socket) -> None:
    """Close ``sock``, waking any thread blocked on it."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """The request head (without its blank line) and whatever came after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk or len(data) > _HEAD_MAX:
            raise ConnectionError("no request head")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    return head, rest


def _destination(line: bytes, head: bytes, rest: bytes
                 ) -> tuple[tuple[str, int] | None, bytes]:
    """Where a request goes, (None if not to loopback), and what to send there first."""
    method, target, _ = line.split(b" ", 2)
    if method == b"CONNECT":
        host, _, port = target.decode("ascii").rpartition(":")
        forward = rest
    else:
        url = urlsplit(target.decode("ascii"))
        host, port = url.hostname or "", str(url.port or 80)
        forward = head + b"\r\n\r\n" + rest
    try:
        if not ipaddress.ip_address(host.strip("[]")).is_loopback:
            return None, b""
    except ValueError:  # a name: never resolved here
        return None, b""
    return (host.strip("[]"), int(port)), forward


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends, then end ``dst``'s direction too."""
    try:
        while chunk := src.recv(65536):
            dst.sendall(chunk)
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass
