"""Adaptive pacing: a site waits FRONTIER_ADAPTIVE_FACTOR x its last answer's time.

Against a real Redis under a private namespace, on the harness's server
clock: what the release of a slow answer does to the site's next claim and
start, that a fast answer brings it back, that the cap, a Crawl-delay floor
and an operator's delay are kept, and that a slowed site gets one request at
a time.
"""

from __future__ import annotations

from collections.abc import Callable

from crawler.frontier.values import Release, RobotsRetry
from tests.frontier_harness import Harness, admission

HOST = "http://a.test:80"


def _answer(h: Harness, lease, fetch_ms: int) -> None:
    h.run(h.frontier.release([Release(lease.host, lease.fingerprint, "done",
                                      fetch_ms=fetch_ms)], "w"))


def _harness(make_harness: Callable[..., Harness], name: str, **limits: int | float) -> Harness:
    h = make_harness(name, clock=True, **{"concurrency": 4, "delay_ms": 100, "jitter": 0,
                                          "adaptive_factor": 2.0, "adaptive_max_ms": 5000,
                                          **limits})
    h.run(h.frontier.admit([admission(f"http://a.test/{i}") for i in range(10)]))
    return h


def test_a_slow_answer_spaces_the_next_request(make_harness: Callable[..., Harness]) -> None:
    h = _harness(make_harness, "as")
    f = h.frontier
    (first,) = h.run(f.claim(1, "w")).leases
    _answer(h, first, 1500)  # 1.5 s: the next request 3 s after this answer
    claimed = h.run(f.claim(10, "w"))
    assert claimed.leases == []
    assert claimed.next_ready_ms is not None
    assert claimed.next_ready_ms - claimed.server_ms == 3000
    assert h.run(f.start_gate(HOST)) == 3000
    h.clock.advance(3000)
    got = h.run(f.claim(10, "w")).leases
    assert len(got) == 1  # slowed down: one at a time, though four are allowed
    _answer(h, got[0], 20)  # fast again: 40 ms is under the 100 ms delay
    # (each claim is its URL's start: the next one a delay after its window)
    h.clock.advance(100 + f.limits.start_window_ms)
    assert len(h.run(f.claim(10, "w")).leases) == 1
    h.clock.advance(100 + f.limits.start_window_ms)
    assert len(h.run(f.claim(10, "w")).leases) == 1  # concurrency back to four


def test_the_cap_and_the_floors(make_harness: Callable[..., Harness]) -> None:
    h = _harness(make_harness, "ac")
    f = h.frontier
    (first,) = h.run(f.claim(1, "w")).leases
    _answer(h, first, 60_000)  # a minute: capped at 5 s
    claimed = h.run(f.claim(10, "w"))
    assert claimed.next_ready_ms is not None
    assert claimed.next_ready_ms - claimed.server_ms == 5000
    # A robots.txt Crawl-delay of 8 s stays the floor: a fast answer never cuts it.
    retry = RobotsRetry(base_ms=1000, cap_ms=1000, max_attempts=0, stale_max_ms=0)
    h.run(f.store_robots(HOST, b"rules", 60_000, 1, 8000, 8000, 0, retry))
    h.clock.advance(8000)
    (second,) = h.run(f.claim(10, "w")).leases
    _answer(h, second, 10)
    h.clock.advance(7000)
    assert h.run(f.claim(10, "w")).leases == []
    h.clock.advance(1000 + f.limits.start_window_ms)  # from the window of its start
    assert len(h.run(f.claim(10, "w")).leases) == 1


def test_off_it_changes_nothing(make_harness: Callable[..., Harness]) -> None:
    h = _harness(make_harness, "ao", adaptive_factor=0)
    f = h.frontier
    (first,) = h.run(f.claim(1, "w")).leases
    _answer(h, first, 1500)
    h.clock.advance(100 + f.limits.start_window_ms)
    assert len(h.run(f.claim(10, "w")).leases) == 1


def test_a_new_site_takes_one_request_until_its_first_answer(
        make_harness: Callable[..., Harness]) -> None:
    # No delay, four at a time allowed: only the unknown answer time holds it.
    h = _harness(make_harness, "af", delay_ms=0)
    f = h.frontier
    assert len(h.run(f.claim(10, "w")).leases) == 1
    assert h.run(f.claim(10, "w")).leases == []  # not before that answer
    site = h.keys.site(f.partition(HOST), HOST)
    assert h.run(h.client.hexists(site, "fa"))


def test_the_first_answer_opens_the_site(make_harness: Callable[..., Harness]) -> None:
    h = _harness(make_harness, "ag", delay_ms=1000)
    f = h.frontier
    (first,) = h.run(f.claim(10, "w")).leases
    _answer(h, first, 20)  # fast: 40 ms of adaptive delay, under the 1 s delay
    assert not h.run(h.client.hexists(h.keys.site(f.partition(HOST), HOST), "fa"))
    h.clock.advance(1000 + f.limits.start_window_ms)
    # the first lease ended: the next start is the delay's, not an answer's wait
    assert len(h.run(f.claim(10, "w")).leases) == 1


def test_without_adaptive_pacing_a_new_site_opens_at_once(
        make_harness: Callable[..., Harness]) -> None:
    h = _harness(make_harness, "ah", delay_ms=0, adaptive_factor=0)
    assert len(h.run(h.frontier.claim(10, "w")).leases) == 4
