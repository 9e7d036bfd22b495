"""Running the same crawl command again: the crawl says it continues, and when
nothing is left, says so and how to start afresh (a real ``scrapy crawl`` on
the real-socket web, twice on one job folder)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.crawl_runner import REALWEB_DEFAULTS, REPO, proxy_env, realweb_settings, run_crawl
from tests.realweb import Host, RealWebProcess, Web, links_to, page

pytestmark = pytest.mark.crawl


def _lines(log: str, needle: str, level: str) -> list[str]:
    return [line for line in log.splitlines() if f"] {level}: " in line and needle in line]


def test_the_same_command_again_says_it_continues_and_that_nothing_is_left(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    web = realweb(Web([Host("docs.test", pages={"/": links_to("/a", "/b"), "/a": page("a"),
                                                "/b": page("b")})]))
    job = tmp_path / "job"
    settings = {**realweb_settings(web.nameserver), **REALWEB_DEFAULTS, "JOBDIR": str(job),
                "DOWNLOAD_DELAY": 0}
    first = run_crawl(None, [web.url("docs.test")], tmp_path / "first", settings, timeout=120)
    assert first.returncode == 0, first.log[-3000:]
    assert sorted(r["url"] for r in first.items) == [web.url("docs.test", p)
                                                     for p in ("/", "/a", "/b")]
    assert not _lines(first.log, "Continuing crawl", "INFO")  # a new crawl continues nothing
    assert not _lines(first.log, "Nothing was left", "WARNING")
    asked = len(web.ledger().targets("docs.test"))

    again = run_crawl(None, [web.url("docs.test")], tmp_path / "again", settings, timeout=120)
    assert again.returncode == 0, again.log[-3000:]
    assert len(web.ledger().targets("docs.test")) == asked  # nothing fetched again
    assert again.items == []
    continuing = _lines(again.log, "Continuing crawl", "INFO")
    assert len(continuing) == 1, again.log[-3000:]
    assert "Continuing crawl of spider broad (started " in continuing[0]
    assert ", 2 runs): 3 done, 0 queued, 0 dead letters, 0 refused" in continuing[0]
    nothing = _lines(again.log, "Nothing was left to do", "WARNING")
    assert len(nothing) == 1, again.log[-3000:]
    assert "(3 done, 0 dead letters, 0 refused)" in nothing[0]
    assert f"scrapy frontier delete --yes -s JOBDIR={job}" in nothing[0]
    assert "-a crawl_id=NEW" in nothing[0]
    # after the summary block, where the eye lands
    assert again.log.rstrip().splitlines()[-1] == nothing[0]


def _frontier(job: Path, sub: str) -> str:
    done = subprocess.run([sys.executable, "-m", "scrapy", "frontier", sub,
                           "-s", f"JOBDIR={job}"], cwd=REPO, env=proxy_env(None),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_resumed_crawl_keeps_how_it_was_started_and_says_what_it_was_given_again(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    # Each seed site has four pages and links to a site of another registered
    # domain: only scope=any follows it. The first run is started with
    # scope=any and a budget of 2 pages a host; the second is given neither, and
    # must crawl as the crawl was started; the third gives another budget.
    sites = []
    for name in ("one", "two", "three"):
        sites += [Host(f"{name}.test", pages={
            "/": links_to("/1", "/2", "/3", f"http://{name}-out.example/"),
            **{f"/{i}": page(f"{name} {i}") for i in (1, 2, 3)}}),
            Host(f"{name}-out.example", pages={"/": page("outside")})]
    web = realweb(Web(sites))
    job = tmp_path / "job"
    common = {**realweb_settings(web.nameserver), **REALWEB_DEFAULTS, "JOBDIR": str(job),
              "DOWNLOAD_DELAY": 0}

    def crawl(name: str, run: str, settings: dict[str, Any], args: dict[str, str]) -> str:
        result = run_crawl(None, [web.url(f"{name}.test")], tmp_path / run,
                           {**common, **settings}, timeout=120, spider_args=args)
        assert result.returncode == 0, result.log[-3000:]
        return result.log

    def fetched(name: str) -> list[bytes]:
        return [t for t in web.ledger().targets(name) if t != b"/robots.txt"]

    first = crawl("one", "first", {"BUDGET_HOST_PAGES": 2}, {"scope": "any"})
    assert len(fetched("one.test")) == 2 and fetched("one-out.example") == [b"/"]
    assert not _lines(first, "Crawl of spider broad", "INFO")  # nothing to compare with

    second = crawl("two", "second", {}, {})
    assert len(fetched("two.test")) == 2, second[-3000:]  # the budget it was started with
    assert fetched("two-out.example") == [b"/"]  # and its scope
    assert not _lines(second, "was started with BUDGET", "INFO")  # nothing given differs
    kept = _lines(second, "Crawl of spider broad keeps what it was started with: ", "INFO")
    assert len(kept) == 1, second[-3000:]  # one line says why this run crawls as it does
    assert "SCOPE=any (the project's: domain)" in kept[0]
    assert "BUDGET_HOST_PAGES=2 (the project's: 0)" in kept[0]

    third = crawl("three", "third", {"BUDGET_HOST_PAGES": 3}, {})
    assert len(fetched("three.test")) == 3, third[-3000:]
    said = _lines(third, "was started with BUDGET_HOST_PAGES=2", "INFO")
    assert len(said) == 1 and "this run gives 3, which applies" in said[0], said
    assert fetched("three-out.example") == [b"/"]

    status = _frontier(job, "status")
    crawl_line = next(line for line in status.splitlines() if line.startswith("Crawl  "))
    assert ", 3 runs; " in crawl_line and "SCOPE=any" in crawl_line, status
    assert "BUDGET_HOST_PAGES=3" in crawl_line  # kept for the runs after
    # the scope the workers crawl with is the crawl's, not this command's settings
    assert _frontier(job, "scope").startswith(
        "scope: scope=any  [the crawl's settings, as it was started and given since]"), _frontier(
        job, "scope")


def test_the_printed_command_continues_a_stopped_crawl_of_loopback_names_to_its_end(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    # The newcomer's first crawl: a 30-page site whose name resolves to a
    # loopback address, allowed with -s, stopped after a few pages. Its summary
    # prints the command that continues it; run exactly so (with this machine's
    # DNS, and no allow-list), it must fetch every page that was left.
    paths = [f"/ch{i}" for i in range(1, 30)]
    web = realweb(Web([Host("book.test", pages={
        "/": links_to(*paths), **{p: page(f"chapter {p}") for p in paths}})]))
    job = tmp_path / "job"
    first = run_crawl(None, [web.url("book.test")], tmp_path / "first", {
        **realweb_settings(web.nameserver), **REALWEB_DEFAULTS, "JOBDIR": str(job),
        "DOWNLOAD_DELAY": 0, "CONCURRENT_REQUESTS_PER_DOMAIN": 1, "CLOSESPIDER_PAGECOUNT": 5},
        timeout=120, spider_args={"crawl_id": "slow"})
    assert first.returncode == 0, first.log[-3000:]
    said = [line for line in first.log.splitlines() if "continue with: " in line]
    assert len(said) == 1, first.log[-3000:]
    command = shlex.split(said[0].split("continue with: ", 1)[1])
    assert command == ["scrapy", "crawl", "broad", "-a", "crawl_id=slow", "-s", f"JOBDIR={job}"]
    fetched_first = len(first.items)
    assert 1 <= fetched_first < 30

    log = tmp_path / "again.log"
    again = subprocess.run(
        [sys.executable, "-m", *command, "-s", f"DNS_NAMESERVERS={web.nameserver}",
         "-s", "ADDRESS_GUARD_RESOLVER=tests.loopback_resolver.LoopbackOnlyResolver",
         "-s", "CLOSESPIDER_TIMEOUT=90", "-s", "PROMETHEUS_ENABLED=False",
         "-s", f"LOG_FILE={log}", "-o", str(tmp_path / "again.jsonl")],
        cwd=REPO, env=proxy_env(None), capture_output=True, text=True, timeout=150)
    text = log.read_text()
    assert again.returncode == 0, text[-3000:]
    assert "ADDRESS_GUARD_ALLOW_RESOLVED=127.0.0.0/8" in text  # kept, and said so
    targets = [t for t in web.ledger().targets("book.test") if t != b"/robots.txt"]
    assert sorted(targets) == sorted([b"/", *(p.encode() for p in paths)])  # once each
    assert len((tmp_path / "again.jsonl").read_text().splitlines()) == 30 - fetched_first
