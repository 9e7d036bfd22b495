"""Crawls of the real-socket web (tests/realweb): what the servers received, byte for byte.

Each test runs a real ``scrapy crawl broad`` in a subprocess. Its names
resolve only through the web's DNS server on 127.0.0.1, each host listens on
its own loopback address, and the assertions are on the web's ledger: the
exact request-targets that came off the wire, on which host, in what order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.crawl_runner import CrawlResult, crawl_realweb
from tests.realweb import Host, RealWebProcess, Web, links_to, page

pytestmark = pytest.mark.crawl

def crawl(web: RealWebProcess, seeds: list[str], tmp_path: Path,
          **settings: Any) -> CrawlResult:
    """A small, fast crawl: no politeness delay unless a test asks for one."""
    return crawl_realweb(web.nameserver, seeds, tmp_path / "crawl",
                         {"DOWNLOAD_DELAY": 0, **settings})


def received(web: RealWebProcess, name: str) -> Counter[bytes]:
    """How often each request-target reached host ``name``."""
    return Counter(web.ledger().targets(name))


def test_urls_are_sent_as_linked(realweb: Callable[..., RealWebProcess],
                                 tmp_path: Path) -> None:
    """Query order, bare keys, reserved characters in values, encoded and raw UTF-8
    paths and IDN hosts reach the server as a browser would send them; a second
    spelling of one page (same canonical form) is not fetched again, and tracking
    parameters leave the request."""
    ok = page("ok")
    web = realweb(Web([
        Host("a.test", pages={
            "/": links_to("/list?b=2&a=1", "/search?page", "/go?next=/a/b?c=1",
                          "/caf%C3%A9", "/na\u00efve?q=\u00fc", "/a/./b/../c",
                          "/p?utm_source=x&k=1", "/list?a=1&b=2", "/e?x=%2f&y=%2F",
                          "http://b\u00fccher.test/"),
            "/list?b=2&a=1": ok, "/search?page": ok, "/go?next=/a/b?c=1": ok,
            "/caf%C3%A9": ok, "/na%C3%AFve?q=%C3%BC": ok, "/a/c": ok, "/p?k=1": ok,
            "/e?x=%2f&y=%2F": ok,
        }),
        Host("xn--bcher-kva.test", pages={"/": page("idn")}),
    ]))
    crawl(web, [web.url("a.test", "/")], tmp_path, SCOPE="any")  # (the IDN host is off scope)

    assert received(web, "a.test") == Counter({
        b"/robots.txt": 1, b"/": 1, b"/list?b=2&a=1": 1, b"/search?page": 1,
        b"/go?next=/a/b?c=1": 1, b"/caf%C3%A9": 1, b"/na%C3%AFve?q=%C3%BC": 1,
        b"/a/c": 1, b"/p?k=1": 1, b"/e?x=%2f&y=%2F": 1,
    })
    idn = web.ledger().for_host("xn--bcher-kva.test")
    assert sorted(r.target for r in idn) == [b"/", b"/robots.txt"]
    assert {r.host_header.split(":")[0] for r in idn} == {"xn--bcher-kva.test"}


def test_robots_rules_match_what_is_sent(realweb: Callable[..., RealWebProcess],
                                         tmp_path: Path) -> None:
    """RFC 9309 matching on the path and query as sent: a site that disallows
    everything but a few exact URLs keeps those pages (sorting the query or
    adding ``=`` to a bare key would lose them), with ``*``, ``$``,
    percent-encoding and non-ASCII rules."""
    robots = "\n".join([
        "User-agent: *",
        "Disallow: /",
        "Allow: /$",
        "Allow: /list?b=2&a=1$",       # the literal query, in the site's order
        "Allow: /search?page$",        # a bare key: "?page=" would not match
        "Allow: /caf\u00e9",           # non-ASCII in the rule: compared percent-encoded
        "Allow: /*.html$",             # "*" and "$"
        "Allow: /foo/bar/baz",         # RFC 9309 2.2.2: %62%61%7A is "baz"
        "Allow: /q?x=a%3Db",           # an encoded "=" inside a value
        "",
    ])
    ok = page("ok")
    allowed = ["/list?b=2&a=1", "/search?page", "/caf%C3%A9", "/x.html",
               "/foo/bar/%62%61%7A", "/q?x=a%3Db"]
    refused = ["/list?a=1&b=2&c=3", "/search?page=1", "/x.html?v=2", "/other", "/q?x=a"]
    web = realweb(Web([Host("r.test", robots=robots, pages={
        "/": links_to("/list?b=2&a=1", "/search?page", "/caf\u00e9", "/x.html",
                      "/foo/bar/%62%61%7A", "/q?x=a%3Db", *refused),
        **{target: ok for target in allowed + refused},
    })]))
    result = crawl(web, [web.url("r.test", "/")], tmp_path)

    got = received(web, "r.test")
    assert got == Counter({b"/robots.txt": 1, b"/": 1, **{t.encode(): 1 for t in allowed}})
    assert result.stat("robots/denied") == str(len(refused))


def test_ipv6_only_and_https_hosts_are_crawled_completely(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    """A host with only an AAAA record (::1) and a host reached over HTTPS and HTTP,
    linked both ways, are crawled page by page; each request arrived on the
    host's own address."""
    web = realweb(Web([
        Host("v6.test", ipv4=False, ipv6=True, pages={
            "/": links_to("/1", "/2"), "/1": links_to("/2", "/3"), "/2": page("2"),
            "/3": page("3")}),
        Host("s.test", pages={
            "/": links_to("https://s.test/secure", "/plain"),
            "/plain": page("plain"), "/secure": links_to("http://s.test/plain", "/deep"),
            "/deep": page("deep")}),
    ]))
    crawl(web, [web.url("v6.test", "/"), web.url("s.test", "/")], tmp_path)

    ledger = web.ledger()
    v6 = ledger.for_host("v6.test")
    assert sorted(r.target for r in v6) == [b"/", b"/1", b"/2", b"/3", b"/robots.txt"]
    assert {r.local_address for r in v6} == {"::1"}
    by_scheme = sorted((r.scheme, r.target) for r in ledger.for_host("s.test"))
    assert by_scheme == [
        ("http", b"/"), ("http", b"/plain"), ("http", b"/robots.txt"),
        ("https", b"/deep"), ("https", b"/robots.txt"), ("https", b"/secure"),
    ]
    assert {r.local_address for r in ledger.for_host("s.test")} == {web.address("s.test")}


def test_one_server_on_both_schemes_has_one_politeness_budget(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    """One server on ports 80 and 443 of one address, its pages on both schemes
    linking each other, per-host limit 1 and DOWNLOAD_DELAY 0.5 s (so starts at
    least 0.25 s apart, jitter 0.5): the server never has two requests in flight
    and never two starts closer than 0.25 s, robots.txt fetches of both schemes
    included (RFC 9309 gives each scheme its own robots.txt)."""
    pages = {f"/{i}": links_to(f"https://both.test/{i + 1}", f"http://both.test/{i + 2}")
             for i in range(10)}
    web = realweb(Web([Host("both.test", pages={
        "/": links_to("https://both.test/0", "http://both.test/1"), **pages})]))
    crawl(web, [web.url("both.test", "/")], tmp_path,
          CONCURRENT_REQUESTS_PER_DOMAIN=1, DOWNLOAD_DELAY=0.5)

    ledger = web.ledger()
    seen = ledger.for_host("both.test")
    assert {r.scheme for r in seen} == {"http", "https"}
    assert sum(r.target == b"/robots.txt" for r in seen) == 2  # one per scheme
    assert len(seen) >= 14
    assert ledger.max_in_flight("both.test") == 1
    # Arrival stamps are taken when a request head is complete; a new TLS
    # connection's head arrives later after its start than a reused one's, so
    # a gap may read a few ms short of what the crawler kept between starts.
    gap = ledger.min_gap("both.test")
    assert gap is not None and gap >= 0.25 - 0.02, sorted(ledger.gaps("both.test"))[:5]
