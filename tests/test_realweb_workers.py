"""Workers joining and dying, on the real-socket web: what the servers received.

Two real ``scrapy crawl broad`` workers on one Redis crawl 24 sites of 24
pages, six names on each of four loopback addresses (each address's gate:
three requests at once), one request a second per site. The second worker
joins once the first is under way; later the first is killed with SIGKILL.
Everything is read from the web's ledger (each worker sends its own
User-Agent):

* the worker that joins gets a fair share within 10 s: from then until the
  kill it sends at least a quarter of the requests;
* the killed worker's work is taken over within its lease and its
  reservation (the URLs it held come back when their leases run out) plus a
  few seconds: every site with pages left at the kill hears from the other
  worker by then;
* nothing is lost (every page of every site was fetched), nothing is fetched
  twice but what the killed worker held leased when it died;
* politeness held across both workers and the kill: each site's requests at
  least its delay apart, each address never more than three requests open;
  and no site went silent for longer than a takeover takes.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pytest
import redis

from bench.soak.chaos import leased_by
from crawler.frontier.keys import Keys, crawl_namespace
from tests.crawl_runner import REALWEB_DEFAULTS, finish_crawl, realweb_settings, start_crawl
from tests.realweb import Host, RealWebProcess, Web
from tests.realweb.sites import ALLOW_ALL, SLACK, chain_site, site_targets

pytestmark = pytest.mark.crawl

PAGES = 24
DELAY = 1.0
LEASE_S = 3.0
RESERVE_S = 3.0
IP_CONCURRENCY = 3


def _requests_by(web: RealWebProcess, agent: str, start: float, end: float) -> int:
    return sum(1 for r in web.ledger().requests
               if r.user_agent == agent and start <= r.arrival < end)


def _wait_until(what: str, test: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_worker_that_joins_gets_its_share_and_a_killed_ones_work_is_taken_over(
        realweb: Callable[..., RealWebProcess], redis_url: str, redis_prefix: str,
        tmp_path: Path) -> None:
    names = [f"s{i}.test" for i in range(24)]
    web = realweb(Web([Host(name, robots=ALLOW_ALL, share=f"a{i % 4}",
                            pages=chain_site(PAGES, slow=frozenset(range(1, PAGES)),
                                             delay=0.3))
                       for i, name in enumerate(names)]))
    namespace = f"{redis_prefix}join"
    settings = {**realweb_settings(web.nameserver), **REALWEB_DEFAULTS,
                "REDIS_URL": redis_url, "FRONTIER_NAMESPACE": namespace,
                "DOWNLOAD_DELAY": DELAY, "DOWNLOAD_DELAY_JITTER": 0,
                "FRONTIER_ADAPTIVE_FACTOR": 0, "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
                "FRONTIER_IP_CONCURRENCY": IP_CONCURRENCY,
                "FRONTIER_LEASE_SECONDS": LEASE_S, "FRONTIER_RESERVE_SECONDS": RESERVE_S}
    seeds = [web.url(name) for name in names]
    keys = Keys(crawl_namespace(namespace, "broad"), 16, 4096)
    client = redis.Redis.from_url(redis_url)
    started = time.monotonic()
    first = start_crawl(None, seeds, tmp_path / "a", {
        **settings, "USER_AGENT": "worker-a", "FRONTIER_WORKER_ID": "worker-a"})
    second = None
    try:
        _wait_until("the first worker crawls", lambda: len(web.ledger().requests) >= 40)
        second = start_crawl(None, seeds, tmp_path / "b", {
            **settings, "USER_AGENT": "worker-b", "FRONTIER_WORKER_ID": "worker-b"})
        _wait_until("the second worker crawls",
                    lambda: any(r.user_agent == "worker-b" for r in web.ledger().requests))
        joined = min(r.arrival for r in web.ledger().requests if r.user_agent == "worker-b")
        time.sleep(max(joined + 16 - time.time(), 0))
        held = leased_by(client, keys, "worker-a")
        os.kill(first.pid, signal.SIGKILL)
        killed = time.time()
        first.wait()
        result = finish_crawl(second, tmp_path / "b", started, timeout=180)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        client.close()
    assert result.returncode == 0, result.log[-3000:]
    assert "Traceback" not in result.log, result.log[-3000:]
    ledger = web.ledger()

    # The newcomer's share, from 10 s after its first request to the kill.
    a = _requests_by(web, "worker-a", joined + 10, killed)
    b = _requests_by(web, "worker-b", joined + 10, killed)
    assert b >= 0.25 * (a + b), (a, b)

    # Taken over: each site with pages left at the kill heard from the
    # survivor within the killed worker's lease and reservation, plus 4 s.
    left = [name for name in names
            if any(r.arrival > killed for r in ledger.for_host(name))]
    assert left, "the kill came after the crawl"
    for name in left:
        after = min(r.arrival for r in ledger.for_host(name) if r.arrival > killed)
        assert after - killed <= LEASE_S + RESERVE_S + 4, (name, after - killed)

    # Nothing lost; twice only what the killed worker held.
    twice = 0
    for name in names:
        targets = ledger.targets(name)
        assert sorted(set(targets)) == site_targets(PAGES), name
        twice += len(targets) - len(set(targets))
    assert twice <= held, (twice, held)

    # Politeness across both workers and the kill, and no site left waiting
    # longer than a takeover takes (a host parked for its address whose wake
    # was lost would wait for its fallback: 15 s and more).
    for name in names:
        arrivals = sorted(r.arrival for r in ledger.for_host(name))  # robots.txt too
        gaps = [b - a for a, b in pairwise(arrivals)]
        assert min(gaps) >= DELAY - SLACK, (name, min(gaps))
        assert max(gaps) <= LEASE_S + RESERVE_S + 4, (name, max(gaps))
    for address in {web.address(name) for name in names}:
        assert ledger.max_in_flight_at(address) <= IP_CONCURRENCY, address
