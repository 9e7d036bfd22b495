"""A worker asks a partition for URLs only when something may be due there
(crawler/frontier/partitiondue.py): its rules as units, then on a real Redis."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from crawler.frontier.partitiondue import PartitionDue
from crawler.frontier.values import Lease, Release
from crawler.scheduling.wakes import PartitionWakes
from tests.frontier_harness import Harness, admission, own_server_harness
from tests.redis_server import started_redis


def _due(sweep_ms: int = 60_000) -> PartitionDue:
    due = PartitionDue(4, sweep_ms)
    due.heard(1_000_000)  # the server's clock reads 1,000,000 ms now
    return due


def test_unknown_partitions_are_asked_and_answers_put_them_off() -> None:
    due = _due()
    assert due.due([0, 1, 2, 3]) == [0, 1, 2, 3]  # no word of any yet
    now = due.now()
    due.answered(0, due.stamp(0), now + 5_000, more=False)  # next host in 5 s
    due.answered(1, due.stamp(1), -1, more=False)  # nothing timed at all
    due.answered(2, due.stamp(2), now + 5_000, more=True)  # gave all it was asked, more due now
    assert due.due([0, 1, 2, 3]) == [2, 3]
    assert due.next_ms() == now  # 2 and 3 are to be asked: now
    due.answered(2, due.stamp(2), now + 7_000, more=False)
    due.answered(3, due.stamp(3), -1, more=False)
    assert due.due([0, 1, 2, 3]) == []
    assert due.next_ms() == now + 5_000
    due.touch(0, 1)  # this worker admitted or released there
    assert due.due([3, 2, 1, 0]) == [1, 0]


def test_an_answer_to_a_claim_sent_before_a_touch_does_not_count() -> None:
    """The claim may have run before the change: its word is stale."""
    due = _due()
    stamp = due.stamp(0)
    due.touch(0)
    due.answered(0, stamp, due.now() + 60_000, more=False)
    assert due.due([0]) == [0]
    due.answered(0, due.stamp(0), due.now() + 60_000, more=False)
    assert due.due([0]) == []


def test_a_sweep_asks_every_partition_again() -> None:
    due = _due(sweep_ms=50)
    due.due([0, 1, 2, 3])
    for part in range(4):
        due.answered(part, due.stamp(part), -1, more=False)
    assert due.due([0, 1, 2, 3]) == []
    assert due.next_ms() is not None and due.next_ms() <= due.now() + 50
    time.sleep(0.06)
    assert due.due([0, 1, 2, 3]) == [0, 1, 2, 3]


def test_without_sweeps_every_claim_asks_every_partition() -> None:
    due = _due(sweep_ms=0)
    due.due([0, 1])
    due.answered(0, due.stamp(0), -1, more=False)
    at = due.now() + 5_000
    due.answered(1, due.stamp(1), at, more=False)
    assert due.next_ms() == at
    assert due.due([0, 1]) == [0, 1]
    due.answered(0, due.stamp(0), -1, more=False)
    due.answered(1, due.stamp(1), -1, more=False)
    assert due.next_ms() is None  # nothing timed anywhere: no wake-up


@pytest.fixture
def paced() -> Iterator[Harness]:
    """A lone worker on a redis-server of its own, on the server's clock, one
    request to a host a second, partitions swept every minute."""
    with own_server_harness("due", concurrency=1, delay_ms=1000, jitter=0,
                            claim_sweep_ms=60_000) as h:
        yield h


def _scripts_run(h: Harness) -> int:
    stats = h.run(h.client.info("commandstats"))
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def test_a_claim_asks_only_partitions_with_something_due(paced: Harness) -> None:
    h, f = paced, paced.frontier
    h.run(f.admit([admission("http://a.test/1"), admission("http://a.test/2")]))
    (first,) = h.run(f.claim(1, "w")).leases
    assert h.run(f.claim(1, "w")).leases == []  # every partition said when: nothing now
    before = _scripts_run(h)
    for _ in range(10):
        result = h.run(f.claim(1, "w"))
        assert result.leases == [] and result.next_ready_ms is not None
    assert _scripts_run(h) == before  # no partition asked: none has anything due
    # The release places the host again, its next URL due a second after the
    # first was claimed, and says so: no partition is asked before then.
    h.run(f.release([Release(first.host, first.fingerprint, "done")], "w"))
    before = _scripts_run(h)
    assert h.run(f.claim(1, "w")).leases == []
    assert _scripts_run(h) == before
    assert f.due.next_ms() == first_turn(h, first)
    time.sleep(max(0.0, (f.due.next_ms() - f.due.now()) / 1000) + 0.05)
    (second,) = h.run(f.claim(1, "w")).leases
    assert second.host == first.host and second.fingerprint != first.fingerprint


def test_a_claim_that_got_all_it_asked_says_when_its_partition_is_due_next(
        paced: Harness) -> None:
    """A partition that gave all it was asked is not asked again at once: the
    claim's answer says when its next host is due (here: nothing until the
    lease is released)."""
    h, f = paced, paced.frontier
    assert h.run(f.claim(4, "w")).leases == []  # every partition: nothing timed
    h.run(f.admit([admission("http://a.test/1"), admission("http://a.test/2")]))
    assert len(h.run(f.claim(1, "w")).leases) == 1
    before = _scripts_run(h)
    assert h.run(f.claim(1, "w")).leases == []
    assert _scripts_run(h) == before


def first_turn(h: Harness, lease: Lease) -> int:
    """When the site of ``lease`` may be claimed next (its record's t and s)."""
    f = h.frontier
    site = h.run(h.client.hmget(f.keys.site(f.partition(lease.host), lease.host), "t", "s"))
    return max(int(v or 0) for v in site)


def test_a_release_that_makes_a_host_ready_now_has_its_partition_asked(
        paced: Harness) -> None:
    """A release that places a host due at once (its site had no room: the
    concurrency of 1 is free again) makes the next claim ask its partition."""
    h, f = paced, paced.frontier
    h.run(f.admit([admission("http://a.test/1"), admission("http://a.test/2")]))
    (first,) = h.run(f.claim(1, "w")).leases
    time.sleep(1.5)  # its turn came (delay, window); only its concurrency holds it
    assert h.run(f.claim(1, "w")).leases == []
    h.run(f.release([Release(first.host, first.fingerprint, "done")], "w"))
    (second,) = h.run(f.claim(1, "w")).leases
    assert second.host == first.host


def test_what_another_worker_admits_is_found_at_the_next_sweep() -> None:
    with started_redis() as server:
        mine = Harness(server.url, "sweep", delay_ms=0, claim_sweep_ms=300)
        other = Harness(server.url, "sweep", delay_ms=0)
        try:
            assert mine.run(mine.frontier.claim(4, "w1")).leases == []
            other.run(other.frontier.admit([admission("http://b.test/1")]))
            assert mine.run(mine.frontier.claim(4, "w1")).leases == []  # not known yet
            time.sleep(0.35)
            assert len(mine.run(mine.frontier.claim(4, "w1")).leases) == 1
        finally:
            mine.close()
            other.close()


def test_a_partition_touched_while_its_claim_ran_is_asked_at_once() -> None:
    """The release that touched it came while the claim was under way (the
    worker's next claim waits for this one): the worker claims again now,
    not at the next sweep."""
    due = _due()
    due.due([0, 1])
    stamp = due.stamp(0)
    due.answered(1, due.stamp(1), -1, more=False)
    due.touch(0)
    due.answered(0, stamp, due.now() + 30_000, more=False)
    assert due.next_ms() is not None and due.next_ms() <= due.now()


def test_a_waiting_worker_hears_what_another_worker_made_due() -> None:
    """A worker whose claims found nothing waits for the time they named, and
    asks no partition meanwhile; another worker's admission there is a
    message on the wake channel, which makes that partition due for it."""
    with started_redis() as server:
        mine = Harness(server.url, "wake", delay_ms=0, claim_sweep_ms=60_000)
        other = Harness(server.url, "wake", delay_ms=0)
        channel = mine.frontier.keys.wake_channel()
        listener = redis.Redis.from_url(server.url).pubsub(ignore_subscribe_messages=True)
        listener.subscribe(channel)
        try:
            listener.get_message(timeout=0.5)  # (the subscription's own answer)
            assert mine.run(mine.frontier.claim(4, "w1")).leases == []  # waits now
            every = list(range(len(mine.frontier.due)))
            assert mine.frontier.due.due(every) == []
            other.run(other.frontier.admit([admission("http://b.test/1")]))
            message = listener.get_message(timeout=2)
            assert message is not None, "no wake for a waiting worker"
            part, at_ms = (int(x) for x in message["data"].split())
            assert part == mine.frontier.partition("http://b.test:80")
            woken: list[int] = []
            wakes = PartitionWakes(None, channel, mine.frontier.due, woken.append)
            wakes.heard_message(message["data"])
            assert woken == [at_ms] and mine.frontier.due.due(every) == [part]
            assert len(mine.run(mine.frontier.claim(4, "w1")).leases) == 1
            # Each waiting worker is told once: the partition's "sl" now says
            # nobody waits for later than that message's time.
            other.run(other.frontier.admit([admission("http://b.test/2")]))
            second = listener.get_message(timeout=0.5)
            assert second is not None  # mine waits again (its claim got 1 of 4)
            other.run(other.frontier.admit([admission("http://b.test/3")]))
            assert listener.get_message(timeout=0.5) is None
        finally:
            listener.close()
            mine.close()
            other.close()


def test_nobody_waiting_means_no_message() -> None:
    """Admissions into partitions no worker waits for publish nothing."""
    with started_redis() as server:
        h = Harness(server.url, "quiet", delay_ms=0)
        listener = redis.Redis.from_url(server.url).pubsub(ignore_subscribe_messages=True)
        listener.subscribe(h.frontier.keys.wake_channel())
        try:
            listener.get_message(timeout=0.5)
            h.run(h.frontier.admit([admission(f"http://h{i}.test/") for i in range(20)]))
            assert listener.get_message(timeout=0.5) is None
        finally:
            listener.close()
            h.close()
