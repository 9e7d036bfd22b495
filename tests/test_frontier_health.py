"""Host health in the frontier (release.lua, claim.lua): backoff holds and breakers.

Every worker sees the same host state, so these hold across workers by
construction; the crawl tests show it on the wire.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from crawler.frontier.values import Breaker, Release
from tests.frontier_harness import Harness, admission

HOST = "http://a.test:80"
BREAKER = Breaker(threshold=3, base_ms=200, cap_ms=300, max_openings=2)


@pytest.fixture
def harness(make_harness: Callable[..., Harness]) -> Harness:
    h = make_harness("h", clock=True, concurrency=4, delay_ms=0, lease_ms=60_000)
    h.frontier.limits.breaker = BREAKER
    h.run(h.frontier.admit([admission(f"http://a.test/{i}") for i in range(20)]))
    return h


def _claim(h: Harness, n: int = 1, worker: str = "w1") -> list:
    return h.run(h.frontier.claim(n, worker)).leases


def _release(h: Harness, lease, op: str = "retry", arg: str = "0", *, hold_ms: int = 0,
             health: str = "", worker: str = "w1"):
    rel = Release(lease.host, lease.fingerprint, op, arg, hold_ms=hold_ms, health=health)
    return h.run(h.frontier.release([rel], worker))


def test_a_hold_keeps_every_worker_off_the_host(harness: Harness) -> None:
    lease = _claim(harness)[0]
    _release(harness, lease, "retry", "5000", hold_ms=300)  # a 429 with Retry-After
    for worker in ("w1", "w2"):
        result = harness.run(harness.frontier.claim(5, worker))
        assert result.leases == []
        assert 200 <= result.next_ready_ms - result.server_ms <= 300
    harness.clock.advance(150)
    assert _claim(harness, 5, "w2") == []  # clearly still held
    harness.clock.advance(170)
    # the server asked us to slow down: one request at a time from now on
    after = _claim(harness, 5, "w2")
    assert len(after) == 1
    assert _claim(harness, 5, "w1") == []


def test_consecutive_failures_open_the_breaker_then_one_probe(harness: Harness) -> None:
    leases = _claim(harness, 4)
    events = []
    for lease in leases[:3]:
        events += _release(harness, lease, health="fail").events
    assert [(e.event, e.host, e.ms) for e in events] == [("open", HOST, 200)]
    assert harness.run(harness.frontier.counts())["breaker_open"] == 1
    assert _claim(harness, 5) == []  # open: nothing claimed
    harness.clock.advance(100)
    assert _claim(harness, 5) == []  # clearly still open
    harness.clock.advance(120)
    probe = _claim(harness, 5)
    assert len(probe) == 1  # half-open: one probe, whatever the concurrency
    assert _claim(harness, 5, "w2") == []
    # the probe fails: open again, longer (capped at 300 ms)
    again = _release(harness, probe[0], health="fail").events
    assert [(e.event, e.ms) for e in again] == [("open", 300)]
    harness.clock.advance(220)
    assert _claim(harness, 5) == []  # longer this time: still open past the first 200 ms
    harness.clock.advance(100)
    probe = _claim(harness, 5)
    assert len(probe) == 1
    closed = _release(harness, probe[0], "done", health="ok").events
    assert [e.event for e in closed] == ["close"]
    assert harness.run(harness.frontier.counts())["breaker_open"] == 0
    assert len(_claim(harness, 5)) == 3  # closed: the host's concurrency again (1 still held)


def test_a_success_resets_the_failure_count(harness: Harness) -> None:
    leases = _claim(harness, 4)
    _release(harness, leases[0], health="fail")
    _release(harness, leases[1], health="fail")
    _release(harness, leases[2], "done", health="ok")
    assert _release(harness, leases[3], health="fail").events == ()


def test_a_host_that_keeps_failing_is_parked(harness: Harness) -> None:
    f = harness.frontier
    for opening in range(BREAKER.max_openings + 1):
        leases = _claim(harness, 4) if opening == 0 else _claim(harness, 5)
        failing = leases[:3] if opening == 0 else leases
        events = [e for lease in failing for e in _release(harness, lease, health="fail").events]
        if opening < BREAKER.max_openings:
            assert [e.event for e in events] == ["open"]
            harness.clock.advance(320)
        else:
            assert [e.event for e in events] == ["park"]
    parked = harness.run(f.park_host(HOST, '{"reason": "host-unreachable"}'))
    counts = harness.run(f.counts())
    assert counts["dead"] == parked and counts["queued"] == 0
    assert (counts["breaker_open"], counts["breaker_parked"]) == (0, 1)
    later = harness.run(f.admit([admission("http://a.test/later")]))
    assert later.parked == 1
