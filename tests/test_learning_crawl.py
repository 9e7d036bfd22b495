"""Two real workers learn which URLs are one page, and which pages are a trap.

The web (``tests/trapweb``) has hosts whose links carry a noise parameter
that no static list knows, hosts where the same parameter names select
different pages, hosts whose canonical links all point to ``/``, endless
calendars inside the static year window (of pages with text, and of
near-empty pages: a date and six links), session-id loops, faceted search
and a 300-page catalogue whose pages really differ. Assertions are on what
the server received (its ledger), checked against the web's ground truth,
then on what the frontier kept (``scrapy frontier host``), and on the logs.
Two workers share one Redis: a rule one worker's pages taught holds for the
other's requests too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator

import pytest
import redis

from tests.crawl_runner import REPO, CrawlResult, finish_crawl, start_crawl
from tests.trapweb import TrapWeb, TrapWebProcess

pytestmark = pytest.mark.crawl

# Fast, for the test's time: the trap hosts and the catalogue are fetched 20
# times a second. The hosts with noise parameters get a quarter of a second
# between requests (four a second, where a crawl's default is one): learning
# needs two pages, and a request started while they are weighed is one more.
SETTINGS = {"DOWNLOAD_DELAY": 0.05, "ROBOTS_MAX_CRAWL_DELAY": 0.05,
            "FRONTIER_DOMAIN_DELAY": 0.05, "DEPTH_LIMIT": 0, "CONCURRENT_REQUESTS": 32,
            "FRONTIER_PARTITIONS": 4, "FRONTIER_SEEN_BUCKETS": 64}
NOISE_DELAY = 0.25
WORKERS = 2
#: The issue's bound on a trap host's requests.
TRAP_MAX = 100


@pytest.fixture(scope="module")
def trapweb() -> Iterator[TrapWebProcess]:
    with TrapWebProcess(seed=5, per_kind=2) as process:
        yield process


@pytest.fixture(scope="module")
def frontier(redis_url: str) -> Iterator[tuple[str, str]]:
    """The shared frontier's Redis and namespace; its keys are deleted after."""
    namespace = f"test:learning:{time.time_ns()}"
    yield redis_url, namespace
    with redis.Redis.from_url(redis_url) as client:
        stale = list(client.scan_iter(match=f"*{namespace}*", count=1000))
        if stale:
            client.delete(*stale)


@pytest.fixture(scope="module")
def crawls(trapweb: TrapWebProcess, frontier: tuple[str, str],
           tmp_path_factory: pytest.TempPathFactory) -> list[CrawlResult]:
    trapweb.reset()
    tmp = tmp_path_factory.mktemp("learning")
    url, namespace = frontier
    slots = {host: {"delay": NOISE_DELAY} for host in trapweb.web.hosts("noise")}
    settings = {**SETTINGS, "REDIS_URL": url, "FRONTIER_NAMESPACE": namespace,
                "DOWNLOAD_SLOTS": slots}
    started = time.monotonic()
    procs = [start_crawl(trapweb.proxy_url, trapweb.web.seed_urls(), tmp / f"w{i}",
                         {**settings, "FRONTIER_WORKER_ID": f"w{i}"}) for i in range(WORKERS)]
    # They must end by themselves, well before the timeout: traps included.
    return [finish_crawl(p, tmp / f"w{i}", started, timeout=240) for i, p in enumerate(procs)]


@pytest.fixture(scope="module")
def crawl(crawls: list[CrawlResult]) -> CrawlResult:
    """The workers' logs as one (their stats are each its own)."""
    return CrawlResult(max(c.returncode for c in crawls), "\n".join(c.log for c in crawls),
                       [i for c in crawls for i in c.items], max(c.seconds for c in crawls))


def _stat(crawls: list[CrawlResult], name: str) -> int:
    return sum(int(c.stat(name) or 0) for c in crawls)


@pytest.fixture(scope="module")
def requests(trapweb: TrapWebProcess, crawl: CrawlResult) -> dict[str, list[str]]:
    """Each host's page requests (request-targets as received), in order."""
    out: dict[str, list[str]] = defaultdict(list)
    for entry in trapweb.ledger().entries:
        if not entry["path"].startswith("/robots.txt"):
            out[entry["host"]].append(entry["path"])
    return out


def _fetched(web: TrapWeb, host: str, targets: list[str]) -> Counter[str]:
    """How often each required page of ``host`` was fetched, in any spelling."""
    return Counter(p for p in (web.page_of(host, t) for t in targets)
                   if p in web.required_pages(host))


def test_the_crawl_ends_on_its_own(crawls: list[CrawlResult]) -> None:
    for result in crawls:
        assert result.returncode == 0, result.log[-3000:]
        assert "'finish_reason': 'finished'" in result.log
    # and both workers did some of the work
    assert all(int(c.stat("downloader/response_count") or 0) > 20 for c in crawls)


def test_no_page_is_lost(trapweb: TrapWebProcess, requests: dict[str, list[str]]) -> None:
    web = trapweb.web
    lost = {host: sorted(web.required_pages(host) - set(_fetched(web, host, requests[host])))
            for host in web.hosts()}
    assert {host: pages for host, pages in lost.items() if pages} == {}


def test_noise_parameters_cost_at_most_two_duplicates_per_host(
        trapweb: TrapWebProcess, requests: dict[str, list[str]]) -> None:
    """One page fetched in two spellings is how the crawler learns that the
    parameter changes nothing (a canonical link alone does not teach it); a
    second can be fetched by the other worker, whose copy of the host's rules
    is one batch behind."""
    web = trapweb.web
    for host in web.hosts("noise"):
        fetched = _fetched(web, host, requests[host])
        duplicates = sum(n - 1 for n in fetched.values())
        assert duplicates <= 2, f"{host}: {' '.join(requests[host])}"
        # and the parameter did reach the crawler: links carrying it were seen
        assert any(f"{web.param_of(host)}=" in t for t in requests[host]) or duplicates == 0


def test_where_the_parameter_matters_every_value_is_fetched_once(
        trapweb: TrapWebProcess, requests: dict[str, list[str]]) -> None:
    web = trapweb.web
    for host in web.hosts("select") + web.hosts("miscanon") + web.hosts("catalogue"):
        fetched = _fetched(web, host, requests[host])
        assert set(fetched) == web.required_pages(host), host
        assert max(fetched.values()) == 1, (host, fetched.most_common(3))


def test_trap_hosts_stay_under_the_bound(trapweb: TrapWebProcess,
                                         requests: dict[str, list[str]]) -> None:
    web = trapweb.web
    for host in (h for h in web.hosts() if web.is_trap(h)):
        assert len(requests[host]) <= TRAP_MAX, (host, len(requests[host]))


def test_what_was_learned_is_logged_once_and_counted(trapweb: TrapWebProcess,
                                                      crawl: CrawlResult,
                                                      crawls: list[CrawlResult]) -> None:
    web = trapweb.web
    learned = [line for line in crawl.log.splitlines() if "Learned: query parameter" in line]
    for host in web.hosts("noise"):
        said = [line for line in learned if f"on http://{host}:80 " in line]
        assert len(said) == 1 and f"'{web.param_of(host)}'" in said[0], learned
    # nothing learned where the parameter selects pages or canonical links lie
    assert all("noise-" in line for line in learned), learned
    traps = [line for line in crawl.log.splitlines()
             if "Trap: refusing URLs of the pattern" in line]
    trap_hosts = [h for h in web.hosts() if web.is_trap(h)]
    for host in trap_hosts:
        assert sum(f"on http://{host}:80 " in line for line in traps) == 1, traps
    assert all(any(f"http://{h}:80" in line for h in trap_hosts) for line in traps), traps
    assert _stat(crawls, "traps/patterns") == len(trap_hosts)
    assert _stat(crawls, "learning/params_learned") == len(web.hosts("noise"))
    assert _stat(crawls, "dedup/variant") > 0
    assert _stat(crawls, "learned/dropped/trap-pattern") > 0


def test_the_frontier_keeps_the_rules_for_the_operator(trapweb: TrapWebProcess,
                                                       crawl: CrawlResult,
                                                       frontier: tuple[str, str]) -> None:
    web = trapweb.web
    url, namespace = frontier
    options = [f"--redis-url={url}", "-s", f"FRONTIER_NAMESPACE={namespace}",
               "-s", f"FRONTIER_PARTITIONS={SETTINGS['FRONTIER_PARTITIONS']}",
               "-s", f"FRONTIER_SEEN_BUCKETS={SETTINGS['FRONTIER_SEEN_BUCKETS']}"]

    def host(name: str, *extra: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-m", "scrapy.cmdline", "frontier", "host", name, "--json",
             *extra, *options],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
        return json.loads(done.stdout.splitlines()[-1])

    noise = web.hosts("noise")[0]
    learned = host(noise)["authorities"][0]["learned"]
    assert learned["noise"] == [web.param_of(noise)]
    select = web.hosts("select")[0]
    assert host(select)["authorities"][0]["learned"]["noise"] == []
    assert host(select)["authorities"][0]["learned"]["evidence"][web.param_of(select)][1] > 0
    calendar = web.hosts("calendar")[0]
    assert host(calendar)["authorities"][0]["learned"]["patterns"] == ["/events/{n}/{n}/{n}"]
    # an operator removes a rule: gone from the frontier, for every worker
    forgotten = host(noise, "--forget-param", web.param_of(noise))
    assert forgotten["authorities"][0]["learned"]["noise"] == []
