"""The robots policy in real crawls: two workers, every robots.txt behaviour.

Every check is on what the simulated web's server received (its ledger).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest
import redis

from crawler.frontier.admin import FrontierAdmin, frontier_keys
from crawler.robots.rules import MAX_ROBOTS_BYTES
from tests.crawl_runner import CrawlResult, finish_crawl, start_crawl
from tests.simweb import SimWebProcess, Web
from tests.simweb.ledger import Ledger, is_robots_path
from tests.simweb.model import DEFAULT_ROBOTS_POLICY, ROBOTS_MODES, RULES_BODY_MODES

pytestmark = pytest.mark.crawl

AGENT = "BroadCrawl"
UNREACHABLE = ("error-500", "error-503", "timeout", "too-many")
# Our choice where RFC 9309 allows one: five redirects are followed, a sixth
# makes robots.txt "unavailable" (the simulated web's default follows six).
POLICY = {**DEFAULT_ROBOTS_POLICY, "redirect-6": "allow"}
HOSTS = 44
SLOW = 0  # host 0: Crawl-delay 2 s
PARTITIONS = 4


@pytest.fixture(scope="module")
def web_process() -> Iterator[SimWebProcess]:
    mix = {f"robots:{mode}": 1.0 for mode in ROBOTS_MODES} | {"page:normal": 1.0}
    with SimWebProcess(seed=11, n_hosts=HOSTS, mix=mix,
                       pinned={SLOW: "robots:rules,crawl-delay:2"}) as process:
        yield process


@pytest.fixture(scope="module")
def crawl(web_process: SimWebProcess, redis_url: str, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[tuple[list[CrawlResult], Ledger, FrontierAdmin]]:
    """Two workers crawl the web once; the tests below read what happened."""
    web = web_process.web
    assert {h.robots for h in web.hosts} == set(ROBOTS_MODES), "every robots mode present"
    tmp = tmp_path_factory.mktemp("robots")
    namespace = f"test:robots:{time.time_ns()}"
    settings = {
        "REDIS_URL": redis_url, "FRONTIER_NAMESPACE": namespace,
        "FRONTIER_PARTITIONS": PARTITIONS, "FRONTIER_SEEN_BUCKETS": 64,
        "DOWNLOAD_DELAY": 0.2, "DEPTH_LIMIT": 1, "ROBOTSTXT_OBEY": True,
        # (one attempt: a robots.txt that does not come within the timeout parks
        # its host; 6 s, so that a loaded machine's slow answer is no timeout)
        "ROBOTS_TIMEOUT": 6, "ROBOTS_UNREACHABLE_MAX_ATTEMPTS": 1,
    }
    started = time.monotonic()
    procs = [start_crawl(web_process.proxy_url, web.seed_urls(), tmp / f"w{i}",
                         {**settings, "FRONTIER_WORKER_ID": f"w{i}"}) for i in range(2)]
    results = [finish_crawl(p, tmp / f"w{i}", started) for i, p in enumerate(procs)]
    client = redis.Redis.from_url(redis_url)
    keys, _ = frontier_keys(client, namespace, PARTITIONS, seen_buckets=64)
    try:
        yield results, web_process.ledger(), FrontierAdmin(client, keys, layout_found=True)
    finally:
        stale = list(client.scan_iter(match=f"*{namespace}*", count=1000))
        if stale:
            client.delete(*stale)
        client.close()


def _hosts(web: Web, *modes: str) -> list[str]:
    return [h.name for h in web.hosts_where(robots=modes)]



def test_both_workers_finish(crawl: tuple[list[CrawlResult], Ledger, FrontierAdmin]) -> None:
    results, _, _ = crawl
    for result in results:
        assert result.returncode == 0, result.log[-3000:]
        assert "'finish_reason': 'finished'" in result.log


def test_one_robots_fetch_per_host_across_workers(
    web_process: SimWebProcess, crawl: tuple[list[CrawlResult], Ledger, FrontierAdmin]
) -> None:
    _, ledger, _ = crawl
    fetches = {h.name: len(ledger.robots_fetches(h.name)) for h in web_process.web.hosts}
    assert fetches == dict.fromkeys(fetches, 1)
    # ... and each before the host's first page request
    for host in fetches:
        robots = ledger.robots_fetches(host)[0]["arrival"]
        assert all(e["arrival"] >= robots for e in ledger.page_requests(host)), host


def test_unreachable_robots_means_no_page_request(
    web_process: SimWebProcess, crawl: tuple[list[CrawlResult], Ledger, FrontierAdmin]
) -> None:
    """RFC 9309 2.3.1.4: 5xx (and 429, our choice) or a timeout: complete disallow."""
    _, ledger, admin = crawl
    hosts = _hosts(web_process.web, *UNREACHABLE)
    assert len(hosts) >= 8
    assert {h: ledger.page_requests(h) for h in hosts} == {h: [] for h in hosts}
    # Their URLs waited, then (after ROBOTS_UNREACHABLE_MAX_ATTEMPTS) became
    # requeue-able dead letters instead of holding the crawl open for good.
    parked = {d.host.split("://")[1].split(":")[0] for d in admin.dead("robots-unreachable")}
    assert parked == set(hosts)


def test_disallowed_paths_are_never_requested(
    web_process: SimWebProcess, crawl: tuple[list[CrawlResult], Ledger, FrontierAdmin]
) -> None:
    results, ledger, admin = crawl
    web = web_process.web
    bad = [(e["host"], e["path"]) for e in ledger.entries if not is_robots_path(e["path"])
           and not web.allowed(e["host"], web.page_identity(e["host"], e["path"])[1], AGENT,
                               robots_policy=POLICY, robots_max_bytes=MAX_ROBOTS_BYTES)]
    assert bad == []
    denied = sum(int(r.stat("robots/denied") or 0) for r in results)
    assert denied > 0, "the web links to /private/ pages: some must have been denied"
    assert admin.status().counts["robots_denied"] == denied


def test_every_allowed_page_is_fetched_once(
    web_process: SimWebProcess, crawl: tuple[list[CrawlResult], Ledger, FrontierAdmin]
) -> None:
    _, ledger, _ = crawl
    web = web_process.web
    # RFC 9309 2.5: the rules after the first 500 KiB ("oversized") are ignored
    expected = set(web.reachable(web.seed_urls(), max_depth=1, user_agent=AGENT,
                                 robots_policy=POLICY, robots_max_bytes=MAX_ROBOTS_BYTES))
    fetched = Counter(ledger.pages(web))
    assert {k: n for k, n in fetched.items() if n > 1} == {}
    assert expected - set(fetched) == set()
    assert set(fetched) - expected == set()


def test_redirects_five_followed_a_sixth_not(
    web_process: SimWebProcess, crawl: tuple[list[CrawlResult], Ledger, FrontierAdmin]
) -> None:
    """RFC 9309 2.3.1.2: at least five redirects, across hosts; more: unavailable."""
    _, ledger, _ = crawl
    web = web_process.web
    for host in _hosts(web, "redirect-3"):
        hops = [e["path"] for e in ledger.entries if e["path"].startswith(f"/robots-hop/{host}/")]
        assert sorted(hops) == [f"/robots-hop/{host}/{n}" for n in (1, 2, 3)]
        assert not any(e["path"].startswith("/private/") for e in ledger.page_requests(host))
    six = _hosts(web, "redirect-6")
    assert six
    for host in six:
        hops = [e["path"] for e in ledger.entries if e["path"].startswith(f"/robots-hop/{host}/")]
        assert sorted(hops) == [f"/robots-hop/{host}/{n}" for n in range(1, 6)]
    # "unavailable": the /private/ pages linked from the root are fetched
    assert any(e["path"].startswith("/private/") for h in six for e in ledger.page_requests(h))


def test_crawl_delay_paces_the_host_across_workers(
    web_process: SimWebProcess, crawl: tuple[list[CrawlResult], Ledger, FrontierAdmin]
) -> None:
    _, ledger, _ = crawl
    web = web_process.web
    slow = web.hosts[SLOW].name
    assert len(ledger.page_requests(slow)) >= 3
    # Arrival times lag by up to ~0.1 s on 2 busy cores.
    assert ledger.min_gap(slow, pages_only=True) >= 2.0 - 0.1
    assert ledger.max_in_flight(slow) == 1
    paced = [spec for spec in web.hosts
             if spec.robots in RULES_BODY_MODES and POLICY[spec.robots] == "rules"]
    assert len(paced) >= 10
    for spec in paced:
        if len(ledger.page_requests(spec.name)) > 1:
            gap = ledger.min_gap(spec.name, pages_only=True)
            assert gap >= spec.crawl_delay - 0.1, (spec.name, spec.robots, spec.crawl_delay, gap)
