"""The IP scope: every name on one server address shares the address's gate.

The gate (lua/ipgate.lua, in a slot of its own) counts requests in flight on
an address and spaces their starts; a host the address has no room for is
parked in its partition (the release's ``ipwait``) and woken when a request
on the address ends (lua/ipend.lua, lua/ipwake.lua) or, should that wake be
lost, at its own time. Against a real Redis, under a private namespace, on
the harness's controllable server clock.
"""

from __future__ import annotations

from collections.abc import Callable

from crawler.frontier.ipgates import FULL, PAUSED, IpGates, Wake
from crawler.frontier.store import Lease, Release
from tests.frontier_harness import Harness, admission

ADDR = "127.0.5.1"


def _gates(h: Harness) -> IpGates:
    return IpGates(h.client, h.keys, h.frontier.limits)


def _take(h: Harness, member: str, host: str = "http://n.test:80", **kw: int) -> int:
    part = h.frontier.partition(host)
    return h.run(_gates(h).take(ADDR, member, part, host, **kw)).wait_ms


def _park(h: Harness, lease: Lease, worker: str, wake_ms: int = 10_000) -> None:
    h.run(h.frontier.release([Release(lease.host, lease.fingerprint, "ipwait",
                                      f"{ADDR}\n{wake_ms}\n60000")], worker))


def _ready(h: Harness) -> set[str]:
    ready: set[str] = set()
    for part in range(h.keys.partitions):
        ready |= {m.decode() for m in h.run(h.client.zrange(h.keys.ready(part), 0, -1))}
    return ready


def test_the_concurrency_bounds_every_name_and_an_end_wakes_the_first_waiting(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("ipc", clock=True, ip_concurrency=2, lease_ms=60_000)
    assert _take(h, "a", "http://a.test:80") == 0
    assert _take(h, "b", "http://b.test:80") == 0
    assert _take(h, "c", "http://c.test:80") == FULL
    assert _take(h, "d", "http://d.test:80") == FULL
    assert _take(h, "a", "http://a.test:80") == 0  # a second pass is not a second request
    gates = _gates(h)
    (wake,) = h.run(gates.end(ADDR, ["a"]))  # one place free: the first to wait
    assert (wake.host, wake.partition) == ("http://c.test:80", h.frontier.partition("http://c.test:80"))
    assert wake.at_ms == h.clock.now_ms()
    assert _take(h, "c", "http://c.test:80") == 0
    assert h.run(gates.end(ADDR)) == []  # full again: nobody else
    (wake,) = h.run(gates.end(ADDR, ["b", "c"]))  # two free, one waiting
    assert wake.host == "http://d.test:80"


def test_a_vanished_workers_requests_stop_counting_after_their_lease(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("ipx", clock=True, ip_concurrency=1, lease_ms=5_000)
    assert _take(h, "a") == 0
    assert _take(h, "b") == FULL
    h.clock.advance(5_001)
    assert _take(h, "b") == 0


def test_the_delay_spaces_starts_and_hands_parked_hosts_one_turn_each(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("ipd", clock=True, ip_delay_ms=1_000, jitter=0)
    assert _take(h, "a") == 0
    h.clock.advance(100)
    assert _take(h, "b", in_place_ms=2_000) == 900  # short enough: wait in place
    # Too long to wait in place: each host gets a wake time of its own, one
    # turn apart, instead of all racing for the next turn.
    assert _take(h, "b", in_place_ms=0) == 900
    assert _take(h, "c", in_place_ms=0) == 1_900
    assert _take(h, "d", in_place_ms=0) == 2_900
    h.clock.advance(900)
    assert _take(h, "b") == 0
    assert _take(h, "c", in_place_ms=2_000) == 1_000


def test_a_stale_pass_starts_at_once_unless_another_start_came_between(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("ips", clock=True, ip_delay_ms=1_000, jitter=0)
    turn = h.run(_gates(h).take(ADDR, "a", 0, "http://n.test:80")).turn
    h.clock.advance(300)
    assert _take(h, "a", earlier=turn) == 0  # nobody started since: at once
    h.clock.advance(300)
    assert _take(h, "a", earlier=turn) > 0  # its pass moved the turn: it is not its own


def test_a_paused_address_starts_nothing(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("ipp", clock=True, ip_concurrency=4)
    h.run(h.client.hset(h.keys.ip_gate(ADDR), "xp", 1))
    assert _take(h, "a") == PAUSED
    h.run(h.client.hdel(h.keys.ip_gate(ADDR), "xp"))
    assert _take(h, "a") == 0


def test_a_parked_host_waits_out_of_the_ready_set_until_an_end_wakes_it(
        make_harness: Callable[..., Harness]) -> None:
    """A request refused for its address goes back to its queue and its host
    is parked: no claim takes it (its https twin joins it, and is reported to
    be queued at the address), other hosts are claimed as before, and the end
    of a request on the address brings it back for one claim."""
    h = make_harness("ipw", clock=True, concurrency=2, delay_ms=0, ip_concurrency=1)
    f = h.frontier
    h.run(f.admit([admission("http://a.test/1"), admission("http://a.test/2"),
                   admission("http://other.test/1")]))
    leases = h.run(f.claim(10, "w")).leases
    mine = [x for x in leases if x.host == "http://a.test:80"]
    assert len(mine) == 2 and len(leases) == 3
    _park(h, mine[0], "w")
    _park(h, mine[1], "w")
    assert "http://a.test:80" not in _ready(h)
    site = h.run(h.client.hgetall(h.keys.site(f.partition("http://a.test:80"), "http://a.test")))
    assert site[b"ip"] == ADDR.encode()
    # More URLs of the name: still parked, not claimed.
    h.run(f.admit([admission("http://a.test/3"), admission("https://a.test/1"),
                   admission("http://other.test/2")]))
    claimed = h.run(f.claim(10, "w"))
    assert [x.host for x in claimed.leases] == ["http://other.test:80"]
    assert claimed.ip_waits == [("https://a.test:443", ADDR)]  # joined the parked one
    assert not {"http://a.test:80", "https://a.test:443"} & _ready(h)
    # The address has room again: its first waiting host comes back.
    part = f.partition("http://a.test:80")
    wake = Wake(part, "http://a.test:80", h.clock.now_ms())
    assert h.run(_gates(h).wake(ADDR, [wake])) == []
    assert h.run(_gates(h).wake(ADDR, [wake])) == [wake]  # not parked any more: missed
    again = h.run(f.claim(10, "w"))
    # Woken for one place: one claim, then its next URL waits behind its twin.
    assert [x.record for x in again.leases] == [mine[0].record]
    assert again.ip_waits == [("http://a.test:80", ADDR)]


def test_a_lost_wake_is_made_up_by_the_parked_hosts_own_time(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("ipf", clock=True, delay_ms=0, ip_concurrency=1)
    f = h.frontier
    h.run(f.admit([admission("http://a.test/1")]))
    (lease,) = h.run(f.claim(10, "w")).leases
    _park(h, lease, "w", wake_ms=10_000)
    claim = h.run(f.claim(10, "w"))
    assert claim.leases == []
    assert claim.next_ready_ms == h.clock.now_ms() + 10_000  # the worker looks again then
    h.clock.advance(10_000)
    (again,) = h.run(f.claim(10, "w")).leases
    assert again.fingerprint == lease.fingerprint


def test_with_the_scope_turned_off_every_parked_host_comes_back_at_once(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("ipo", clock=True, delay_ms=0, ip_concurrency=1)
    f = h.frontier
    h.run(f.admit([admission(f"http://n{i}.test/1") for i in range(5)]))
    leases = h.run(f.claim(10, "w")).leases
    for lease in leases:
        _park(h, lease, "w", wake_ms=3_600_000)
    assert h.run(f.claim(10, "w")).leases == []
    f.limits.ip_concurrency = 0  # a worker started with the scope off
    assert len(h.run(f.claim(10, "w")).leases) == 5
