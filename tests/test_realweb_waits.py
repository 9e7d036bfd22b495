"""Waiting costs nothing: no claim while every host waits, and a gated domain at its pace.

The short variant of ``python -m bench.gatedweb --webs crawldelay``: one host
of the real-socket web whose robots.txt says ``Crawl-delay: 8``, crawled by
one worker on a redis-server of the test's own, whose counters are read four
times a second. Between two of the host's requests nothing is due anywhere:
what the worker sends then is its heartbeat, the watches of live settings,
the frontier's counts and the watchdog's reads, and no claim (before the
wake channel, every partition was asked once a second: 16 script calls a
second).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pytest

from bench.gatedweb import SETTINGS as GATED
from bench.gatedweb import Sampler
from bench.gatedweb import domain_web as domain_web_spec
from tests.crawl_runner import REALWEB_DEFAULTS, finish_crawl, realweb_settings, start_crawl
from tests.realweb import Host, RealWebProcess, Web
from tests.realweb.sites import SLACK, chain_site
from tests.redis_server import started_redis

pytestmark = pytest.mark.crawl

CRAWL_DELAY = 8


def test_a_worker_whose_host_waits_sends_no_claim_until_its_turn(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    web = realweb(Web([Host("slow.test", robots=f"User-agent: *\nCrawl-delay: {CRAWL_DELAY}\n",
                            pages=chain_site(3))]))
    with started_redis() as server, Sampler(server.url, every=0.25) as sampler:
        started = time.monotonic()
        proc = start_crawl(None, [web.url("slow.test")], tmp_path / "crawl", {
            **realweb_settings(web.nameserver), **REALWEB_DEFAULTS, "REDIS_URL": server.url})
        result = finish_crawl(proc, tmp_path / "crawl", started, timeout=120)
    assert result.returncode == 0, result.log[-3000:]
    requests = sorted(web.ledger().for_host("slow.test"), key=lambda r: r.arrival)
    assert [r.target for r in requests] == [b"/robots.txt", b"/", b"/1", b"/2"]
    gaps = [b.arrival - a.done for a, b in pairwise(requests)]  # type: ignore[operator]
    assert min(gaps) >= CRAWL_DELAY - 0.1, gaps  # the Crawl-delay, from the end of each answer
    # The wait between "/" and "/1", leaving a second at each end for what
    # an answer and a claim cost.
    start, end = requests[1].arrival + 1.0, requests[2].arrival - 1.0
    window = [(t, u) for t, u in sampler.samples if start <= t <= end]
    assert len(window) >= 4, "too few readings of Redis's counters"
    (t0, first), (t1, last) = window[0], window[-1]
    spent = last - first
    seconds = t1 - t0
    # The heartbeat is a script a second, the watchdog one every few; the
    # claims were 16 a second.
    assert spent.scripts / seconds <= 2.5, (spent.scripts, seconds, spent.by_command)
    assert spent.commands / seconds <= 40, (spent.commands, seconds, spent.by_command)


DOMAIN_NAMES = 20
DOMAIN_DELAY = 0.25  # FRONTIER_DOMAIN_DELAY's default: the tightest gate here


@pytest.mark.parametrize("workers", [1, 2])
def test_names_of_one_domain_on_one_address_go_at_the_domains_pace(
        realweb: Callable[..., RealWebProcess], tmp_path: Path, workers: int) -> None:
    """20 names of one registered domain on one address, pages answering in
    200 ms, with the address's concurrency 2 and no delay of its own, and
    the domain's delay of 0.25 s (4 pages a second) binding: the domain goes
    at 70% of that at least (the benchmark's target is 90%, on an unloaded
    machine, where this test sees 92-98%; bench.gatedweb; CI runs it beside
    other crawls on two cores, where it saw 77%), every page fetched once, never more than two
    requests open at the address, and no two of the domain's requests
    starting closer than the delay less its jitter. (Before a turn its host
    did not take, for a DNS job or to wait for the address, went to the next
    host, the domain went at about half its pace.)"""
    web, _ = domain_web_spec(True)
    farm = [h for h in web.hosts if h.name.endswith(".farm.test")]
    assert len(farm) == DOMAIN_NAMES
    w = realweb(web)
    seeds = [w.url(h.name) for h in web.hosts]
    with started_redis() as server:
        started = time.monotonic()
        procs = [start_crawl(None, seeds[i::workers], tmp_path / f"w{i}", {
            **realweb_settings(w.nameserver), **GATED, **REALWEB_DEFAULTS,
            "REDIS_URL": server.url, "FRONTIER_WORKER_ID": f"w{i}",
            "JOBDIR": str(tmp_path / f"w{i}" / "job")}) for i in range(workers)]
        results = [finish_crawl(p, tmp_path / f"w{i}", started, timeout=180)
                   for i, p in enumerate(procs)]
    for result in results:
        assert result.returncode == 0, result.log[-3000:]
    ledger = w.ledger()
    requests = ledger.for_domain("farm.test")
    pages = [r for r in requests if r.target != b"/robots.txt"]
    assert sorted((r.host, r.target) for r in pages) == sorted(
        (h.name, t) for h in farm for t in h.pages), "a page fetched twice or never"
    assert ledger.max_in_flight_in_domain("farm.test") <= 2
    gaps = ledger.gaps_in_domain("farm.test")
    assert min(gaps) >= DOMAIN_DELAY * 0.5 - SLACK, sorted(gaps)[:5]
    span = max(r.done or r.arrival for r in requests) - requests[0].arrival
    pace = len(requests) / span
    assert pace >= 0.7 / DOMAIN_DELAY, (pace, len(requests), span)
