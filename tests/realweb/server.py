"""The hosts' HTTP and HTTPS servers, on raw asyncio streams, and the request ledger.

One listener per (address, scheme); each knows the hosts on its address and
picks one by the Host header (a name not served there gets 421), and, for
HTTPS, by SNI: the ClientHello's name chooses that host's certificate (no
SNI, or an unknown name: the address's first host's certificate, as a real
server's default site). Request heads are read by :mod:`~tests.realweb.wire`
so the ledger keeps each request-target exactly as it arrived.

The ledger has one dict per request (see :mod:`~tests.realweb.ledger`):
appended when the head is complete (``arrival``), completed in place when
the response was fully written (``done``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import ssl
import sys
import time
import traceback
import weakref
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from . import content
from .layout import Layout
from .listen import Sockets
from .spec import Host, Web
from .tls import TestCA
from .wire import MAX_LINE, BadRequest, Head, read_body, read_head, response_head

IDLE_TIMEOUT = 60.0
CHUNK = 64 * 1024
LINGER = 1.0

Entry = dict[str, Any]


@dataclass
class Listener:
    """One listening socket: its address and scheme, and the hosts on that address."""

    address: str
    port: int
    scheme: str
    hosts: dict[str, Host]  # every name on this address -> its host
    default: Host | None  # the first host on the address serving this scheme


def host_of(header: str | None) -> str | None:
    """The name in a Host header (or authority), lower-case, without port or brackets."""
    if header is None:
        return None
    text = header.strip().lower()
    if text.startswith("["):
        return text[1:].partition("]")[0]
    return (text.rpartition(":")[0] if ":" in text else text).rstrip(".")


def _absolute_form(target: bytes) -> tuple[str, bytes] | None:
    """(authority, rest) of an absolute-form target ``http://a.test/x``, else None."""
    lower = target[:8].lower()
    for prefix in (b"http://", b"https://"):
        if lower.startswith(prefix):
            rest = target[len(prefix):]
            cut = min((i for i in (rest.find(b"/"), rest.find(b"?")) if i >= 0),
                      default=len(rest))
            return rest[:cut].decode("latin-1"), rest[cut:] or b"/"
    return None


class RealWebServer:
    """Serves ``web`` on the sockets ``bind_web`` made, with certificates from ``ca``."""

    def __init__(self, web: Web, layout: Layout, sockets: Sockets, ca: TestCA) -> None:
        self.web = web
        self.layout = layout
        self.ca = ca
        self.ledger: list[Entry] = []
        self.handshakes: list[Entry] = []
        self._sockets = sockets
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight: Counter[str] = Counter()
        self._ids = itertools.count(1)
        self._conns = itertools.count(1)
        self._sni: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._certs: dict[str, tuple[Path, Path]] = {}
        self._contexts: dict[str, ssl.SSLContext] = {}

    # ---------------------------------------------------------------- TLS

    def _cert(self, host: Host) -> tuple[Path, Path]:
        """The host's certificate: all its names and all its addresses."""
        if host.name not in self._certs:
            place = self.layout.place(host.name)
            self._certs[host.name] = self.ca.issue(list(host.names), list(place.addresses))
        return self._certs[host.name]

    def _context(self, host: Host) -> ssl.SSLContext:
        if host.name not in self._contexts:
            self._contexts[host.name] = self._new_context(host)
        return self._contexts[host.name]

    def _new_context(self, host: Host) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*self._cert(host))
        context.set_alpn_protocols(["http/1.1"])
        return context

    def _listener_context(self, listener: Listener) -> ssl.SSLContext:
        """The default host's certificate, switched per connection by SNI."""
        assert listener.default is not None
        context = self._new_context(listener.default)

        def on_sni(ssl_object: Any, name: str | None, _: ssl.SSLContext) -> None:
            self._sni[ssl_object] = name or ""
            self.handshakes.append({"at": time.time(), "sni": name,
                                    "address": listener.address, "port": listener.port})
            host = listener.hosts.get(name.lower()) if name else None
            if host is not None and host.https:
                ssl_object.context = self._context(host)

        context.sni_callback = on_sni
        return context

    # ---------------------------------------------------------- lifecycle

    def listeners(self) -> list[Listener]:
        found = []
        for (address, scheme), sock in self._sockets.items():
            hosts = [self.web.host(p.name) for p in self.layout.places if address in p.addresses]
            on_address = [h for h in hosts if h is not None]
            serving = [h for h in on_address if getattr(h, scheme)]
            found.append(Listener(address, sock.getsockname()[1], scheme,
                                  {n: h for h in on_address for n in h.names},
                                  serving[0] if serving else None))
        return found

    async def start(self) -> None:
        for host in self.web.hosts:  # every certificate now, not during a handshake
            if host.https:
                self._context(host)
        for listener in self.listeners():
            sock = self._sockets[(listener.address, listener.scheme)]
            context = self._listener_context(listener) if listener.scheme == "https" else None
            self._servers.append(await asyncio.start_server(
                partial(self._handle, listener), sock=sock, ssl=context, limit=MAX_LINE,
                ssl_handshake_timeout=10.0 if context else None))

    async def close(self) -> None:
        """Stop listening, cancel every connection, and wait for them."""
        for server in self._servers:
            server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()

    def reset(self) -> None:
        self.ledger.clear()
        self.handshakes.clear()

    @property
    def open_connections(self) -> int:
        return len(self._tasks)

    # -------------------------------------------------------- connections

    async def _handle(self, listener: Listener, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        _no_delay(writer)
        conn = {"conn": next(self._conns), "scheme": listener.scheme,
                "sni": self._sni.get(writer.get_extra_info("ssl_object"))
                if listener.scheme == "https" else None,
                "local": writer.get_extra_info("sockname"),
                "remote": writer.get_extra_info("peername")}
        try:
            while True:
                try:
                    head = await read_head(reader, IDLE_TIMEOUT)
                except BadRequest as exc:
                    await self._refuse(reader, writer, conn, exc)
                    return
                if head is None or not await self._exchange(listener, conn, head,
                                                            reader, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, ssl.SSLError):
            pass
        except asyncio.CancelledError:
            pass  # only close() cancels; ending quietly keeps asyncio from logging it
        except Exception:  # one connection must never take the web down
            traceback.print_exc(file=sys.stderr)
        finally:
            self._tasks.discard(task)
            writer.close()

    def _open_entry(self, conn: dict[str, Any], head: Head | None, line: bytes | None,
                    host: str | None) -> Entry:
        local, remote = conn["local"], conn["remote"]
        entry: Entry = {
            "id": next(self._ids), "conn": conn["conn"], "arrival": time.time(), "done": None,
            "scheme": conn["scheme"], "sni": conn["sni"],
            "host_header": head.header("host") if head else None, "host": host,
            "local_address": local[0], "local_port": local[1],
            "remote_address": remote[0], "remote_port": remote[1],
            "target": (head.target if head else line or b"").decode("latin-1"),
            "method": head.method if head else None,
            "version": head.version if head else None,
            "user_agent": head.header("user-agent") if head else None,
            "if_none_match": head.header("if-none-match") if head else None,
            "if_modified_since": head.header("if-modified-since") if head else None,
            "request_head": head.raw.decode("latin-1") if head else None,
            "response_head": None,
            "in_flight": None, "status": None, "body_bytes": 0, "served_by": None, "outcome": None,
        }
        self.ledger.append(entry)
        return entry

    async def _exchange(self, listener: Listener, conn: dict[str, Any], head: Head,
                        reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; whether the connection stays open."""
        hosts = head.all("host")
        route = head.target
        name = host_of(hosts[0]) if len(hosts) == 1 else None
        absolute = _absolute_form(head.target)
        if absolute is not None:  # RFC 9112 3.2.2: the target's authority wins
            name, route = host_of(absolute[0]), absolute[1]
        entry = self._open_entry(conn, head, None, name)
        key = name or ""
        self._in_flight[key] += 1
        entry["in_flight"] = self._in_flight[key]
        try:
            if len(hosts) > 1 or (not hosts and head.version == "HTTP/1.1"):
                raise BadRequest(400, "HTTP/1.1 needs exactly one Host header", head.line)
            await read_body(reader, head)
            answer, delay, host = self._choose(listener, name, head, route)
            entry["served_by"] = host.name if host else None
            if delay:
                await asyncio.sleep(delay)
            keep = head.keep_alive
            await self._send(writer, entry, answer, keep, head.method == "HEAD")
            entry["outcome"] = "ok"
            return keep
        except BadRequest as exc:
            entry["outcome"] = "bad-request"
            await self._refuse(reader, writer, conn, exc, entry)
            return False
        finally:
            self._in_flight[key] -= 1
            if entry["done"] is None:
                entry["done"] = time.time()
                entry["outcome"] = entry["outcome"] or "client-closed"

    def _choose(self, listener: Listener, name: str | None, head: Head, route: bytes
                ) -> tuple[content.Answer, float, Host | None]:
        """What to answer: (answer, delay before it, the host that answered)."""
        host = listener.hosts.get(name) if name else None
        if host is None and name in (None, listener.address):
            host = listener.default
        if host is None or not getattr(host, listener.scheme):
            return content.misdirected(name, listener.address), 0.0, None
        if head.method not in ("GET", "HEAD"):
            refused = content.Answer(405, (("Allow", "GET, HEAD"),), b"method not allowed\n")
            return refused, 0.0, host
        page = host.find(listener.scheme, route)
        if page is None:
            return content.not_found(), 0.0, host
        answer = (content.not_modified(page, head)
                  or content.render(page, self.layout, host=name or host.name, target=route))
        return answer, page.delay, host

    async def _send(self, writer: asyncio.StreamWriter, entry: Entry, answer: content.Answer,
                    keep: bool, head_only: bool) -> None:
        entry["status"] = answer.status
        head = response_head(answer.status, answer.headers, length=len(answer.body),
                             keep_alive=keep, verbatim=answer.verbatim)
        entry["response_head"] = head.decode("latin-1")
        writer.write(head)
        if not head_only:
            for start in range(0, len(answer.body), CHUNK):
                if writer.is_closing():
                    raise ConnectionResetError("client went away")
                writer.write(answer.body[start:start + CHUNK])
                await writer.drain()
                entry["body_bytes"] += min(CHUNK, len(answer.body) - start)
        await writer.drain()
        entry["done"] = time.time()

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      conn: dict[str, Any], exc: BadRequest, entry: Entry | None = None) -> None:
        """Answer a request that cannot be served, recording it, then close gracefully
        (send FIN and drain briefly: closing with unread input would send RST)."""
        if entry is None:
            entry = self._open_entry(conn, None, exc.line, None)
            entry["outcome"] = "bad-request"
        body = f"{exc.status} {exc}\n".encode()
        with contextlib.suppress(ConnectionError, TimeoutError, ValueError, ssl.SSLError):
            await self._send(writer, entry, content.Answer(
                exc.status, (("Content-Type", "text/plain"),), body), False, False)
            if writer.can_write_eof():
                writer.write_eof()
            async with asyncio.timeout(LINGER):
                while await reader.read(CHUNK):
                    pass
        if entry["done"] is None:
            entry["done"] = time.time()


def _no_delay(writer: asyncio.StreamWriter) -> None:
    """Send small writes at once (TCP_NODELAY), as web servers do (nginx's tcp_nodelay).

    asyncio sets it only on sockets made with proto IPPROTO_TCP, and the
    listeners here are made with proto 0: without it a keep-alive response's
    body waits behind the unacknowledged head for the client's delayed ACK
    (40 ms on Linux), and every crawl of this web would look 40 ms slow.
    """
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
