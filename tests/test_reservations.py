"""A claim reserves a site's next URLs (``lua/claim.lua``, ``FRONTIER_RESERVE_SECONDS``).

Against a real Redis under a private namespace, on the harness's server
clock: how many URLs one claim of a host reserves and at which offsets (its
delay, concurrency, queue, the claim's budget for later URLs, its domain),
that the site counts them all in flight so no other worker claims it
meanwhile, that the next claim and start come after the last one, and that a
dead worker's reserved URLs come back one lease after their own turn. Then
the worker's side: the reserved requests wait for their turn
(``scheduling/reserved.py``) and an operator's change takes them back
(``scheduling/controlwatch.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

import pytest
from redis.asyncio import Redis
from scrapy import Request

from crawler.frontier.values import LEASE_LOST, SERIAL, Limits, Release
from crawler.lease import TICKET_META, Ticket
from crawler.scheduling import reserved as reserved_module
from crawler.scheduling.controlwatch import ControlWatch
from crawler.scheduling.reserved import Reserved
from tests.frontier_harness import Harness, admission

HOST = "http://a.test:80"


def _paced(make_harness: Callable[..., Harness], name: str, **limits: int | float) -> Harness:
    limits = {"concurrency": 4, "delay_ms": 1000, "jitter": 0, "reserve_ms": 3000, **limits}
    h = make_harness(name, clock=True, **limits)
    h.run(h.frontier.admit([admission(f"http://a.test/{i}") for i in range(10)]))
    return h


def test_a_paced_site_reserves_its_next_urls_spaced_by_its_delay(
        make_harness: Callable[..., Harness]) -> None:
    h = _paced(make_harness, "paced")
    f = h.frontier
    claimed = h.run(f.claim(1, "w", 50, later=10))
    now = claimed.server_ms
    # each next one a delay plus the window after the last: what two claims
    # would have spaced them by; a fourth (3150 ms) is past the 3 s horizon
    assert [x.offset_ms for x in claimed.leases] == [0, 1050, 2100]
    # each starts before the least gap (the delay, no jitter) to the next one,
    # the last within the window
    assert [x.latest_ms for x in claimed.leases] == [50, 1100, 2150]
    assert [x.record for x in claimed.leases] == [
        f'{{"u":"http://a.test/{i}"}}' for i in range(3)]
    # only the last carries the turns: the site's next start after it
    assert [x.turns for x in claimed.leases] == [(0, 0), (0, 0), (now + 2100 + 1050, 0)]
    site = h.run(h.client.hgetall(f.keys.site(f.partition(HOST), HOST)))
    assert int(site[b"i"]) == 3 and int(site[b"t"]) == now + 2100 + 1000
    # no other worker claims the site until the reservation is over
    h.clock.advance(3149)
    assert h.run(f.claim(4, "w2", 50, later=10)).leases == []
    h.run(f.release([Release(x.host, x.fingerprint, "done") for x in claimed.leases], "w"))
    h.clock.advance(1)
    assert [x.offset_ms for x in h.run(f.claim(1, "w2", 50, later=10)).leases] == [
        0, 1050, 2100]


def test_a_reservation_is_bounded_by_concurrency_queue_and_budget(
        make_harness: Callable[..., Harness]) -> None:
    h = _paced(make_harness, "bounds", concurrency=2)
    f = h.frontier
    assert len(h.run(f.claim(1, "w", 50, later=10)).leases) == 2  # concurrency 2
    h2 = _paced(make_harness, "budget")
    assert len(h2.run(h2.frontier.claim(1, "w", 50, later=1)).leases) == 2  # one later
    h3 = _paced(make_harness, "none")
    (only,) = h3.run(h3.frontier.claim(1, "w", 50)).leases  # no budget: one per claim
    assert only.offset_ms == 0
    h4 = make_harness("short", clock=True, concurrency=4, delay_ms=1000, jitter=0,
                      reserve_ms=3000)
    h4.run(h4.frontier.admit([admission("http://a.test/1"), admission("http://a.test/2")]))
    assert len(h4.run(h4.frontier.claim(1, "w", 50, later=10)).leases) == 2  # its queue


def test_an_unpaced_site_gives_what_the_claim_starts_now(
        make_harness: Callable[..., Harness]) -> None:
    h = _paced(make_harness, "free", delay_ms=0)
    f = h.frontier
    two = h.run(f.claim(2, "w", 50, later=10)).leases
    assert [x.offset_ms for x in two] == [0, 0]  # all now: as many as asked, no more
    assert [x.offset_ms for x in h.run(f.claim(8, "w", 50, later=10)).leases] == [0, 0]


def test_the_domain_spaces_a_reservation_and_a_shared_domain_ends_them(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("dom", clock=True, concurrency=4, delay_ms=0, jitter=0,
                     domain_delay_ms=300, domain_concurrency=8, reserve_ms=3000)
    f = h.frontier
    h.run(f.admit([admission(f"http://s1.a.test/{i}") for i in range(6)]))
    first = h.run(f.claim(1, "w", 50, later=10))
    now = first.server_ms
    assert [x.offset_ms for x in first.leases] == [0, 350, 700, 1050]  # domain 300 + window
    assert first.leases[-1].turns == (0, now + 1050 + 350)
    # another site of the domain waits for it, and from then on the domain's
    # sites take turns: one URL of each per turn (the claim takes the one
    # that waited longest, and reserves the domain's next turn for the other)
    # (the domain gated its one site, whose delay is shorter: the second
    # site's coming leaves the domain's turns as they were)
    domain_key = f.keys.domain(f.partition("http://s1.a.test:80"), "http://s1.a.test:80")
    turns_before = h.run(h.client.hmget(domain_key, "t", "s", "re", "rh"))
    h.run(f.admit([admission("http://s2.a.test/")]))
    assert h.run(h.client.hmget(domain_key, "t", "s", "re", "rh")) == turns_before
    assert h.run(f.claim(4, "w", 50, later=10)).leases == []
    h.run(f.release([Release(x.host, x.fingerprint, "done") for x in first.leases], "w"))
    h.clock.advance(1400)
    turns = h.run(f.claim(1, "w", 50, later=10)).leases
    assert [(x.host, x.offset_ms) for x in turns] == [
        ("http://s2.a.test:80", 0), ("http://s1.a.test:80", 350)]


def test_a_domain_whose_sites_take_turns_reserves_its_next_turns(
        make_harness: Callable[..., Harness]) -> None:
    """Once several sites of a domain claim, each claim of the domain takes one
    URL of a site; at the domain's turn the claim also reserves the next URLs
    of the hosts waiting for it, one each, spaced by the domain's delay plus
    the window, each counted in flight by its site, the domain's next turn
    after the last. A waiting host whose own site may not go by then (a hold)
    keeps waiting."""
    h = make_harness("domres", clock=True, concurrency=4, delay_ms=0, jitter=0,
                     domain_delay_ms=300, domain_concurrency=8, reserve_ms=3000)
    f = h.frontier
    h.run(f.admit([admission(f"http://s{s}.a.test/{i}") for s in range(1, 7) for i in range(3)]))
    # one site alone: its own reservation (spaced by the domain)
    first = h.run(f.claim(1, "w", 50, later=10)).leases
    assert [x.offset_ms for x in first] == [0, 350, 700] and len({x.host for x in first}) == 1
    h.run(f.release([Release(x.host, x.fingerprint, "done") for x in first], "w"))
    h.clock.advance(1500)
    # another site: one URL, and from then on the sites take turns; the others
    # find the domain busy and wait for it, and so does that site, for its
    # next URL, behind them
    (second,) = h.run(f.claim(1, "w", 50, later=10)).leases
    assert h.run(f.claim(4, "w", 50, later=10)).leases == []
    waiting_key = f.keys.domain_waiting(f.partition(second.host), second.host)
    in_line = [m.decode() for m in h.run(h.client.zrange(waiting_key, 0, -1))]
    assert len(in_line) == 5 and in_line[-1] == second.host
    held = sorted(in_line[:-1])[-1]
    assert h.run(f.hold(held, 5000))
    h.run(f.release([Release(second.host, second.fingerprint, "done")], "w"))
    h.clock.advance(350)
    turn = h.run(f.claim(1, "w", 50, later=10))
    now = turn.server_ms
    assert [x.offset_ms for x in turn.leases] == [0, 350, 700, 1050]
    assert [x.latest_ms for x in turn.leases] == [50, 400, 750, 1100]
    assert [x.turns[1] for x in turn.leases] == [now + 350, now + 700, now + 1050, now + 1400]
    hosts = [x.host for x in turn.leases]
    assert len(set(hosts)) == 4 and held not in hosts and first[0].host not in hosts
    assert hosts[-1] == second.host  # it waited least
    for host in hosts:
        site = h.run(h.client.hgetall(f.keys.site(f.partition(host), host)))
        assert int(site[b"i"]) == 1
    domain = h.run(h.client.hgetall(f.keys.domain(f.partition(held), held)))
    assert int(domain[b"t"]) == now + 1050 + 300
    # its waiting hosts are looked at when its next turn comes, not sooner
    # (a wake set for an earlier turn would only find it busy): the claim
    # moved the wake there, and the partition's timers with it
    pre = f.keys.prefix(f.partition(held))
    assert h.run(h.client.zscore(pre + ":dwake", "a.test")) == now + 1050 + 350
    assert int(h.run(h.client.hget(pre + ":n", "mt"))) == now + 1050 + 350
    assert {m.decode() for m in h.run(h.client.zrange(waiting_key, 0, -1))} >= {held}
    assert h.run(f.claim(4, "w", 50, later=10)).leases == []


def test_a_dead_workers_reserved_urls_come_back_a_lease_after_their_turn(
        make_harness: Callable[..., Harness]) -> None:
    h = _paced(make_harness, "dead", lease_ms=5000)
    f = h.frontier
    claimed = h.run(f.claim(1, "w", 50, later=10)).leases
    assert [x.offset_ms for x in claimed] == [0, 1050, 2100]
    h.clock.advance(5000)  # the first lease ran out; the others' not yet
    (back,) = h.run(f.claim(1, "w2", 50)).leases
    assert back.record == claimed[0].record  # first in line again
    counts = h.run(f.counts())
    assert counts["expired"] == 1 and counts["leased"] == 3
    h.clock.advance(2099)
    h.run(f.claim(1, "w3", 50))
    assert h.run(f.counts())["expired"] == 2  # the second's ran out at 6050
    h.clock.advance(1)  # and the third's, a lease after its own turn
    h.run(f.claim(1, "w3", 50))
    assert h.run(f.counts())["expired"] == 3


# ------------------------------------------------------------------ the worker's side


def test_reserved_requests_come_out_on_their_turn_earliest_first() -> None:
    asyncio.run(_reserved_in_order())


async def _reserved_in_order() -> None:
    came: list[list[str]] = []
    reserved = Reserved(lambda requests: came.append([r.url for r in requests]), Limits(),
                        lambda requests: None)
    loop = asyncio.get_event_loop()
    t0 = loop.time()
    reserved.add(t0 + 0.15, Request("http://a.test/late"), HOST)
    reserved.add(t0 + 0.05, Request("http://a.test/early"), HOST)
    reserved.add(t0 + 0.30, Request("http://b.test/last"), "http://b.test:80")
    assert reserved.due() == [] and len(reserved) == 3
    assert reserved.next_due(HOST) == t0 + 0.05 and reserved.next_due("x") is None
    await asyncio.sleep(0.2)
    assert came == [["http://a.test/early"], ["http://a.test/late"]]
    assert reserved.next_due(HOST) is None
    taken = reserved.take(lambda r: r.url.startswith("http://b.test"))
    assert [r.url for r in taken] == ["http://b.test/last"] and len(reserved) == 0
    assert reserved.next_due("http://b.test:80") is None
    await asyncio.sleep(0.15)
    assert len(came) == 2  # taken before its turn: never comes out


def test_an_operators_change_takes_back_the_reservations_it_concerns(
        redis_url: str, redis_prefix: str) -> None:
    asyncio.run(_control_watch(redis_url, redis_prefix))


async def _control_watch(redis_url: str, redis_prefix: str) -> None:
    client = Redis.from_url(redis_url)
    key = f"{redis_prefix}:control"
    given: list[str | None] = []
    watch = ControlWatch(client, key, holds=lambda: True, give_back=given.append)
    try:
        await watch.look()  # learns the head: nothing to give back
        await client.lpush(key, json.dumps({"scope": "site", "name": "a.test"}))
        await watch.look()
        assert given == ["a.test"]
        await client.lpush(key, json.dumps({"scope": "site", "name": "b.test"}),
                           json.dumps({"scope": "domain", "name": "c.test"}))
        await watch.look()
        assert given == ["a.test", None]  # a domain: every reservation
        await watch.look()
        assert given == ["a.test", None]  # nothing new
    finally:
        await client.delete(key)
        await client.aclose()


def test_every_operators_action_is_said_once_in_the_workers_log(
        redis_url: str, redis_prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    async def watch_it() -> None:
        client = Redis.from_url(redis_url)
        key = f"{redis_prefix}:control"
        await client.lpush(key, json.dumps({"scope": "site", "name": "old.test",
                                            "change": "pause"}))
        given: list[str | None] = []
        watch = ControlWatch(client, key, holds=lambda: False, give_back=given.append)
        try:
            await watch.look()  # learns the head: an earlier action is not news
            await client.lpush(key, json.dumps({"scope": "site", "name": "a.test",
                                                "change": "pause", "who": "alice@ops"}),
                               json.dumps({"scope": "domain", "name": "b.test",
                                           "change": "delay 5 s"}))
            await watch.look()
            await watch.look()
            assert given == []  # no reservations to give back
        finally:
            await client.delete(key)
            await client.aclose()

    with caplog.at_level(logging.INFO, logger="crawler.scheduling.controlwatch"):
        asyncio.run(watch_it())
    assert [r.getMessage() for r in caplog.records] == [
        "Operator: site a.test: pause (by alice@ops)", "Operator: domain b.test: delay 5 s"]


def test_a_site_paced_from_the_end_of_its_answers_reserves_a_chain(
        make_harness: Callable[..., Harness]) -> None:
    h = _paced(make_harness, "serial", concurrency=1)
    f = h.frontier
    claimed = h.run(f.claim(1, "w", 50, later=10))
    now = claimed.server_ms
    # one request at a time: the next ones start after the one before ended,
    # as many as about 3 s of its delay (1 s) hold; the worker paces them
    assert [x.offset_ms for x in claimed.leases] == [0, SERIAL, SERIAL, SERIAL]
    assert {x.pacing for x in claimed.leases} == {(1000, 0)}
    assert claimed.leases[0].turns == (now + 50 + 1000, 0)  # the first carries the turns
    h.clock.advance(5000)
    assert h.run(f.claim(1, "w2", 50, later=10)).leases == []  # held till all are back
    # the last answer came 300 ms after its request started: the next claim
    # no sooner than the delay after that start, whatever the claim had said
    done = [Release(x.host, x.fingerprint, "done", fetch_ms=300) for x in claimed.leases]
    h.run(f.release(done, "w"))
    assert h.run(f.start_gate(HOST)) == 1000 - 300
    h.clock.advance(699)
    assert h.run(f.claim(1, "w2", 50, later=10)).leases == []
    h.clock.advance(1)
    # fewer now: its answers' time (300 ms) counts in the 3 s too
    assert len(h.run(f.claim(1, "w2", 50, later=10)).leases) == 3


def test_a_chains_next_url_waits_for_the_delay_after_the_start_and_the_floor_after_the_end(
        ) -> None:
    asyncio.run(_chain())


async def _chain() -> None:
    came: list[Request] = []
    limits = Limits(jitter=0, adaptive_factor=2.0, adaptive_max_ms=30_000)
    reserved = Reserved(came.extend, limits, lambda requests: None)
    requests = [Request(f"http://a.test/{i}", meta={TICKET_META: Ticket(f"t{i}")})
                for i in range(3)]
    until = time.monotonic() + 0.5
    reserved.chain(HOST, "t0", requests[1:], delay_ms=100, floor_ms=0, until=until)
    assert len(reserved) == 2
    assert reserved.ended(HOST, "t-other", None, None, 0.05) == []  # not the head
    now = time.monotonic()
    # sent 10 ms ago, answered in 20 ms: the delay after the start (100 ms)
    # is later than twice the answer's time after its end (40 ms)
    assert reserved.ended(HOST, "t0", now - 0.01, 0.02, 0.05) == []
    ticket = requests[1].meta[TICKET_META]
    assert now + 0.085 <= ticket.claimed <= now + 0.1
    assert ticket.start_by == until  # late, it asks the start gate
    await asyncio.sleep(0.12)
    assert came == [requests[1]]
    # a slow answer (300 ms): twice its time after its end (600 ms) is past
    # the reservation's end: the rest is handed back
    now = time.monotonic()
    assert reserved.ended(HOST, "t1", now - 0.4, 0.3, 0.05) == [requests[2]]
    assert len(reserved) == 0 and reserved.take() == []


def test_a_chain_whose_request_never_ends_is_given_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The backstop: a chain's next URLs wait for the one under way to end; if
    that never comes, they go back CHAIN_GRACE_S after the reservation's end."""
    monkeypatch.setattr(reserved_module, "CHAIN_GRACE_S", 0.05)
    asyncio.run(_stale_chain())


async def _stale_chain() -> None:
    stale: list[Request] = []
    reserved = Reserved(lambda requests: None, Limits(), stale.extend)
    requests = [Request(f"http://a.test/{i}", meta={TICKET_META: Ticket(f"t{i}")})
                for i in range(3)]
    reserved.chain(HOST, "t0", requests[1:], delay_ms=100, floor_ms=0,
                   until=time.monotonic())
    await asyncio.sleep(0.02)
    assert stale == [] and len(reserved) == 2
    await asyncio.sleep(0.08)
    assert stale == requests[1:] and len(reserved) == 0
    assert reserved.ended(HOST, "t0", None, None, 0.05) == []  # too late: nothing moves


def test_a_worker_that_stood_still_past_its_lease_starts_nothing(
        make_harness: Callable[..., Harness]) -> None:
    """The lease is the fencing token: a request late enough to ask the start
    gate names it, and starts only while its worker holds it still."""
    h = _paced(make_harness, "fence", lease_ms=5000)
    f = h.frontier
    claimed = h.run(f.claim(1, "w", 50, later=10)).leases
    first = claimed[0]
    fence = (first.fingerprint, "w")
    h.clock.advance(1100)
    assert h.run(f.start_turn(first.host, None, fence)).wait_ms >= 0  # still its own
    h.clock.advance(5000)  # frozen past the lease: it went back, another worker has it
    taken = h.run(f.claim(1, "w2", 50)).leases
    assert [x.fingerprint for x in taken] == [first.fingerprint]
    assert h.run(f.start_turn(first.host, None, fence)).wait_ms == LEASE_LOST
    assert h.run(f.start_turn(first.host, None, (first.fingerprint, "w2"))).wait_ms >= 0
    # and its late release is refused (counted stale), the new holder's stands
    late = h.run(f.release([Release(first.host, first.fingerprint, "done")], "w"))
    assert (late.released, late.stale) == (0, 1)
    assert h.run(f.counts())["leased"] == 2  # w2's, and w's third (due at 2100 ms)


def test_a_start_after_its_turn_holds_off_the_next_claim_of_the_site(
        make_harness: Callable[..., Harness]) -> None:
    """A request that starts late asks the start gate, which moves the site's
    next start on from then without placing its hosts again: the next claim
    reads the site's record, so no other worker claims the site (and starts
    it within its window) before the delay after that late start."""
    h = make_harness("late", clock=True, concurrency=4, delay_ms=1000, jitter=0, reserve_ms=0)
    f = h.frontier
    h.run(f.admit([admission(f"http://a.test/{i}") for i in range(3)]))
    (first,) = h.run(f.claim(1, "w1", 50)).leases
    h.clock.advance(1200)  # past its window, and past the site's next claim
    turn = h.run(f.start_turn(first.host, (0, *first.turns),
                              (first.fingerprint, "w1")))
    assert turn.wait_ms == 0
    late = h.run(f.claim(1, "w2", 50))
    assert late.leases == []
    assert late.next_ready_ms == late.server_ms + 1000
    h.clock.advance(1000)
    (second,) = h.run(f.claim(1, "w2", 50)).leases
    assert second.record == '{"u":"http://a.test/1"}'


def test_the_last_url_of_a_reservation_may_start_until_the_least_gap_before_the_next_claim(
        make_harness: Callable[..., Harness]) -> None:
    """With jitter the site's next claim falls anywhere in [delay/2, 3 delay/2]
    after the last reserved URL; nobody else starts the site before it, so
    that URL keeps its worker's word until the least gap (delay/2) before it
    rather than for the start window only, and the site's next start is the
    next claim at the soonest: a stale request of another worker waits for
    it, and a claim before it gets nothing."""
    for rnd in range(8):  # several jitter draws: a gap wider and narrower than the window
        h = make_harness(f"carrier{rnd}", clock=True, concurrency=4, delay_ms=1000,
                         jitter=0.5, reserve_ms=3000)
        f = h.frontier
        h.run(f.admit([admission(f"http://a.test/{i}") for i in range(2)]))
        h.clock.advance(rnd * 137)
        claimed = h.run(f.claim(1, "w", 50, later=10))
        # (the test clock's time, as the claim's script saw it: a claim that
        # asks no partition says the worker's reckoning of it instead)
        leases, now = claimed.leases, claimed.server_ms
        last = leases[-1]
        site = h.run(h.client.hgetall(f.keys.site(f.partition(HOST), HOST)))
        next_claim, next_start = int(site[b"t"]), int(site[b"s"])
        assert next_start == last.turns[0] == max(next_claim, now + last.offset_ms + 550)
        assert last.latest_ms == max(last.offset_ms + 50, next_start - now - 500)
        # nobody else starts or claims the site before its next start
        h.run(f.admit([admission("http://a.test/x")]))
        assert h.run(f.claim(1, "w2", 50, later=10)).leases == []
        h.clock.advance(next_start - now - 1)
        waited = h.run(f.start_turn(HOST, (0, 1, 0)))
        assert waited.wait_ms == 1
