"""The frontier in real crawls: shared by workers, surviving kills and restarts.

Every check is on what the simulated web's server received (its ledger).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest
import redis

from crawler import settings as project_settings
from tests.crawl_runner import finish_crawl, run_crawl, start_crawl
from tests.redis_server import started_redis
from tests.simweb import SimWebProcess, Web
from tests.simweb.ledger import Ledger

pytestmark = pytest.mark.crawl

# Politeness is asserted from the server's arrival times, which lag by up to
# ~0.1 s when two crawlers and the server share 2 busy cores: the delay must
# dwarf that (its shortest jittered gap, 0.3 s, is three times the lag; the
# largest host, 47 pages, then takes ~28 s). Tests that do not assert gaps use
# a shorter one.
DELAY = 0.6
FAST_DELAY = 0.2
HOSTS = 120
# These tests are about the frontier, so the robots policy is off (it has its
# own tests, tests/test_robots_*.py) and the ground truth ignores robots.txt.
# A short lease brings a killed worker's URLs back quickly; few partitions
# keep the test Redis small.
SHARED = {"DOWNLOAD_DELAY": FAST_DELAY, "DEPTH_LIMIT": 0, "ROBOTSTXT_OBEY": False,
          "FRONTIER_PARTITIONS": 4, "FRONTIER_SEEN_BUCKETS": 256, "FRONTIER_LEASE_SECONDS": 3}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimWebProcess]:
    with SimWebProcess(seed=23, n_hosts=HOSTS, mix="clean") as process:
        yield process


def _page_counts(web: Web, ledger: Ledger) -> Counter[tuple[str, str]]:
    return Counter(web.page_identity(e["host"], e["path"]) for e in ledger.entries
                   if not e["path"].startswith("/robots.txt"))


def _expected(web: Web, seeds: list[str] | None = None) -> set[tuple[str, str]]:
    return set(web.reachable(seeds or web.seed_urls(), obey_robots=False))


def _assert_polite(ledger: Ledger, concurrency: int) -> None:
    """Per host: never more than ``concurrency`` in flight, and requests at
    least half of DOWNLOAD_DELAY x (1 - jitter) apart as the server stamped
    them, one short gap in 500 tolerated, as in test_e2e_crawl: on a loaded
    2-core machine a request can reach the server a few hundred ms after its
    worker let it go, which squeezes the gap after it. Without pacing a host
    shows gaps of a few ms by the dozen."""
    gaps = []
    for host in ledger.hosts():
        assert ledger.max_in_flight(host) <= concurrency, host
        gaps += [(gap, host) for gap in ledger.gaps(host)]
    assert len(gaps) > 500
    short = sorted(g for g in gaps if g[0] < DELAY * 0.5 * 0.5)
    assert len(short) <= len(gaps) // 500, short[:5]


def _shared_settings(redis_url: str, namespace: str, **extra: object) -> dict[str, object]:
    return {**SHARED, "REDIS_URL": redis_url, "FRONTIER_NAMESPACE": namespace, **extra}


def test_two_workers_share_one_frontier(
    sim: SimWebProcess, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    sim.reset()
    web = sim.web
    settings = _shared_settings(redis_url, redis_prefix + "two", DOWNLOAD_DELAY=DELAY)
    started = time.monotonic()
    procs = [
        start_crawl(sim.proxy_url, web.seed_urls(), tmp_path / f"w{i}",
                    {**settings, "FRONTIER_WORKER_ID": f"w{i}"})
        for i in range(2)
    ]
    results = [finish_crawl(p, tmp_path / f"w{i}", started) for i, p in enumerate(procs)]
    for result in results:
        assert result.returncode == 0, result.log[-3000:]
    ledger = sim.ledger()
    fetched = _page_counts(web, ledger)
    expected = _expected(web)
    assert len(expected) > 1000
    assert {k: n for k, n in fetched.items() if n > 1} == {}
    assert expected - set(fetched) == set()
    assert set(fetched) <= expected
    # Both workers did real work, and the per-host limits held across them.
    per_worker = [int(r.stat("frontier/leases/done") or 0) for r in results]
    assert min(per_worker) > 200, per_worker
    _assert_polite(ledger, concurrency=4)


def test_killed_worker_loses_nothing(
    sim: SimWebProcess, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    sim.reset()
    web = sim.web
    namespace = redis_prefix + "kill"
    settings = _shared_settings(redis_url, namespace)
    started = time.monotonic()
    victim = start_crawl(sim.proxy_url, web.seed_urls(), tmp_path / "victim", settings)
    client = redis.Redis.from_url(redis_url)
    done_key = [f"{{{namespace}/p{p}}}:n" for p in range(4)]
    deadline = time.monotonic() + 60
    while sum(int(client.hget(k, "done") or 0) for k in done_key) < 400:
        assert time.monotonic() < deadline, "the crawl made no progress"
        assert victim.poll() is None, (tmp_path / "victim" / "crawl.log").read_text()[-3000:]
        time.sleep(0.1)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    leased_at_kill = sum(int(client.hget(k, "leased") or 0) for k in done_key)
    survivor = finish_crawl(
        start_crawl(sim.proxy_url, web.seed_urls(), tmp_path / "survivor", settings),
        tmp_path / "survivor", started)
    assert survivor.returncode == 0, survivor.log[-3000:]

    fetched = _page_counts(web, sim.ledger())
    assert _expected(web) - set(fetched) == set(), "pages lost with the killed worker"
    twice = sum(n - 1 for n in fetched.values() if n > 1)
    assert twice <= leased_at_kill, (twice, leased_at_kill)
    assert int(survivor.stat("frontier/leases/claimed") or 0) > 0
    counts = Counter()
    for key in done_key:
        counts.update({k.decode(): int(v) for k, v in client.hgetall(key).items()})
    assert counts["queued"] == counts["leased"] == counts["delayed"] == 0
    assert counts["expired"] >= leased_at_kill


def test_seeds_pushed_to_redis_feed_a_worker_that_joins_without_seeds(
    sim: SimWebProcess, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    sim.reset()
    web = sim.web
    seeds = web.seed_urls()
    half = len(seeds) // 2
    namespace, key = redis_prefix + "feed", redis_prefix + "start_urls"
    # The idle wait keeps a worker whose frontier ran dry listening for seeds.
    settings = _shared_settings(redis_url, namespace, REDIS_START_URLS_KEY=key,
                                REDIS_START_URLS_POLL_SECONDS=0.2, FRONTIER_IDLE_WAIT=2)
    started = time.monotonic()
    first = start_crawl(sim.proxy_url, seeds[:half], tmp_path / "a",
                        {**settings, "FRONTIER_WORKER_ID": "a"})
    client = redis.Redis.from_url(redis_url)
    done_keys = [f"{{{namespace}/p{p}}}:n" for p in range(4)]
    deadline = time.monotonic() + 60
    while sum(int(client.hget(k, "done") or 0) for k in done_keys) < 100:
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.1)
    # The rest of the seeds arrive through Redis (with one bad line), while a
    # second worker with no seed file joins the running crawl.
    client.rpush(key, "not-a-url", *seeds[half:])
    second = start_crawl(sim.proxy_url, None, tmp_path / "b",
                         {**settings, "FRONTIER_WORKER_ID": "b"})
    results = [finish_crawl(first, tmp_path / "a", started),
               finish_crawl(second, tmp_path / "b", started)]
    for result in results:
        assert result.returncode == 0, result.log[-3000:]
    fetched = _page_counts(web, sim.ledger())
    assert _expected(web) - set(fetched) == set(), "pages of fed seeds were not crawled"
    assert {k: n for k, n in fetched.items() if n > 1} == {}
    assert int(results[1].stat("frontier/leases/done") or 0) > 50, "the joiner did no work"
    assert sum(int(r.stat("seeds/loaded") or 0) for r in results) == len(seeds)
    assert sum(int(r.stat("seeds/malformed") or 0) for r in results) == 1
    logs = results[0].log + results[1].log
    assert f"Skipping seed line {key} (Redis list):1: no http:// or https:// scheme" in logs
    assert client.llen(key) == 0 and client.hlen(f"{{{key}}}:taken") == 0


def test_redis_restart_loses_nothing(sim: SimWebProcess, tmp_path: Path) -> None:
    sim.reset()
    web = sim.web
    with started_redis(appendonly=True) as server:
        # Leases outlive the outage (renewals fail while Redis is down): no
        # URL may be handed to anyone else meanwhile.
        settings = _shared_settings(server.url, "restart", FRONTIER_LEASE_SECONDS=30)
        started = time.monotonic()
        worker = start_crawl(sim.proxy_url, web.seed_urls(), tmp_path / "w", settings)
        client = redis.Redis.from_url(server.url)
        counts = [f"{{restart/p{p}}}:n" for p in range(4)]
        deadline = time.monotonic() + 60
        while sum(int(client.hget(k, "done") or 0) for k in counts) < 300:
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.1)
        client.close()
        server.stop()
        time.sleep(2)  # the worker keeps downloading what it holds and must wait
        assert worker.poll() is None, "the worker died with Redis"
        server.start()
        result = finish_crawl(worker, tmp_path / "w", started)
    assert result.returncode == 0, result.log[-3000:]
    assert "Redis unreachable" in result.log and "Redis is back" in result.log
    fetched = _page_counts(web, sim.ledger())
    assert _expected(web) - set(fetched) == set(), "pages lost across the Redis restart"
    assert {k: n for k, n in fetched.items() if n > 1} == {}


def test_embedded_frontier_resumes_after_sigint(sim: SimWebProcess, tmp_path: Path) -> None:
    sim.reset()
    web = sim.web
    seeds = web.seed_urls(50)
    # (what 50 seeds reach of the whole web: every link in scope)
    settings = {"DOWNLOAD_DELAY": 0.1, "DEPTH_LIMIT": 0, "ROBOTSTXT_OBEY": False,
                "JOBDIR": str(tmp_path / "job"), "SCOPE": "any"}
    started = time.monotonic()
    first = start_crawl(sim.proxy_url, seeds, tmp_path / "first", settings)
    deadline = time.monotonic() + 60
    while len([e for e in sim.ledger().entries if e["status"] == 200]) < 200:
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.1)
    first.send_signal(signal.SIGINT)
    interrupted = finish_crawl(first, tmp_path / "first", started, timeout=60)
    assert "'finish_reason': 'shutdown'" in interrupted.log
    fetched_first = len(sim.ledger().entries)

    second = run_crawl(sim.proxy_url, seeds, tmp_path / "second", settings)
    assert second.returncode == 0, second.log[-3000:]
    assert "'finish_reason': 'finished'" in second.log
    # A graceful stop gives back every lease it held, those of a claim that
    # was under way included: none is left to run out before it is crawled.
    opened = next(line for line in second.log.splitlines() if " leased, " in line)
    assert " 0 leased, " in opened, opened
    assert int(second.stat("frontier/duplicates") or 0) >= len(seeds)  # seeds seen before
    fetched = _page_counts(web, sim.ledger())
    assert _expected(web, seeds) - set(fetched) == set()
    assert {k: n for k, n in fetched.items() if n > 1} == {}, "pages refetched on resume"
    assert len(sim.ledger().entries) > fetched_first


def test_slow_host_first_blocks_nobody(tmp_path: Path) -> None:
    # One host answering in 2 s listed first, 50 instant hosts, 8 pages each,
    # 16 requests in flight in all and 2 per host (the head-of-line scenario).
    # Adaptive pacing spaces the slow host's requests by at most 1 s (its
    # default cap, 30 s, would stretch the slow host's 8 pages over 45 s).
    with SimWebProcess(seed=5, n_hosts=51, mix={"robots:allow-all": 1, "page:normal": 1},
                       pinned={0: "slow"}) as slow_web:
        result = run_crawl(
            slow_web.proxy_url, slow_web.web.seed_urls(), tmp_path,
            settings={"CONCURRENT_REQUESTS": 16, "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
                      "DOWNLOAD_DELAY": 0, "ROBOTSTXT_OBEY": False, "DEPTH_LIMIT": 0,
                      "ADMISSION_MAX_PAGES_PER_HOST": 8, "FRONTIER_ADAPTIVE_MAX_DELAY": 1.0},
        )
        ledger = slow_web.ledger()
    assert result.returncode == 0, result.log[-3000:]
    slow, fast = "h00000.test", [h for h in ledger.hosts() if h != "h00000.test"]
    assert len(fast) == 50
    assert ledger.max_in_flight(slow) <= 2
    assert all(ledger.max_in_flight(h) <= 2 for h in fast)
    slow_done = sorted(e["done"] for e in ledger.for_host(slow))
    assert len(slow_done) == 8
    fast_entries = [e for h in fast for e in ledger.for_host(h)]
    reachable = slow_web.web.reachable(slow_web.web.seed_urls(), obey_robots=False)
    for host in fast:
        own = sum(1 for h, _ in reachable if h == host)
        assert len(ledger.for_host(host)) == min(8, own), host
    # Every fast page was served while the slow host had done at most half of
    # its pages: no slow request held a download slot a fast host could use.
    assert max(e["done"] for e in fast_entries) < slow_done[3], "fast hosts waited on the slow one"


def test_no_idle_stalls_between_paced_requests(tmp_path: Path) -> None:
    # One host, a 0.3 s delay: the crawl must go on as soon as the host is
    # allowed again, not at Scrapy's 5 s engine heartbeat.
    with SimWebProcess(seed=3, n_hosts=1, mix={"robots:allow-all": 1, "page:normal": 1}) as one:
        result = run_crawl(one.proxy_url, one.web.seed_urls(), tmp_path,
                           settings={"DOWNLOAD_DELAY": 0.3, "DOWNLOAD_DELAY_JITTER": 0,
                                     "ROBOTSTXT_OBEY": False, "DEPTH_LIMIT": 0})
        arrivals = sorted(e["arrival"] for e in one.ledger().entries)
    assert result.returncode == 0, result.log[-3000:]
    assert len(arrivals) >= 3
    gaps = [b - a for a, b in pairwise(arrivals)]
    assert min(gaps) >= 0.3 * 0.8, gaps
    assert max(gaps) < 1.0, gaps  # the last response's links are claimed ~0.3 s later


@pytest.mark.crawl
def test_dont_filter_does_not_refetch_and_says_so(sim: SimWebProcess, tmp_path: Path) -> None:
    """A request with dont_filter=True for a page already fetched is admitted like
    any other, so the server sees the page once; the crawl counts it and warns."""
    settings = {"ROBOTSTXT_OBEY": False, "DEPTH_LIMIT": 1, "DOWNLOAD_DELAY": 0,
                "EXTENSIONS": {**project_settings.EXTENSIONS,
                               "tests.refetch_probe.RefetchProbe": 0}}
    seeds = sim.web.seed_urls(3)
    sim.reset()
    result = run_crawl(sim.proxy_url, seeds, tmp_path, settings)
    assert result.returncode == 0, result.log[-3000:]
    asked = result.stat("test/refetch_asked").strip("'")
    assert asked in seeds
    host, path = asked.split("://", 1)[1].split("/", 1)
    fetched = [e for e in sim.ledger().entries if e["host"] == host and e["path"] == "/" + path]
    assert len(fetched) == 1, fetched
    assert result.stat("frontier/dont_filter_ignored") == "1"
    assert "dont_filter=True does not make a URL fetched again" in result.log
