"""Asyncio HTTP/1.1 server that plays every host of a ``Web`` at once.

Clients use it as a plain HTTP forward proxy, so requests normally carry an
absolute URI (``GET http://h00042.test/p/3 HTTP/1.1``); origin-form requests
are routed by their ``Host`` header.  It is written on raw asyncio streams
(not ``http.server``) so that hangs, resets and trickles are exact, and it
never opens an outgoing connection: every host is answered locally, and
``CONNECT`` gets 405.

Requests to the server itself (``127.0.0.1``/``localhost`` with a path
starting ``/_``) are the control API: ``/_ledger``, ``/_reset``, ``/_health``,
``/_stalls``.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import ipaddress
import itertools
import json
import math
import re
import socket
import struct
import sys
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

from .model import SLOW_SECONDS, Resource, Web
from .urls import canonical_path, split_host

MAX_LINE = 8 * 1024
MAX_HEADER_BYTES = 32 * 1024
MAX_HEADERS = 100
MAX_REQUEST_BODY = 1024 * 1024
HEADER_TIMEOUT = 30.0
LINGER_SECONDS = 2.0
CONTROL_HOSTS = frozenset({"127.0.0.1", "localhost"})
#: A request header the ledger keeps as "client": which of several crawlers sent it.
CLIENT_HEADER = "x-client-id"

_REQUEST_LINE = re.compile(r"([A-Z]{1,20}) (\S{1,8000}) HTTP/(\d)\.(\d)")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")

Entry = dict[str, Any]


class BadRequest(Exception):
    """The request cannot be parsed; answer ``status`` and close."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(slots=True)
class Request:
    method: str
    target: str
    version: tuple[int, int]
    headers: dict[str, str]  # lower-case names; the last value wins

    @property
    def keep_alive(self) -> bool:
        """HTTP/1.1 keeps the connection unless told to close; 1.0 the reverse."""
        tokens = {
            t.strip().lower()
            for name in ("connection", "proxy-connection")
            for t in self.headers.get(name, "").split(",")
        }
        if "close" in tokens:
            return False
        return self.version >= (1, 1) or "keep-alive" in tokens


@dataclass(slots=True)
class Target:
    host: str  # lower-case, port stripped
    port: int | None
    path: str  # path+query as received (fragment kept if sent)


def parse_target(req: Request) -> Target:
    """Where a request is going: absolute URI first, else the Host header."""
    raw = req.target
    if req.method == "CONNECT":
        host, _, port = raw.rpartition(":")
        return Target(split_host(host or raw), _int_or_none(port), raw)
    if raw.startswith("/"):
        host_header = req.headers.get("host")
        if not host_header:
            raise BadRequest(400, "origin-form request without Host")
        return Target(split_host(host_header), _port_of(host_header), raw)
    parts = urlsplit(raw)
    if parts.scheme.lower() != "http" or not parts.netloc:
        raise BadRequest(400, f"unsupported request target {raw[:100]!r}")
    # Keep the path exactly as sent: everything after "http://netloc".
    path = raw[len(parts.scheme) + 3 + len(parts.netloc) :]
    if not path.startswith("/"):
        path = "/" + path
    return Target(split_host(parts.netloc), _port_of(parts.netloc), path)


def _int_or_none(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def _port_of(netloc: str) -> int | None:
    hostport = netloc.rsplit("@", 1)[-1]
    if "]" in hostport:
        hostport = hostport.rsplit("]", 1)[1]
    return _int_or_none(hostport.rpartition(":")[2]) if ":" in hostport else None


async def read_request(reader: asyncio.StreamReader, idle_timeout: float) -> Request | None:
    """Read one request head (and discard a small body).  None on a clean
    end of connection; ``BadRequest`` on anything malformed."""
    try:
        async with asyncio.timeout(idle_timeout):
            line = await reader.readline()
            if line in (b"\r\n", b"\n"):  # RFC 9112: ignore one leading CRLF
                line = await reader.readline()
    except TimeoutError:
        return None
    except ValueError as exc:  # line longer than the stream limit
        raise BadRequest(414, "request line too long") from exc
    if not line.endswith(b"\n"):
        return None  # EOF (possibly mid-line): nothing to answer
    match = _REQUEST_LINE.fullmatch(line.rstrip(b"\r\n").decode("latin-1"))
    if match is None:
        raise BadRequest(400, "malformed request line")
    method, target, major, minor = match.groups()
    async with asyncio.timeout(HEADER_TIMEOUT):
        headers = await _read_headers(reader)
        await _discard_body(reader, headers)
    return Request(method, target, (int(major), int(minor)), headers)


async def _read_headers(reader: asyncio.StreamReader) -> dict[str, str]:
    headers: dict[str, str] = {}
    total = 0
    for _ in range(MAX_HEADERS + 1):
        try:
            line = await reader.readline()
        except ValueError as exc:
            raise BadRequest(431, "header line too long") from exc
        total += len(line)
        if total > MAX_HEADER_BYTES:
            raise BadRequest(431, "headers too large")
        if not line.endswith(b"\n"):
            raise asyncio.IncompleteReadError(line, None)
        text = line.rstrip(b"\r\n").decode("latin-1")
        if not text:
            return headers
        name, sep, value = text.partition(":")
        if not sep or not _TOKEN.fullmatch(name):
            raise BadRequest(400, "malformed header line")
        headers[name.lower()] = value.strip()
    raise BadRequest(431, "too many headers")


async def _discard_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> None:
    if "transfer-encoding" in headers:
        raise BadRequest(501, "request bodies with Transfer-Encoding are not supported")
    length = headers.get("content-length", "0").strip() or "0"
    if not length.isdigit():
        raise BadRequest(400, "bad Content-Length")
    if int(length) > MAX_REQUEST_BODY:
        raise BadRequest(413, "request body too large")
    if int(length):
        await reader.readexactly(int(length))


def response_head(
    status: int,
    headers: Iterable[tuple[str, str]],
    *,
    length: int,
    keep_alive: bool,
) -> bytes:
    """Status line and headers (with Content-Length, but for a 204 or 304)."""
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [
        f"HTTP/1.1 {status} {reason}",
        f"Date: {email.utils.formatdate(usegmt=True)}",
        "Server: simweb",
        *(f"{k}: {v}" for k, v in headers),
        *([f"Content-Length: {length}"] if status not in (204, 304) else []),
        f"Connection: {'keep-alive' if keep_alive else 'close'}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class LoopWatch:
    """When the server's own event loop ran late: arrival stamps taken then may be late.

    A timer due every ``every`` seconds; when it runs more than ``over``
    seconds late, the loop (or the whole process, on a busy machine) was
    not running between the timer's start and its run, so data that reached
    the socket in that window was stamped late by up to the window's length.
    ``stalls`` holds those windows as ``[start, end]`` epoch seconds.
    """

    def __init__(self, every: float = 0.01, over: float = 0.02) -> None:
        self.every = every
        self.over = over
        self.stalls: list[list[float]] = []

    async def run(self) -> None:
        while True:
            before = time.time()
            await asyncio.sleep(self.every)
            after = time.time()
            if after - before > self.every + self.over:
                self.stalls.append([round(before, 4), round(after, 4)])


class SimWebServer:
    """One listening socket on loopback answering for every host of ``web``.

    ``ledger`` holds one dict per proxied request (see the README of the
    brief / ``ledger.Ledger``): appended on arrival, completed in place.
    """

    def __init__(
        self,
        web: Web,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        hang_max: float = 300.0,
        idle_timeout: float = 120.0,
        trickle_interval: float = 0.5,
        trickle_steps: int = 40,
    ) -> None:
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError("the simulated web only ever listens on loopback")
        self.web = web
        self.host = host
        self.requested_port = port
        self.hang_max = hang_max
        self.idle_timeout = idle_timeout
        self.trickle_interval = trickle_interval
        self.trickle_steps = trickle_steps
        self.ledger: list[Entry] = []
        self._hits: dict[tuple[str, str], int] = {}
        self._ids = itertools.count(1)
        self._conns = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.loop_watch = LoopWatch()
        self._watching: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._watching = asyncio.create_task(self.loop_watch.run())
        self._server = await asyncio.start_server(
            self._handle, self.host, self.requested_port, limit=MAX_LINE, backlog=512
        )

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("server not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening, cancel every connection task, and wait for them
        (Python 3.11's ``wait_closed`` does not wait for handlers)."""
        if self._server is not None:
            self._server.close()
        if self._watching is not None:
            self._watching.cancel()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def reset_state(self) -> None:
        """Forget the ledger, every page's request count and the loop's stalls."""
        self.ledger.clear()
        self._hits.clear()
        self.loop_watch.stalls.clear()

    # ----------------------------------------------------------- connection

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = next(self._conns)
        try:
            await self._serve_connection(reader, writer, conn)
        except BadRequest as exc:
            await self._send_error(reader, writer, exc.status, str(exc))
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except asyncio.CancelledError:
            # Only close() cancels us.  Ending normally instead of re-raising
            # keeps asyncio (3.11) from logging every cancelled connection.
            pass
        except Exception:  # never let one connection take the server down
            traceback.print_exc(file=sys.stderr)
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: int
    ) -> None:
        while True:
            req = await read_request(reader, self.idle_timeout)
            if req is None:
                return
            if not await self._dispatch(req, reader, writer, conn):
                return

    @staticmethod
    async def _send_error(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int, message: str
    ) -> None:
        """Answer a bad request, then close gracefully: send our FIN and
        swallow what the client still sends (briefly), because closing with
        unread input makes the kernel send RST, which can destroy the answer
        before the client reads it."""
        body = f"{status} {message}\n".encode()
        head = response_head(
            status, [("Content-Type", "text/plain")], length=len(body), keep_alive=False
        )
        with contextlib.suppress(ConnectionError, TimeoutError, ValueError):
            writer.write(head + body)
            await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
            async with asyncio.timeout(LINGER_SECONDS):
                while await reader.read(64 * 1024):
                    pass

    # -------------------------------------------------------------- dispatch

    async def _dispatch(
        self,
        req: Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        conn: int,
    ) -> bool:
        """Answer one request; return whether the connection stays open."""
        target = parse_target(req)
        if target.host in CONTROL_HOSTS and target.path.startswith("/_"):
            return await self._control(req, target, writer)
        entry = self._open_entry(req, target, conn)
        try:
            return await self._answer(req, target, reader, writer, entry)
        finally:
            if entry["done"] is None:
                entry["done"] = time.time()
                entry["outcome"] = entry["outcome"] or "client-closed"

    def _open_entry(self, req: Request, target: Target, conn: int) -> Entry:
        entry: Entry = {
            "id": next(self._ids),
            "host": target.host,
            "path": target.path,
            "method": req.method,
            "arrival": time.time(),
            "done": None,
            "status": None,
            "bytes": 0,
            "outcome": None,
            "conn": conn,
            "user_agent": req.headers.get("user-agent"),
            "client": req.headers.get(CLIENT_HEADER),
        }
        self.ledger.append(entry)
        return entry

    async def _answer(
        self,
        req: Request,
        target: Target,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        entry: Entry,
    ) -> bool:
        keep = req.keep_alive
        if req.method not in ("GET", "HEAD"):
            res = Resource(
                405, "text/plain", b"method not allowed\n", headers=(("Allow", "GET, HEAD"),)
            )
            return await self._respond(writer, entry, res, head_only=False, keep=keep)
        res = self.web.resource(target.host, target.path)
        if res.action == "hang":
            await self._hang(reader, entry)
            return False
        if res.action == "reset":
            self._reset(writer, entry)
            return False
        res = self._flaky(target, res)
        if req.method == "GET":
            res = _not_modified(req, res)
        if res.action == "slow":
            await asyncio.sleep(SLOW_SECONDS)
        if res.action == "trickle" and req.method == "GET":
            return await self._trickle(writer, entry, res, keep)
        return await self._respond(writer, entry, res, head_only=req.method == "HEAD", keep=keep)

    def _flaky(self, target: Target, res: Resource) -> Resource:
        """Count requests per (host, page) and fail the first few if the
        page is flaky."""
        if not res.fail_first:
            return res
        key = (target.host, canonical_path(target.path))
        self._hits[key] = count = self._hits.get(key, 0) + 1
        if count > res.fail_first:
            return res
        headers: list[tuple[str, str]] = []
        if res.retry_after is not None:
            form, delay = res.retry_after
            value = (
                str(delay)
                if form == "seconds"
                else email.utils.formatdate(math.ceil(time.time() + delay), usegmt=True)
            )
            headers.append(("Retry-After", value))
        body = f"{res.fail_status} try again later\n".encode()
        return Resource(res.fail_status, "text/plain", body, headers=tuple(headers))

    # ------------------------------------------------------------- behaviours

    async def _respond(
        self,
        writer: asyncio.StreamWriter,
        entry: Entry,
        res: Resource,
        *,
        head_only: bool,
        keep: bool,
    ) -> bool:
        headers = _resource_headers(res)
        writer.write(response_head(res.status, headers, length=res.content_length, keep_alive=keep))
        entry["status"] = res.status
        if not head_only:
            for chunk in res.chunks():
                if writer.is_closing():
                    raise ConnectionResetError("client went away")
                writer.write(chunk)
                await writer.drain()
                entry["bytes"] += len(chunk)
        await writer.drain()
        entry["done"] = time.time()
        entry["outcome"] = "ok"
        return keep

    async def _trickle(
        self, writer: asyncio.StreamWriter, entry: Entry, res: Resource, keep: bool
    ) -> bool:
        """Headers at once, then the body a few bytes per interval."""
        body = b"".join(res.chunks())
        step = max(1, math.ceil(len(body) / self.trickle_steps))
        writer.write(response_head(200, _resource_headers(res), length=len(body), keep_alive=keep))
        await writer.drain()
        entry["status"] = res.status
        for start in range(0, len(body), step):
            await asyncio.sleep(self.trickle_interval)
            if writer.is_closing():
                raise ConnectionResetError("client went away")
            writer.write(body[start : start + step])
            await writer.drain()
            entry["bytes"] += len(body[start : start + step])
        entry["done"] = time.time()
        entry["outcome"] = "trickle"
        return keep

    async def _hang(self, reader: asyncio.StreamReader, entry: Entry) -> None:
        """Say nothing until the client closes or ``hang_max`` passes."""
        try:
            async with asyncio.timeout(self.hang_max):
                while await reader.read(64 * 1024):
                    pass
        except (TimeoutError, ConnectionError):
            pass
        finally:
            entry["done"] = time.time()
            entry["outcome"] = "hang"

    @staticmethod
    def _reset(writer: asyncio.StreamWriter, entry: Entry) -> None:
        """Close with SO_LINGER 0 so the kernel sends RST, not FIN."""
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
        entry["done"] = time.time()
        entry["outcome"] = "reset"

    # --------------------------------------------------------------- control

    async def _control(self, req: Request, target: Target, writer: asyncio.StreamWriter) -> bool:
        path = target.path.split("?", 1)[0]
        if path == "/_ledger":
            payload: object = self.ledger
        elif path == "/_stalls":
            payload = self.loop_watch.stalls
        elif path == "/_reset":
            self.reset_state()
            payload = {"ok": True}
        elif path == "/_health":
            payload = {
                "ok": True,
                "seed": self.web.seed,
                "hosts": self.web.n_hosts,
                "mix": self.web.mix,
                "requests": len(self.ledger),
                "open_connections": len(self._tasks),
            }
        else:
            payload = None
        status = 200 if payload is not None else 404
        body = json.dumps(payload if payload is not None else {"error": "unknown"}).encode()
        head = response_head(
            status,
            [("Content-Type", "application/json")],
            length=len(body),
            keep_alive=req.keep_alive,
        )
        writer.write(head + (b"" if req.method == "HEAD" else body))
        await writer.drain()
        return req.keep_alive


def _not_modified(req: Request, res: Resource) -> Resource:
    """A 304 (validators only) when the request's validator matches the page's
    (RFC 9110 13.1: If-None-Match first, If-Modified-Since only without it)."""
    if res.status != 200:
        return res
    own = {k.lower(): v for k, v in res.headers}
    match, since = req.headers.get("if-none-match"), req.headers.get("if-modified-since")
    if match is not None:
        fresh = "etag" in own and own["etag"].removeprefix("W/") in [
            t.strip().removeprefix("W/") for t in match.split(",")]
    else:
        fresh = since is not None and own.get("last-modified") == since
    if not fresh:
        return res
    kept = tuple((k, v) for k, v in res.headers if k.lower() in ("etag", "last-modified"))
    return Resource(304, headers=kept, action="respond")


def _resource_headers(res: Resource) -> list[tuple[str, str]]:
    headers: list[tuple[str, str]] = []
    if res.content_type:
        headers.append(("Content-Type", res.content_type))
    if res.location:
        headers.append(("Location", res.location))
    headers.extend(res.headers)
    return headers


async def serve(web: Web, stop: asyncio.Event, *, port: int = 0, hang_max: float = 300.0,
                trickle_interval: float = 0.5) -> None:
    """Run a server until ``stop`` is set, announcing ``READY 127.0.0.1:PORT``
    on stdout once it listens (``process.SimWebProcess`` waits for it)."""
    server = SimWebServer(web, port=port, hang_max=hang_max, trickle_interval=trickle_interval)
    await server.start()
    print(f"READY 127.0.0.1:{server.port}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.close()
