"""A tiny web for the head-of-line benchmark: one slow host among fast ones.

The simulated web in ``tests/simweb`` has no host that is merely slow (and
it belongs to the tests), so this is a minimal stand-in: an asyncio HTTP/1.1
server on 127.0.0.1 that a crawl uses as its forward proxy (``http_proxy``),
answering every host itself and never opening a connection anywhere. Each
host has ``pages`` pages (``/`` and ``/p/1`` ...), every page linking to all
pages of its host, so a crawl from the roots finds them all at depth 1. The
slow host answers each request after ``slow_seconds``; the others at once
(or after ``fast_seconds``).

It records a ledger (host, path, arrival, done; ``time.monotonic()`` of this
process) so the benchmark measures what the *server* saw, not what the
crawler believes it did.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Self
from urllib.parse import urlsplit

SLOW_HOST = "slow.test"
#: The registered domain of the many slow names (``slow_names``).
SLOW_DOMAIN = "big.test"


@dataclass(slots=True)
class Hit:
    """One request as the server saw it."""

    host: str
    path: str
    arrival: float
    done: float | None = None
    status: int = 0


class HolWeb:
    """The slow host (optional) plus ``n_fast`` instant hosts, in a background thread.

    ``slow_names=N``: instead of the slow host, N slow names of one registered
    domain (``n0000.big.test`` ...), one page each (no links): many names on
    one organisation's servers, each a host of its own to a scheduler that
    knows only hosts. ``loaded=N``: N more hosts (``busy000.test`` ...) that
    answer in ``load_seconds`` times the requests they have open: a server
    that slows down as it is asked more at once.
    """

    def __init__(self, n_fast: int = 50, pages: int = 8, slow_seconds: float = 2.0,
                 with_slow: bool = True, fast_seconds: float = 0.0,
                 slow_names: int = 0, loaded: int = 0, load_seconds: float = 0.2) -> None:
        self.n_fast = n_fast
        self.pages = pages
        self.slow_seconds = slow_seconds
        self.fast_seconds = fast_seconds
        self.with_slow = with_slow
        self.fast_hosts = [f"fast{i:03d}.test" for i in range(n_fast)]
        slow = [f"n{i:04d}.{SLOW_DOMAIN}" for i in range(slow_names)] or [SLOW_HOST]
        self.slow_hosts = set(slow) if with_slow else set()
        #: Hosts that slow down under load: each answer takes ``load_seconds``
        #: times the requests the host has open when it arrives (itself too).
        self.loaded_hosts = [f"busy{i:03d}.test" for i in range(loaded)]
        self.load_seconds = load_seconds
        self._open: dict[str, int] = {}
        self.hosts = {*self.fast_hosts, *self.slow_hosts, *self.loaded_hosts}
        self.hits: list[Hit] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()
        self.port = 0

    # ----------------------------------------------------------------- the web

    def seeds(self) -> list[str]:
        """All the slow host's pages first, then the fast hosts' roots.

        Seeding every slow page up front puts 8 slow requests at the head of
        the line from the first second, while the fast hosts are still being
        discovered; seeding only the slow root would let the fast hosts finish
        before the slow host's other pages were even known.
        """
        if SLOW_HOST in self.slow_hosts:
            slow = [f"http://{SLOW_HOST}{p}" for p in self.paths()]
        else:
            slow = [f"http://{h}/" for h in sorted(self.slow_hosts)]
        loaded = [f"http://{h}/" for h in self.loaded_hosts]
        return slow + loaded + [f"http://{h}/" for h in self.fast_hosts]

    def paths(self) -> list[str]:
        return ["/"] + [f"/p/{k}" for k in range(1, self.pages)]

    def body(self) -> bytes:
        links = "".join(f'<li><a href="{p}">page {p}</a></li>' for p in self.paths())
        return (f"<!doctype html><html><head><title>bench</title></head>"
                f"<body><ul>{links}</ul></body></html>").encode()

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ----------------------------------------------------------------- lifecycle

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._run, name="holweb", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("holweb did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        self._server = loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=256))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    # ----------------------------------------------------------------- HTTP

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _wait(self, host: str) -> None:
        """How long this host takes to answer (the request is counted open)."""
        if host in self.slow_hosts:
            await asyncio.sleep(self.slow_seconds)
        elif host in self.loaded_hosts:
            await asyncio.sleep(self.load_seconds * self._open[host])
        elif self.fast_seconds:
            await asyncio.sleep(self.fast_seconds)

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        line = await reader.readline()
        if not line.strip():
            return False
        headers: dict[str, str] = {}
        while True:
            raw = await reader.readline()
            if raw in (b"\r\n", b"\n", b""):
                break
            name, _, value = raw.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        parts = line.decode("latin-1").split()
        target = parts[1] if len(parts) >= 2 else "/"
        if target.startswith("/"):
            host, path = headers.get("host", "").split(":")[0].lower(), target
        else:
            split = urlsplit(target)
            host = (split.hostname or "").lower()
            path = (split.path or "/") + (f"?{split.query}" if split.query else "")
        hit = Hit(host, path, time.monotonic())
        self.hits.append(hit)
        self._open[host] = self._open.get(host, 0) + 1
        try:
            await self._wait(host)
        finally:
            self._open[host] -= 1
        if host in self.slow_hosts and host != SLOW_HOST and path == "/":
            status, body = 200, b"<!doctype html><title>one of many</title>"
        elif host in self.hosts and path in self.paths():
            status, body = 200, self.body()
        else:
            status, body = 404, b"not found\n"
        keep = "close" not in headers.get("connection", "").lower() and \
            "close" not in headers.get("proxy-connection", "").lower()
        head = (f"HTTP/1.1 {status} {'OK' if status == 200 else 'Not Found'}\r\n"
                f"Content-Type: text/html; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
                f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n").encode()
        writer.write(head + body)
        await writer.drain()
        hit.done = time.monotonic()
        hit.status = status
        return keep


def max_in_flight(hits: list[Hit], host: str) -> int:
    """Most requests to ``host`` (or, with a leading dot, to any name under it)
    open at once ([arrival, done); an end before a start)."""
    events: list[tuple[float, int]] = []
    end = max((h.done or h.arrival for h in hits), default=0.0)
    for h in hits:
        if h.host == host or (host.startswith(".") and h.host.endswith(host)):
            events += [(h.arrival, 1), (h.done if h.done is not None else end, -1)]
    events.sort()
    best = current = 0
    for _, delta in events:
        current += delta
        best = max(best, current)
    return best
