"""Tests of the real-socket test web (tests/realweb) itself.

Crawler tests will take this web as ground truth for DNS, per-address, IPv6
and TLS behaviour, so each of those is checked here with plain clients: DNS
questions sent with dnslib to the web's own server, then raw sockets (and
``ssl`` verifying against the test CA) to exactly the addresses it answered.
No test name is ever looked up through the machine's resolver.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from ipaddress import ip_address
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from dnslib import QTYPE, RCODE, DNSRecord

from tests.realweb import (
    Host,
    Ledger,
    Name,
    RealWebProcess,
    Web,
    links_to,
    page,
    redirect,
    shared_hosting,
    to_https,
    web_of,
)
from tests.realweb.process import REPO_ROOT

SLOW = 0.6
IS_ROOT = os.geteuid() == 0


def module_web() -> Web:
    """One web for most tests: every feature on a few hosts."""
    return Web([
        Host(["a.test", "www.a.test"], robots="User-agent: *\nDisallow: /private\n", pages={
            "/": links_to("/x?b=2&a=1", "rel/page", "https://a.test/secure", "http://b.test/",
                          "http://elsewhere.test/", "http://b.test:8081/explicit"),
            "/x?b=2&a=1": page("b-then-a"),
            "/q?a": page("bare a"),
            "/q?a=": page("a equals empty"),
            "/%7Euser": page("percent tilde"),
            "/~user": page("raw tilde"),
            "/caf%C3%A9": page("percent utf8"),
            "/café": page("raw utf8"),
            b"/raw\xff": page("raw ff byte"),
            "/a/../b": page("dots kept"),
            "//double": page("two slashes"),
            "/secure": page("over https"),
            "/big": page(size=200_000, content_type="application/octet-stream"),
            "/gone": page("gone", status=410, headers={"X-Test": "yes"}),
            "/later": redirect("/x?b=2&a=1", 302),
        }, http_pages={"/secure": to_https()}),
        Host("b.test", robots=500, pages={"/": page("b home")}),
        Host("c.test", pages={"/": page("c home"), "/slow": page("slow c", delay=SLOW)}),
        Host("up.test", upgrade=True, pages={"/p?x=1": page("upgraded")}),
        Host("v6.test", ipv4=False, ipv6=True, pages={"/": page("six")}),
        Host("dual.test", ipv6=True, pages={"/": page("dual")}),
        Host("plain.test", https=False, pages={"/": page("no tls")}),
        *shared_hosting(["s1.test", "s2.test", "s3.test"]),
    ], dns={"nx.test": Name(fail="nxdomain"), "sf.test": Name(fail="servfail"),
            "quiet.test": Name(fail="silent")})


@pytest.fixture(scope="module")
def web() -> Iterator[RealWebProcess]:
    with RealWebProcess(module_web()) as proc:
        yield proc
        assert "Traceback" not in proc.stderr_text()  # no connection ever crashed it


# ---------------------------------------------------------------- plain clients


def ask(web: RealWebProcess, name: str, qtype: str = "A", timeout: float = 2.0) -> DNSRecord:
    """One DNS question to the web's own server (UDP)."""
    reply = DNSRecord.question(name, qtype).send("127.0.0.1", web.dns_port, timeout=timeout)
    return DNSRecord.parse(reply)


def answers(web: RealWebProcess, name: str, qtype: str = "A") -> list[str]:
    return [str(rr.rdata) for rr in ask(web, name, qtype).rr if QTYPE[rr.rtype] == qtype]


def address_of(web: RealWebProcess, name: str) -> str:
    """The first address the web's DNS gives ``name`` (A first, then AAAA)."""
    found = answers(web, name, "A") or answers(web, name, "AAAA")
    assert found, f"no address for {name}"
    return found[0]


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    cert: dict | None = None


def connect(web: RealWebProcess, name: str, scheme: str = "http", *, address: str | None = None,
            sni: str | None = None, context: ssl.SSLContext | None = None) -> socket.socket:
    """A socket to ``name`` at the address DNS gave it (or ``address``); TLS verified
    against the test CA with ``sni`` (default: ``name``) for https."""
    sock = socket.create_connection((address or address_of(web, name), web.layout.port(scheme)),
                                    timeout=5)
    if scheme == "https":
        sock = (context or web.client_context()).wrap_socket(sock, server_hostname=sni or name)
    return sock


def request_bytes(target: bytes, host: str | None, method: str = "GET",
                  extra: bytes = b"", close: bool = True) -> bytes:
    head = method.encode() + b" " + target + b" HTTP/1.1\r\n"
    if host is not None:
        head += b"Host: " + host.encode() + b"\r\n"
    return head + extra + (b"Connection: close\r\n" if close else b"") + b"\r\n"


def read_response(sock: socket.socket, method: str = "GET") -> Response:
    resp = http.client.HTTPResponse(sock, method=method)
    resp.begin()
    body = resp.read()
    cert = sock.getpeercert() if isinstance(sock, ssl.SSLSocket) else None
    return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, body, cert)


def get(web: RealWebProcess, name: str, target: bytes | str = b"/", scheme: str = "http", *,
        host: str | None = None, address: str | None = None, sni: str | None = None,
        method: str = "GET", extra: bytes = b"") -> Response:
    """One request with the exact ``target`` bytes, Host ``host`` (default ``name``)."""
    raw = target if isinstance(target, bytes) else target.encode()
    with connect(web, name, scheme, address=address, sni=sni) as sock:
        sock.sendall(request_bytes(raw, host or name, method, extra))
        return read_response(sock, method)


class _Hrefs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.hrefs += [v for k, v in attrs if tag == "a" and k == "href" and v]


def hrefs(body: bytes) -> list[str]:
    parser = _Hrefs()
    parser.feed(body.decode())
    return parser.hrefs


# ---------------------------------------------------------------- DNS


def test_dns_answers_a_and_aaaa_as_the_layout_says(web: RealWebProcess) -> None:
    a = web.place("a.test").ipv4
    assert answers(web, "a.test", "A") == [a]
    assert answers(web, "www.a.test", "A") == [a]  # every name of a host
    assert answers(web, "a.test", "AAAA") == []
    assert answers(web, "v6.test", "A") == []
    assert answers(web, "v6.test", "AAAA") == ["::1"]
    assert answers(web, "dual.test", "A") == [web.place("dual.test").ipv4]
    assert answers(web, "dual.test", "AAAA") == ["::1"]
    assert ask(web, "v6.test", "A").header.rcode == RCODE.NOERROR  # a name, no A record
    assert [rr.ttl for rr in ask(web, "a.test").rr] == [60]


def test_dns_failures_as_configured(web: RealWebProcess) -> None:
    assert ask(web, "nx.test").header.rcode == RCODE.NXDOMAIN
    assert ask(web, "unknown.test").header.rcode == RCODE.NXDOMAIN  # not in the zone
    assert ask(web, "sf.test").header.rcode == RCODE.SERVFAIL
    with pytest.raises(TimeoutError):
        ask(web, "quiet.test", timeout=0.4)
    asked = web.dns_questions("quiet.test")
    assert [(q.name, q.qtype) for q in asked][-1:] == [("quiet.test", "A")]


def test_each_host_has_its_own_loopback_address(web: RealWebProcess) -> None:
    places = [p for p in web.layout.places if p.ipv4 is not None]
    alone = [p.ipv4 for p in places if not p.name.startswith("s")]
    shared = {p.ipv4 for p in places if p.name.startswith("s")}
    assert len(set(alone)) == len(alone) == 6  # a, b, c, up, dual, plain
    assert len(shared) == 1 and not shared & set(alone)
    for address in web.layout.addresses():
        assert ip_address(address).is_loopback and address != "127.0.0.1"


def test_ports_are_80_and_443_as_root_and_urls_say_so(web: RealWebProcess) -> None:
    if IS_ROOT:
        assert (web.http_port, web.https_port) == (80, 443)
        assert web.url("a.test", "/x") == "http://a.test/x"
        assert web.url("a.test", "/x", "https") == "https://a.test/x"
    else:
        assert web.http_port >= 1024 and web.https_port >= 1024
        assert web.url("a.test", "/x") == f"http://a.test:{web.http_port}/x"


# ---------------------------------------------------------------- addresses and names


def test_a_host_answers_on_its_own_address_and_not_on_another(web: RealWebProcess) -> None:
    web.reset()
    assert get(web, "a.test", "/x?b=2&a=1").body == b"b-then-a"
    wrong = get(web, "a.test", "/x?b=2&a=1", address=web.address("b.test"))
    assert wrong.status == 421
    assert get(web, "b.test").body == b"b home"
    on_b = web.ledger().at_address(web.address("b.test"))
    assert [(r.host, r.status, r.served_by) for r in on_b] == [
        ("a.test", 421, None), ("b.test", 200, "b.test")]


def test_shared_hosting_tells_names_apart_by_host_header(web: RealWebProcess) -> None:
    shared = web.address("s1.test")
    for name in ("s1.test", "s2.test", "s3.test"):
        assert address_of(web, name) == shared
        assert get(web, name).body == f"<h1>{name}</h1>\n".encode()
        assert get(web, name, scheme="https").body == f"<h1>{name}</h1>\n".encode()
    assert get(web, "s1.test", host="a.test").status == 421  # not served there


def test_no_host_header_is_400_on_1_1_and_the_default_site_on_1_0(web: RealWebProcess) -> None:
    with connect(web, "c.test") as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert read_response(sock).status == 400
    with connect(web, "c.test") as sock:
        sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
        assert read_response(sock).body == b"c home"


def test_host_header_with_port_counts_as_the_name(web: RealWebProcess) -> None:
    web.reset()
    port = web.http_port
    assert get(web, "c.test", host=f"C.Test:{port}").body == b"c home"
    (entry,) = web.ledger().for_host("c.test")
    assert (entry.host_header, entry.host) == (f"C.Test:{port}", "c.test")


def test_ipv6_only_host_answers_on_ipv6_loopback(web: RealWebProcess) -> None:
    web.reset()
    assert address_of(web, "v6.test") == "::1"
    assert get(web, "v6.test").body == b"six"
    assert get(web, "v6.test", scheme="https").body == b"six"  # cert has the name and ::1
    assert get(web, "v6.test", address=web.address("a.test")).status == 421  # no IPv4 site
    assert {(r.local_address, r.remote_address, r.scheme) for r in web.ledger()
            if r.status == 200} == {("::1", "::1", "http"), ("::1", "::1", "https")}


def test_dual_stack_host_answers_on_both_addresses(web: RealWebProcess) -> None:
    place = web.place("dual.test")
    assert place.ipv4 is not None and place.ipv6 == "::1"
    for address in place.addresses:
        assert get(web, "dual.test", address=address).body == b"dual"
        assert get(web, "dual.test", scheme="https", address=address).body == b"dual"


def test_a_host_without_https_refuses_the_connection(web: RealWebProcess) -> None:
    assert get(web, "plain.test").body == b"no tls"
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((web.address("plain.test"), web.https_port), timeout=2)


# ---------------------------------------------------------------- TLS


def test_https_verifies_against_the_test_ca_for_the_hosts_names(web: RealWebProcess) -> None:
    web.reset()
    response = get(web, "a.test", "/secure", "https")
    assert response.body == b"over https"
    assert response.cert is not None
    alt = set(response.cert["subjectAltName"])
    assert alt == {("DNS", "a.test"), ("DNS", "www.a.test"),
                   ("IP Address", web.address("a.test"))}
    assert get(web, "www.a.test", "/secure", "https").status == 200
    with pytest.raises(ssl.SSLCertVerificationError):  # a's address has no cert for b.test
        get(web, "a.test", "/secure", "https", sni="b.test")
    with (pytest.raises(ssl.SSLCertVerificationError),  # the system's CAs do not know it
          connect(web, "a.test", "https", context=ssl.create_default_context())):
        pass
    assert [r.sni for r in web.ledger()] == ["a.test", "www.a.test"]
    assert [h["sni"] for h in web.tls_handshakes()] == ["a.test", "www.a.test", "b.test",
                                                         "a.test"]


def test_sni_picks_the_certificate_on_a_shared_address(web: RealWebProcess) -> None:
    for name in ("s2.test", "s3.test"):
        response = get(web, name, scheme="https")
        assert response.cert is not None
        assert ("DNS", name) in response.cert["subjectAltName"]


def test_https_by_ip_address_gets_the_default_site_certificate(web: RealWebProcess) -> None:
    address = web.address("c.test")
    context = web.client_context()
    with context.wrap_socket(socket.create_connection((address, web.https_port), timeout=5),
                             server_hostname=address) as sock:  # IP literal: no SNI sent
        sock.sendall(request_bytes(b"/", address))
        assert read_response(sock).body == b"c home"


# ---------------------------------------------------------------- exact request-targets


@pytest.mark.parametrize(("target", "body"), [
    (b"/x?b=2&a=1", b"b-then-a"),
    (b"/x?a=1&b=2", None),
    (b"/q?a", b"bare a"),
    (b"/q?a=", b"a equals empty"),
    (b"/%7Euser", b"percent tilde"),
    (b"/%7euser", None),
    (b"/~user", b"raw tilde"),
    (b"/caf%C3%A9", b"percent utf8"),
    (b"/caf%c3%a9", None),
    ("/café".encode(), b"raw utf8"),
    (b"/raw\xff", b"raw ff byte"),
    (b"/a/../b", b"dots kept"),
    (b"/b", None),
    (b"//double", b"two slashes"),
    (b"/double", None),
    (b"/x?b=2&a=1#frag", None),
])
def test_request_target_is_routed_and_recorded_byte_for_byte(
        web: RealWebProcess, target: bytes, body: bytes | None) -> None:
    web.reset()
    response = get(web, "a.test", target)
    assert (response.status, response.body if body else None) == (200 if body else 404, body)
    assert web.ledger().targets("a.test") == [target]


def test_absolute_form_target_is_recorded_whole_and_routed_by_its_path(
        web: RealWebProcess) -> None:
    web.reset()
    target = f"http://{web.layout.authority('a.test', 'http')}/x?b=2&a=1".encode()
    assert get(web, "a.test", target, host="ignored.test").body == b"b-then-a"
    (entry,) = web.ledger()
    assert (entry.target, entry.host, entry.host_header) == (target, "a.test", "ignored.test")


def test_malformed_request_line_is_answered_400_and_recorded(web: RealWebProcess) -> None:
    web.reset()
    with connect(web, "c.test") as sock:
        sock.sendall(b"GET /a b HTTP/1.1\r\nHost: c.test\r\n\r\n")
        assert read_response(sock).status == 400
    (entry,) = web.ledger()
    assert (entry.method, entry.target, entry.status) == (None, b"GET /a b HTTP/1.1", 400)


# ---------------------------------------------------------------- content


def test_links_are_written_with_ports_only_when_not_default(web: RealWebProcess) -> None:
    found = hrefs(get(web, "a.test").body)
    assert found == ["/x?b=2&a=1", "rel/page", web.url("a.test", "/secure", "https"),
                     web.url("b.test", "/"), "http://elsewhere.test/",
                     "http://b.test:8081/explicit"]
    base = web.url("a.test", "/")
    assert urljoin(base, found[1]) == web.url("a.test", "/rel/page")


def test_robots_txt_body_status_or_absent(web: RealWebProcess) -> None:
    robots = get(web, "a.test", "/robots.txt")
    assert (robots.status, robots.body) == (200, b"User-agent: *\nDisallow: /private\n")
    assert robots.headers["content-type"] == "text/plain"
    assert get(web, "b.test", "/robots.txt").status == 500
    assert get(web, "c.test", "/robots.txt").status == 404


def test_page_status_headers_size_and_head(web: RealWebProcess) -> None:
    gone = get(web, "a.test", "/gone")
    assert (gone.status, gone.headers["x-test"], gone.body) == (410, "yes", b"gone")
    big = get(web, "a.test", "/big")
    assert len(big.body) == 200_000 and big.headers["content-length"] == "200000"
    head = get(web, "a.test", "/big", method="HEAD")
    assert (head.status, head.body, head.headers["content-length"]) == (200, b"", "200000")
    assert get(web, "a.test", "/", method="POST").status == 405


def test_redirects_keep_the_exact_target(web: RealWebProcess) -> None:
    up = get(web, "up.test", "/p?x=1")
    assert (up.status, up.headers["location"]) == (301, web.url("up.test", "/p?x=1", "https"))
    assert get(web, "up.test", "/p?x=1", "https").body == b"upgraded"
    assert get(web, "up.test", "/robots.txt").status == 301  # everything upgrades
    secure = get(web, "a.test", "/secure")
    assert secure.headers["location"] == web.url("a.test", "/secure", "https")
    later = get(web, "a.test", "/later", "https")
    assert (later.status, later.headers["location"]) == (302, "/x?b=2&a=1")


def test_slow_page_waits_before_answering(web: RealWebProcess) -> None:
    start = time.monotonic()
    assert get(web, "c.test", "/slow").body == b"slow c"
    assert time.monotonic() - start >= SLOW


# ---------------------------------------------------------------- the ledger


def test_ledger_records_each_request(web: RealWebProcess) -> None:
    web.reset()
    before = time.time()
    get(web, "a.test", "/gone", "https", extra=b"User-Agent: realweb-test/1\r\n")
    after = time.time()
    (entry,) = web.ledger()
    assert before <= entry.arrival <= entry.done  # type: ignore[operator]
    # done is stamped once the server's last write returns, which can be just
    # after the client has read the whole answer
    assert entry.arrival <= after and entry.done <= after + 0.5  # type: ignore[operator]
    assert (entry.scheme, entry.sni, entry.host_header, entry.host) == (
        "https", "a.test", "a.test", "a.test")
    assert (entry.local_address, entry.local_port) == (web.address("a.test"), web.https_port)
    assert ip_address(entry.remote_address).is_loopback
    assert (entry.method, entry.target, entry.user_agent, entry.status) == (
        "GET", b"/gone", "realweb-test/1", 410)
    assert (entry.in_flight, entry.body_bytes, entry.outcome) == (1, 4, "ok")


def test_keep_alive_requests_share_a_connection(web: RealWebProcess) -> None:
    web.reset()
    with connect(web, "c.test") as sock:
        for _ in range(2):
            sock.sendall(request_bytes(b"/", "c.test", close=False))
            assert read_response(sock).body == b"c home"
    first, second = web.ledger()
    assert first.conn == second.conn and first.remote_port == second.remote_port


def test_two_concurrent_requests_to_a_slow_page_are_two_in_flight(web: RealWebProcess) -> None:
    web.reset()
    results: list[Response] = []
    threads = [threading.Thread(target=lambda: results.append(get(web, "c.test", "/slow")))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.status for r in results] == [200, 200]
    ledger = web.ledger()
    assert ledger.max_in_flight("c.test") == 2
    assert ledger.max_in_flight_at(web.address("c.test")) == 2
    assert sorted(r.in_flight or 0 for r in ledger) == [1, 2]
    # Then one after the other: never more than one at a time.
    web.reset()
    get(web, "c.test", "/slow")
    get(web, "c.test", "/slow", "https")
    assert web.ledger().max_in_flight("c.test") == 1
    assert [r.in_flight for r in web.ledger()] == [1, 1]


def test_gaps_per_host_across_schemes_and_per_address(web: RealWebProcess) -> None:
    web.reset()
    get(web, "s1.test")
    time.sleep(0.3)
    get(web, "s1.test", scheme="https")
    time.sleep(0.1)
    get(web, "s2.test")
    ledger = web.ledger()
    first, second = ledger.for_host("s1.test")
    assert (first.scheme, second.scheme) == ("http", "https")
    assert ledger.min_gap("s1.test") == pytest.approx(second.arrival - first.arrival)
    assert 0.3 <= (ledger.min_gap("s1.test") or 0) < 1.0
    assert ledger.min_gap("s2.test") is None
    shared = ledger.min_gap_at(web.address("s1.test"))
    assert shared is not None and 0.1 <= shared < (ledger.min_gap("s1.test") or 0)
    assert len(ledger.gaps_at(web.address("s1.test"))) == 2


def _record(n: int, host: str, arrival: float, done: float | None, address: str = "127.0.1.1",
            scheme: str = "http") -> dict[str, object]:
    return {"id": n, "conn": n, "arrival": arrival, "done": done, "scheme": scheme,
            "sni": None, "host_header": host, "host": host, "local_address": address,
            "local_port": 80, "remote_address": "127.0.0.1", "remote_port": 40000 + n,
            "target": "/", "method": "GET", "version": "HTTP/1.1", "user_agent": None,
            "in_flight": None, "status": 200, "body_bytes": 0, "served_by": host,
            "outcome": "ok"}


def test_ledger_helpers_on_hand_made_records() -> None:
    ledger = Ledger([
        _record(1, "a.test", 10.0, 12.0),
        _record(2, "a.test", 11.0, 11.5, scheme="https"),  # inside 1: two at once
        _record(3, "a.test", 12.0, 13.0),  # starts as 1 ends: no overlap with it
        _record(4, "b.test", 12.5, None),  # still open: counts to the end (13.0)
        _record(5, "c.test", 12.75, 12.8, address="127.0.1.2"),
    ])
    assert ledger.max_in_flight("a.test") == 2
    assert ledger.max_in_flight("b.test") == 1
    assert ledger.max_in_flight_at("127.0.1.1") == 2  # 3 and 4 overlap on one address
    assert ledger.gaps("a.test") == [1.0, 1.0]
    assert ledger.min_gap("a.test") == 1.0
    assert ledger.gaps_at("127.0.1.1") == [1.0, 1.0, 0.5]
    assert ledger.min_gap_at("127.0.1.1") == 0.5
    assert ledger.min_gap("c.test") is None
    assert ledger.count("a.test", "/") == 3 and ledger.hosts() == {"a.test", "b.test", "c.test"}


# ---------------------------------------------------------------- control


def test_dns_records_and_pages_change_while_the_web_runs(web: RealWebProcess) -> None:
    c = web.address("c.test")
    web.set_dns("moved.test", Name(a=[c], ttl=5))
    assert answers(web, "moved.test") == [c]
    web.set_dns("moved.test", Name(fail="servfail"))
    assert ask(web, "moved.test").header.rcode == RCODE.SERVFAIL
    web.set_page("c.test", "/fresh?b&a", page("fresh"))
    assert get(web, "c.test", "/fresh?b&a").body == b"fresh"
    web.set_page("c.test", "/fresh?b&a", None)
    assert get(web, "c.test", "/fresh?b&a").status == 404
    with pytest.raises(RuntimeError, match=r"400.*loopback"):  # checked in the web too
        web.control("POST", "/dns", {"name": "evil.test", "entry": {"a": ["8.8.8.8"]}})
    assert ask(web, "evil.test").header.rcode == RCODE.NXDOMAIN


def test_reset_forgets_requests_handshakes_and_questions(web: RealWebProcess) -> None:
    get(web, "c.test", scheme="https")
    web.reset()
    assert len(web.ledger()) == 0 and web.tls_handshakes() == [] and web.dns_questions() == []


# ---------------------------------------------------------------- other webs


def test_high_ports_web_of_hosts_is_reachable_by_following_links() -> None:
    """``web_of`` on high ports: URLs and links carry the ports, and a plain
    breadth-first walk through the web's DNS fetches every page of every host."""
    spec = web_of(4, 2, ports="high")
    with RealWebProcess(spec) as web:
        assert web.http_port >= 1024 and web.https_port >= 1024
        assert web.url("h1.test") == f"http://h1.test:{web.http_port}/"
        assert len({web.address(h.name) for h in spec.hosts}) == 4
        seen: set[str] = set()
        queue = [web.url("h1.test")]
        while queue:
            url = queue.pop(0)
            if url in seen:
                continue
            seen.add(url)
            parts = urlsplit(url)
            assert parts.hostname is not None and parts.port == web.http_port
            response = get(web, parts.hostname, parts.path)
            assert response.status == 200
            queue += [urljoin(url, href) for href in hrefs(response.body)]
        assert len(seen) == 4 * 3
        assert {r.host for r in web.ledger()} == {"h1.test", "h2.test", "h3.test", "h4.test"}
        assert ("robots", get(web, "h2.test", "/robots.txt").body) == (
            "robots", b"User-agent: *\nAllow: /\n")


def test_two_hundred_names_on_one_address() -> None:
    names = [f"site{i}.test" for i in range(200)]
    with RealWebProcess(Web(shared_hosting(names), ports="high")) as web:
        assert {web.address(n) for n in names} == {web.address("site0.test")}
        for name in ("site0.test", "site77.test", "site199.test"):
            response = get(web, name, scheme="https")
            assert response.body == f"<h1>{name}</h1>\n".encode()
        assert answers(web, "site150.test") == [web.address("site0.test")]


def test_upgrade_redirect_carries_the_https_port_on_high_ports(
        realweb: Callable[..., RealWebProcess]) -> None:
    web = realweb(Web([Host("up.test", upgrade=True, pages={"/": page("x")})], ports="high"))
    location = get(web, "up.test", "/?q=%41").headers["location"]
    assert location == f"https://up.test:{web.https_port}/?q=%41"


def test_two_webs_at_once_get_disjoint_addresses() -> None:
    """A second web finds the first block busy (same ports) and moves to another."""
    if not IS_ROOT:
        pytest.skip("on high ports two webs differ by port and need not move")
    with RealWebProcess(web_of(2, 1)) as first, RealWebProcess(web_of(2, 1)) as second:
        assert (first.http_port, first.https_port) == (second.http_port, second.https_port)
        assert not first.layout.addresses() & second.layout.addresses()
        for web in (first, second):
            assert get(web, "h2.test", "/p/1", "https").status == 200
            assert web.ledger().targets("h2.test") == [b"/p/1"]


# ---------------------------------------------------------------- safety and life cycle


@pytest.mark.parametrize("address", ["10.0.0.1", "192.0.2.7", "0.0.0.0", "localhost", "::"])
def test_non_loopback_addresses_are_refused(address: str) -> None:
    with pytest.raises(ValueError, match=r"loopback|literal"):
        Host("a.test", address=address)
    with pytest.raises(ValueError, match="loopback"):
        Name(a=["8.8.8.8"])


def test_the_server_refuses_a_spec_with_a_non_loopback_address(tmp_path: Path) -> None:
    """The subprocess checks the spec it is given, not only the dataclasses that wrote it."""
    spec = json.loads(Web([Host("a.test")]).to_json())
    spec["hosts"][0]["address"] = "192.0.2.1"
    (tmp_path / "web.json").write_text(json.dumps(spec))
    done = subprocess.run(
        [sys.executable, "-m", "tests.realweb", "serve", "--spec", str(tmp_path / "web.json"),
         "--ca-dir", str(tmp_path / "ca")],
        cwd=REPO_ROOT, capture_output=True, timeout=20, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert b"loopback" in done.stderr and b"192.0.2.1" in done.stderr
    assert done.stdout == b""  # never READY


def _gone(pid: int, within: float) -> bool:
    """Whether process ``pid`` has ended (a zombie no one reaped yet counts), waiting
    up to ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except FileNotFoundError:
            return True
        if "\nState:\tZ" in status:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def test_stop_ends_the_process_and_frees_its_ports() -> None:
    spec = Web([Host("a.test", address="127.0.9.9")], ports="high")
    with RealWebProcess(spec) as web:
        pid, port = web.pid, web.http_port
        assert get(web, "a.test").status == 404
    assert _gone(pid, 1.0)  # stop() waited for it
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.9.9", port), timeout=2)


def test_the_web_goes_away_with_a_killed_test_process() -> None:
    """A test process killed outright (no cleanup at all) still leaves no web behind:
    the web stops when its standard input ends."""
    code = ("import sys, time\n"
            "from tests.realweb import Host, RealWebProcess, Web\n"
            "web = RealWebProcess(Web([Host('a.test')], ports='high')).start()\n"
            "print(web.pid, flush=True)\n"
            "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT,
                              stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    child = None
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert not _gone(child, 0.2)
        parent.send_signal(signal.SIGKILL)
        parent.wait(5)
        assert _gone(child, 5.0)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
        if child is not None and not _gone(child, 0):
            os.kill(child, signal.SIGKILL)  # only if the test failed: never leak it
