"""The admin operations on a frontier (crawler/frontier/admin.py, status.py), against
a real Redis.

The frontier state is built with the real :class:`Frontier` (admit, claim,
release), so the admin scripts are checked against what workers write, and
after every change the counts must still agree with the queues themselves.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from crawler.frontier.admin import (
    AdminError,
    FrontierAdmin,
    HostMatch,
    frontier_keys,
    parse_dead,
    parse_host,
    parse_host_match,
)
from crawler.frontier.values import Release
from crawler.frontier.workers import Heartbeat
from tests.frontier_world import (
    PARTITIONS,
    World,
    admission,
    filled_world,
    lease_url,
    sites_world,
)

A, B, C = "http://a.test:80", "http://b.test:80", "http://c.test:80"


@pytest.fixture
def world(redis_url: str, redis_prefix: str) -> Iterator[World]:
    """See :func:`filled_world`."""
    w = filled_world(redis_url, redis_prefix + "adm")
    yield w
    w.close()


# ---------------------------------------------------------------------- helpers


def test_parse_host_accepts_names_and_urls() -> None:
    assert parse_host("Example.COM") == "http://example.com:80"
    assert parse_host("http://example.com:80") == "http://example.com:80"
    assert parse_host("https://example.com") == "https://example.com:443"
    with pytest.raises(AdminError):
        parse_host("ftp://example.com/")


def test_host_match_a_name_is_every_scheme_and_port_a_url_one_authority() -> None:
    name = parse_host_match("G.test")
    assert name == HostMatch("g.test")
    assert str(name) == "g.test, every scheme and port"
    assert all(name.matches(h) for h in ("http://g.test:80", "https://g.test:443",
                                         "http://g.test:8080"))
    assert not any(name.matches(h) for h in ("http://www.g.test:80", "http://g.test.x:80",
                                             "http://xg.test:80"))
    on_port = parse_host_match("g.test:8443")
    assert str(on_port) == "g.test:8443, every scheme"
    assert on_port.matches("https://g.test:8443") and on_port.matches("http://g.test:8443")
    assert not on_port.matches("https://g.test:443")
    for one in ("https://g.test", "https://g.test/", "https://g.test:443/x"):
        assert parse_host_match(one) == HostMatch.exact("https://g.test:443")
    assert not parse_host_match("https://g.test").matches("http://g.test:80")
    assert parse_host_match("[::1]:8080").matches("https://[::1]:8080")
    with pytest.raises(AdminError):
        parse_host_match("ftp://g.test/")


def test_dead_letter_whose_fingerprint_holds_newlines() -> None:
    fp = b"\n" * 4 + b"x" * 12
    letter = parse_dead(fp, b'http://a.test:80\n{"reason":"r","error":"E"}\n' + fp + b'{"u":"U"}')
    assert (letter.host, letter.reason, letter.error, letter.url) == ("http://a.test:80", "r",
                                                                     "E", "U")
    plain = parse_dead(fp, b"h\nnot json\n" + fp + b"{}")
    assert (plain.reason, plain.url) == ("not json", "")


# ---------------------------------------------------------------------- status


def test_status_counts_hosts_and_workers(world: World) -> None:
    now = time.time()
    workers = world.keys.workers()
    world.client.hset(workers, mapping={
        "box:1": json.dumps({"seen": now - 2, "held": 4, "pid": 1, "host": "box"}),
        "box:2": json.dumps({"seen": now - 600, "held": 1, "pid": 2, "host": "box"}),
        "broken": "{",
    })
    # b.test paced: its next-allowed time is a minute ahead
    part = world.admin.partition(B)
    world.client.zadd(world.keys.ready(part), {B: int(now * 1000) + 60_000})
    st = world.admin.status()
    c = st.counts
    assert (c["queued"], c["leased"], c["delayed"], c["done"], c["dead"], c["hosts"]) == (
        6, 0, 0, 1, 3, 3)
    assert st.hosts == {"total": 3, "ready_now": 2, "paced": 1, "other": 0,
                        "busy": 0, "draining": 0, "parked": 0, "finished": 0}
    assert [(w.id, w.state, w.held) for w in st.workers] == [
        ("box:1", "alive", 4), ("box:2", "gone", 1), ("broken", "?", None)]
    assert st.partitions == PARTITIONS and not st.layout_found
    # just admitted: the oldest queue head has waited under the 10 s mark step
    assert st.oldest_queued_s is not None and 0 <= st.oldest_queued_s <= 10


def test_status_judges_each_worker_by_the_lease_it_states(world: World) -> None:
    """A worker with a long lease beats rarely: gone only after three missed beats;
    one that states no lease is judged by the reader's (FRONTIER_LEASE_SECONDS)."""
    now = time.time()
    world.client.hset(world.keys.workers(), mapping={
        "slow": Heartbeat(now - 100, held=1, lease=300).to_json(),
        "fast": Heartbeat(now - 100, held=1, lease=30).to_json(),
        "old": json.dumps({"seen": now - 100}),
    })
    states = {w.id: w.state for w in world.admin.status(oldest=False).workers}
    assert states == {"slow": "alive", "fast": "gone", "old": "gone"}
    patient = FrontierAdmin(world.client, world.keys, lease_seconds=600)
    assert {w.id: w.state for w in patient.status(oldest=False).workers}["old"] == "alive"


def test_status_says_what_hosts_that_cannot_be_claimed_are_doing(
        redis_url: str, redis_prefix: str) -> None:
    """One URL in flight per site: a host with more queued is busy, one with only
    a lease or a retry is draining, one with nothing left is finished."""
    w = World(redis_url, redis_prefix + "states", concurrency=1, delay_ms=0)
    try:
        w.admit("http://a.test/0", "http://a.test/1", "http://b.test/0", "http://c.test/0",
                "http://d.test/0")
        leases = {lease_url(lease).split("/")[2]: lease for lease in w.claim_all("w1")}
        assert sorted(leases) == ["a.test", "b.test", "c.test", "d.test"]
        w.release("w1", Release(leases["c.test"].host, leases["c.test"].fingerprint, "done"),
                  Release(leases["d.test"].host, leases["d.test"].fingerprint, "retry",
                          "60000"))
        st = w.admin.status()
        assert st.hosts == {"total": 4, "ready_now": 0, "paced": 0, "other": 4,
                            "busy": 1, "draining": 2, "parked": 0, "finished": 1}
        # Without the queue scan (the metrics' cheap refresh) only the remainder is known.
        assert w.admin.status(oldest=False).hosts == {
            "total": 4, "ready_now": 0, "paced": 0, "other": 4}
        w.release("w1", *(Release(leases[h].host, leases[h].fingerprint, "done")
                          for h in ("a.test", "b.test")))
        st = w.admin.status()
        assert (st.hosts["ready_now"], st.hosts["busy"], st.hosts["draining"],
                st.hosts["finished"]) == (1, 0, 1, 2)
    finally:
        w.close()


def test_status_reads_the_oldest_queue_head_age_from_time_marks(world: World) -> None:
    sec = int(world.client.time()[0])
    for part in range(PARTITIONS):  # as if every URL so far was admitted an hour ago
        marks = f"{world.keys.prefix(part)}:e"
        if world.client.exists(marks):
            world.client.delete(marks)
            world.client.zadd(marks, {str(sec - 3600): 1})
    assert 3600 <= world.admin.status().oldest_queued_s <= 3610
    world.admit("http://new.test/1")  # a fresh URL does not hide the old ones
    assert world.admin.status().oldest_queued_s >= 3600
    for lease in world.claim_all("w9"):  # nothing queued: no age
        world.release("w9", Release(lease.host, lease.fingerprint, "done"))
    assert world.admin.status().oldest_queued_s is None


def test_stored_layout_wins_over_settings(world: World) -> None:
    world.client.set(f"{world.keys.namespace}:layout",
                     json.dumps({"partitions": PARTITIONS, "seen_buckets": 64}))
    keys, found = frontier_keys(world.client, world.keys.namespace, partitions=16)
    assert found and keys == world.keys


# ---------------------------------------------------------------------- dead, requeue


def test_dead_lists_and_filters(world: World) -> None:
    letters = world.admin.dead()
    assert sorted(d.url for d in letters) == [
        "http://a.test/0", "http://a.test/1", "http://b.test/0"]
    (b,) = world.admin.dead(reason="http-404")
    assert (b.url, b.host, b.error) == ("http://b.test/0", B, "")
    assert {(d.url, d.error) for d in world.admin.dead(host=A)} == {
        ("http://a.test/0", "TimeoutError"), ("http://a.test/1", "DNSLookupError")}
    assert len(world.admin.dead(limit=1)) == 1
    assert world.admin.dead(reason="download-error", host=B) == []


def test_requeue_puts_dead_letters_back_and_they_are_claimed(world: World) -> None:
    assert world.admin.requeue(reason="download-error") == 2
    counts = world.assert_consistent()
    assert (counts["dead"], counts["queued"]) == (1, 8)
    assert [d.url for d in world.admin.dead()] == ["http://b.test/0"]
    assert world.admin.requeue(reason="download-error") == 0  # nothing left to move
    claimed = {lease_url(lease) for lease in world.claim_all("w2")}
    assert {"http://a.test/0", "http://a.test/1"} <= claimed and len(claimed) == 8
    assert world.admin.requeue(host=B) == 1
    assert world.assert_consistent()["dead"] == 0


@pytest.mark.parametrize("front", [False, True])
def test_requeue_order_back_or_front(redis_url: str, redis_prefix: str, front: bool) -> None:
    w = World(redis_url, redis_prefix + "ord", concurrency=1, delay_ms=0)
    try:
        w.admit(*[f"http://x.test/{i}" for i in range(3)])
        (first,) = w.run(w.frontier.claim(1, "w")).leases
        w.release("w", Release(first.host, first.fingerprint, "dead", '{"reason":"r"}'))
        assert w.admin.requeue(front=front) == 1
        order = []
        for _ in range(3):
            (lease,) = w.run(w.frontier.claim(1, "w")).leases
            order.append(lease_url(lease))
            w.release("w", Release(lease.host, lease.fingerprint, "done"))
        expected = ["/0", "/1", "/2"] if front else ["/1", "/2", "/0"]
        assert order == [f"http://x.test{p}" for p in expected]
    finally:
        w.close()


# ---------------------------------------------------------------------- drop-host


def test_drop_host_makes_its_urls_dead_and_unclaimable(world: World) -> None:
    # a.test/2 is delayed (a retry), a.test/3 and /4 queued, when the host is dropped
    leases = {lease_url(x): x for x in world.claim_all("w3")}
    retry = leases.pop("http://a.test/2")
    world.release("w3", Release(retry.host, retry.fingerprint, "retry", "60000"),
                  *[Release(x.host, x.fingerprint, "return") for x in leases.values()])
    result = world.admin.drop_host(A)
    assert (result.queued, result.delayed, result.in_flight) == (2, 1, 0)
    counts = world.assert_consistent()
    assert (counts["queued"], counts["delayed"], counts["dead"]) == (3, 0, 6)
    dropped = world.admin.dead(reason="dropped")
    assert sorted(d.url for d in dropped) == [f"http://a.test/{i}" for i in (2, 3, 4)]
    assert not any(x.host == A for x in world.claim_all("w4"))
    part = world.admin.partition(A)
    assert world.client.hget(world.keys.host(part, A), "n") == b"0"
    assert world.client.zscore(world.keys.ready(part), A) is None
    with pytest.raises(AdminError, match="not in the frontier"):
        world.admin.drop_host("http://nowhere.test:80")
    # the drop lasts: new links to the host are refused, and not marked seen
    late = [admission("http://a.test/late"), admission("http://b.test/late")]
    result = world.run(world.frontier.admit(late))
    assert (result.added, result.blocked) == (1, 1)
    assert world.assert_consistent()["blocked"] == 1
    # a drop is undone by requeueing its dead letters, and the host unblocked
    assert world.admin.requeue(reason="dropped", host=A) == 3
    assert world.assert_consistent()["queued"] == 4
    assert world.run(world.frontier.admit(late[:1])).added == 1


def test_dead_and_requeue_by_name_take_every_scheme_and_port(redis_url: str,
                                                             redis_prefix: str) -> None:
    w = sites_world(redis_url, redis_prefix + "sites")
    try:
        def hosts(host: HostMatch) -> list[str]:
            return sorted(d.host for d in w.admin.dead(host=host))

        name = parse_host_match("g.test")
        assert hosts(name) == ["http://g.test:80", "http://g.test:8080", "https://g.test:443"]
        assert hosts(parse_host_match("https://g.test/")) == ["https://g.test:443"]
        assert hosts(parse_host_match("g.test:8080")) == ["http://g.test:8080"]
        assert w.admin.dead(host="http://g.test:80")[0].url == "http://g.test/0"  # a key
        assert w.admin.requeue(host=parse_host_match("https://g.test:443")) == 1
        assert w.admin.requeue(host=name) == 2
        assert sorted(d.host for d in w.admin.dead()) == [
            "http://other.test:80", "https://www.g.test:443"]
        counts = w.assert_consistent()
        assert (counts["queued"], counts["dead"]) == (3, 2)
    finally:
        w.close()


def test_requeue_by_name_unblocks_every_dropped_authority(redis_url: str,
                                                          redis_prefix: str) -> None:
    """A name's authorities dropped with nothing queued (so nothing dead to requeue)
    take new links again after one requeue of the name; another name stays dropped."""
    w = World(redis_url, redis_prefix + "drops", concurrency=10, delay_ms=0)
    try:
        w.admit("http://g.test/0", "https://g.test/1", "http://other.test/2")
        w.release("w1", *(Release(x.host, x.fingerprint, "done") for x in w.claim_all("w1")))
        for host in ("http://g.test:80", "https://g.test:443", "http://other.test:80"):
            assert w.admin.drop_host(host).queued == 0
        late = [admission(u) for u in ("http://g.test/late", "https://g.test/late",
                                       "http://other.test/late")]
        assert w.run(w.frontier.admit(late)).blocked == 3
        assert w.admin.requeue(host=parse_host_match("g.test")) == 0
        result = w.run(w.frontier.admit(late))
        assert (result.added, result.blocked) == (2, 1)
    finally:
        w.close()
