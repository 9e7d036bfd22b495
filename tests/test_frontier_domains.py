"""The registered-domain scope: every site of one domain shares its gates too.

``www.a.test`` and ``img.a.test`` are two sites of the domain ``a.test``:
each keeps its own concurrency and delay, and together they stay within
the domain's (``FRONTIER_DOMAIN_CONCURRENCY``, ``FRONTIER_DOMAIN_DELAY``). A
host whose domain is busy waits outside the ready set, so other domains'
hosts are claimed as if it were not there. Against a real Redis, under a
private namespace, on the harness's controllable server clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from crawler.domains import registered_domain
from crawler.frontier.keys import LAYOUT_POLITENESS, older_layout, partition_of
from crawler.frontier.values import Release, RobotsRetry
from tests.frontier_harness import Harness, admission


@pytest.mark.parametrize(("name", "domain"), [
    ("www.example.co.uk", "example.co.uk"), ("example.co.uk", "example.co.uk"),
    ("a.b.example.com", "example.com"), ("WWW.Example.COM.", "example.com"),
    ("alice.github.io", "alice.github.io"),  # the list's private section counts
    ("www.a.test", "a.test"),  # an unknown suffix: the default rule "*"
    ("a.test", "a.test"), ("localhost", "localhost"), ("co.uk", "co.uk"),
    ("127.0.0.1", "127.0.0.1"), ("[::1]", "[::1]"), ("[2001:db8::1]", "[2001:db8::1]"),
])
def test_registered_domain(name: str, domain: str) -> None:
    assert registered_domain(name) == domain


def test_every_site_of_a_domain_is_in_one_partition() -> None:
    for domain in (f"d{i}.example.co.uk" for i in range(100)):
        parts = {partition_of(f"{scheme}://{sub}{domain}:{port}", 16)
                 for sub in ("", "www.", "img.", "a.b.")
                 for scheme, port in (("http", 80), ("https", 443))}
        assert len(parts) == 1, domain


def test_a_frontier_partitioned_per_host_name_is_refused() -> None:
    site_layout = json.dumps({"partitions": 16, "seen_buckets": 64, "politeness": "site"})
    why = older_layout(site_layout)
    assert why is not None and "per host name" in why and "crawl id" in why
    ours = json.dumps({"partitions": 16, "seen_buckets": 64, "politeness": LAYOUT_POLITENESS})
    assert older_layout(ours) is None


def _subdomains(n: int, domain: str = "a.test", per: int = 3) -> list:
    return [admission(f"http://s{i}.{domain}/{j}") for i in range(n) for j in range(per)]


def _done(h: Harness, worker: str, leases: list) -> None:
    h.run(h.frontier.release([Release(x.host, x.fingerprint, "done") for x in leases], worker))


def test_the_domain_concurrency_bounds_all_its_sites(make_harness: Callable[..., Harness]) -> None:
    """Twenty subdomains, four in flight each allowed, two for the domain: two
    leases at a time, whatever the workers ask; an ordinary host next to them
    is claimed at once; each release lets exactly one more go."""
    h = make_harness("dc", concurrency=4, delay_ms=0, domain_concurrency=2)
    f = h.frontier
    h.run(f.admit([*_subdomains(20), admission("http://other.test/1")]))
    first = h.run(f.claim(50, "w1"))
    mine = [x for x in first.leases if x.host.endswith(".a.test:80")]
    assert len(mine) == 2
    assert "http://other.test:80" in {x.host for x in first.leases}
    assert h.run(f.claim(50, "w2")).leases == []
    ready, _ = h.run(f.ready_hosts())
    assert ready == 0  # the waiting subdomains are out of the ready set
    _done(h, "w1", mine[:1])
    (nxt,) = h.run(f.claim(50, "w2")).leases
    assert nxt.host.endswith(".a.test:80")
    assert h.run(f.claim(50, "w2")).leases == []
    taken = 3
    leases = [mine[1], nxt]
    while leases:  # the domain drains, two at a time, to the last URL
        _done(h, "w1" if leases[0] is mine[1] else "w2", leases[:1])
        leases = leases[1:]
        got = h.run(f.claim(50, "w2")).leases
        assert len(got) <= 1 and len(leases) + len(got) <= 2
        taken += len(got)
        leases += got
    assert taken == 60


def test_the_domain_delay_spaces_claims_and_starts(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("dd", clock=True, concurrency=4, delay_ms=0, jitter=0,
                     domain_delay_ms=500)
    f = h.frontier
    window = f.limits.start_window_ms
    h.run(f.admit([*_subdomains(5, per=1), admission("http://other.test/1")]))
    first = h.run(f.claim(50, "w"))
    assert sorted(x.host for x in first.leases)[0] == "http://other.test:80"
    assert len(first.leases) == 2  # other.test and one subdomain
    # A claim is its URL's start turn: the domain's next one comes a delay after
    # the window in which the worker starts it.
    claimed = next(x for x in first.leases if x.host != "http://other.test:80")
    assert claimed.turns == (0, first.server_ms + window + 500)
    assert first.next_ready_ms is not None
    assert first.next_ready_ms - first.server_ms == window + 500
    h.clock.advance(window + 499)
    assert h.run(f.claim(50, "w")).leases == []
    h.clock.advance(1)
    second = h.run(f.claim(50, "w")).leases
    assert len(second) == 1
    # The start gate: a start the claims did not hand out waits for the
    # domain's turn; a claimed URL that starts late names its turn and, no
    # other request of the domain having started since, goes at once.
    one = second[0].host
    two = next(name for i in range(5)
               if (name := f"http://s{i}.a.test:80") not in {claimed.host, one})
    assert h.run(f.start_gate(two)) == window + 500
    assert h.run(f.start_turn(one, (0, *second[0].turns))).wait_ms == 0
    assert h.run(f.start_gate(two)) == 500
    h.clock.advance(500)
    assert h.run(f.start_gate(two)) == 0
    assert h.run(f.start_gate("http://other.test:80")) == 0  # another domain: no wait


def test_a_stale_turn_keeps_its_domain_turn(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("dt", clock=True, concurrency=4, delay_ms=0, jitter=0,
                     domain_delay_ms=400)
    f = h.frontier
    first = h.run(f.start_turn("http://s0.a.test:80"))
    assert first.wait_ms == 0 and first.domain_turn == h.clock.now_ms() + 400
    h.clock.advance(100)
    again = h.run(f.start_turn("http://s0.a.test:80", first))
    assert again.wait_ms == 0  # its own domain reservation does not hold it back
    assert h.run(f.start_gate("http://s1.a.test:80")) == 400


def test_a_lease_whose_worker_vanished_stops_counting(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("dv", clock=True, concurrency=4, delay_ms=0, domain_concurrency=1,
                     lease_ms=1000)
    f = h.frontier
    h.run(f.admit(_subdomains(3, per=1)))
    assert len(h.run(f.claim(10, "dead-worker")).leases) == 1
    h.clock.advance(999)
    assert h.run(f.claim(10, "w")).leases == []
    h.clock.advance(2)
    got = h.run(f.claim(10, "w")).leases
    assert len(got) == 1  # the expired lease went back and freed its domain


def test_robots_jobs_count_against_the_domain(make_harness: Callable[..., Harness]) -> None:
    """Fifty subdomains, none with robots rules yet, domain concurrency 2: two
    robots.txt fetches at a time, the next one when one of them is stored."""
    h = make_harness("dr", concurrency=4, delay_ms=0, domain_concurrency=2, robots_ms=10_000)
    f = h.frontier
    h.run(f.admit(_subdomains(50, per=1)))
    jobs = h.run(f.claim(100, "w")).robots_jobs
    assert len(jobs) == 2
    assert h.run(f.claim(100, "w")).robots_jobs == []
    retry = RobotsRetry(base_ms=1000, cap_ms=1000, max_attempts=0, stale_max_ms=0)
    h.run(f.store_robots(jobs[0], b"rules", 60_000, 4, 0, 0, 0, retry))
    claimed = h.run(f.claim(100, "w"))
    assert len(claimed.robots_jobs) + len(claimed.leases) == 1


def test_with_the_scope_off_waiting_hosts_come_back(make_harness: Callable[..., Harness]) -> None:
    """Hosts left waiting for a domain by a run with the scope on are claimed by
    a run with it off."""
    on = make_harness("do", concurrency=4, delay_ms=0, domain_concurrency=1)
    on.run(on.frontier.admit(_subdomains(10, per=1)))
    assert len(on.run(on.frontier.claim(50, "w")).leases) == 1
    off = make_harness("do", concurrency=4, delay_ms=0)
    assert len(off.run(off.frontier.claim(50, "w")).leases) == 9


def test_a_site_alone_in_its_domain_leaves_the_domain_alone_until_a_second_comes(
        make_harness: Callable[..., Harness]) -> None:
    """The domain's gate would only repeat its one site's: that site's claims
    and releases leave the domain's record as its admission wrote it (its
    count of sites and first site). A second site ends that: the first
    site's turns become the domain's, so the newcomer waits for them, and
    from then on the sites take turns."""
    h = make_harness("alone", clock=True, concurrency=4, delay_ms=1000, jitter=0,
                     domain_delay_ms=300, domain_concurrency=8, reserve_ms=3000)
    f = h.frontier
    www, img = "http://www.a.test:80", "http://img.a.test:80"
    h.run(f.admit([admission(f"http://www.a.test/{i}") for i in range(6)]))
    part = f.partition(www)
    domain_key, site_key = f.keys.domain(part, www), f.keys.site(part, www)
    lone = {b"ns": b"1", b"fs": b"www.a.test"}
    first = h.run(f.claim(1, "w", 50, later=10)).leases
    assert [x.offset_ms for x in first] == [0, 1050, 2100]  # its own delay, not the domain's
    assert h.run(h.client.hgetall(domain_key)) == lone
    assert not h.run(h.client.exists(f"{f.keys.prefix(part)}:di:a.test"))
    _done(h, "w", first)
    assert h.run(h.client.hgetall(domain_key)) == lone
    site = h.run(h.client.hgetall(site_key))
    turn = max(int(site[b"t"]), int(site[b"s"]))
    h.run(f.admit([admission("http://img.a.test/1")]))
    domain = h.run(h.client.hgetall(domain_key))
    assert (int(domain[b"t"]), domain[b"rh"], domain[b"ns"]) == (turn, b"www.a.test", b"2")
    assert b"d1" not in h.run(h.client.hgetall(site_key))
    h.clock.advance(turn - h.clock.now_ms() - 1)
    assert h.run(f.claim(4, "w", 50, later=10)).leases == []
    h.clock.advance(1)
    (one,) = h.run(f.claim(4, "w", 50, later=10)).leases
    assert one.host == img  # it waited longest
    assert h.run(h.client.hget(domain_key, "m")) == b"1"


def test_a_site_alone_but_looser_than_its_domain_is_gated_and_its_robots_job_ends_there(
        make_harness: Callable[..., Harness]) -> None:
    """A site alone in its domain whose own delay is shorter than the domain's
    is gated by the domain: its robots.txt fetch counts in flight there, and
    stops counting when it is stored."""
    h = make_harness("dl", concurrency=4, delay_ms=0, domain_concurrency=2,
                     domain_delay_ms=300, robots_ms=10_000)
    f = h.frontier
    h.run(f.admit([admission("http://www.c.test/1")]))
    (job,) = h.run(f.claim(10, "w")).robots_jobs
    part = f.partition(job)
    in_flight = f"{f.keys.prefix(part)}:di:c.test"
    assert h.run(h.client.zcard(in_flight)) == 1
    retry = RobotsRetry(base_ms=1000, cap_ms=1000, max_attempts=0, stale_max_ms=0)
    h.run(f.store_robots(job, b"rules", 60_000, 4, 0, 0, 0, retry))
    assert h.run(h.client.zcard(in_flight)) == 0
