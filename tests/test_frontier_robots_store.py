"""The frontier's side of the robots policy (claim.lua, robots.lua) on a real Redis.

A host's URLs are not handed out until its robots.txt is resolved; one
worker gets the robots job; the outcome paces the host, holds it when
unreachable (with backoff), serves a last good copy, parks it at the end.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from crawler.frontier.admin import FrontierAdmin
from crawler.frontier.values import Release, RobotsRetry
from tests.frontier_harness import Harness, admission

HOST = "http://a.test:80"
RETRY = RobotsRetry(base_ms=200, cap_ms=400, max_attempts=3, stale_max_ms=60_000)


@pytest.fixture
def harness(make_harness: Callable[..., Harness]) -> Harness:
    h = make_harness("r", clock=True, concurrency=4, delay_ms=0, lease_ms=60_000,
                     robots_ms=300)
    h.run(h.frontier.admit([admission(f"http://a.test/{i}") for i in range(3)]))
    return h


def _store_ok(h: Harness, ttl_ms: int = 60_000, concurrency: int = 4, delay_ms: int = 0,
              floor_ms: int = 0) -> int:
    outcome = h.run(h.frontier.store_robots(HOST, b"blob", ttl_ms, concurrency, delay_ms,
                                            floor_ms, 0, RETRY))
    assert outcome.state == "rules"
    return outcome.version


def _host(h: Harness) -> dict[str, str]:
    """The host's fields and its site's (politeness), in one dict."""
    part = h.frontier.partition(HOST)
    raw = h.run(h.client.hgetall(h.keys.host(part, HOST)))
    raw.update(h.run(h.client.hgetall(h.keys.site(part, HOST))))
    return {k.decode(): v.decode() for k, v in raw.items()}


def test_robots_first_one_job_for_all_workers(harness: Harness) -> None:
    f = harness.frontier
    first = harness.run(f.claim(10, "w1"))
    assert (first.leases, first.robots_jobs) == ([], [HOST])
    # while w1 fetches, nobody gets the host: not its URLs, not another job
    second = harness.run(f.claim(10, "w2"))
    assert (second.leases, second.robots_jobs) == ([], [])
    version = _store_ok(harness)
    leases = harness.run(f.claim(10, "w2")).leases
    assert len(leases) == 3 and {x.robots_version for x in leases} == {version}
    assert harness.run(f.robots_blob(HOST)) == b"blob"


def test_a_vanished_fetcher_is_replaced_after_the_job_lease(harness: Harness) -> None:
    f = harness.frontier
    assert harness.run(f.claim(10, "w1")).robots_jobs == [HOST]  # w1 then dies
    harness.clock.advance(200)
    assert harness.run(f.claim(10, "w2")).robots_jobs == []  # clearly before the job's lease ends
    harness.clock.advance(150)
    assert harness.run(f.claim(10, "w2")).robots_jobs == [HOST]


def test_rules_expire_and_are_fetched_again(harness: Harness) -> None:
    f = harness.frontier
    harness.run(f.claim(1, "w1"))
    _store_ok(harness, ttl_ms=150)
    (lease,) = harness.run(f.claim(1, "w1")).leases
    harness.clock.advance(200)
    # Due again, but a robots.txt fetch is a request like any other: it waits
    # until nothing of the host's name is in flight.
    assert harness.run(f.claim(5, "w1")).robots_jobs == []
    harness.run(f.release([Release(HOST, lease.fingerprint, "done")], "w1"))
    again = harness.run(f.claim(5, "w1"))
    assert (again.leases, again.robots_jobs) == ([], [HOST])


def test_crawl_delay_becomes_the_hosts_pacing(harness: Harness) -> None:
    f = harness.frontier
    harness.run(f.claim(1, "w1"))
    _store_ok(harness, concurrency=1, delay_ms=2000, floor_ms=2000)
    host = _host(harness)
    assert (host["c"], host["dl"], host["fl"]) == ("1", "2000", "2000")
    first = harness.run(f.claim(5, "w1"))
    (lease,) = first.leases  # concurrency 1
    assert harness.run(f.start_turn(HOST, (0, *lease.turns))).wait_ms == 0  # it starts...
    harness.run(f.release([Release(HOST, first.leases[0].fingerprint, "done")], "w1"))
    nxt = harness.run(f.claim(5, "w1"))  # ...and ends
    assert nxt.leases == []  # not before 2 s, whatever the jitter
    assert nxt.next_ready_ms - nxt.server_ms >= 1900
    assert harness.run(f.start_gate(HOST)) >= 1900


def test_unreachable_holds_the_host_with_backoff_then_parks_it(
    harness: Harness, redis_url: str
) -> None:
    f = harness.frontier
    outcomes = []
    for _ in range(3):
        assert harness.run(f.claim(5, "w1")).robots_jobs == [HOST]
        outcome = harness.run(f.store_robots(HOST, None, 0, 0, 0, 0, 0, RETRY))
        outcomes.append((outcome.state, outcome.attempts))
        held = harness.run(f.claim(5, "w1"))
        assert (held.leases, held.robots_jobs) == ([], [])  # complete disallow meanwhile
        wait = held.next_ready_ms - held.server_ms
        assert 150 <= wait <= 400, wait  # 200 ms, then 400 (the cap)
        harness.clock.advance(wait + 20)
    assert outcomes == [("unreachable", 1), ("unreachable", 2), ("park", 3)]
    assert harness.run(f.park_host(HOST, '{"reason": "robots-unreachable"}')) == 3
    counts = harness.run(f.counts())
    assert (counts["queued"], counts["dead"]) == (0, 3)
    # new links of a parked host are dead letters at once: a finite crawl ends
    result = harness.run(f.admit([admission("http://a.test/later")]))
    assert (result.added, result.parked) == (0, 1)
    assert harness.run(f.counts())["dead"] == 4
    assert harness.run(f.claim(5, "w1")).robots_jobs == []
    # the operator brings them back: the host is unparked and robots tried again
    admin = FrontierAdmin(redis.Redis.from_url(redis_url), harness.keys, layout_found=True)
    assert admin.requeue(reason="robots-unreachable") == 4
    harness.clock.advance(450)  # past the retry wait
    assert harness.run(f.claim(5, "w1")).robots_jobs == [HOST]


def test_a_last_good_copy_serves_while_unreachable(harness: Harness) -> None:
    f = harness.frontier
    harness.run(f.claim(1, "w1"))
    version = _store_ok(harness, ttl_ms=50)
    harness.clock.advance(100)
    assert harness.run(f.claim(5, "w1")).robots_jobs == [HOST]  # due again
    outcome = harness.run(f.store_robots(HOST, None, 0, 0, 0, 0, 0, RETRY))
    assert (outcome.state, outcome.version) == ("stale", version)
    leases = harness.run(f.claim(5, "w1")).leases
    assert len(leases) == 3 and leases[0].robots_version == version
    assert harness.run(f.robots_blob(HOST)) == b"blob"


def test_robots_denials_are_refused_never_done_and_counted(harness: Harness) -> None:
    f = harness.frontier
    harness.run(f.claim(1, "w1"))
    _store_ok(harness)
    lease = harness.run(f.claim(1, "w1")).leases[0]
    harness.run(f.release([Release(HOST, lease.fingerprint, "refused", "robots", unsent=True)],
                          "w1"))
    counts = harness.run(f.counts())
    assert (counts["done"], counts["r:robots"], counts["robots_denied"], counts["leased"]) \
        == (0, 1, 1, 0)
