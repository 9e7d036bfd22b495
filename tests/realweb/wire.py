"""HTTP/1.1 request heads read off the wire byte for byte, and response heads.

The point of the real-socket web is to see exactly what a client sent, so
the request line is split here by hand: the request-target is kept as the
bytes that arrived (no percent-decoding, no dot-segment removal, no query
reordering, raw non-ASCII bytes kept), and pages are routed by those bytes.
"""

from __future__ import annotations

import asyncio
import email.utils
import re
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus

#: Longest request line or header line (the stream's buffer limit).
MAX_LINE = 64 * 1024
MAX_HEADERS = 100
MAX_BODY = 1024 * 1024
HEAD_TIMEOUT = 30.0

_METHOD = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VERSION = re.compile(rb"HTTP/[0-9]\.[0-9]")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CONTROL = re.compile(rb"[\x00-\x20\x7f]")


class BadRequest(Exception):
    """The request cannot be answered as sent: reply ``status`` and close."""

    def __init__(self, status: int, reason: str, line: bytes | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.line = line


@dataclass(frozen=True)
class Head:
    """A request head as received: the raw line and target, headers in order."""

    line: bytes  # the request line without its CRLF
    method: str
    target: bytes
    version: str  # "HTTP/1.1"
    headers: tuple[tuple[str, str], ...]  # (lower-case name, value) as latin-1 text
    raw: bytes = b""  # the whole head as it arrived, the blank line included

    def header(self, name: str) -> str | None:
        """The first value of header ``name``, or None."""
        name = name.lower()
        return next((v for k, v in self.headers if k == name), None)

    def all(self, name: str) -> list[str]:
        name = name.lower()
        return [v for k, v in self.headers if k == name]

    @property
    def keep_alive(self) -> bool:
        """HTTP/1.1 keeps the connection unless told to close; 1.0 the reverse."""
        tokens = {t.strip().lower() for v in self.all("connection") for t in v.split(",")}
        if "close" in tokens:
            return False
        return self.version == "HTTP/1.1" or "keep-alive" in tokens


def _strip_eol(line: bytes) -> bytes:
    if line.endswith(b"\r\n"):
        return line[:-2]
    return line[:-1] if line.endswith(b"\n") else line


def parse_request_line(line: bytes) -> tuple[str, bytes, str]:
    """``METHOD SP request-target SP HTTP-version``, split on the two spaces only."""
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[1]:
        raise BadRequest(400, "malformed request line", line)
    method, target, version = parts
    if not _METHOD.fullmatch(method) or not _VERSION.fullmatch(version):
        raise BadRequest(400, "malformed request line", line)
    if _CONTROL.search(target):
        raise BadRequest(400, "control byte in request-target", line)
    return method.decode("ascii"), target, version.decode("ascii")


async def read_head(reader: asyncio.StreamReader, idle_timeout: float) -> Head | None:
    """The next request head, or None when the client closed (or idled) between requests."""
    try:
        async with asyncio.timeout(idle_timeout):
            raw = await reader.readline()
            if raw in (b"\r\n", b"\n"):  # RFC 9112 2.2: ignore a CRLF before the line
                raw = await reader.readline()
    except TimeoutError:
        return None
    except ValueError as exc:  # longer than the stream limit
        raise BadRequest(414, "request line too long") from exc
    if not raw.endswith(b"\n"):
        return None  # end of stream, maybe mid-line: nothing to answer
    line = _strip_eol(raw)
    method, target, version = parse_request_line(line)
    seen = bytearray(raw)
    async with asyncio.timeout(HEAD_TIMEOUT):
        headers = await _read_headers(reader, line, seen)
    return Head(line, method, target, version, headers, bytes(seen))


async def _read_headers(reader: asyncio.StreamReader, line: bytes, seen: bytearray
                        ) -> tuple[tuple[str, str], ...]:
    headers: list[tuple[str, str]] = []
    for _ in range(MAX_HEADERS + 1):
        try:
            raw = await reader.readline()
        except ValueError as exc:
            raise BadRequest(431, "header line too long", line) from exc
        if not raw.endswith(b"\n"):
            raise asyncio.IncompleteReadError(raw, None)
        seen += raw
        text = _strip_eol(raw).decode("latin-1")
        if not text:
            return tuple(headers)
        name, sep, value = text.partition(":")
        if not sep or not _TOKEN.fullmatch(name):  # also refuses obs-fold lines
            raise BadRequest(400, "malformed header line", line)
        headers.append((name.lower(), value.strip(" \t")))
    raise BadRequest(431, "too many headers", line)


async def read_body(reader: asyncio.StreamReader, head: Head, limit: int = MAX_BODY) -> bytes:
    """The request body (Content-Length only; chunked bodies are refused)."""
    if head.header("transfer-encoding") is not None:
        raise BadRequest(501, "chunked request bodies are not supported", head.line)
    length = (head.header("content-length") or "0").strip()
    if not length.isdigit():
        raise BadRequest(400, "bad Content-Length", head.line)
    if int(length) > limit:
        raise BadRequest(413, "request body too large", head.line)
    return await reader.readexactly(int(length)) if int(length) else b""


def response_head(status: int, headers: Iterable[tuple[str, str | bytes]], *,
                  length: int, keep_alive: bool, server: str = "realweb",
                  verbatim: bytes = b"") -> bytes:
    """Status line and headers, with Content-Length unless the status has no body
    (a 304's would describe the page it stands for; values may be raw bytes), and
    ``verbatim`` header lines last, as they are (CRLF-ended: any case, repeats,
    folded lines)."""
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [f"HTTP/1.1 {status} {reason}".encode("ascii"),
             f"Date: {email.utils.formatdate(usegmt=True)}".encode("ascii"),
             f"Server: {server}".encode("ascii")]
    for name, value in headers:
        raw = value if isinstance(value, bytes) else value.encode("latin-1")
        lines.append(name.encode("ascii") + b": " + raw)
    if status not in (204, 304):
        lines.append(f"Content-Length: {length}".encode("ascii"))
    lines.append(b"Connection: " + (b"keep-alive" if keep_alive else b"close"))
    return b"\r\n".join(lines) + b"\r\n" + verbatim + b"\r\n"
