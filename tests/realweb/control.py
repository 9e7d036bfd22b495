"""The web's control endpoint, on 127.0.0.1 and a port of its own (JSON over HTTP).

Kept apart from the hosts' listeners so that reading the ledger never shows
up in it, and never competes with a host's name or address.

=========================  =====================================================
``GET /layout``            every host's names, addresses, and the two ports
``GET /ledger``            the request ledger (see ``ledger.py``)
``GET /tls``               every TLS ClientHello seen: time, SNI, address, port
``GET /dns``               every DNS question: name, type, time
``GET /health``            {"ok", "requests", "open_connections"}
``POST /reset``            forget ledger, handshakes and DNS questions
``POST /dns``              {"name", "entry": Name fields}: add or change a record
``POST /page``             {"host", "target" (latin-1), "page": Page fields or
                           null to remove, "scheme": null or "http" (http_pages)}
=========================  =====================================================
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import asdict
from typing import Any

from .dns import Name, TestDNS
from .listen import listening_socket
from .server import RealWebServer
from .spec import Page
from .wire import MAX_LINE, BadRequest, Head, read_body, read_head, response_head


class ControlServer:
    """Answers the control API for ``web`` (its server) and ``dns``."""

    def __init__(self, web: RealWebServer, dns: TestDNS) -> None:
        self.web = web
        self.dns = dns
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        sock = listening_socket("127.0.0.1", 0)
        self._server = await asyncio.start_server(self._handle, sock=sock, limit=MAX_LINE)
        return int(sock.getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (head := await read_head(reader, 60.0)) is not None:
                body = await read_body(reader, head, limit=64 * 1024 * 1024)
                try:
                    status, payload = 200, self.answer(head, body)
                except (KeyError, ValueError, TypeError) as exc:
                    status, payload = 400, {"error": f"{type(exc).__name__}: {exc}"}
                if payload is None:
                    status, payload = 404, {"error": "unknown control path"}
                data = json.dumps(payload).encode()
                writer.write(response_head(status, [("Content-Type", "application/json")],
                                           length=len(data), keep_alive=head.keep_alive)
                             + data)
                await writer.drain()
                if not head.keep_alive:
                    break
        except (BadRequest, ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            with contextlib.suppress(ConnectionError):
                writer.close()

    def answer(self, head: Head, body: bytes) -> Any:
        """The JSON payload for one control request (None: no such path)."""
        route = (head.method, head.target.split(b"?", 1)[0].decode("latin-1"))
        web = self.web
        if route == ("GET", "/layout"):
            return json.loads(web.layout.to_json())
        if route == ("GET", "/ledger"):
            return web.ledger
        if route == ("GET", "/tls"):
            return web.handshakes
        if route == ("GET", "/dns"):
            return [asdict(q) for q in self.dns.questions()]
        if route == ("GET", "/health"):
            return {"ok": True, "requests": len(web.ledger),
                    "open_connections": web.open_connections}
        if route == ("POST", "/reset"):
            web.reset()
            self.dns.asked.clear()
            return {"ok": True}
        if route == ("POST", "/dns"):
            request = json.loads(body)
            self.dns.set(request["name"], Name(**request["entry"]))
            return {"ok": True}
        if route == ("POST", "/page"):
            return self._set_page(json.loads(body))
        return None

    def _set_page(self, request: dict[str, Any]) -> Any:
        host = self.web.web.host(request["host"])
        if host is None:
            raise KeyError(f"no host {request['host']}")
        pages = host.http_pages if request.get("scheme") == "http" else host.pages
        target = request["target"].encode("latin-1")
        if request["page"] is None:
            pages.pop(target, None)
        else:
            pages[target] = Page.from_dict(request["page"])
        return {"ok": True}
