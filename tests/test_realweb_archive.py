"""The WARC archive of a crawl of the real-socket web (tests/realweb), checked
against what the server received and sent.

The simulated web proves the archive at scale (tests/test_warc_crawl.py:
rotation, revisits, the CDXJ index, a killed writer). Here a real
``scrapy crawl broad`` fetches pages whose request-targets are unusual (a
query in the site's own order, a bare key, percent-encoded and raw UTF-8
paths, an HTTPS page) straight from the server's socket, with no proxy, and
every record is compared with the server's ledger entry for that request:
the URL as sent, the request line byte for byte, the address it was sent to,
and the body the server wrote.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from tests.crawl_runner import crawl_realweb
from tests.realweb import Host, RealWebProcess, Request, Web, links_to, page
from tests.realweb.content import render

pytestmark = pytest.mark.crawl


@dataclass(frozen=True)
class Record:
    """One WARC record, read back with warcio."""

    type: str
    id: str
    uri: str
    concurrent_to: str | None
    ip_address: str | None
    first_line: str  # the status line "HTTP/1.1 200 OK", or the request line "GET /x HTTP/1.1"
    headers: tuple[tuple[str, str], ...]
    payload: bytes


def read_warcs(warc_dir: Path) -> list[Record]:
    """Every record of every complete file in ``warc_dir`` (warcinfo left out)."""
    records = []
    for path in sorted(warc_dir.glob("*.warc.gz")):
        with path.open("rb") as stream:
            for rec in ArchiveIterator(stream):
                if rec.rec_type == "warcinfo":
                    continue
                h = rec.rec_headers
                http = rec.http_headers
                records.append(Record(
                    rec.rec_type, h.get_header("WARC-Record-ID"), h.get_header("WARC-Target-URI"),
                    h.get_header("WARC-Concurrent-To"), h.get_header("WARC-IP-Address"),
                    # warcio splits the first line after its first word (protocol)
                    f"{http.protocol} {http.statusline}" if http is not None else "",
                    tuple(http.headers) if http is not None else (),
                    rec.content_stream().read()))
    return records


def sent_url(web: RealWebProcess, r: Request) -> str:
    """The URL of a request exactly as the server received it: scheme, Host, target."""
    assert r.host_header is not None
    return f"{r.scheme}://{r.host_header}{r.target.decode('ascii')}"


def body_sent(web: RealWebProcess, r: Request) -> bytes:
    """The body the server wrote for ``r`` (rendered again from the web's spec)."""
    assert r.host is not None
    host = web.web.host(r.host)
    assert host is not None
    found = host.find(r.scheme, r.target)
    assert found is not None, r
    return render(found, web.layout, host=r.host, target=r.target).body


def test_each_response_is_archived_once_as_sent_and_as_received(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    """For every request the server answered (pages and both robots.txt files):

    * exactly one ``response`` record whose ``WARC-Target-URI`` is the URL as
      the server received it (scheme, Host header, exact request-target: the
      query in the site's order, ``?page`` without ``=``, ``%C3%A9`` as sent,
      a raw UTF-8 link sent percent-encoded), and nothing else archived;
    * its payload is byte for byte the body the server sent, and its
      ``WARC-IP-Address`` is the host's own loopback address;
    * one ``request`` record, ``WARC-Concurrent-To`` that response, whose
      request line is the one the server parsed (method, target, version) and
      whose Host header is the one it got;
    * every file reads with warcio, and ``warcio check`` finds every digest right.

    Every page (and each scheme's robots.txt) has a body of its own, so no
    payload is stored as a revisit.
    """
    web = realweb(Web([Host("arc.test", robots="User-agent: *\nAllow: /\n# https\n", http_pages={
        "/robots.txt": page("User-agent: *\nAllow: /\n# http\n", content_type="text/plain"),
    }, pages={
        "/": links_to("/list?b=2&a=1", "/search?page", "/caf%C3%A9", "/na\u00efve?q=\u00fc",
                      "https://arc.test/secure"),
        "/list?b=2&a=1": page("list, b before a"),
        "/search?page": page("search, a bare key"),
        "/caf%C3%A9": page("caf\u00e9, encoded".encode()),
        "/na%C3%AFve?q=%C3%BC": page("na\u00efve, sent encoded".encode()),
        "/secure": page("over TLS", content_type="text/plain"),
    })]))
    warc_dir = tmp_path / "warc"
    crawl_realweb(web.nameserver, [web.url("arc.test")], tmp_path / "crawl",
                  {"DOWNLOAD_DELAY": 0, "WARC_DIR": str(warc_dir)})

    requests = web.ledger().for_host("arc.test")
    assert sorted((r.scheme, r.target) for r in requests) == sorted([
        ("http", b"/robots.txt"), ("https", b"/robots.txt"), ("http", b"/"),
        ("http", b"/list?b=2&a=1"), ("http", b"/search?page"), ("http", b"/caf%C3%A9"),
        ("http", b"/na%C3%AFve?q=%C3%BC"), ("https", b"/secure")])
    assert all(r.status == 200 and r.done is not None for r in requests), requests

    files = sorted(warc_dir.glob("*.warc.gz"))
    assert files and not list(warc_dir.glob("*.open")), list(warc_dir.iterdir())
    check = subprocess.run([sys.executable, "-m", "warcio.cli", "check", "-v", *map(str, files)],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]

    records = read_warcs(warc_dir)
    assert {r.type for r in records} == {"response", "request"}, Counter(r.type for r in records)
    responses = {r.uri: r for r in records if r.type == "response"}
    assert Counter(r.uri for r in records if r.type == "response") == Counter(
        sent_url(web, r) for r in requests)
    for sent in requests:
        archived = responses[sent_url(web, sent)]
        assert archived.first_line == "HTTP/1.1 200 OK", archived
        assert archived.payload == body_sent(web, sent), (archived.uri, archived.payload)
        assert archived.ip_address == sent.local_address == web.address("arc.test")

    asked = {r.concurrent_to: r for r in records if r.type == "request"}
    assert len(asked) == len(requests) == sum(1 for r in records if r.type == "request")
    by_id = {r.id: r for r in records if r.type == "response"}
    for request_record in asked.values():
        answer = by_id[request_record.concurrent_to]  # type: ignore[index]
        assert request_record.uri == answer.uri
    for sent in requests:
        request_record = asked[responses[sent_url(web, sent)].id]
        line = f"{sent.method} {sent.target.decode('ascii')} {sent.version}"
        assert request_record.first_line == line, (request_record.first_line, line)
        hosts = [v for k, v in request_record.headers if k.lower() == "host"]
        assert hosts == [sent.host_header], request_record.headers
