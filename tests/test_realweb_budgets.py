"""Budgets on the real-socket web: what the servers received.

Two workers of one frontier crawl sites whose home pages link to twenty pages
each: under ``BUDGET_HOST_PAGES`` each site's server sees exactly that many
page requests (its robots.txt aside), however the two workers share the
work; the rest of each queue is a dead letter with reason ``budget``, and a
small site under its budget is crawled whole. Under ``BUDGET_DOMAIN_PAGES``
the sites of one registered domain share one budget; under
``BUDGET_HOST_BYTES`` a site ends after the answer that spent it.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from crawler.frontier.admin import FrontierAdmin
from crawler.frontier.keys import Keys
from tests.crawl_runner import (
    REALWEB_DEFAULTS,
    crawl_realweb,
    finish_crawl,
    realweb_settings,
    start_crawl,
)
from tests.realweb import Host, RealWebProcess, Web, links_to, page
from tests.realweb.sites import ALLOW_ALL

pytestmark = pytest.mark.crawl


def _site(name: str, pages: int, size: int | None = None) -> Host:
    paths = [f"/p{i}" for i in range(pages)]
    return Host(name, robots=ALLOW_ALL, pages={
        "/": links_to(*paths), **{path: links_to("/", size=size) for path in paths}})


def _pages(web: RealWebProcess, name: str) -> list[bytes]:
    return [t for t in web.ledger().targets(name) if t != b"/robots.txt"]


def test_a_page_budget_holds_for_two_workers_and_ends_the_rest_as_dead_letters(
        realweb: Callable[..., RealWebProcess], redis_url: str, redis_prefix: str,
        tmp_path: Path) -> None:
    web = realweb(Web([_site("a.test", 20), _site("b.test", 20), _site("small.test", 2)]))
    namespace = f"{redis_prefix}budget"
    settings = {**realweb_settings(web.nameserver), **REALWEB_DEFAULTS,
                "DOWNLOAD_DELAY": 0.05, "ADDRESS_GUARD_ALLOW": "127.0.0.0/8",
                "BUDGET_HOST_PAGES": 5, "REDIS_URL": redis_url,
                "FRONTIER_NAMESPACE": namespace, "SCOPE_SETTLE_SECONDS": 0}
    seeds = [web.url(name) for name in ("a.test", "b.test", "small.test")]
    started = time.monotonic()
    workers = [start_crawl(None, seeds, tmp_path / f"w{i}", settings) for i in (1, 2)]
    results = [finish_crawl(proc, tmp_path / f"w{i}", started, 120)
               for i, proc in zip((1, 2), workers, strict=True)]
    for result in results:
        assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
    for name in ("a.test", "b.test"):
        pages = _pages(web, name)
        assert len(pages) == 5 and len(set(pages)) == 5, pages
        assert pages[0] == b"/"
    assert sorted(_pages(web, "small.test")) == [b"/", b"/p0", b"/p1"]  # under its budget
    admin = FrontierAdmin(redis.Redis.from_url(redis_url), Keys(namespace, partitions=16))
    letters = admin.dead(reason="budget")
    assert len(letters) == 2 * 16  # 21 URLs a site, 5 fetched
    assert {letter.host for letter in letters} == {"http://a.test:80", "http://b.test:80"}
    assert all("spent the site's 5 pages" in letter.error for letter in letters)
    log = "".join(result.log for result in results)
    assert "Budget: a.test spent the site's 5 pages; 16 queued URL(s) are dead letters" in log
    assert sum(int(result.stat("budget/ended") or 0) for result in results) == 32


def test_a_domain_budget_is_shared_by_its_sites_and_a_byte_budget_ends_a_site(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    web = realweb(Web([_site("www.d.test", 6), _site("docs.d.test", 6),
                       _site("big.test", 10, size=10_000)]))
    seeds = [web.url(name) for name in ("www.d.test", "docs.d.test", "big.test")]
    result = crawl_realweb(web.nameserver, seeds, tmp_path, {
        "DOWNLOAD_DELAY": 0.05, "ADDRESS_GUARD_ALLOW": "127.0.0.0/8",
        "BUDGET_DOMAIN_PAGES": 8, "BUDGET_HOST_BYTES": 25_000})
    in_domain = _pages(web, "www.d.test") + _pages(web, "docs.d.test")
    assert len(in_domain) == 8
    assert b"/" in _pages(web, "www.d.test") and b"/" in _pages(web, "docs.d.test")
    # the home page (small), then 10 kB pages: the third brings it past 25 kB
    assert len(_pages(web, "big.test")) == 4
    assert "spent the domain's 8 pages" in result.log
    assert "Budget: big.test spent the site's 25,000 bytes" in result.log


def test_under_a_page_budget_the_most_linked_pages_go_first(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    """A site whose most linked pages sit three links deep (bench/priorities.py,
    smaller): under a 20-page budget breadth-first fetches none of them, and
    inlink priority (on by default under a page budget) fetches them before
    the lists that link to them are all fetched."""
    rng = random.Random(3)
    pages = {"/": links_to(*(f"/s{i}" for i in range(3)))}
    for i in range(3):
        pages[f"/s{i}"] = links_to(*(f"/s{i}/l{j}" for j in range(6)))
        for j in range(6):
            tops = [f"/top/{t}" for t in rng.sample(range(20), 10)]
            leaves = [f"/s{i}/l{j}/p{k}" for k in range(5)]
            pages[f"/s{i}/l{j}"] = links_to(*tops, *leaves)
            pages |= {leaf: links_to() for leaf in leaves}
    pages |= {f"/top/{t}": links_to() for t in range(20)}
    web = realweb(Web([Host("a.test", robots=ALLOW_ALL, pages=pages)]))
    shares = {}
    for inlinks in (False, True):
        web.reset()
        crawl_realweb(web.nameserver, [web.url("a.test")], tmp_path / str(inlinks), {
            "DOWNLOAD_DELAY": 0.02, "ADDRESS_GUARD_ALLOW": "127.0.0.0/8",
            "BUDGET_HOST_PAGES": 20, "LEARN_ENABLED": False,
            **({} if inlinks else {"FRONTIER_INLINK_PRIORITY": False})})
        fetched = _pages(web, "a.test")
        assert len(fetched) == 20
        shares[inlinks] = sum(1 for t in fetched if t.startswith(b"/top/"))
    assert shares[False] == 0  # breadth-first: the home, 3 sections and 16 of 18 lists
    assert shares[True] >= 4, shares


def _urlset(*entries: tuple[str, str, str]) -> str:
    urls = "".join(f"<url><loc>{loc}</loc><priority>{prio}</priority>"
                   + (f"<lastmod>{mod}</lastmod>" if mod else "") + "</url>"
                   for loc, prio, mod in entries)
    return ('<?xml version="1.0" encoding="UTF-8"?>'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>')


def test_a_sitemap_seed_line_seeds_the_crawl_and_its_priorities_spend_the_budget(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    """A seed line that is a sitemap index: its sitemap's pages are crawled,
    the site's most important and freshest first, so a budget of five URLs
    (the two sitemaps and three pages) buys the three it ranks highest."""
    fresh = time.strftime("%Y-%m-%d", time.gmtime())
    index = ('<?xml version="1.0" encoding="UTF-8"?>'
             '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
             '<sitemap><loc>http://a.test/sm1.xml</loc></sitemap></sitemapindex>')
    urlset = _urlset(("http://a.test/low", "0.1", ""), ("http://a.test/mid", "0.5", ""),
                     ("http://a.test/old", "0.9", "2001-01-01"),
                     ("http://a.test/high", "0.9", fresh), ("http://a.test/top", "1.0", ""))
    web = realweb(Web([Host("a.test", robots=ALLOW_ALL, pages={
        "/sitemap.xml": page(index, content_type="application/xml"),
        "/sm1.xml": page(urlset, content_type="application/xml"),
        **{f"/{name}": links_to() for name in ("low", "mid", "old", "high", "top")}})]))
    result = crawl_realweb(web.nameserver, ["http://a.test/sitemap.xml"], tmp_path, {
        "DOWNLOAD_DELAY": 0.05, "ADDRESS_GUARD_ALLOW": "127.0.0.0/8",
        "BUDGET_HOST_PAGES": 5, "CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    fetched = _pages(web, "a.test")
    assert fetched[:2] == [b"/sitemap.xml", b"/sm1.xml"]
    # high: 0.9 and fresh (+3); top: 1.0 (+2); old: 0.9 but unchanged for years (+1)
    assert fetched[2:] == [b"/high", b"/top", b"/old"]
    assert int(result.stat("broad/sitemaps/seeded")) == 1
    assert int(result.stat("broad/sitemaps/read")) == 2


def test_site_rules_give_a_site_its_own_pace_budget_and_scope(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    """SITE_RULES: slow.test gets a 0.4 s delay, one request at a time and a
    3-page budget; partner.test, off the seeds' domains, is let in by its
    rule; other.test, also linked, is not."""
    web = realweb(Web([
        Host("slow.test", robots=ALLOW_ALL, pages={
            "/": links_to(*(f"/p{i}" for i in range(6)), "http://partner.test/x",
                          "http://other.test/y"),
            **{f"/p{i}": links_to() for i in range(6)}}),
        Host("partner.test", robots=ALLOW_ALL, pages={"/x": links_to()}),
        Host("other.test", robots=ALLOW_ALL, pages={"/y": links_to()}),
    ]))
    rules = tmp_path / "sites.jsonl"
    rules.write_text('{"site": "slow.test", "delay": 0.4, "concurrency": 1, "budget_pages": 3}\n'
                     '{"site": "partner.test", "scope": "include"}\n')
    result = crawl_realweb(web.nameserver, [web.url("slow.test")], tmp_path / "crawl", {
        "DOWNLOAD_DELAY": 0.05, "DOWNLOAD_DELAY_JITTER": 0, "ADDRESS_GUARD_ALLOW": "127.0.0.0/8",
        "SITE_RULES": str(rules)})
    slow = [r for r in web.ledger().for_host("slow.test") if r.target != b"/robots.txt"]
    assert len(slow) == 3
    gaps = [b.arrival - a.arrival for a, b in itertools.pairwise(slow)]
    assert min(gaps) >= 0.4 - 0.02, gaps  # its own delay, not DOWNLOAD_DELAY
    assert _pages(web, "partner.test") == [b"/x"]
    assert _pages(web, "other.test") == []
    assert "Budget: slow.test spent the site's 3 pages" in result.log
