"""The frontier's Redis operations against a real Redis, under a private namespace."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from importlib.resources import files

import pytest
import redis

from crawler.frontier.store import script_source
from crawler.frontier.values import Release
from tests.frontier_harness import Harness, admission, clocked_source, own_server_harness


@pytest.fixture
def harness(make_harness: Callable[..., Harness]) -> Harness:
    return make_harness("f", clock=True, concurrency=2, delay_ms=0, lease_ms=60_000)


def test_the_test_clock_is_the_scripts_clock(make_harness: Callable[..., Harness]) -> None:
    """What every clock=True test here stands on: the scripts see h.clock, and
    only h.clock (a claim reports the time it ran at)."""
    h = make_harness("c", clock=True, concurrency=1, delay_ms=0)
    start = h.clock.now_ms()
    assert h.run(h.frontier.claim(1, "w")).server_ms == start
    assert h.run(h.frontier.claim(1, "w")).server_ms == start  # it stands still...
    assert h.clock.advance(1234) == start + 1234
    assert h.run(h.frontier.claim(1, "w")).server_ms == start + 1234  # ...until moved


def test_the_test_clock_takes_every_read_of_the_server_time() -> None:
    lua = files("crawler.frontier").joinpath("lua")
    names = sorted(item.name[:-4] for item in lua.iterdir() if item.name.endswith(".lua"))
    assert "claim" in names
    sources = {name: clocked_source(script_source(name), "t:clock") for name in names}
    # (now_ms in common.lua; a script that never asks the time is built without it)
    assert "test_clock_time()" in sources["claim"]
    assert all("test_clock_time()" in sources[name] for name in names
               if "'TIME'" in script_source(name))
    with pytest.raises(AssertionError, match="does not replace"):
        clocked_source("local t = redis.pcall('TIME')", "t:clock")


def test_admit_dedups_in_one_step(harness: Harness) -> None:
    f = harness.frontier
    urls = [admission(f"http://h{i % 5}.test/p/{i}") for i in range(20)]
    result = harness.run(f.admit(urls + urls[:7]))
    assert (result.added, result.duplicates) == (20, 7)
    again = harness.run(f.admit(urls))
    assert (again.added, again.duplicates) == (0, 20)
    counts = harness.run(f.counts())
    assert counts["queued"] == 20 and counts["hosts"] == 5 and counts["dup"] == 27


def test_claim_respects_host_concurrency_and_releases_once(harness: Harness) -> None:
    f = harness.frontier
    harness.run(f.admit([admission(f"http://one.test/p/{i}") for i in range(5)]))
    first = harness.run(f.claim(10, "w1"))
    assert len(first.leases) == 2  # concurrency 2 for the only host
    assert harness.run(f.claim(10, "w2")).leases == []
    done = Release(first.leases[0].host, first.leases[0].fingerprint, "done")
    assert harness.run(f.release([done, done], "w1"))[:2] == (1, 1)  # the repeat is stale
    assert len(harness.run(f.claim(10, "w2")).leases) == 1
    counts = harness.run(f.counts())
    assert (counts["queued"], counts["leased"], counts["done"]) == (2, 2, 1)


def test_a_pages_links_and_its_lease_end_go_together(harness: Harness) -> None:
    """One call admits the links and ends the leases (Sync's flush), with
    each side's answer as admit and release give it alone."""
    f = harness.frontier
    harness.run(f.admit([admission("http://a.test/1")]))
    (lease,) = harness.run(f.claim(10, "w")).leases
    links = [admission("http://a.test/2"), admission("http://b.test/"),
             admission("http://a.test/1")]
    done = Release(lease.host, lease.fingerprint, "done")
    admitted, released = harness.run(f.admit_and_release(links, [done, done], "w"))
    assert (admitted.added, admitted.duplicates) == (2, 1)
    assert released[:2] == (1, 1)  # the repeat is stale
    counts = harness.run(f.counts())
    assert (counts["queued"], counts["leased"], counts["done"]) == (2, 0, 1)
    nothing = harness.run(f.admit_and_release([], [], "w"))
    assert (nothing[0].added, nothing[1][:2]) == (0, (0, 0))


def test_release_of_another_workers_lease_is_stale(harness: Harness) -> None:
    f = harness.frontier
    harness.run(f.admit([admission("http://a.test/")]))
    lease = harness.run(f.claim(1, "w1")).leases[0]
    assert harness.run(f.release([Release(lease.host, lease.fingerprint, "done")], "w2"))[:2] == (
        0, 1)
    assert harness.run(f.counts())["leased"] == 1


def test_fifo_within_host_and_priority_first(harness: Harness) -> None:
    f = harness.frontier
    harness.run(f.admit([admission(f"http://a.test/{i}") for i in range(3)]))
    harness.run(f.admit([admission("http://a.test/urgent", priority=5)]))
    order = []
    for _ in range(4):
        (lease,) = harness.run(f.claim(1, "w")).leases
        order.append(lease.record)
        harness.run(f.release([Release(lease.host, lease.fingerprint, "done")], "w"))
    assert order == [f'{{"u":"http://a.test/{p}"}}' for p in ("urgent", "0", "1", "2")]


def test_delay_between_claims_of_one_host(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("d", clock=True, concurrency=4, delay_ms=300, jitter=0)
    h.run(h.frontier.admit([admission(f"http://slow.test/{i}") for i in range(3)]
                           + [admission("http://other.test/")]))
    first = h.run(h.frontier.claim(10, "w"))
    assert sorted(lease.host for lease in first.leases) == [
        "http://other.test:80", "http://slow.test:80"]
    assert first.next_ready_ms is not None
    # The claim is the URL's start: the next one comes a delay after the window
    # in which its worker starts it.
    window = h.frontier.limits.start_window_ms
    assert first.next_ready_ms - first.server_ms == 300 + window
    assert h.run(h.frontier.claim(10, "w")).leases == []
    h.clock.advance(200)
    assert h.run(h.frontier.claim(10, "w")).leases == []  # clearly before the delay is up
    h.clock.advance(100 + window)
    assert len(h.run(h.frontier.claim(10, "w")).leases) == 1


def test_expired_lease_returns_to_queue(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("e", clock=True, concurrency=1, delay_ms=0, lease_ms=200)
    h.run(h.frontier.admit([admission("http://a.test/x")]))
    lease = h.run(h.frontier.claim(1, "dead-worker")).leases[0]
    assert h.run(h.frontier.claim(1, "w2")).leases == []
    h.clock.advance(150)
    assert h.run(h.frontier.claim(1, "w2")).leases == []  # clearly before it runs out
    h.clock.advance(100)
    again = h.run(h.frontier.claim(1, "w2")).leases
    assert [x.fingerprint for x in again] == [lease.fingerprint]
    # the dead worker's late release is stale and changes nothing
    stale = Release(lease.host, lease.fingerprint, "done")
    assert h.run(h.frontier.release([stale], "dead-worker"))[:2] == (0, 1)
    assert h.run(h.frontier.counts())["expired"] == 1


def test_an_expired_lease_an_older_build_wrote_returns_to_its_queue(
        make_harness: Callable[..., Harness]) -> None:
    """An older build kept a lease's fingerprint in PP:leased and its details in
    PP:ld: a frontier it left behind still gets such a lease back when it runs out."""
    h = make_harness("o", clock=True, concurrency=1, delay_ms=0, lease_ms=200)
    h.run(h.frontier.admit([admission("http://a.test/x")]))
    lease = h.run(h.frontier.claim(1, "old")).leases[0]
    part = h.frontier.partition(lease.host)
    leased, details = h.keys.leased(part), h.keys.lease_details(part)
    ((member, expiry),) = h.run(h.client.zrange(leased, 0, -1, withscores=True))
    assert member.split(b"\n", 3)[2] == b"old"  # host, score, worker, entry
    h.run(h.client.zrem(leased, member))
    h.run(h.client.zadd(leased, {lease.fingerprint: expiry}))
    h.run(h.client.hset(details, lease.fingerprint, member))
    h.clock.advance(250)
    (again,) = h.run(h.frontier.claim(1, "new")).leases
    assert (again.fingerprint, again.record) == (lease.fingerprint, lease.record)
    assert h.run(h.client.hlen(details)) == 0
    assert h.run(h.frontier.counts())["expired"] == 1


def test_renew_keeps_a_lease_alive(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("r", clock=True, concurrency=1, delay_ms=0, lease_ms=300)
    h.run(h.frontier.admit([admission("http://a.test/x")]))
    lease = h.run(h.frontier.claim(1, "w1")).leases[0]
    for _ in range(3):  # 450 ms in all: past the first lease
        h.clock.advance(150)
        assert h.run(h.frontier.renew([lease], "w1")) == 1
    assert h.run(h.frontier.claim(1, "w2")).leases == []
    assert h.run(h.frontier.renew([lease], "w2")) == 0
    h.clock.advance(350)  # renewed no more: it runs out, and goes to another worker
    assert [x.fingerprint for x in h.run(h.frontier.claim(1, "w2")).leases] == [lease.fingerprint]


def test_retry_dead_and_return(harness: Harness, redis_url: str) -> None:
    f = harness.frontier
    harness.run(f.admit([admission(f"http://h{i}.test/") for i in range(3)]))
    a, b, c = harness.run(f.claim(3, "w")).leases
    harness.run(f.release([
        Release(a.host, a.fingerprint, "retry", "100", '{"u":"retried"}'),
        Release(b.host, b.fingerprint, "dead", '{"reason":"http-404"}'),
        Release(c.host, c.fingerprint, "return"),
    ], "w"))
    counts = harness.run(f.counts())
    assert (counts["delayed"], counts["dead"], counts["queued"], counts["leased"]) == (1, 1, 1, 0)
    assert [x.host for x in harness.run(f.claim(3, "w")).leases] == [c.host]
    harness.clock.advance(50)
    assert harness.run(f.claim(3, "w")).leases == []  # clearly before its retry time
    harness.clock.advance(70)
    (retried,) = harness.run(f.claim(3, "w")).leases
    assert retried.record == '{"u":"retried"}'
    dead = redis.Redis.from_url(redis_url).hgetall(harness.keys.dead(f.partition(b.host)))
    assert b'"reason":"http-404"' in dead[b.fingerprint]


def test_budget_refuses_and_marks_seen(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("b", concurrency=1, delay_ms=0, admit_max=2)
    res = h.run(h.frontier.admit([admission(f"http://a.test/{i}") for i in range(4)]))
    assert (res.added, res.refused) == (2, 2)


def test_seen_buckets_are_intsets(harness: Harness, redis_url: str) -> None:
    harness.run(harness.frontier.admit([admission(f"http://a.test/{i}") for i in range(200)]))
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{harness.keys.prefix(0)[:-3]}*:s:*"))
    assert keys
    assert {client.object("encoding", k) for k in keys} == {b"intset"}


def test_claim_never_leases_more_than_asked(harness: Harness) -> None:
    f = harness.frontier
    harness.run(f.admit([admission(f"http://h{i}.test/") for i in range(50)]))
    for n in (1, 2, 16):
        assert len(harness.run(f.claim(n, "w")).leases) == n
    # the rest are still claimable, wherever their partitions are
    assert len(harness.run(f.claim(100, "w")).leases) == 50 - 19


def test_the_workers_client_waits_for_a_connection_instead_of_failing(
    redis_url: str, redis_prefix: str
) -> None:
    # Every request in flight may call Redis at once; redis-py's default pool
    # raised "Too many connections" past its limit (and lost robots outcomes).
    from crawler.frontier.connection import async_client

    async def main() -> list[int]:
        client = async_client(redis_url, {"max_connections": 4})
        try:
            key = redis_prefix + "busy"
            return await asyncio.gather(*(client.incr(key) for _ in range(300)))
        finally:
            await client.aclose()

    assert sorted(asyncio.run(main())) == list(range(1, 301))


def _sorted_set_reads(h: Harness) -> tuple[int, int]:
    """Script calls and sorted-set reads the server has run so far (all clients)."""
    stats = h.run(h.client.info("commandstats"))

    def calls(name: str) -> int:
        return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))

    return calls("evalsha"), calls("zrange") + calls("zrangebyscore")


@pytest.fixture
def private_harness() -> Iterator[Harness]:
    with own_server_harness("private", clock=True, concurrency=2, delay_ms=0,
                            lease_ms=60_000) as h:
        yield h


def test_a_claim_with_nothing_due_skips_the_timed_sets(private_harness: Harness) -> None:
    """A partition whose leases, delayed URLs, revisits and wakes are not due
    costs a claim two sorted-set reads (its ready set, and its head for the
    next time), not one for each timed set: the partition keeps their
    earliest time, and the claim looks at them only when it has come."""
    harness = private_harness
    f = harness.frontier
    harness.run(f.admit([admission("http://a.test/1"), admission("http://a.test/2"),
                         admission("http://a.test/3")]))
    assert len(harness.run(f.claim(2, "w")).leases) == 2  # host a at its concurrency
    for _ in range(f.keys.partitions):  # every partition looked at once (no timers yet)
        assert harness.run(f.claim(1, "w")).leases == []
    scripts, reads = _sorted_set_reads(harness)
    for _ in range(5):
        assert harness.run(f.claim(1, "w")).leases == []
    scripts, reads = (n - before for n, before in zip(_sorted_set_reads(harness),
                                                      (scripts, reads), strict=True))
    assert scripts >= 5 and reads <= 2 * scripts
    # the timers still fire: the leases run out and their URLs come back
    harness.clock.advance(60_000)
    assert len(harness.run(f.claim(3, "w")).leases) == 2


def test_scripts_the_server_lost_are_loaded_again(private_harness: Harness) -> None:
    """The pipelines send EVALSHA without asking first whether the server has
    the scripts: after a SCRIPT FLUSH (or a restart) the calls that met
    NOSCRIPT run again, loaded, and nothing runs twice."""
    h = private_harness
    f = h.frontier
    assert h.run(f.admit([admission("http://a.test/1")])).added == 1
    h.run(h.client.script_flush())
    assert h.run(f.admit([admission("http://a.test/1"), admission("http://b.test/1")])).added == 1
    h.run(h.client.script_flush())
    assert len(h.run(f.claim(4, "w")).leases) == 2
    assert h.run(f.counts())["leased"] == 2
