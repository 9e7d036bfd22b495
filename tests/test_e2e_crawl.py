"""End to end: a real ``scrapy crawl broad`` against the simulated web.

Assertions are on what the server received (its ledger), checked against the
web model's ground truth, which knows every page, every link and every
robots rule without using any crawler code.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.crawl_runner import CrawlResult, run_crawl
from tests.simweb import SimWebProcess, Web
from tests.simweb.ledger import Ledger

pytestmark = pytest.mark.crawl

USER_AGENT = "BroadCrawl"  # crawler.settings.ROBOTSTXT_USER_AGENT
TRAP_MODES = ("trap-calendar", "trap-repeat")
TRACKING = re.compile(r"[?&](utm_[a-z]+|gclid|fbclid|msclkid)=", re.I)
DELAY = 0.2  # DOWNLOAD_DELAY of the test crawls: fast, but paced well above event-loop lag
SEEDS = 50
# The full crawl caps hosts at 48 URLs: no well-behaved host this crawl
# reaches has more than 40, and it keeps the trap hosts (endless calendars and
# ?sid= loops), the crawl's tail, small.
HOST_CAP = 48


@pytest.fixture(scope="module")
def sim() -> Iterator[SimWebProcess]:
    # 120 hosts, of which the crawl is seeded with 50: links lead to the
    # others, so "only hosts that were linked" is tested too.
    with SimWebProcess(seed=11, n_hosts=120, mix="e2e") as process:
        yield process


@pytest.fixture(scope="module")
def full_crawl(sim: SimWebProcess, tmp_path_factory: pytest.TempPathFactory) -> CrawlResult:
    sim.reset()
    return run_crawl(
        sim.proxy_url, sim.web.seed_urls(SEEDS), tmp_path_factory.mktemp("full"),
        # Crawl-delays of this web (0.2-1 s) clamped to 0.2 s: the test's time
        # goes to breadth; tests/test_robots_crawl.py checks the pacing.
        # The whole web from a few seeds: every link is in scope.
        settings={"DOWNLOAD_DELAY": DELAY, "DEPTH_LIMIT": 0, "SCOPE": "any",
                  "ADMISSION_MAX_PAGES_PER_HOST": HOST_CAP, "ROBOTS_MAX_CRAWL_DELAY": DELAY},
    )


@pytest.fixture(scope="module")
def full_ledger(sim: SimWebProcess, full_crawl: CrawlResult) -> Ledger:
    return sim.ledger()


def _page_entries(ledger: Ledger) -> list[dict]:
    return [e for e in ledger.entries if not e["path"].startswith("/robots.txt")]


def _expected(web: Web, seeds: list[str]) -> dict[tuple[str, str], int]:
    return web.reachable(seeds, user_agent=USER_AGENT)


def _trap_hosts(web: Web) -> set[str]:
    return {h.name for h in web.hosts_where(page=TRAP_MODES)}


def _lines_about(result: CrawlResult, hosts: set[str]) -> str:
    """The log's lines that name one of ``hosts``, and its summary, for a
    failure's message."""
    about = [line for line in result.log.splitlines() if any(host in line for host in hosts)]
    return "\n".join(about[:40]) + "\n" + result.summary()[:4000]


def test_crawl_finishes_cleanly(full_crawl: CrawlResult) -> None:
    assert full_crawl.returncode == 0, full_crawl.log[-3000:]
    assert "'finish_reason': 'finished'" in full_crawl.log
    assert "Traceback" not in full_crawl.log
    assert "DeprecationWarning" not in full_crawl.log
    assert full_crawl.stat("seeds/loaded") == str(SEEDS)


def test_every_reachable_page_fetched_exactly_once(
    sim: SimWebProcess, full_ledger: Ledger, full_crawl: CrawlResult
) -> None:
    web = sim.web
    expected = _expected(web, web.seed_urls(SEEDS))
    traps = _trap_hosts(web)
    fetched = Counter(web.page_identity(e["host"], e["path"]) for e in _page_entries(full_ledger))

    wanted = {ident for ident in expected if ident[0] not in traps}
    assert len(wanted) > 500, "the web is too small to prove anything"
    twice = {ident: n for ident, n in fetched.items() if n > 1}
    assert not twice, f"pages fetched more than once: {list(twice.items())[:10]}"
    missed = sorted(wanted - set(fetched))
    assert not missed, (f"{len(missed)} reachable pages never fetched: {missed[:10]}; what "
                        "the crawl's log says of their hosts:\n"
                        + _lines_about(full_crawl, {host for host, _ in missed}))
    extra = sorted(i for i in fetched if i not in expected and i[0] not in traps)
    assert not extra, f"fetched pages that no correct crawl reaches: {extra[:10]}"


def test_only_seed_hosts_and_linked_hosts_are_visited(
    sim: SimWebProcess, full_ledger: Ledger
) -> None:
    web = sim.web
    expected_hosts = {host for host, _ in _expected(web, web.seed_urls(SEEDS))}
    visited = set(full_ledger.hosts())
    assert visited <= expected_hosts
    assert len(visited) > SEEDS, "links to hosts beyond the seeds were not followed"
    never_linked = {h.name for h in web.hosts} - expected_hosts
    assert never_linked, "every host is linked: the web cannot show over-reach"
    assert not visited & never_linked


def test_tracking_and_fragment_duplicates_fetched_once(
    sim: SimWebProcess, full_ledger: Ledger
) -> None:
    entries = _page_entries(full_ledger)
    assert not [e["path"] for e in entries if TRACKING.search(e["path"])]
    assert not [e["path"] for e in entries if "#" in e["path"]]
    dup_heavy = {h.name for h in sim.web.hosts_where(page="dup-heavy")}
    served = [e for e in entries if e["host"] in dup_heavy and e["status"] == 200]
    assert served, "the web has no dup-heavy host in the crawl"


def test_robots_rules_are_obeyed(sim: SimWebProcess, full_ledger: Ledger) -> None:
    assert full_ledger.disallowed_fetches(sim.web, user_agent=USER_AGENT) == []
    for host in full_ledger.hosts():
        assert len(full_ledger.robots_fetches(host)) == 1, host


def test_traps_are_cut(sim: SimWebProcess, full_ledger: Ledger) -> None:
    for host in _trap_hosts(sim.web) & set(full_ledger.hosts()):
        paths = [e["path"] for e in _page_entries(full_ledger) if e["host"] == host]
        assert len(paths) <= HOST_CAP, (host, len(paths))
        assert not [p for p in paths if "/a/b/a/b/a" in p or "/b/a/b/a/b" in p]


def test_per_host_politeness(sim: SimWebProcess, full_ledger: Ledger) -> None:
    # The frontier allows CONCURRENT_REQUESTS_PER_DOMAIN=4 in flight and starts
    # requests to one host at least 0.5 x DOWNLOAD_DELAY apart (jitter 0.5).
    # Arrival times carry the server loop's lag (tens of ms on a loaded 2-core
    # machine: a busy loop stamps two requests late, the second less so, which
    # squeezes their gap to a few ms), so: half of that gap as slack, and one
    # squeezed gap in 500 tolerated. Without pacing a host shows gaps of a few
    # ms by the dozen.
    gaps = []
    for host in full_ledger.hosts():
        assert full_ledger.max_in_flight(host) <= 4, host
        gaps += [(g, host) for g in full_ledger.gaps(host)]
    assert len(gaps) > 500
    short = sorted(g for g in gaps if g[0] < DELAY * 0.5 * 0.5)
    assert len(short) <= len(gaps) // 500, short[:5]


def test_items_describe_the_pages(sim: SimWebProcess, full_crawl: CrawlResult) -> None:
    items = full_crawl.items
    assert items
    by_url = {item["url"]: item for item in items}
    home = by_url["http://h00000.test/"]
    assert home["status"] == 200 and home["depth"] == 0 and home["referrer"] is None
    assert home["content_type"].startswith("text/html")
    deeper = [i for i in items if i["depth"] == 2]
    assert deeper and all(i["referrer"] for i in deeper)
    redirected = [i for i in items if i["redirects"]]
    assert redirected, "the web has redirects: some items must show their chain"
    for item in redirected:
        assert item["redirects"][0] == item["url"] and item["redirects"][-1] == item["final_url"]
    assert all(item["fetched_at"].endswith("+00:00") for item in items)


@pytest.fixture(scope="module")
def limited(sim: SimWebProcess, tmp_path_factory: pytest.TempPathFactory,
            full_ledger: Ledger) -> tuple[CrawlResult, Ledger]:
    sim.reset()
    result = run_crawl(
        sim.proxy_url, sim.web.seed_urls(40), tmp_path_factory.mktemp("limited"),
        settings={"DOWNLOAD_DELAY": DELAY, "DEPTH_LIMIT": 2,
                  "ADMISSION_MAX_PAGES_PER_HOST": 5, "URLLENGTH_LIMIT": 26},
    )
    return result, sim.ledger()


def test_limits_are_respected(sim: SimWebProcess, limited: tuple[CrawlResult, Ledger]) -> None:
    result, ledger = limited
    assert result.returncode == 0, result.log[-3000:]
    web = sim.web
    depths = _expected(web, web.seed_urls(40))
    entries = _page_entries(ledger)
    assert entries
    redirecting = {h.name for h in web.hosts_where(page="redirects")}
    for host in ledger.hosts():
        fetches = [e for e in entries if e["host"] == host]
        # Redirect targets are not admitted again (the frontier will charge
        # them); on other hosts every fetch is an admitted URL.
        cap = 10 if host in redirecting else 5
        assert len(fetches) <= cap, (host, [e["path"] for e in fetches])
    for e in entries:
        ident = web.page_identity(e["host"], e["path"])
        assert depths.get(ident, 99) <= 2, (ident, depths.get(ident))
        assert len(f"http://{e['host']}{e['path']}") <= 26, e["path"]
    assert all(item["depth"] <= 2 for item in result.items)
    assert int(result.stat("urllength/request_ignored_count") or 0) > 0
    assert int(result.stat("frontier/refused/host-budget") or 0) > 0


def test_bad_seed_lines_are_reported_and_skipped(
    sim: SimWebProcess, tmp_path: Path
) -> None:
    sim.reset()
    seeds = ["http://h00001.test/", "not a url", "h00002.test/", "http://h00003.test/"]
    result = run_crawl(sim.proxy_url, seeds, tmp_path,
                       settings={"DOWNLOAD_DELAY": DELAY, "DEPTH_LIMIT": 0,
                                 "ADMISSION_MAX_PAGES_PER_HOST": 1})
    assert result.returncode == 0
    assert "seeds.txt:2: more than one field on the line: 'not a url'" in result.log
    assert "seeds.txt:3: no http:// or https:// scheme: 'h00002.test/'" in result.log
    fetched = {(e["host"], e["path"]) for e in _page_entries(sim.ledger())}
    assert ("h00001.test", "/") in fetched and ("h00003.test", "/") in fetched
    assert result.stat("seeds/malformed") == "2"


def test_no_proxy_is_honoured(sim: SimWebProcess, tmp_path: Path) -> None:
    # h00001.test bypasses the proxy; the test resolver sends it to 127.0.0.1:80
    # (nothing leaves loopback), where the simulated web is not listening: its
    # robots.txt is unreachable, so its URLs are parked after the first try.
    sim.reset()
    result = run_crawl(
        sim.proxy_url, ["http://h00001.test/", "http://h00002.test/"], tmp_path,
        settings={"DOWNLOAD_DELAY": DELAY, "DEPTH_LIMIT": 0, "RETRY_ENABLED": False,
                  "ROBOTS_UNREACHABLE_MAX_ATTEMPTS": 1},
        env={"no_proxy": "h00001.test"},
    )
    assert result.returncode == 0, result.log[-3000:]
    hosts = sim.ledger().hosts()
    assert "h00002.test" in hosts
    assert "h00001.test" not in hosts
    assert "robots.txt of http://h00001.test:80 unreachable (DownloadConnectionRefusedError)" \
        in result.log


def test_a_page_budget_holds_on_the_simulated_web(sim: SimWebProcess, tmp_path: Path) -> None:
    """Forty seeds of the simulated web under a budget of four URLs a host: no
    server sees a fifth page request (a redirect's target is a URL of its
    own), the hosts with more pages stop at four, and what each left queued
    is a dead letter with reason budget."""
    sim.reset()
    result = run_crawl(sim.proxy_url, sim.web.seed_urls(40), tmp_path,
                       settings={"DOWNLOAD_DELAY": DELAY, "BUDGET_HOST_PAGES": 4,
                                 "FRONTIER_INLINK_PRIORITY": False})
    assert result.returncode == 0, result.log[-3000:]
    per_host = Counter(e["host"] for e in _page_entries(sim.ledger()))
    assert per_host and max(per_host.values()) <= 4, per_host.most_common(5)
    assert sum(1 for n in per_host.values() if n == 4) >= 10
    assert int(result.stat("budget/ended")) > 0
    assert int(result.stat("budget/sites_spent/site/pages")) >= 10
    assert "Budget: " in result.log
