"""Refused seeds and the end-of-crawl summary in a real ``scrapy crawl broad``.

A first crawl is often of a test server on 127.0.0.1 or localhost, which the
address guard refuses: the log must say so, once per host, with the setting
that allows it, say at the end when every seed was refused, and exit with
code 1 (scrapyd shows a failed job, not a successful one). The crawl of
an allowed seed (a simulated host, through the web's proxy) ends with the
summary block, whose page count is what the web's ledger answered.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.crawl_runner import REALWEB_DEFAULTS, realweb_settings, run_crawl
from tests.realweb import Host, RealWebProcess, Web, page
from tests.simweb import SimWebProcess

pytestmark = pytest.mark.crawl

ALL_REFUSED = "every seed was refused"


def _warnings(log: str, needle: str, level: str = "WARNING") -> list[str]:
    return [line for line in log.splitlines() if level in line and needle in line]


def test_loopback_and_localhost_seeds_are_reported_once_per_host(tmp_path: Path) -> None:
    # Nothing listens there, and nothing is connected to: the guard refuses them first.
    seeds = ["http://127.0.0.1:8101/", "http://127.0.0.1:8101/other", "http://127.0.0.1:8102/",
             "http://localhost:8101/", "http://LOCALHOST:8101/x"]
    result = run_crawl(None, seeds, tmp_path, timeout=120)
    assert result.returncode == 1, result.log[-3000:]  # a crawl that could do nothing failed
    assert "'finish_reason': 'finished'" in result.log  # it ended, it was not broken
    loopback = _warnings(result.log, "Seed refused by the address guard: 127.0.0.1 is loopback")
    assert len(loopback) == 1, result.log[-3000:]
    assert "ADDRESS_GUARD_ALLOW=127.0.0.0/8" in loopback[0]
    localhost = _warnings(result.log, "Seed refused by the address guard: localhost is localhost")
    assert len(localhost) == 1
    assert "ADDRESS_GUARD_ALLOW_HOSTS=localhost" in localhost[0]
    final = _warnings(result.log, ALL_REFUSED, "ERROR")  # the job failed
    assert len(final) == 1
    assert "5 of 5 (2 localhost, 3 loopback)" in final[0]
    # It is the last word of the crawl, after the summary block.
    assert result.log.rstrip().splitlines()[-1] == final[0]
    assert result.items == []


def test_a_crawl_with_an_allowed_seed_ends_with_its_summary(tmp_path: Path) -> None:
    with SimWebProcess(seed=2, n_hosts=4, mix="clean") as sim:
        result = run_crawl(
            sim.proxy_url, ["http://h00000.test/", "http://h00001.test/",
                            f"http://127.0.0.1:{sim.port}/"], tmp_path,
            settings={"DOWNLOAD_DELAY": 0.05, "DEPTH_LIMIT": 1, "ROBOTSTXT_OBEY": True},
            timeout=180)
        ledger = sim.ledger()
    assert result.returncode == 0, result.log[-3000:]
    assert len(_warnings(result.log, "Seed refused by the address guard: 127.0.0.1")) == 1
    assert ALL_REFUSED not in result.log
    # Pages the web answered (robots.txt aside; no redirects or retries in the clean mix).
    answered = [e for e in ledger.entries
                if e["status"] is not None and not e["path"].startswith("/robots.txt")]
    assert answered and all(e["status"] < 300 for e in answered)
    hosts = {e["host"] for e in answered}
    block = result.log[result.log.index("Crawl summary (finished, "):]
    match = re.search(r"pages fetched: (\d+) from (\d+) host\(s\)", block)
    assert match, block
    assert (int(match.group(1)), int(match.group(2))) == (len(answered), len(hosts))
    assert len(result.items) == len(answered)
    assert f"items: one per page, in {tmp_path / 'items.jsonl'}" in block
    assert f"archive: 1 WARC file(s) in {tmp_path / 'warc'}" in block
    assert "seeds refused: 1 of 3 (loopback 1" in block
    # The block comes after Scrapy's stats dump.
    assert result.log.index("Dumping Scrapy stats") < result.log.index("Crawl summary")


def test_seeds_whose_names_resolve_to_loopback_fail_the_crawl_naming_the_setting(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    # A first crawl of a local test site by name: the names resolve (through the
    # web's own DNS server) to loopback addresses, which the guard refuses by
    # default. Nothing may reach the servers, and the job must fail, saying which
    # hosts, at which addresses, and the setting that allows them.
    web = realweb(Web([Host("docs.test", pages={"/": page("docs")}),
                       Host("wiki.test", pages={"/x": page("wiki")})]))
    settings = {**realweb_settings(web.nameserver), **REALWEB_DEFAULTS,
                "ADDRESS_GUARD_ALLOW_RESOLVED": "192.0.2.0/24"}  # not loopback
    result = run_crawl(None, [web.url("docs.test"), web.url("wiki.test", "/x")], tmp_path,
                       settings, timeout=120)
    assert result.returncode == 1, result.log[-3000:]
    assert "Traceback" not in result.log
    assert web.ledger().targets("docs.test") == [] == web.ledger().targets("wiki.test")
    final = _warnings(result.log, "address guard", "ERROR")
    assert len(final) == 1, result.log[-3000:]
    for name in ("docs.test", "wiki.test"):
        assert f"{name} ({web.address(name)})" in final[0], final[0]
    assert "ADDRESS_GUARD_ALLOW=127.0.0.0/8" in final[0], final[0]
    assert result.log.rstrip().splitlines()[-1] == final[0]  # the crawl's last word
    assert result.items == []
