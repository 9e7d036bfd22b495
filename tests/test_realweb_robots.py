"""robots.txt and DNS, a host's first contact, on the real-socket web (tests/realweb).

Each test runs a real ``scrapy crawl broad`` in a subprocess; names resolve
only through the web's DNS server, each host listens on its own loopback
address, HTTP and HTTPS (test CA), and the assertions are on what the servers
received (the web's ledger: scheme, host, exact request-target) and on the
frontier's dead letters as the operator's ``scrapy frontier dead`` lists them.
The simulated web proves the robots policy at scale (tests/test_robots_crawl.py)
and the DNS outcomes with tiny servers of their own (tests/test_dns_crawl.py);
here the same behaviours meet real sockets: a robots.txt redirect from HTTP
to HTTPS, two schemes of one host with different files, an IPv6-only host.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.crawl_runner import CrawlResult, crawl_realweb, frontier_dead_letters
from tests.realweb import Host, Name, RealWebProcess, Web, links_to, page, to_https

pytestmark = pytest.mark.crawl

OK = page("ok")


def crawl(web: RealWebProcess, seeds: list[str], workdir: Path, **settings: Any) -> CrawlResult:
    """A crawl of ``web`` from ``seeds`` that must end cleanly (no politeness delay)."""
    return crawl_realweb(web.nameserver, seeds, workdir, {"DOWNLOAD_DELAY": 0, **settings})


def received(web: RealWebProcess, name: str) -> Counter[tuple[str, bytes]]:
    """How often each (scheme, request-target) reached host ``name``."""
    return Counter((r.scheme, r.target) for r in web.ledger().for_host(name))


def test_robots_outcomes_on_real_sockets(realweb: Callable[..., RealWebProcess],
                                         tmp_path: Path) -> None:
    """Four hosts, one robots.txt behaviour each (RFC 9309), in one crawl:

    * ``r500.test``: robots.txt answers 500, "unreachable" [2.3.1.4]: nothing
      but that one robots.txt request reaches the host, and its URLs end as
      ``robots-unreachable`` dead letters (ROBOTS_UNREACHABLE_MAX_ATTEMPTS=1);
    * ``r404.test``: no robots.txt (404), "unavailable" [2.3.1.3]: everything
      is allowed, ``/private`` included;
    * ``up.test``: ``http://up.test/robots.txt`` redirects to the same file over
      HTTPS; the redirect is followed [2.3.1.2] and the rules found there
      (``Disallow: /private``) apply to the HTTP URLs: ``/private`` is never
      requested, ``/public`` is;
    * ``two.test``: the HTTP robots.txt disallows ``/x``, the HTTPS one allows
      everything. Robots rules belong to one scheme and authority [2.3]:
      ``http://two.test/x`` is never requested, ``https://two.test/x`` is, and
      each scheme's robots.txt is fetched once, on its own scheme.
    """
    private_rule = "User-agent: *\nDisallow: /private\n"
    site = {"/": links_to("/public", "/private"), "/public": OK, "/private": OK}
    web = realweb(Web([
        Host("r500.test", robots=500, pages=site),
        Host("r404.test", robots=None, pages=site),
        Host("up.test", robots=private_rule, pages=site,
             http_pages={"/robots.txt": to_https()}),
        Host("two.test", robots="User-agent: *\nAllow: /\n",
             http_pages={"/robots.txt": page("User-agent: *\nDisallow: /x\n",
                                             content_type="text/plain")},
             pages={"/": links_to("/x", "/y", "https://two.test/x"), "/x": OK, "/y": OK}),
    ]))
    workdir = tmp_path / "crawl"
    result = crawl(web, [web.url(name) for name in ("r500.test", "r404.test", "up.test",
                                                    "two.test")],
                   workdir, ROBOTS_UNREACHABLE_MAX_ATTEMPTS=1)

    assert received(web, "r500.test") == Counter({("http", b"/robots.txt"): 1})
    assert received(web, "r404.test") == Counter({
        ("http", b"/robots.txt"): 1, ("http", b"/"): 1, ("http", b"/public"): 1,
        ("http", b"/private"): 1})
    assert received(web, "up.test") == Counter({
        ("http", b"/robots.txt"): 1, ("https", b"/robots.txt"): 1, ("http", b"/"): 1,
        ("http", b"/public"): 1})
    assert received(web, "two.test") == Counter({
        ("http", b"/robots.txt"): 1, ("http", b"/"): 1, ("http", b"/y"): 1,
        ("https", b"/robots.txt"): 1, ("https", b"/x"): 1})
    # /private on up.test and http://two.test/x
    assert result.stat("robots/denied") == "2"

    dead = frontier_dead_letters(workdir)
    assert {(d["url"], d["reason"]) for d in dead} == {
        (web.url("r500.test"), "robots-unreachable")}, dead


def test_sitemaps_listed_in_robots_txt_seed_the_crawl_when_asked(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    """With ``ROBOTS_SITEMAPS`` on, the sitemap robots.txt names is fetched
    once its rules are stored, and the pages it lists are crawled although no
    page links to them; its disallowed page still is not, and a host whose
    robots.txt names no sitemap gets no sitemap request.
    """
    urlset = ("<?xml version='1.0' encoding='UTF-8'?>"
              "<urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'>"
              "<url><loc>http://map.test/listed</loc></url>"
              "<url><loc>http://map.test/private/listed</loc></url></urlset>")
    web = realweb(Web([
        Host("map.test", robots="User-agent: *\nDisallow: /private\n"
                                "Sitemap: http://map.test/sitemap.xml\n",
             pages={"/": OK, "/sitemap.xml": page(urlset, content_type="application/xml"),
                    "/listed": OK, "/private/listed": OK}),
        Host("plain.test", robots="User-agent: *\nAllow: /\n",
             pages={"/": OK, "/sitemap.xml": page(urlset, content_type="application/xml")}),
    ]))
    result = crawl(web, [web.url("map.test"), web.url("plain.test")], tmp_path / "crawl",
                   ROBOTS_SITEMAPS=True)

    targets = [r.target for r in web.ledger().for_host("map.test")]
    assert Counter(targets) == Counter({b"/robots.txt": 1, b"/": 1, b"/sitemap.xml": 1,
                                        b"/listed": 1})
    assert targets.index(b"/robots.txt") < targets.index(b"/sitemap.xml") \
        < targets.index(b"/listed")
    assert received(web, "plain.test") == Counter({("http", b"/robots.txt"): 1,
                                                  ("http", b"/"): 1})
    assert (result.stat("robots/sitemaps_listed"), result.stat("broad/sitemaps/queued"),
            result.stat("broad/sitemaps/read")) == ("1", "1", "1")


def test_dns_failure_of_one_seed_leaves_the_other_hosts_whole(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    """A web with an IPv4 host, an IPv6-only host (AAAA ``::1`` only) and a seed
    whose name does not exist (NXDOMAIN from the web's DNS server):

    * the crawl finishes quickly (the bad name is parked at once, not retried
      as a download error with backoff);
    * both hosts are crawled completely, each on its own address;
    * no request for the bad name reaches any server, but its name was asked;
    * ``scrapy frontier dead`` lists both of its URLs as ``dns-nxdomain``.
    """
    site = {"/": links_to("/a", "/b"), "/a": links_to("/c"), "/b": OK, "/c": OK}
    web = realweb(Web([
        Host("ok.test", robots="User-agent: *\nAllow: /\n", pages=site),
        Host("v6.test", robots="User-agent: *\nAllow: /\n", pages=site, ipv4=False,
             ipv6=True),
    ], dns={"gone.test": Name(fail="nxdomain")}))
    gone = ["http://gone.test/", "http://gone.test/x"]
    workdir = tmp_path / "crawl"
    result = crawl(web, [web.url("ok.test"), web.url("v6.test"), *gone], workdir)

    assert result.seconds < 45, result.seconds
    everything = sorted([b"/robots.txt", b"/", b"/a", b"/b", b"/c"])
    ledger = web.ledger()
    for name in ("ok.test", "v6.test"):
        assert sorted(ledger.targets(name)) == everything, name
        assert {r.local_address for r in ledger.for_host(name)} == {web.address(name)}
    assert web.address("v6.test") == "::1"
    assert ledger.hosts() == {"ok.test", "v6.test"}
    assert web.dns_questions("gone.test"), "the bad name was never looked up"

    dead = frontier_dead_letters(workdir)
    assert sorted((d["url"], d["reason"]) for d in dead) == [
        (url, "dns-nxdomain") for url in sorted(gone)], dead
    assert all("NXDOMAIN" in d["error"] for d in dead), dead
    assert "parked (dns-nxdomain)" in result.log


def test_a_long_url_is_judged_and_requested_when_urllength_limit_allows_it(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    """google/robotstxt's long-URL case: a rule matching a path of 16 KB. With
    URLLENGTH_LIMIT above that, the allowed long URL is requested, byte for
    byte, and the disallowed one is not."""
    long_path = "/x" + "/" + "a" * 16_000
    robots = f"User-agent: *\nDisallow: /x/{'a' * 15_000}b\nAllow: /\n"
    web = realweb(Web([Host("long.test", robots=robots, pages={
        "/": links_to(long_path, long_path[:15_003] + "b"),
        long_path: page("a long way down")})]))
    result = crawl_realweb(web.nameserver, [web.url("long.test")], tmp_path,
                           {"DOWNLOAD_DELAY": 0, "URLLENGTH_LIMIT": 20_000})
    targets = sorted(r.target for r in web.ledger())
    assert targets == sorted([b"/", long_path.encode(), b"/robots.txt"])
    assert result.stat("robots/denied") == "1"
