"""A real crawl learns which URLs are one page, and which pages are a trap.

The web (``tests/trapweb``) has hosts whose links carry a noise parameter
that no static list knows, hosts where the same parameter names select
different pages, hosts whose canonical links all point to ``/``, endless
calendars inside the static year window, session-id loops, faceted search
and a 300-page catalogue whose pages really differ. Assertions are on what
the server received (its ledger), checked against the web's ground truth,
then on what the frontier kept (``scrapy frontier host``), and on the log.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.crawl_runner import REPO, CrawlResult, run_crawl
from tests.trapweb import TrapWeb, TrapWebProcess

pytestmark = pytest.mark.crawl

SETTINGS = {"DOWNLOAD_DELAY": 0.1, "ROBOTS_MAX_CRAWL_DELAY": 0.1, "DEPTH_LIMIT": 0,
            "CONCURRENT_REQUESTS": 32}
#: The issue's bound on a trap host's requests.
TRAP_MAX = 100


@pytest.fixture(scope="module")
def trapweb() -> Iterator[TrapWebProcess]:
    with TrapWebProcess(seed=5, per_kind=2) as process:
        yield process


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("learning")


@pytest.fixture(scope="module")
def crawl(trapweb: TrapWebProcess, workdir: Path) -> CrawlResult:
    trapweb.reset()
    # It must end by itself, well before the timeout: traps included.
    return run_crawl(trapweb.proxy_url, trapweb.web.seed_urls(), workdir, SETTINGS, timeout=240)


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


def test_the_crawl_ends_on_its_own(crawl: CrawlResult) -> None:
    assert crawl.returncode == 0, crawl.log[-3000:]
    assert "Spider closed (finished)" in crawl.log


def test_no_page_is_lost(trapweb: TrapWebProcess, requests: dict[str, list[str]]) -> None:
    web = trapweb.web
    lost = {host: sorted(web.required_pages(host) - set(_fetched(web, host, requests[host])))
            for host in web.hosts()}
    assert {host: pages for host, pages in lost.items() if pages} == {}


def test_noise_parameters_cost_at_most_one_duplicate_per_host(
        trapweb: TrapWebProcess, requests: dict[str, list[str]]) -> None:
    web = trapweb.web
    for host in web.hosts("noise"):
        fetched = _fetched(web, host, requests[host])
        duplicates = sum(n - 1 for n in fetched.values())
        assert duplicates <= 1, (host, requests[host])
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
                                                      crawl: CrawlResult) -> None:
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
    assert int(crawl.stat("traps/patterns")) == len(trap_hosts)
    assert int(crawl.stat("learning/params_learned")) == len(web.hosts("noise"))
    assert int(crawl.stat("dedup/variant")) > 0
    assert int(crawl.stat("learned/dropped/trap-pattern")) > 0


def test_the_frontier_keeps_the_rules_for_the_operator(trapweb: TrapWebProcess,
                                                       crawl: CrawlResult,
                                                       workdir: Path) -> None:
    web = trapweb.web

    def host(name: str, *extra: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-m", "scrapy.cmdline", "frontier", "host", name, "--json",
             *extra, "-s", f"JOBDIR={workdir / 'job'}"],
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
