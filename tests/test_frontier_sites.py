"""One server, one politeness budget: every scheme and port of a host name share a site.

Queues and robots.txt stay per scheme and authority (RFC 9309), while
concurrency, delays, holds, the breaker and the page budget are the name's
(crawler/frontier/keys.py). Against a real Redis, under a private namespace.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from crawler.frontier.keys import partition_of, site_of
from crawler.frontier.values import Breaker, Release, RobotsRetry
from tests.frontier_harness import Harness, admission

HTTP, HTTPS = "http://a.test:80", "https://a.test:443"


@pytest.mark.parametrize(("host", "site"), [
    ("http://a.test:80", "a.test"), ("https://a.test:443", "a.test"),
    ("http://a.test:8080", "a.test"), ("http://[::1]:80", "[::1]"),
    ("https://[2001:db8::1]:8443", "[2001:db8::1]"), ("http://127.0.0.1:80", "127.0.0.1"),
])
def test_site_of_a_host_key(host: str, site: str) -> None:
    assert site_of(host) == site


def test_every_scheme_and_port_of_a_name_is_in_one_partition() -> None:
    for name in (f"h{i}.test" for i in range(200)):
        parts = {partition_of(f"{scheme}://{name}:{port}", 16)
                 for scheme, port in (("http", 80), ("https", 443), ("http", 8080))}
        assert len(parts) == 1, name


def test_both_schemes_share_one_concurrency(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("c", concurrency=1, delay_ms=0)
    f = h.frontier
    h.run(f.admit([admission("http://a.test/1"), admission("https://a.test/2"),
                   admission("http://b.test/")]))
    first = h.run(f.claim(10, "w1"))
    hosts = sorted(lease.host for lease in first.leases)
    # One of a.test's two schemes, and b.test: never both schemes of a.test at once.
    assert len(hosts) == 2 and "http://b.test:80" in hosts
    assert h.run(f.claim(10, "w2")).leases == []
    mine = next(lease for lease in first.leases if "a.test" in lease.host)
    h.run(f.release([Release(mine.host, mine.fingerprint, "done")], "w1"))
    (other,) = h.run(f.claim(10, "w2")).leases
    assert {other.host, mine.host} == {HTTP, HTTPS}


def test_both_schemes_share_one_delay(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("d", clock=True, concurrency=4, delay_ms=800, jitter=0)
    f = h.frontier
    h.run(f.admit([admission("http://a.test/1"), admission("https://a.test/2")]))
    first = h.run(f.claim(10, "w"))
    assert len(first.leases) == 1
    assert first.next_ready_ms is not None
    assert first.next_ready_ms - first.server_ms == 800 + f.limits.start_window_ms
    # The start gate is the name's too: the other scheme may not start now.
    (lease,) = first.leases
    assert h.run(f.start_turn(lease.host, (0, *lease.turns))).wait_ms == 0
    other = HTTPS if first.leases[0].host == HTTP else HTTP
    assert 700 <= h.run(f.start_gate(other)) <= 800


def test_a_hold_on_one_scheme_holds_the_other(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("h", clock=True, concurrency=4, delay_ms=0)
    f = h.frontier
    h.run(f.admit([admission("https://a.test/1"), admission("http://a.test/2")]))
    assert h.run(f.hold(HTTPS, 5000))
    claimed = h.run(f.claim(10, "w"))
    assert claimed.leases == []
    assert claimed.next_ready_ms is not None
    assert claimed.next_ready_ms - claimed.server_ms >= 4800
    assert h.run(f.start_gate(HTTP)) >= 4800


def test_the_breaker_is_the_names(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("b", concurrency=4, delay_ms=0,
                     breaker=Breaker(threshold=2, base_ms=5000, cap_ms=5000, max_openings=3))
    f = h.frontier
    h.run(f.admit([admission("http://a.test/1"), admission("https://a.test/2"),
                   admission("https://a.test/3")]))
    leases = h.run(f.claim(10, "w")).leases
    assert len(leases) == 3
    failed = [Release(lease.host, lease.fingerprint, "retry", "100000", health="fail")
              for lease in leases if lease.host == HTTPS]
    events = h.run(f.release(failed, "w")).events
    assert [e.event for e in events] == ["open"]
    h.run(f.admit([admission("http://a.test/4")]))
    h.run(f.release([Release(leases[0].host, leases[0].fingerprint, "done")], "w"))
    assert h.run(f.claim(10, "w")).leases == []  # http waits out https's cool-down


def test_the_page_budget_is_the_names(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("a", concurrency=4, delay_ms=0, admit_max=3)
    result = h.run(h.frontier.admit(
        [admission(f"http://a.test/{i}") for i in range(2)]
        + [admission(f"https://a.test/{i}") for i in range(2)]
        + [admission("http://a.test:8080/x")]))
    assert (result.added, result.refused) == (3, 2)


def _store(h: Harness, host: str, *, concurrency: int, delay_ms: int, floor_ms: int) -> None:
    retry = RobotsRetry(base_ms=1000, cap_ms=1000, max_attempts=0, stale_max_ms=0)
    h.run(h.frontier.store_robots(host, b"rules", 60_000, concurrency, delay_ms, floor_ms, 0,
                                  retry))


def test_the_stricter_robots_file_paces_the_name(make_harness: Callable[..., Harness]) -> None:
    """http://a.test/robots.txt asks for 0.6 s between requests, https's for 0.2 s:
    the name is paced by the stricter file; each robots.txt is fetched on its own,
    never while another request to the name is in flight."""
    h = make_harness("r", clock=True, concurrency=4, delay_ms=100, jitter=0, robots_ms=10_000)
    f = h.frontier
    asks = {HTTPS: (1, 200, 200), HTTP: (1, 600, 600)}
    h.run(f.admit([admission("http://a.test/1"), admission("https://a.test/2")]))
    stored: list[str] = []
    for _ in range(200):  # 10 s on the frontier's clock, 50 ms a step
        if len(stored) == 2:
            break
        claimed = h.run(f.claim(10, "w"))
        assert len(claimed.robots_jobs) + len(claimed.leases) <= 1  # one request at a time
        for job in claimed.robots_jobs:
            conc, delay, floor = asks[job]
            _store(h, job, concurrency=conc, delay_ms=delay, floor_ms=floor)
            stored.append(job)
        h.run(f.release([Release(lease.host, lease.fingerprint, "done")
                         for lease in claimed.leases], "w"))
        h.clock.advance(50)
    assert sorted(stored) == [HTTP, HTTPS]  # robots.txt per scheme and authority
    site = h.run(h.client.hgetall(h.keys.site(f.partition(HTTP), HTTP)))
    assert (site[b"c"], site[b"dl"], site[b"fl"]) == (b"1", b"600", b"600")
    # A later, laxer copy of the stricter file relaxes the name to the other's.
    _store(h, HTTP, concurrency=4, delay_ms=100, floor_ms=0)
    site = h.run(h.client.hgetall(h.keys.site(f.partition(HTTP), HTTP)))
    assert (site[b"c"], site[b"dl"], site[b"fl"]) == (b"1", b"200", b"200")


def test_a_robots_job_whose_turn_is_far_off_is_left_to_run_out(
        make_harness: Callable[..., Harness]) -> None:
    """A hold that came after a robots job was claimed (a 429 on another scheme of
    the name): the job does not fetch early, nor wait past half its lease (another
    worker would take it over), nor hold a slot for the whole hold."""
    from scrapy.utils.test import get_crawler

    from crawler.scheduling.robotsjobs import robots_turn

    # A robots lease of 20 s: half of it (10 s) is far from both a job that
    # gives up at once and the minute's hold, so the timing below has room.
    h = make_harness("j", concurrency=4, delay_ms=100, jitter=0, robots_ms=20_000)
    f = h.frontier
    h.run(f.admit([admission("http://a.test/1"), admission("https://a.test/2")]))
    (job,) = h.run(f.claim(1, "w")).robots_jobs
    other = HTTPS if job == HTTP else HTTP
    assert h.run(f.hold(other, 60_000))  # the name is held now, for a minute
    # The scheduler's own wait for the turn, on this frontier (no crawl needed for it).
    stats = get_crawler().stats
    started = time.monotonic()
    assert h.run(robots_turn(f, stats, job, may_gate=True)) is None
    assert time.monotonic() - started < 5  # at once: it did not wait (10 s) to give up
    assert stats.get_value("robots/jobs_deferred") == 1
    assert h.run(f.start_gate(job)) > 50_000  # and the gate still holds its start


def test_a_stale_turn_passes_again_at_once_unless_another_start_came_between(
        make_harness: Callable[..., Harness]) -> None:
    """A request that passed the gate and sat in a stalled worker passes it again
    naming its turn: with no other start since, it goes now and the gap counts
    from now; once another request of the site started, it waits like any other."""
    h = make_harness("t", clock=True, concurrency=4, delay_ms=800, jitter=0)
    f = h.frontier
    h.run(f.admit([admission("http://a.test/1")]))
    (lease,) = h.run(f.claim(10, "w")).leases
    assert h.run(f.start_turn(HTTPS)).wait_ms > 800  # the claim took the start turn
    first = h.run(f.start_turn(HTTP, (0, *lease.turns)))
    assert first.wait_ms == 0 and first.turn == h.clock.now_ms() + 800
    h.clock.advance(100)  # the worker stalled: its turn is stale
    again = h.run(f.start_turn(HTTP, first))
    assert again[:2] == (0, h.clock.now_ms() + 800)  # its own reservation does not hold it back
    assert 700 <= h.run(f.start_gate(HTTPS)) <= 800  # the next start counts from the resend
    h.clock.advance(800)
    other = h.run(f.start_turn(HTTPS))  # another request of the name starts...
    assert other.wait_ms == 0
    h.clock.advance(100)
    late = h.run(f.start_turn(HTTP, again))  # ...so the stale one's turn is gone
    assert late[:2] == (700, 0)


def _authorities(h: Harness) -> bytes | None:
    """The site record's count of its authorities (na)."""
    key = h.keys.site(partition_of(HTTP, h.keys.partitions), HTTP)
    return h.run(h.client.hget(key, "na"))


@pytest.mark.parametrize("older_build", [False, True])
def test_a_claim_and_a_release_place_every_authority_of_the_name(
        make_harness: Callable[..., Harness], older_build: bool) -> None:
    """The site counts its authorities (na), so that a claim or a release of a
    one-authority site places its host without reading the site again; with
    two, or on a site an older build made (no count), every authority is
    looked at: the other scheme waits while one is in flight and goes once
    it is released."""
    h = make_harness("n", concurrency=1, delay_ms=0)
    f = h.frontier
    h.run(f.admit([admission("http://a.test/1")]))
    assert _authorities(h) == b"1"
    if older_build:
        h.run(h.client.hdel(h.keys.site(partition_of(HTTP, h.keys.partitions), HTTP), "na"))
    h.run(f.admit([admission("https://a.test/2"), admission("http://a.test/3")]))
    assert _authorities(h) == (None if older_build else b"2")
    (first,) = h.run(f.claim(10, "w1")).leases
    assert h.run(f.claim(10, "w2")).leases == []
    h.run(f.release([Release(first.host, first.fingerprint, "done")], "w1"))
    (second,) = h.run(f.claim(10, "w2")).leases
    h.run(f.release([Release(second.host, second.fingerprint, "done")], "w2"))
    (third,) = h.run(f.claim(10, "w1")).leases
    assert {first.host, second.host, third.host} == {HTTP, HTTPS}
    assert h.run(f.claim(10, "w1")).leases == []
