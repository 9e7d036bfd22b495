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

from crawler.frontier.ipgates import FULL, NO_ADDRESS, PAUSED, DnsNote, IpGates, Wake
from crawler.frontier.values import ClaimResult, Lease, Release
from tests.frontier_harness import Harness, admission

ADDR = "127.0.5.1"


def _gates(h: Harness) -> IpGates:
    return IpGates(h.client, h.keys, h.frontier.limits, h.frontier.due)


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
    assert _take(h, "a", "http://a.test:80", earlier=0) == 0  # a second pass: its own place
    gates = _gates(h)
    (wake,) = h.run(gates.end(ADDR, ["a"]))  # one place free: the first to wait
    assert (wake.host, wake.partition) == ("http://c.test:80", h.frontier.partition("http://c.test:80"))
    assert wake.at_ms == h.clock.now_ms()
    assert _take(h, "c", "http://c.test:80") == 0
    assert h.run(gates.end(ADDR)) == []  # full again: nobody else
    (wake,) = h.run(gates.end(ADDR, ["b", "c"]))  # two free, one waiting
    assert wake.host == "http://d.test:80"


def test_the_gate_says_when_half_the_places_or_more_are_still_free(
        make_harness: Callable[..., Harness]) -> None:
    """A place taken with half the address free or more (this one counted) may
    be kept by its worker for its next request there; past half, and on a
    second pass, it goes back at its end (the hosts that wait need it)."""
    h = make_harness("ipf", clock=True, ip_concurrency=4, lease_ms=60_000)
    gates = _gates(h)
    host = "http://n.test:80"

    def take(member: str, **kw: int) -> tuple[int, bool]:
        turn = h.run(gates.take(ADDR, member, h.frontier.partition(host), host, **kw))
        return turn.wait_ms, turn.spare

    assert take("a") == (0, True)  # 1 of 4
    assert take("b") == (0, True)  # 2 of 4
    assert take("c") == (0, False)  # 3 of 4
    assert take("a", earlier=0) == (0, False)  # its own place again: not counted
    assert take("d") == (0, False)
    assert take("e")[0] == FULL
    h.run(gates.end(ADDR, ["c", "d"]))
    assert take("f") == (0, False)  # the waiting host's place is reserved: 4 of 4
    # Without a limit (a delay alone), starts are spaced by turns: never kept.
    h2 = make_harness("ipf2", clock=True, ip_delay_ms=500, jitter=0)
    turn = h2.run(_gates(h2).take(ADDR, "a", 0, host))
    assert turn.wait_ms == 0 and turn.turn > 0


def test_a_vanished_workers_requests_stop_counting_after_their_lease(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("ipx", clock=True, ip_concurrency=1, lease_ms=5_000)
    assert _take(h, "a") == 0
    h.clock.advance(1_000)
    host = "http://n.test:80"
    refused = h.run(_gates(h).take(ADDR, "b", h.frontier.partition(host), host))
    # full until a request ends, or at the latest until the first place runs
    # out: the refused host's own wake (nobody ends a dead worker's request)
    assert (refused.wait_ms, refused.turn) == (FULL, 4_000)
    h.clock.advance(4_001)
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


def _dns_jobs(h: Harness, claim: ClaimResult, address: str = ADDR) -> list[bool]:
    """Carry out a claim's DNS jobs as a worker would: every name points at
    ``address``; join them to it, tell the partitions. Which may go now."""
    f = h.frontier
    gates = _gates(h)
    hosts = claim.dns_jobs
    go = h.run(gates.join(address, [(f.partition(x), x) for x in hosts])).go
    for host, ok in zip(hosts, go, strict=True):
        h.run(gates.note(f.partition(host), [DnsNote(host, address, 600_000, ok, 30_000)]))
    return go


def test_a_name_is_looked_up_before_its_first_claim_and_waits_parked_if_its_server_is_full(
        make_harness: Callable[..., Harness]) -> None:
    """Three names new to one server allowing one request: the claim hands out
    DNS jobs, not URLs; the first name joins with a place reserved, the other
    two wait in the server's queue, parked: no claim takes them, while a host
    on another server is claimed as usual. The end of the first one's request
    wakes the second, whose place nobody else can take."""
    h = make_harness("ipj", clock=True, delay_ms=0, ip_concurrency=1)
    f = h.frontier
    h.run(f.admit([admission(f"http://n{i}.test/") for i in range(3)]))
    first = h.run(f.claim(10, "w"))
    assert first.leases == [] and sorted(first.dns_jobs) == [
        f"http://n{i}.test:80" for i in range(3)]
    assert h.run(f.claim(10, "w")).dns_jobs == []  # handed out once
    first.dns_jobs.sort()
    assert _dns_jobs(h, first) == [True, False, False]
    (lease,) = h.run(f.claim(10, "w")).leases
    assert lease.host == "http://n0.test:80"
    gates = _gates(h)
    assert _take(h, "x", "http://x.test:80") == FULL  # the place is n0's
    assert h.run(gates.take(ADDR, lease.token, f.partition(lease.host), lease.host)
                 ).wait_ms == 0
    (wake,) = h.run(gates.end(ADDR, [lease.token]))
    assert wake.host == "http://n1.test:80"  # first come, first served
    assert _take(h, "y", "http://y.test:80") == FULL  # n1's place is reserved for it
    assert h.run(gates.wake(ADDR, [wake])) == []
    (woken,) = h.run(f.claim(10, "w")).leases
    assert woken.host == "http://n1.test:80"
    assert h.run(gates.take(ADDR, woken.token, f.partition(woken.host), woken.host)
                 ).wait_ms == 0


def test_a_parked_host_waits_out_of_the_ready_set_until_an_end_wakes_it(
        make_harness: Callable[..., Harness]) -> None:
    """A request refused for its address goes back to its queue and its host
    is parked: no claim takes it (its https twin joins it, and is reported to
    be queued at the address), other hosts are claimed as before, and the end
    of a request on the address brings it back for one claim."""
    h = make_harness("ipw", clock=True, concurrency=2, delay_ms=0, ip_concurrency=1)
    f = h.frontier
    h.run(f.admit([admission("http://a.test/1"), admission("http://a.test/2")]))
    assert _dns_jobs(h, h.run(f.claim(10, "w"))) == [True]
    mine = h.run(f.claim(10, "w")).leases
    assert [x.host for x in mine] == ["http://a.test:80"] * 2
    _park(h, mine[0], "w")
    _park(h, mine[1], "w")
    assert "http://a.test:80" not in _ready(h)
    site = h.run(h.client.hgetall(h.keys.site(f.partition("http://a.test:80"), "http://a.test")))
    assert site[b"ip"] == ADDR.encode()
    # More URLs of the name: still parked, not claimed; its https twin joins it.
    h.run(f.admit([admission("http://a.test/3"), admission("https://a.test/1")]))
    claimed = h.run(f.claim(10, "w"))
    assert claimed.leases == []
    assert claimed.ip_waits == [("https://a.test:443", ADDR)]
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


def test_a_wake_that_comes_before_its_hosts_park_is_kept(
        make_harness: Callable[..., Harness]) -> None:
    """A request refused at the address's gate queues its host there at once,
    but the host is parked in its partition only when the release arrives, a
    batch later. A request ending on the address in between wakes the host
    before it is parked: the wake is kept, and the park that follows lets the
    host go (with the place reserved for it) instead of leaving it to wait for
    its fallback time (15 s and more by default)."""
    h = make_harness("ipr", clock=True, delay_ms=0, ip_concurrency=1)
    f = h.frontier
    h.run(f.admit([admission("http://a.test/1"), admission("http://a.test/2")]))
    assert _dns_jobs(h, h.run(f.claim(10, "w"))) == [True]
    first, lease = h.run(f.claim(10, "w")).leases
    assert _take(h, first.token, first.host) == 0  # the one place
    assert _take(h, lease.token, lease.host) == FULL  # so a.test queues at the address
    (wake,) = h.run(_gates(h).end(ADDR, [first.token]))  # the first ends: a.test's turn
    assert wake.host == lease.host
    assert h.run(_gates(h).wake(ADDR, [wake])) == [wake]  # not parked yet
    _park(h, lease, "w", wake_ms=30_000)  # its release comes now
    assert lease.host in _ready(h)
    (again,) = h.run(f.claim(10, "w")).leases
    assert again.record == lease.record
    assert _take(h, again.token, again.host) == 0  # the place the wake reserved for it


def test_a_lost_wake_is_made_up_by_the_parked_hosts_own_time(
        make_harness: Callable[..., Harness]) -> None:
    """The host that went first never came to the gate (its worker died), so
    no request ends to wake the one waiting: at its own time the waiting host's
    address is looked at again (a DNS job), and as the first in the queue, with
    the first one's reservation run out, it goes. Until then it keeps its place."""
    h = make_harness("ipf", clock=True, delay_ms=0, ip_concurrency=1)
    f = h.frontier
    h.run(f.admit([admission("http://a.test/1"), admission("http://b.test/1"),
                   admission("http://c.test/1")]))
    claim = h.run(f.claim(10, "w"))
    claim.dns_jobs.sort()
    assert _dns_jobs(h, claim) == [True, False, False]
    (lease,) = h.run(f.claim(10, "w")).leases
    assert lease.host == "http://a.test:80"
    claim = h.run(f.claim(10, "w"))
    assert claim.leases == []
    # The parked hosts' fallback (30 s here): the worker looks again then.
    assert claim.next_ready_ms == h.clock.now_ms() + 30_000
    h.clock.advance(30_000)
    again = h.run(f.claim(10, "w"))
    assert again.leases == [] and sorted(again.dns_jobs) == ["http://b.test:80",
                                                             "http://c.test:80"]
    again.dns_jobs.sort()
    assert _dns_jobs(h, again) == [True, False]  # b was first; c keeps its place
    (lease,) = h.run(f.claim(10, "w")).leases
    assert lease.host == "http://b.test:80"


def test_with_the_scope_turned_off_every_parked_host_comes_back_at_once(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("ipo", clock=True, delay_ms=0, ip_concurrency=1)
    f = h.frontier
    h.run(f.admit([admission(f"http://n{i}.test/1") for i in range(5)]))
    assert sum(_dns_jobs(h, h.run(f.claim(10, "w")))) == 1
    assert len(h.run(f.claim(10, "w")).leases) == 1
    f.limits.ip_concurrency = 0  # a worker started with the scope off
    assert len(h.run(f.claim(10, "w")).leases) == 4


def test_a_name_that_is_not_gated_is_claimed_as_usual(
        make_harness: Callable[..., Harness]) -> None:
    """A DNS job that finds nothing to gate (a proxy connects the host, or its
    name did not resolve) lets it be claimed, and asks again only later."""
    h = make_harness("ipn", clock=True, delay_ms=0, ip_concurrency=1)
    f = h.frontier
    h.run(f.admit([admission("http://a.test/1"), admission("http://a.test/2")]))
    (host,) = h.run(f.claim(10, "w")).dns_jobs
    h.run(_gates(h).note(f.partition(host), [DnsNote(host, NO_ADDRESS, 60_000, True)]))
    assert len(h.run(f.claim(10, "w")).leases) == 2
    h.clock.advance(60_000)
    h.run(f.admit([admission("http://a.test/3")]))
    assert h.run(f.claim(10, "w")).dns_jobs == [host]
