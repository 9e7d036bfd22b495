"""Retries and host backoff in real crawls with two workers (ledger assertions)."""

from __future__ import annotations

import contextlib
import socket
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest
import redis

from tests.crawl_runner import REPO, CrawlResult, finish_crawl, proxy_env, run_crawl, start_crawl
from tests.simweb import SimWebProcess
from tests.simweb.ledger import Ledger, is_robots_path

pytestmark = pytest.mark.crawl

# Server arrival times lag by up to ~0.1 s on 2 busy cores.
LAG = 0.1


@pytest.fixture(scope="module")
def web_process() -> Iterator[SimWebProcess]:
    mix = {"robots:allow-all": 1.0, "page:rate-limited-seconds": 1.0,
           "page:rate-limited-date": 1.0, "page:unavailable": 1.0, "page:normal": 1.0}
    with SimWebProcess(seed=4, n_hosts=12, mix=mix) as process:
        yield process


@pytest.fixture(scope="module")
def crawl(web_process: SimWebProcess, redis_url: str, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[tuple[list[CrawlResult], Ledger]]:
    tmp = tmp_path_factory.mktemp("retry")
    namespace = f"test:retry:{time.time_ns()}"
    settings = {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": namespace,
                "FRONTIER_PARTITIONS": 4, "FRONTIER_SEEN_BUCKETS": 64,
                "DOWNLOAD_DELAY": 0.2, "DEPTH_LIMIT": 1, "ADMISSION_MAX_PAGES_PER_HOST": 5,
                "RETRY_BACKOFF_BASE": 1.0}
    started = time.monotonic()
    procs = [start_crawl(web_process.proxy_url, web_process.web.seed_urls(), tmp / f"w{i}",
                         {**settings, "FRONTIER_WORKER_ID": f"w{i}"}) for i in range(2)]
    results = [finish_crawl(p, tmp / f"w{i}", started) for i, p in enumerate(procs)]
    yield results, web_process.ledger()
    client = redis.Redis.from_url(redis_url)
    stale = list(client.scan_iter(match=f"*{namespace}*", count=1000))
    if stale:
        client.delete(*stale)
    client.close()


def _hosts(web_process: SimWebProcess, mode: str) -> list[str]:
    return [h.name for h in web_process.web.hosts_where(page=mode)]



def test_workers_finish_and_every_page_is_served_in_the_end(
    web_process: SimWebProcess, crawl: tuple[list[CrawlResult], Ledger]
) -> None:
    results, ledger = crawl
    for result in results:
        assert result.returncode == 0, result.log[-3000:]
    by_path: dict[tuple[str, str], set[int]] = defaultdict(set)
    for e in ledger.entries:
        by_path[(e["host"], e["path"])].add(e["status"])
    failed_for_good = [k for k, statuses in by_path.items() if 200 not in statuses
                       and not is_robots_path(k[1])]
    assert failed_for_good == []
    assert sum(int(r.stat("retry/count") or 0) for r in results) >= 10


@pytest.mark.parametrize(("mode", "wait"), [("rate-limited-seconds", 2.0),
                                            ("rate-limited-date", 2.0)])
def test_retry_after_keeps_both_workers_off_the_host(
    web_process: SimWebProcess, crawl: tuple[list[CrawlResult], Ledger], mode: str, wait: float
) -> None:
    """After a 429 with Retry-After, no request to that host from either worker for that long.

    (The HTTP-date form has one-second resolution: "3 s from now" is 2 to 3 s.)
    """
    _, ledger = crawl
    hosts = _hosts(web_process, mode)
    assert hosts
    checked = 0
    for host in hosts:
        pages = ledger.page_requests(host)
        for i, e in enumerate(pages):
            if e["status"] != 429:
                continue
            later = [p["arrival"] for p in pages[i + 1:]]
            if later:
                checked += 1
                assert min(later) - e["done"] >= wait - LAG, (host, e["path"])
    assert checked >= 3


def test_503_backoff_is_jittered(
    web_process: SimWebProcess, crawl: tuple[list[CrawlResult], Ledger]
) -> None:
    _, ledger = crawl
    waits: dict[int, list[float]] = defaultdict(list)  # attempt -> waits before the retry
    for host in _hosts(web_process, "unavailable"):
        by_path: dict[str, list[dict]] = defaultdict(list)
        for e in ledger.page_requests(host):
            by_path[e["path"]].append(e)
        for tries in by_path.values():
            for attempt, (a, b) in enumerate(pairwise(tries)):
                if a["status"] == 503:
                    waits[attempt].append(b["arrival"] - a["done"])
    assert len(waits[0]) >= 5
    # Full jitter spreads first retries over [0, 1 s]. The host's own pacing
    # (DOWNLOAD_DELAY 0.2 s) lifts the shortest ones to about 0.2 s, so equal
    # waits there are pacing, not a missing jitter. Without jitter every wait
    # would be the whole second and the waits would sit within LAG of each
    # other. (The window's growth is unit-tested in test_retry_policy.)
    first = waits[0]
    assert statistics.pstdev(first) > 0.15, first
    assert max(first) - min(first) > 0.3, first
    assert sum(w < 0.9 for w in first) >= 0.6 * len(first), first


def test_broken_hosts_trip_their_breakers_and_healthy_hosts_carry_on(tmp_path: Path) -> None:
    """A host that resets every connection, one that hangs, one that trickles and
    one that refuses connections: timeouts free their slots, breakers open after
    the threshold and, after one more failed probe, park the host. The server
    sees threshold + one probe requests of the resetting host (one at a time, so
    nothing else is in flight when it opens); healthy hosts are all crawled."""
    threshold = 3
    mix = {"robots:allow-all": 1.0, "page:normal": 1.0}
    pinned = {0: "reset", 1: "hang", 2: "trickle"}
    with SimWebProcess(seed=8, n_hosts=10, mix=mix, pinned=pinned, hang_max=30) as sim:
        web = sim.web
        dead = "h00003.test"  # bypasses the proxy: 127.0.0.1:80 refuses it
        started = time.monotonic()
        settings = {"DOWNLOAD_DELAY": 0.1, "DEPTH_LIMIT": 1, "DOWNLOAD_TIMEOUT": 2,
                    "CONCURRENT_REQUESTS_PER_DOMAIN": 1, "RETRY_BACKOFF_BASE": 0.2,
                    "BREAKER_THRESHOLD": threshold, "BREAKER_COOLDOWN": 1,
                    "BREAKER_MAX_OPENINGS": 1, "ROBOTSTXT_OBEY": False}
        result = run_crawl(sim.proxy_url, web.seed_urls(), tmp_path, settings=settings,
                           env={"no_proxy": dead})
        elapsed = time.monotonic() - started
        ledger = sim.ledger()
        # After its attempts the resetting host's URL is a dead letter that
        # `scrapy frontier requeue` brings back: the same job, run again with
        # no seeds, sends it again (and gives up again).
        reset_host = f"http://{web.hosts[0].name}:80"
        requeue = subprocess.run(
            [sys.executable, "-m", "scrapy", "frontier", "requeue", "--reason", "download-error",
             "--host", reset_host, "-s", f"JOBDIR={tmp_path / 'job'}"],
            cwd=REPO, env=proxy_env(sim.proxy_url), capture_output=True, text=True, timeout=60)
        assert requeue.returncode == 0, requeue.stderr[-2000:]
        assert "requeued 1 dead letter" in requeue.stdout
        again = run_crawl(sim.proxy_url, None, tmp_path / "again",
                          settings={**settings, "JOBDIR": str(tmp_path / "job")},
                          env={"no_proxy": dead})
        second = sim.ledger().page_requests(web.hosts[0].name)
    assert again.returncode == 0, again.log[-3000:]
    assert len(second) == 2 * (threshold + 1)
    assert result.returncode == 0, result.log[-3000:]
    broken = [web.hosts[i].name for i in pinned]
    assert len(ledger.page_requests(broken[0])) == threshold + 1  # reset: exact at the server
    for host in [*broken, dead]:
        assert f"Breaker open for http://{host}:80" in result.log, host
        assert f"Host http://{host}:80 parked" in result.log, host
    for host in broken[1:]:  # hang, trickle: each attempt cut by the 2 s timeout
        assert len(ledger.page_requests(host)) <= threshold + 1, host
    # 4 broken hosts x 4 attempts x <= 2 s, one at a time per host, in parallel
    assert elapsed < 60
    healthy = {h.name for h in web.hosts} - {*broken, dead}
    expected = {k for k in web.reachable(web.seed_urls(), max_depth=1, obey_robots=False)
                if k[0] in healthy}
    assert expected - set(ledger.pages(web)) == set()


def test_a_redirect_loop_and_a_huge_body_are_dropped_with_a_reason(tmp_path: Path) -> None:
    mix = {"robots:allow-all": 1.0, "page:normal": 1.0}
    with SimWebProcess(seed=8, n_hosts=3, mix=mix,
                       pinned={0: "redirect-loop", 1: "huge"}) as sim:
        result = run_crawl(sim.proxy_url, sim.web.seed_urls(), tmp_path,
                           settings={"DOWNLOAD_DELAY": 0.1, "DEPTH_LIMIT": 2})
        ledger = sim.ledger()
        loop_host, huge_host = sim.web.hosts[0].name, sim.web.hosts[1].name
    assert result.returncode == 0, result.log[-3000:]
    # a -> b -> a: each fetched once, the second "a" refused as a loop
    assert ledger.count(loop_host, "/loop/a") == 1 and ledger.count(loop_host, "/loop/b") == 1
    assert int(result.stat("frontier/refused/redirect-loop") or 0) == 1
    # the 50 MiB body is cut at DOWNLOAD_MAXSIZE once, and not retried
    assert ledger.count(huge_host, "/huge") == 1
    assert int(result.stat("download/aborted/too-large") or 0) == 1


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port whose SYNs go unanswered: its one-slot accept queue is full."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    yield port
    for s in [*fillers, listener]:
        s.close()


def test_connecting_has_its_own_timeout_and_slow_pages_keep_theirs(
    tmp_path: Path, silent_port: int
) -> None:
    """A host that never completes the handshake fails after DOWNLOAD_CONNECT_TIMEOUT
    (1 s), not DOWNLOAD_TIMEOUT (30 s: six attempts would take three minutes), while a
    page that answers after 2 s on a connected socket is still fetched."""
    silent = f"http://silent.test:{silent_port}/"
    mix = {"robots:allow-all": 1.0, "page:normal": 1.0}
    with SimWebProcess(seed=8, n_hosts=2, mix=mix, pinned={0: "slow"}) as sim:
        settings = {"DOWNLOAD_TIMEOUT": 30, "DOWNLOAD_CONNECT_TIMEOUT": 1, "DEPTH_LIMIT": 1,
                    "RETRY_TIMES": 5, "RETRY_BACKOFF_BASE": 0.05, "BREAKER_THRESHOLD": 10,
                    "ADMISSION_MAX_PAGES_PER_HOST": 3, "ROBOTSTXT_OBEY": False}
        result = run_crawl(sim.proxy_url, [*sim.web.seed_urls(), silent], tmp_path,
                           settings=settings, env={"no_proxy": "silent.test"})
        slow_host = sim.web.hosts[0].name
    assert result.returncode == 0, result.log[-3000:]
    statuses = {item["url"]: item["status"] for item in result.items}
    assert statuses[f"http://{slow_host}/"] == 200
    assert silent not in statuses
    assert int(result.stat("retry/reason_count/download-error") or 0) == 5
    assert int(result.stat("retry/max_reached") or 0) == 1
    assert result.seconds < 30, result.seconds


def test_a_retry_after_of_a_year_is_capped(tmp_path: Path) -> None:
    """``Retry-After: 31536000`` waits RETRY_AFTER_MAX (3 s here), logged, not a year."""
    mix = {"robots:allow-all": 1.0, "page:normal": 1.0}
    with SimWebProcess(seed=8, n_hosts=1, mix=mix, pinned={0: "rate-limited-year"}) as sim:
        settings = {"RETRY_AFTER_MAX": 3, "DEPTH_LIMIT": 1, "ADMISSION_MAX_PAGES_PER_HOST": 3,
                    "ROBOTSTXT_OBEY": False}
        result = run_crawl(sim.proxy_url, sim.web.seed_urls(), tmp_path, settings=settings)
        host = sim.web.hosts[0].name
        pages = sim.ledger().page_requests(host)
    assert result.returncode == 0, result.log[-3000:]
    assert [e["status"] for e in pages] == [429, 200] * 3  # one page at a time (host hold)
    for refused, served in zip(pages[::2], pages[1::2], strict=True):
        assert 3 - LAG <= served["arrival"] - refused["done"] < 3 + 5
    assert result.log.count("capped to 3 s (RETRY_AFTER_MAX)") == 3
    assert int(result.stat("retry/retry_after_capped") or 0) == 3
