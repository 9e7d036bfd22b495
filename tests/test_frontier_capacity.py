"""The politeness-bound ceiling and the time to drain (crawler/frontier/capacity.py).

Against a real Redis under a private namespace: sites admitted through the
frontier, their latency kept by the release script, their domains' and
server addresses' limits, operators' overrides; the figures read as
``scrapy frontier status`` reads them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from crawler.commands.frontier_output import format_status
from crawler.frontier.admin import FrontierAdmin
from crawler.frontier.capacity import CapacityReader, site_pace
from crawler.frontier.keys import Count
from crawler.frontier.values import Limits, Release
from crawler.frontier.workers import Heartbeat
from crawler.metrics.frontier import FrontierCollector
from tests.frontier_harness import Harness, admission

LIMITS = dict(concurrency=2, delay_ms=500, domain_delay_ms=250, ip_concurrency=2)


def _fields(**given: object) -> list[bytes | None]:
    names = ("c", "dl", "fl", "ad", "xc", "xd", "xp", "lt", "bs", "ip", "ipx")
    return [None if given.get(n) is None else str(given[n]).encode() for n in names]


@pytest.mark.parametrize(("fields", "pace", "bound"), [
    (dict(c=2, dl=500, lt=100), 2.0, "delay"),  # 2/s by the delay; 20/s by concurrency
    (dict(c=2, dl=0, lt=250), 8.0, "concurrency"),  # two in flight, 4 answers/s each
    (dict(c=4, dl=100, fl=2000, lt=100), 0.5, "delay"),  # Crawl-delay 2 s: one at a time
    (dict(c=4, dl=100, ad=900, lt=100), 1.0, "delay"),  # adaptation: 0.1 s + 0.9 s a page
    (dict(c=4, dl=100, xd=250, xc=1, lt=1000), 1.0, "concurrency"),  # the operator's limits
    (dict(c=4, dl=100, xp=1), 0.0, "paused"),
    (dict(c=4, dl=100, bs="x"), 0.0, "paused"),  # the breaker parked it
])
def test_a_sites_pace(fields: dict[str, object], pace: float, bound: str) -> None:
    rate, _, why = site_pace(_fields(**fields), Limits(**LIMITS), 1000.0)
    assert (round(rate, 3), why) == (pace, bound)


def test_the_ceiling_sums_sites_within_their_domains_and_addresses(
        make_harness: Callable[..., Harness], redis_url: str) -> None:
    """x.test alone: 2/s (its delay); four subdomains of big.test: 8/s, but
    their domain starts four a second; p.test and q.test on one address: 4/s,
    but the address has two in flight, answering in 1 s; z.test paused: 0.
    Ceiling 2 + 4 + 2 = 8 pages/s. Two workers doing 1 and 1.5 pages/s: 2.5
    now, and seven such workers reach the ceiling."""
    h = make_harness("cap", **LIMITS)
    f = h.frontier
    sites = ["x.test", *(f"s{i}.big.test" for i in range(4)), "p.test", "q.test", "z.test"]
    h.run(f.admit([admission(f"http://{site}/{j}") for site in sites for j in range(5)]))
    until = int(time.time() * 1000) + 600_000

    def site_key(site: str) -> str:
        host = f"http://{site}:80"
        return h.keys.site(f.partition(host), host)

    h.run(h.client.hset(site_key("x.test"), "lt", 100))
    for site in ("p.test", "q.test"):
        h.run(h.client.hset(site_key(site), mapping={"lt": 1000, "ip": "127.0.0.9",
                                                     "ipx": until}))
    h.run(h.client.hset(site_key("z.test"), "xp", 1))
    reader = CapacityReader(redis.Redis.from_url(redis_url), h.keys, f.limits)
    cap = reader.read([f"http://{s}:80" for s in sites], 40, int(time.time() * 1000),
                      [1.0, 1.5])
    assert cap.ceiling == 8.0
    assert cap.bound_by == {"delay": 1, "domain": 4, "address": 2, "paused": 1}
    assert (cap.current, cap.sites_with_work, cap.workers_alive) == (2.5, 8, 2)
    assert (cap.drain_at_current_s, cap.drain_at_ceiling_s) == (16.0, 5.0)
    assert cap.workers_for_ceiling == 7
    # Without the scopes the same sites could do 2 + 8 + 4 = 14 pages/s.
    open_limits = Limits(concurrency=2, delay_ms=500)
    wide = CapacityReader(redis.Redis.from_url(redis_url), h.keys, open_limits).read(
        [f"http://{s}:80" for s in sites], 40, int(time.time() * 1000), [None])
    assert wide.ceiling == 14.0
    assert (wide.current, wide.drain_at_current_s, wide.workers_for_ceiling) == (None,) * 3


def test_the_release_keeps_each_sites_answer_time(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("lt", concurrency=2, delay_ms=0)
    f = h.frontier
    h.run(f.admit([admission(f"http://a.test/{j}") for j in range(3)]))
    key = h.keys.site(f.partition("http://a.test:80"), "http://a.test:80")
    for fetch_ms in (1000, 2000):
        (lease,) = h.run(f.claim(1, "w")).leases
        h.run(f.release([Release(lease.host, lease.fingerprint, "done", fetch_ms=fetch_ms)], "w"))
    assert int(h.run(h.client.hget(key, "lt"))) == 1300  # 0.7 x 1000 + 0.3 x 2000


def test_the_status_shows_the_pace_and_the_time_to_drain(
        make_harness: Callable[..., Harness], redis_url: str) -> None:
    h = make_harness("capst", concurrency=1, delay_ms=1000)
    h.run(h.frontier.admit([admission(f"http://h{i}.test/{j}") for i in range(3)
                            for j in range(4)]))
    admin = FrontierAdmin(redis.Redis.from_url(redis_url), h.keys, limits=h.frontier.limits)
    st = admin.status()
    assert st.counts[Count.QUEUED] == 12
    assert st.capacity is not None and st.capacity.ceiling == 3.0
    assert st.capacity.drain_at_ceiling_s == 4.0
    text = format_status(st, "redis://test")
    assert "ceiling 3.0 pages/s with unlimited workers (3 sites with work: 3 by delay)" in text
    assert "Drain    the 12 queued URLs: 4s at the ceiling" in text


def test_the_reporter_exports_the_ceiling_and_the_time_to_drain(
        make_harness: Callable[..., Harness], redis_url: str) -> None:
    """The metrics' reporter reads the capacity with its scan of the queues and
    exports it: the ceiling, the pace its workers' heartbeats give, the time to
    drain at both and the workers for the ceiling."""
    h = make_harness("capm", concurrency=1, delay_ms=500)
    h.run(h.frontier.admit([admission(f"http://h{i}.test/{j}") for i in range(4)
                            for j in range(5)]))
    beat = Heartbeat(time.time(), held=0, lease=60.0, rate=2.0)
    h.run(h.client.hset(h.keys.workers(), "w1", beat.to_json()))
    collector = FrontierCollector(redis.Redis.from_url(redis_url), h.keys, "w1",
                                  limits=h.frontier.limits)
    try:
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in collector.collect() for s in family.samples}
    finally:
        collector.close()
    frontier = (("frontier", h.keys.namespace),)
    # Four sites, one at a time, not timed yet (1 s each): 4 pages/s at most.
    assert samples[("crawler_frontier_ceiling_pages_per_second", frontier)] == 4.0
    assert samples[("crawler_frontier_pages_per_second", frontier)] == 2.0
    assert samples[("crawler_frontier_drain_seconds", (("at", "ceiling"), *frontier))] == 5.0
    assert samples[("crawler_frontier_drain_seconds", (("at", "current"), *frontier))] == 10.0
    assert samples[("crawler_frontier_workers_for_ceiling", frontier)] == 2
