"""The archive holds the heads as they went over the wire, on the real-socket web.

The server keeps, for every request, the head it read and the head it
wrote, byte for byte (tests/realweb/wire.py); the crawl's WARC records are
read back as their raw blocks (each gzip member decompressed, the WARC
header cut off) and compared with them: a response record's HTTP block
starts with the response head as the server wrote it (status line, header
order, case, repeated names, a folded line, ``Connection``, an ``ETag``
spelled ``ETag``), a request record's block is the request head the server
read, over HTTP and over HTTPS.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.crawl_runner import crawl_realweb
from tests.realweb import Host, Page, RealWebProcess, Web, links_to
from tests.realweb.sites import ALLOW_ALL

pytestmark = pytest.mark.crawl

#: Header lines no parser keeps as they are: a name twice, odd case, a folded
#: value, a validator in the case its server gave it.
VERBATIM = (b"X-Dup: one\r\nx-dup: two\r\nETag: \"e-1\"\r\nx-MiXeD-CaSe: Yes\r\n"
            b"X-Folded: first part\r\n  second part\r\n")


def _blocks(warc_dir: Path) -> list[tuple[bytes, bytes]]:
    """(WARC header, block) of every record of every WARC file, as stored."""
    found = []
    for path in sorted(warc_dir.glob("*.warc.gz")):
        data = path.read_bytes()
        while data:
            member = zlib.decompressobj(wbits=31)
            record = member.decompress(data)
            data = member.unused_data
            header, _, block = record.partition(b"\r\n\r\n")
            found.append((header, block.removesuffix(b"\r\n\r\n")))  # (the record's end)
    return found


def _field(header: bytes, name: bytes) -> bytes | None:
    for line in header.split(b"\r\n"):
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == name.lower():
            return value.strip()
    return None


def test_records_hold_the_heads_byte_for_byte_over_http_and_https(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    web = realweb(Web([Host("heads.test", robots=ALLOW_ALL, pages={
        "/": links_to("/odd", "https://heads.test/odd-tls"),
        "/odd": Page(body=b"odd headers", verbatim=VERBATIM),
        "/odd-tls": Page(body=b"odd headers over TLS", verbatim=VERBATIM),
    })]))
    crawl_realweb(web.nameserver, [web.url("heads.test")], tmp_path / "crawl",
                  {"DOWNLOAD_DELAY": 0, "WARC_DIR": str(tmp_path / "warc")})
    ledger = list(web.ledger())
    assert {(r.scheme, r.target) for r in ledger} >= {
        ("http", b"/odd"), ("https", b"/odd-tls"), ("http", b"/")}
    blocks = _blocks(tmp_path / "warc")
    by_kind: dict[tuple[bytes, str], bytes] = {}
    for header, block in blocks:
        kind, uri = _field(header, b"WARC-Type"), _field(header, b"WARC-Target-URI")
        if kind in (b"request", b"response", b"revisit") and uri is not None:
            # (a revisit, an answer whose payload is stored already, has the head alone)
            by_kind[b"response" if kind == b"revisit" else kind, uri.decode()] = block
    for request in ledger:
        url = web.url("heads.test", request.target.decode(), request.scheme)
        assert request.response_head is not None and request.request_head is not None
        response = by_kind[b"response", url]
        assert response.startswith(request.response_head), (url, response[:400])
        assert by_kind[b"request", url] == request.request_head, url
    odd = by_kind[b"response", web.url("heads.test", "/odd")]
    assert VERBATIM in odd and b"\r\nConnection: keep-alive\r\n" in odd
    assert odd.endswith(b"\r\n\r\nodd headers")
