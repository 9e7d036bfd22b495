"""A host's DNS state in the frontier (lua/dns.lua, crawler/frontier/dnsstate.py), on real Redis.

Failed lookups are counted per host, for every worker: a run of them holds
the host with backoff and ends in "park"; any answer from the host, or a
requeue, ends the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import redis

from crawler.frontier.admin import FrontierAdmin
from crawler.frontier.dnsstate import DNSRetry, HostDNS
from crawler.frontier.values import Release
from tests.frontier_harness import Harness, admission

HOST = "http://a.test:80"
RETRY = DNSRetry(base_ms=200, cap_ms=300, max_attempts=4)


@pytest.fixture
def harness(make_harness: Callable[..., Harness]) -> Harness:
    h = make_harness("d", clock=True, concurrency=4, delay_ms=0, lease_ms=60_000)
    h.run(h.frontier.admit([admission(f"http://a.test/{i}") for i in range(6)]))
    return h


def _hosts(h: Harness) -> HostDNS:
    return HostDNS(h.frontier, RETRY)


def _field(h: Harness, name: str) -> bytes | None:
    part = h.frontier.partition(HOST)
    site = h.run(h.client.hget(h.keys.site(part, HOST), name))
    return site if site is not None else h.run(h.client.hget(h.keys.host(part, HOST), name))


def test_a_failed_lookup_holds_the_host_for_every_worker(harness: Harness) -> None:
    verdict = harness.run(_hosts(harness).failed(HOST))
    assert (verdict.verdict, verdict.attempts, verdict.wait_ms, verdict.counted) == (
        "hold", 1, 200, True)
    for worker in ("w1", "w2"):
        assert harness.run(harness.frontier.claim(5, worker)).leases == []
    assert harness.run(harness.frontier.start_gate(HOST)) > 0  # URLs claimed before wait too
    harness.clock.advance(100)
    assert harness.run(harness.frontier.claim(5, "w1")).leases == []  # clearly still held
    harness.clock.advance(120)
    assert len(harness.run(harness.frontier.claim(5, "w1")).leases) == 4


def test_failures_during_a_hold_are_one_episode(harness: Harness) -> None:
    """The URLs claimed together all fail at once: one failed lookup, not four."""
    hosts = _hosts(harness)
    first = harness.run(hosts.failed(HOST))
    again = [harness.run(hosts.failed(HOST)) for _ in range(3)]
    assert first.counted and not any(v.counted for v in again)
    assert {v.attempts for v in again} == {1}
    assert all(v.verdict == "hold" and 0 < v.wait_ms <= 200 for v in again)  # wait for its end


def test_a_run_of_failures_backs_off_then_parks(harness: Harness) -> None:
    hosts = _hosts(harness)
    waits = []
    for _ in range(RETRY.max_attempts - 1):
        verdict = harness.run(hosts.failed(HOST))
        assert verdict.verdict == "hold"
        waits.append(verdict.wait_ms)
        harness.clock.advance(verdict.wait_ms + 20)
    assert waits == [200, 300, 300]  # doubling, capped
    verdict = harness.run(hosts.failed(HOST))
    assert (verdict.verdict, verdict.attempts) == ("park", RETRY.max_attempts)


def test_failures_in_a_nameserver_outage_hold_without_counting(harness: Harness) -> None:
    hosts = _hosts(harness)
    harness.run(hosts.failed(HOST))
    harness.clock.advance(220)
    for _ in range(RETRY.max_attempts + 1):  # would have parked it, counted
        verdict = harness.run(hosts.failed(HOST, count=False))
        assert (verdict.verdict, verdict.attempts, verdict.counted) == ("hold", 1, False)
        assert verdict.wait_ms == 200  # its backoff as it stands
        harness.clock.advance(220)
    assert harness.run(hosts.failed(HOST)).attempts == 2


def test_zero_max_attempts_never_parks(harness: Harness) -> None:
    hosts = HostDNS(harness.frontier, DNSRetry(base_ms=10, cap_ms=10, max_attempts=0))
    for _ in range(5):
        assert harness.run(hosts.failed(HOST)).verdict == "hold"
        harness.clock.advance(20)


def test_an_answer_from_the_host_ends_the_run(harness: Harness) -> None:
    hosts = _hosts(harness)
    harness.run(hosts.failed(HOST))
    harness.clock.advance(220)
    harness.run(hosts.failed(HOST))
    assert _field(harness, "da") == b"2"
    harness.clock.advance(320)
    lease = harness.run(harness.frontier.claim(1, "w1")).leases[0]
    release = Release(lease.host, lease.fingerprint, "done", health="ok")
    harness.run(harness.frontier.release([release], "w1"))
    assert _field(harness, "da") is None and _field(harness, "du") is None
    assert harness.run(hosts.failed(HOST)).attempts == 1


def test_a_failed_release_does_not_end_the_run(harness: Harness) -> None:
    hosts = _hosts(harness)
    harness.run(hosts.failed(HOST))
    harness.clock.advance(220)
    lease = harness.run(harness.frontier.claim(1, "w1")).leases[0]
    release = Release(lease.host, lease.fingerprint, "retry", "0")  # health "": not an answer
    harness.run(harness.frontier.release([release], "w1"))
    assert _field(harness, "da") == b"1"


def test_a_robots_jobs_hold_is_replaced(harness: Harness) -> None:
    """The robots fetch will not happen: the host waits for the DNS backoff, not its lease."""
    harness.frontier.limits.robots_ms = 60_000
    claimed = harness.run(harness.frontier.claim(1, "w1"))
    assert claimed.robots_jobs == [HOST]
    harness.run(_hosts(harness).failed(HOST, job=True))
    hold = int(_field(harness, "w") or 0) - harness.run(harness.frontier.claim(1, "w1")).server_ms
    assert 0 < hold <= 200
    harness.clock.advance(100)
    assert harness.run(harness.frontier.claim(1, "w2")).robots_jobs == []  # clearly still held
    harness.clock.advance(120)
    assert harness.run(harness.frontier.claim(1, "w2")).robots_jobs == [HOST]  # asked again


def test_an_unknown_host_is_gone(harness: Harness) -> None:
    verdict = harness.run(_hosts(harness).failed("http://never.test:80"))
    assert verdict.verdict == "gone"


def test_a_parked_host_is_requeued_with_a_fresh_count(harness: Harness, redis_url: str) -> None:
    hosts = _hosts(harness)
    reason = json.dumps({"reason": "dns-failed", "error": "a.test: timeout"})
    harness.run(hosts.failed(HOST))
    assert harness.run(hosts.park(HOST, reason)) == 6
    assert harness.run(harness.frontier.admit([admission("http://a.test/new")])).parked == 1
    client = redis.Redis.from_url(redis_url)
    try:
        admin = FrontierAdmin(client, harness.keys)
        assert {d.reason for d in admin.dead()} == {"dns-failed"}
        assert admin.requeue("dns-failed") == 7
    finally:
        client.close()
    assert _field(harness, "da") is None and _field(harness, "b") is None
    assert harness.run(hosts.failed(HOST)).attempts == 1
