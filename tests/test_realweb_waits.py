"""A worker whose only host waits asks Redis for no claim until the gate opens.

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

from bench.gatedweb import Sampler
from tests.crawl_runner import REALWEB_DEFAULTS, finish_crawl, realweb_settings, start_crawl
from tests.realweb import Host, RealWebProcess, Web
from tests.realweb.sites import chain_site
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
