"""What went over the wire for one request: the head it sent, the head it got.

Scrapy hands the archive a parsed response: its headers in a dictionary
(order and case lost, duplicates merged) with Twisted's connection headers
(``Connection``, ``Keep-Alive``) taken out. An archive of the wire wants the
bytes: the download handler (:mod:`crawler.handlers`) opens a :class:`WireTap`
for each request it writes, which keeps the request head as written and the
response head as it came off the connection (after TLS, before any parsing),
and the archive (:mod:`crawler.middlewares.warc`) writes those.

Taps are kept by request object, weakly: a copy of a request (a redirect
hop, a retry) is a request of its own, with a tap of its own or none, never
its original's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

from scrapy import Request

#: The most a response head may take before the tap gives up (Twisted's own
#: parser refuses lines of more than 64 KiB).
MAX_HEAD = 256 * 1024
_END = re.compile(rb"\r?\n\r?\n")
_STATUS = re.compile(rb"HTTP/[0-9.]+[ \t]+([0-9]{3})")

_TAPS: WeakKeyDictionary[Request, WireTap] = WeakKeyDictionary()


@dataclass(slots=True, eq=False)
class WireTap:
    """The request head written and the final response head read (None while
    incomplete, or when it could not be kept: longer than :data:`MAX_HEAD`)."""

    sent: bytes = b""
    head: bytes | None = None
    _buffer: bytearray = field(default_factory=bytearray)
    _done: bool = False
    _sealed: bool = False

    def wrote(self, data: bytes) -> None:
        """Bytes of the request as written (until :meth:`seal`)."""
        if not self._sealed:
            self.sent += data

    def seal(self) -> None:
        """The request is written: later writes (none, for a GET) are not its head."""
        self._sealed = True

    def received(self, data: bytes) -> bool:
        """Bytes of the response as they arrive; True once the head is complete
        (or given up on): the rest is no longer the tap's."""
        if self._done:
            return True
        self._buffer += data
        while (end := _END.search(self._buffer)) is not None:
            head = bytes(self._buffer[:end.end()])
            status = _STATUS.match(head)
            if status is not None and status.group(1).startswith(b"1"):
                del self._buffer[:end.end()]  # an interim answer (100, 103): the next is final
                continue
            self.head, self._done = head, True
            self._buffer.clear()
            return True
        if len(self._buffer) > MAX_HEAD:
            self._buffer.clear()
            self._done = True
        return self._done


def open_tap(request: Request) -> WireTap:
    """A new tap for ``request`` (the one a previous attempt opened is dropped)."""
    tap = _TAPS[request] = WireTap()
    return tap


def tap_of(request: Request) -> WireTap | None:
    """The tap of ``request``, if its download opened one."""
    return _TAPS.get(request)


def without_fields(head: bytes, names: frozenset[bytes]) -> bytes:
    """``head`` without the header lines named ``names`` (lower-case), their
    continuation lines (obs-fold) included; every other byte kept."""
    lines = head.splitlines(keepends=True)
    kept, dropping = lines[:1], False
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t") and line.strip():
            if not dropping:
                kept.append(line)
            continue
        name = line.split(b":", 1)[0].strip().lower() if b":" in line else None
        dropping = name in names
        if not dropping:
            kept.append(line)
    return b"".join(kept)


class RecordingTransport:
    """A transport that records what is written through it (``write``,
    ``writeSequence``) and hands everything to ``transport``."""

    def __init__(self, transport: object, record: Callable[[bytes], None]) -> None:
        self._transport = transport
        self._record = record

    def __getattr__(self, name: str) -> object:
        return getattr(self._transport, name)

    def write(self, data: bytes) -> None:
        self._record(data)
        self._transport.write(data)  # type: ignore[attr-defined]

    def writeSequence(self, data: list[bytes]) -> None:  # Twisted's name
        for chunk in data:
            self._record(chunk)
        self._transport.writeSequence(data)  # type: ignore[attr-defined]


def read_through(protocol: Any, tap: WireTap) -> None:
    """Have ``tap`` read each chunk ``protocol`` receives (its ``dataReceived``)
    before the protocol parses it, until the response head is complete; the
    protocol's own ``dataReceived`` (its class's) takes over then."""
    parse = type(protocol).dataReceived.__get__(protocol)

    def received(data: bytes) -> None:
        if tap.received(data) and vars(protocol).get("dataReceived") is received:
            del protocol.dataReceived  # (the class's again)
        parse(data)

    protocol.dataReceived = received
