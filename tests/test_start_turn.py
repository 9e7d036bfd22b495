"""A claim is its URL's start turn (``lua/claim.lua``), for a window the worker names.

Against a real Redis under a private namespace, on the harness's server
clock: what a claim does to the site's and the domain's next start, that a
worker late past its window is sent back to the start gate and goes at once
on its own turn, and how a worker picks its window from what its requests
took (``scheduling/startwindow.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from crawler.frontier.values import START_WINDOW_MS, RobotsRetry
from crawler.scheduling.startwindow import StartWindow
from tests.frontier_harness import Harness, admission

HOST = "http://a.test:80"


def test_a_paced_claim_moves_the_next_start_past_its_window(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("pace", clock=True, concurrency=4, delay_ms=1000, jitter=0.5)
    f = h.frontier
    h.run(f.admit([admission(f"http://a.test/{i}") for i in range(3)]))
    claimed = h.run(f.claim(4, "w", 120))
    (lease,) = claimed.leases
    # the delay less its jitter (500 ms), after the 120 ms the worker asked
    # for, and no sooner than the site's next claim (its jittered delay)
    site = h.run(h.client.hgetall(f.keys.site(f.partition(HOST), HOST)))
    turn = max(claimed.server_ms + 120 + 500, int(site[b"t"]))
    assert lease.turns == (turn, 0)
    gap = turn - claimed.server_ms
    assert h.run(f.start_gate("https://a.test:443")) == gap  # no other start before it
    h.clock.advance(gap - 1)
    assert h.run(f.claim(4, "w2", 120)).leases == []
    h.clock.advance(1000)
    assert len(h.run(f.claim(4, "w2", 120)).leases) == 1


def test_a_late_request_goes_at_once_on_its_own_turn_not_after_another_start(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("late", clock=True, concurrency=4, delay_ms=400, jitter=0)
    f = h.frontier
    h.run(f.admit([admission("http://a.test/1")]))
    (lease,) = h.run(f.claim(4, "w", 50)).leases
    h.clock.advance(300)  # past its window: the worker asks the gate, naming its turn
    again = h.run(f.start_turn(lease.host, (0, *lease.turns)))
    assert again.wait_ms == 0 and again.turn == h.clock.now_ms() + 400
    assert h.run(f.start_gate("https://a.test:443")) == 400  # the gap counts from now


def test_unpaced_claims_take_no_turn(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("free", clock=True, concurrency=4, delay_ms=0)
    f = h.frontier
    h.run(f.admit([admission(f"http://a.test/{i}") for i in range(4)]))
    leases = h.run(f.claim(4, "w", 200)).leases
    assert len(leases) == 4 and {x.turns for x in leases} == {(0, 0)}
    assert h.run(f.start_gate(HOST)) == 0


def test_a_crawl_delay_needs_no_window(make_harness: Callable[..., Harness]) -> None:
    """A Crawl-delay allows one request at a time and counts from the end of its
    answer (release.lua), so the window is not added to it."""
    h = make_harness("cd", clock=True, concurrency=4, delay_ms=0, robots_ms=300)
    f = h.frontier
    h.run(f.admit([admission(f"http://a.test/{i}") for i in range(3)]))
    assert h.run(f.claim(5, "w")).robots_jobs == [HOST]
    retry = RobotsRetry(base_ms=1000, cap_ms=1000, max_attempts=0, stale_max_ms=0)
    h.run(f.store_robots(HOST, b"rules", 60_000, 1, 700, 700, 0, retry))
    claimed = h.run(f.claim(5, "w", 200))
    (lease,) = claimed.leases
    assert lease.turns == (claimed.server_ms + 700, 0)


def test_the_domain_turn_has_the_window_too(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("dom", clock=True, concurrency=4, delay_ms=0, jitter=0,
                     domain_delay_ms=300)
    f = h.frontier
    h.run(f.admit([admission("http://s1.a.test/"), admission("http://s2.a.test/")]))
    claimed = h.run(f.claim(4, "w", 80))
    (lease,) = claimed.leases
    assert lease.turns == (0, claimed.server_ms + 80 + 300)
    assert claimed.next_ready_ms == claimed.server_ms + 380


def test_the_window_is_what_requests_took_within_its_bounds() -> None:
    window = StartWindow(keep=100, quantile=0.9, every=10)
    assert window.ms == START_WINDOW_MS  # before anything was seen
    for i in range(100):
        window.observe((i + 1) / 1000)  # 1 .. 100 ms
    assert window.ms == 91  # the 90th percentile, rounded up
    for _ in range(100):
        window.observe(0.001)
    assert window.ms == StartWindow.LEAST_MS
    for _ in range(100):
        window.observe(2.5)  # a stalled reactor: the window stays short
    assert window.ms == StartWindow.MOST_MS


def test_the_window_moves_only_every_so_many_requests() -> None:
    window = StartWindow(keep=16, quantile=0.5, every=7)
    for _ in range(6):
        window.observe(0.1)
    assert window.ms == START_WINDOW_MS
    window.observe(0.1)
    assert window.ms == 100


def test_a_pass_of_the_gate_keeps_the_next_start_past_its_window(
        make_harness: Callable[..., Harness]) -> None:
    """A request passed by start.lua reaches its socket a moment later; the
    worker names how long it allows for that, and the next start of the site
    and of its domain waits that much longer (no slack taken from the gap)."""
    h = make_harness("window", clock=True, concurrency=4, delay_ms=400, jitter=0,
                     domain_delay_ms=200, domain_concurrency=8)
    f = h.frontier
    h.run(f.admit([admission("http://a.test/1")]))
    (lease,) = h.run(f.claim(4, "w", 50)).leases
    h.clock.advance(1000)
    again = h.run(f.start_turn(lease.host, (0, *lease.turns), window_ms=80))
    now = h.clock.now_ms()
    assert (again.wait_ms, again.turn, again.domain_turn) == (0, now + 480, now + 280)
    assert h.run(f.start_gate("https://a.test:443")) == 480
    # with no window named the gap is the delay alone
    h.clock.advance(480)
    assert h.run(f.start_turn(lease.host)).turn == h.clock.now_ms() + 400
