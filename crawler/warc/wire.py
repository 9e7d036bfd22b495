"""The bytes of a page's response and request records, written without warcio's objects.

warcio builds a record as objects (header lists searched by name on every
access, digests read back through a stream, base32 in pure Python) and then
serialises it: on a 3 KB page that was most of the writer thread's time,
about 0.4 ms a page, compression a tenth of it. A response and the request
it answers are what nearly every page writes, and their layout is fixed, so
:func:`exchange_bytes` writes them directly, byte for byte what
:func:`crawler.warc.records.exchange_records` and warcio's writer write
(``tests/test_warc_wire.py`` compares the two). Revisits and ``warcinfo``
records, a small share, stay warcio's; every reader (warcio, pywb) reads
both alike.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crawler.warc.cdxj import mime_of
from crawler.warc.records import request_target, warc_date

if TYPE_CHECKING:
    from crawler.warc.exchange import Exchange

#: The WARC-Payload-Digest of an empty body (a GET's request record).
_EMPTY_DIGEST = "sha1:" + base64.b32encode(hashlib.sha1(b"").digest()).decode("ascii")
_NOT_DIGITS = str.maketrans("", "", "-:T")


@dataclass(frozen=True, slots=True)
class ExchangeBytes:
    """An exchange's two records, uncompressed, and what its index line needs."""

    response: bytes
    request: bytes
    date: str  # WARC-Date
    timestamp: str  # the same moment as CDXJ's 14 digits
    mime: str  # the response's Content-Type, without parameters ("unk": none)


def exchange_bytes(exchange: Exchange, digest: str, record_id: str,
                   request_id: str) -> ExchangeBytes | None:
    """The ``response`` record (id ``record_id``, payload digest ``digest``) and the
    ``request`` record (``request_id``) of ``exchange``, with its heads as they
    went over the wire when it has them (``Exchange.response_head``).

    ``None`` when a header holds text that is not Latin-1 (it never came from
    the wire): warcio's percent-encoding is the way to write that.
    """
    try:
        response_head = exchange.response_head or _http_head(
            f"{exchange.protocol} {exchange.status} {exchange.reason}",
            exchange.response_headers)
        request_head = exchange.request_head or _http_head(
            f"{exchange.method} {request_target(exchange.url)} {exchange.protocol}",
            exchange.request_headers)
    except UnicodeEncodeError:
        return None
    date = warc_date(exchange.received_at)
    common = (f"WARC-Record-ID: {record_id}\r\nWARC-Date: {date}\r\n"
              f"WARC-Target-URI: {exchange.url}\r\n")
    fields = f"WARC-Type: response\r\n{common}WARC-Payload-Digest: {digest}\r\n"
    if exchange.ip_address:
        fields += f"WARC-IP-Address: {exchange.ip_address}\r\n"
    if exchange.truncated:
        fields += f"WARC-Truncated: {exchange.truncated}\r\n"
    response = _record(fields, "response", response_head, exchange.body)
    body = exchange.request_body
    fields = (f"WARC-Type: request\r\nWARC-Record-ID: {request_id}\r\nWARC-Date: {date}\r\n"
              f"WARC-Target-URI: {exchange.url}\r\nWARC-Concurrent-To: {record_id}\r\n"
              f"WARC-Payload-Digest: {_sha1(body) if body else _EMPTY_DIGEST}\r\n")
    request = _record(fields, "request", request_head, body)
    return ExchangeBytes(response, request, date, _timestamp(date),
                         _mime(exchange.response_headers))


def _http_head(first_line: str, headers: list[tuple[str, str]]) -> bytes:
    """Status or request line, headers and the blank line, as the octets received."""
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers)
    return f"{first_line}\r\n{lines}\r\n".encode("latin-1")


def _record(fields: str, msgtype: str, head: bytes, payload: bytes) -> bytes:
    """One WARC/1.1 record: ``fields``, then the block digest, type and length warcio adds."""
    block = _sha1(head, payload)
    trailer = (f"WARC-Block-Digest: {block}\r\nContent-Type: application/http; "
               f"msgtype={msgtype}\r\nContent-Length: {len(head) + len(payload)}\r\n\r\n")
    return b"".join((b"WARC/1.1\r\n", (fields + trailer).encode("utf-8"), head, payload,
                     b"\r\n\r\n"))


def _sha1(*parts: bytes) -> str:
    """``sha1:BASE32`` of the parts in a row (warcio's ``Digester`` spelling)."""
    digest = hashlib.sha1()
    for part in parts:
        digest.update(part)
    return "sha1:" + base64.b32encode(digest.digest()).decode("ascii")


def _timestamp(date: str) -> str:
    """``2026-12-03T21:35:22.753863Z`` -> ``20261203213522`` (the WARC-Date's own second)."""
    return date[:19].translate(_NOT_DIGITS)


def _mime(headers: list[tuple[str, str]]) -> str:
    """The first Content-Type's media type, as CDXJ's ``mime``."""
    content_type = next((value for name, value in headers if name.lower() == "content-type"),
                        None)
    return mime_of(content_type)
