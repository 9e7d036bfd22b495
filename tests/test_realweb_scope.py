"""A crawl's scope on the real-socket web: what the servers received.

One seed, ``http://a.test/``, whose pages link to another site of its
registered domain (``docs.a.test``) and off it (``b.test/b1``,
``c.test/direct``); ``b.test/b1`` links on (``b.test/b2``, ``c.test/``).
With ``SCOPE = "domain"`` and ``SCOPE_HOPS = 1`` (what the spider's
``scope`` and ``hops`` arguments set: tests/test_spider_args.py): both sites
of ``a.test`` are crawled, the off-scope pages linked from them are fetched,
and nothing linked from those; the dropped links are counted by rule and
the off-scope hosts reported with their link counts.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.crawl_runner import (
    REALWEB_DEFAULTS,
    crawl_realweb,
    finish_crawl,
    realweb_settings,
    start_crawl,
)
from tests.frontier_harness import frontier_command
from tests.realweb import Host, RealWebProcess, Web, links_to, redirect
from tests.realweb.sites import ALLOW_ALL

pytestmark = pytest.mark.crawl


def test_a_domain_scope_with_one_hop_fetches_exactly_the_pages_linked_from_it(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    web = realweb(Web([
        Host("a.test", robots=ALLOW_ALL, pages={
            "/": links_to("/a1", "http://docs.a.test/", "http://b.test/b1"),
            "/a1": links_to("/", "http://c.test/direct")}),
        Host("docs.a.test", robots=ALLOW_ALL, pages={"/": links_to("/d1"), "/d1": links_to()}),
        Host("b.test", robots=ALLOW_ALL, pages={
            "/b1": links_to("/b2", "http://c.test/"), "/b2": links_to()}),
        Host("c.test", robots=ALLOW_ALL, pages={"/": links_to(), "/direct": links_to()}),
    ]))
    result = crawl_realweb(web.nameserver, [web.url("a.test")], tmp_path, {
        "DOWNLOAD_DELAY": 0.05, "ADDRESS_GUARD_ALLOW": "127.0.0.0/8",
        "SCOPE": "domain", "SCOPE_HOPS": 1})
    ledger = web.ledger()
    assert sorted(ledger.targets("a.test")) == [b"/", b"/a1", b"/robots.txt"]
    assert sorted(ledger.targets("docs.a.test")) == [b"/", b"/d1", b"/robots.txt"]
    assert sorted(ledger.targets("b.test")) == [b"/b1", b"/robots.txt"]  # one hop
    assert sorted(ledger.targets("c.test")) == [b"/direct", b"/robots.txt"]  # linked from a.test
    # b.test/b2 and c.test/ were linked from b.test/b1, a page one hop off scope
    assert int(result.stat("scope/rejected/domain")) == 2
    assert int(result.stat("scope/hops")) == 2
    assert "Scope: scope=domain, hops=1" in result.log
    assert "Hosts off scope linked most (links dropped): " in result.log
    report = result.log[result.log.index("Hosts off scope linked most"):].splitlines()[0]
    assert "b.test (1)" in report and "c.test (1)" in report


def test_a_worker_follows_links_to_the_sites_another_worker_seeded(
        realweb: Callable[..., RealWebProcess], redis_url: str, redis_prefix: str,
        tmp_path: Path) -> None:
    """Two workers of one frontier, each with its own part of the seeds: the
    second's links to the first's site are in scope (the first shared its
    seeds' scope in Redis), its links elsewhere are not."""
    web = realweb(Web([
        Host("b.test", robots=ALLOW_ALL, pages={"/": links_to(), "/new": links_to()}),
        Host("a.test", robots=ALLOW_ALL, pages={
            "/": links_to("http://b.test/new", "http://c.test/x")}),
        Host("c.test", robots=ALLOW_ALL, pages={"/x": links_to()}),
    ]))
    settings = {"DOWNLOAD_DELAY": 0.05, "ADDRESS_GUARD_ALLOW": "127.0.0.0/8",
                "SCOPE": "host", "REDIS_URL": redis_url,
                "FRONTIER_NAMESPACE": f"{redis_prefix}shared"}
    crawl_realweb(web.nameserver, [web.url("b.test")], tmp_path / "w1", settings)
    second = crawl_realweb(web.nameserver, [web.url("a.test")], tmp_path / "w2", settings)
    ledger = web.ledger()
    assert sorted(ledger.targets("b.test")) == [b"/", b"/new", b"/robots.txt"]
    assert sorted(ledger.targets("a.test")) == [b"/", b"/robots.txt"]
    assert ledger.targets("c.test") == []
    assert int(second.stat("scope/rejected/host")) == 1


def test_links_to_a_site_another_worker_seeds_a_little_later_are_held_not_dropped(
        realweb: Callable[..., RealWebProcess], redis_url: str, redis_prefix: str,
        tmp_path: Path) -> None:
    """The first worker parses its page, which links to the second worker's
    site, before the second has started: the link is held while the scope
    settles, and followed once the second worker's seeds are shared."""
    web = realweb(Web([
        Host("a.test", robots=ALLOW_ALL, pages={
            "/": links_to("http://b.test/new", "http://c.test/x")}),
        Host("b.test", robots=ALLOW_ALL, pages={"/": links_to(), "/new": links_to()}),
        Host("c.test", robots=ALLOW_ALL, pages={"/x": links_to()}),
    ]))
    settings = {**realweb_settings(web.nameserver), **REALWEB_DEFAULTS,
                "DOWNLOAD_DELAY": 0.05, "ADDRESS_GUARD_ALLOW": "127.0.0.0/8",
                "SCOPE": "host", "SCOPE_SETTLE_SECONDS": 5, "REDIS_URL": redis_url,
                "FRONTIER_NAMESPACE": f"{redis_prefix}settle"}
    started = time.monotonic()
    first = start_crawl(None, [web.url("a.test")], tmp_path / "w1", settings)
    while not web.ledger().targets("a.test").count(b"/"):  # its page is parsed
        assert time.monotonic() - started < 60
        time.sleep(0.1)
    time.sleep(1.0)
    second = start_crawl(None, [web.url("b.test")], tmp_path / "w2", settings)
    one = finish_crawl(first, tmp_path / "w1", started, 120)
    two = finish_crawl(second, tmp_path / "w2", started, 120)
    assert one.returncode == 0 and two.returncode == 0, one.log[-2000:] + two.log[-2000:]
    ledger = web.ledger()
    assert sorted(ledger.targets("b.test")) == [b"/", b"/new", b"/robots.txt"]
    assert ledger.targets("c.test") == []
    assert int(one.stat("scope/held_admitted")) == 1
    assert int(one.stat("scope/rejected/host")) == 1  # c.test, when the hold ended


def test_redirects_are_decided_by_the_scope_and_a_seeds_redirect_is_a_seed(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    """A page's redirect off scope is not followed (and its host never asked
    for robots.txt); a redirect within its host is; a seed's redirect to
    another site makes that site a seed, whose links are then in scope."""
    web = realweb(Web([
        Host("a.test", robots=ALLOW_ALL, pages={
            "/": links_to("/moved", "/slash"),
            "/moved": redirect("http://b.test/x"),
            "/slash": redirect("/slash/"),
            "/slash/": links_to()}),
        Host("b.test", robots=ALLOW_ALL, pages={"/x": links_to()}),
        Host("old.test", robots=ALLOW_ALL, pages={"/": redirect("http://new.test/")}),
        Host("new.test", robots=ALLOW_ALL, pages={"/": links_to("/n1"), "/n1": links_to()}),
    ]))
    result = crawl_realweb(web.nameserver, [web.url("a.test"), web.url("old.test")], tmp_path, {
        "DOWNLOAD_DELAY": 0.05, "ADDRESS_GUARD_ALLOW": "127.0.0.0/8", "SCOPE": "host"})
    ledger = web.ledger()
    assert sorted(ledger.targets("a.test")) == [b"/", b"/moved", b"/robots.txt", b"/slash",
                                                b"/slash/"]
    assert ledger.targets("b.test") == []
    assert sorted(ledger.targets("new.test")) == [b"/", b"/n1", b"/robots.txt"]
    assert int(result.stat("scope/redirects_dropped")) == 1
    assert int(result.stat("scope/seed_redirects")) == 1
    assert "Scope: seed http://old.test/ redirects to http://new.test/, a seed too" in result.log


def test_a_scope_narrowed_live_ends_the_queued_urls_it_puts_out_for_every_worker(
        realweb: Callable[..., RealWebProcess], redis_url: str, redis_prefix: str,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Two workers crawl a paced site; an operator excludes half of its pages
    while they run: no excluded page is requested after the change, the
    excluded pages still queued are dead letters (out-of-scope), and the
    rest of the site is crawled."""
    paths = [f"/p{i}" for i in range(30)]
    web = realweb(Web([Host("a.test", robots=ALLOW_ALL, pages={
        "/": links_to(*paths), **{path: links_to() for path in paths}})]))
    namespace = f"{redis_prefix}live"
    settings = {**realweb_settings(web.nameserver), **REALWEB_DEFAULTS,
                "DOWNLOAD_DELAY": 0.2, "ADDRESS_GUARD_ALLOW": "127.0.0.0/8",
                "REDIS_URL": redis_url, "FRONTIER_NAMESPACE": namespace}
    started = time.monotonic()
    workers = [start_crawl(None, [web.url("a.test")], tmp_path / f"w{i}", settings)
               for i in (1, 2)]
    while len(web.ledger().targets("a.test")) < 6:  # robots.txt, /, a few pages
        assert time.monotonic() - started < 60
        time.sleep(0.05)
    code, _, err = frontier_command(monkeypatch, capsys, "scope", "--exclude", "re:/p1[0-9]$",
                                    REDIS_URL=redis_url, FRONTIER_NAMESPACE=namespace)
    changed = time.time()
    assert code == 0, err
    results = [finish_crawl(proc, tmp_path / f"w{i}", started, 120)
               for i, proc in zip((1, 2), workers, strict=True)]
    for result in results:
        assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
    requests = web.ledger().for_host("a.test")
    excluded = [r for r in requests if re.fullmatch(rb"/p1[0-9]", r.target)]
    # every worker reads the change within a second; a lease taken before it may still go
    assert all(r.arrival < changed + 1.5 for r in excluded), [(r.target, r.arrival - changed)
                                                              for r in excluded]
    ended = int(err.split(" queued URL(s) now out of scope")[0].rsplit(" ", 1)[1])
    assert ended >= 1 and len(excluded) + ended == 10, err
    others = {r.target for r in requests} - {r.target for r in excluded}
    assert others == {b"/robots.txt", b"/", *(p.encode() for p in paths
                                              if not re.fullmatch(r"/p1[0-9]", p))}
    assert any("changed for every worker by scrapy frontier scope" in r.log for r in results)
