"""The parts of a worker's frontier, each on its own, against a real Redis.

Each part takes narrow collaborators (the store, the stats, the tasks, a few
callbacks: ``scheduling/worker.py``), so it runs here without a crawl or an
engine: the store is the production one on a private prefix, on a clock the
test moves (tests/frontier_harness.py), and the callbacks record what the
part asked of the rest of the worker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from crawler.frontier.keys import Count
from crawler.frontier.records import from_record
from crawler.frontier.values import ClaimResult, Lease, Release
from crawler.frontier.workers import Heartbeat
from crawler.lease import ticket_of
from crawler.scheduling.claims import ClaimHooks, Claims
from crawler.scheduling.health import RedisHealth
from crawler.scheduling.heartbeat import Heartbeats
from crawler.scheduling.leases import LeaseTable
from crawler.scheduling.sync import Sync, SyncHooks
from crawler.scheduling.tasks import Tasks
from crawler.urls import canonical_url
from tests.frontier_harness import Harness, admission

SPIDER = Spider(name="parts")


class Asked:
    """The callbacks a part was given, and what it asked of each."""

    def __init__(self) -> None:
        self.calls: dict[str, list[tuple[Any, ...]]] = {}

    def __call__(self, name: str, answer: Any = None) -> Callable[..., Any]:
        self.calls.setdefault(name, [])

        def record(*args: Any) -> Any:
            self.calls[name].append(args)
            return answer
        return record

    def count(self, name: str) -> int:
        return len(self.calls.get(name, []))


class Parts:
    """A store, its stats, health, tasks and lease table, and a claims and a sync
    wired to recorded callbacks (``busy`` and ``paused`` as the test sets them)."""

    def __init__(self, h: Harness, *, concurrency: int = 4) -> None:
        self.h = h
        self.stats = get_crawler(Spider).stats
        self.health = RedisHealth(self.stats)
        self.tasks = Tasks()
        self.asked = Asked()
        self.busy = 0
        self.paused = ""
        self.leases = LeaseTable(self.stats, h.frontier.limits, lambda request, lease: "")
        a = self.asked
        self.claims = Claims(h.frontier, "w1", concurrency, self.leases, self.stats,
                             self.health, self.tasks, ClaimHooks(
                                 to_request=self._request, canonical=canonical_url,
                                 busy=lambda: self.busy, paused=lambda: self.paused,
                                 give_back=a("give_back"), give_back_site=a("give_back_site"),
                                 release=a("release"), jobs=a("jobs"), wake=a("wake"),
                                 drained=a("drained")))
        self.sync = Sync(h.frontier, "w1", self.stats, self.health, self.tasks, SyncHooks(
            holds_reserved=lambda host: False, changed=a("changed"), forget=a("forget"),
            give_back_site=a("give_back_site"), flushed=a("flushed")))

    @staticmethod
    def _request(lease: Lease) -> Request:
        return from_record(lease.record, SPIDER, lease.host)

    async def claimed(self) -> None:
        """Ask for a claim and wait for its answer."""
        self.claims.want()
        while self.claims.claiming:
            await asyncio.sleep(0.005)

    async def flushed(self) -> None:
        while self.sync.flushing:
            await asyncio.sleep(0.005)


def test_a_flush_admits_a_pages_links_and_ends_its_lease_in_one_go(make_harness) -> None:
    h = make_harness("sync", clock=True, delay_ms=0)
    parts = Parts(h)
    seed = admission("http://a.test/")
    h.run(h.frontier.admit([seed]))
    lease = h.run(h.frontier.claim(1, "w1")).leases[0]

    async def scenario() -> None:
        for url in ("http://a.test/x", "http://a.test/y", "http://b.test/"):
            parts.sync.admit(admission(url))
        parts.sync.release(Release(lease.host, lease.fingerprint, "done"))
        assert parts.sync.flushing  # one background flush for all four
        await parts.flushed()

    h.run(scenario())
    counts = h.run(h.frontier.counts())
    assert (counts[Count.QUEUED], counts[Count.LEASED], counts[Count.DONE]) == (3, 0, 1)
    assert parts.sync.epoch == 1 and not parts.sync
    assert parts.asked.count("changed") == 1 and parts.asked.count("flushed") == 1
    assert parts.stats.get_value("frontier/admitted") == 3


def test_a_duplicate_offer_is_counted_not_queued_again(make_harness) -> None:
    h = make_harness("dup", clock=True, delay_ms=0)
    parts = Parts(h)

    async def scenario() -> None:
        parts.sync.admit(admission("http://a.test/"))
        await parts.flushed()
        parts.sync.admit(admission("http://a.test/"))
        await parts.flushed()

    h.run(scenario())
    assert h.run(h.frontier.counts())[Count.QUEUED] == 1
    assert parts.stats.get_value("frontier/duplicates") == 1


def test_a_claim_takes_as_many_urls_as_there_are_free_slots(make_harness) -> None:
    h = make_harness("claim", clock=True, delay_ms=0)
    h.run(h.frontier.admit([admission(f"http://h{i}.test/") for i in range(6)]))
    parts = Parts(h, concurrency=4)
    parts.busy = 1  # one download under way: three slots free

    h.run(parts.claimed())
    assert len(parts.claims.buffer) == 3
    for request in parts.claims.buffer:  # each holds a lease this worker tracks
        ticket = ticket_of(request.meta)
        assert ticket is not None and parts.leases.host_of(ticket.token) is not None
    assert h.run(h.frontier.counts())[Count.LEASED] == 3
    results = parts.asked.calls["jobs"]
    assert len(results) == 1 and isinstance(results[0][0], ClaimResult)
    assert parts.asked.count("wake") == 1
    first = parts.claims.pop()  # the engine takes one; still more than a quarter left
    assert first is not None and len(parts.claims.buffer) == 2


def test_a_paused_worker_claims_nothing(make_harness) -> None:
    h = make_harness("paused", clock=True, delay_ms=0)
    h.run(h.frontier.admit([admission("http://a.test/")]))
    parts = Parts(h)
    parts.paused = "disk full"

    h.run(parts.claimed())
    assert not parts.claims.buffer and h.run(h.frontier.counts())[Count.LEASED] == 0
    parts.paused = ""
    h.run(parts.claimed())
    assert len(parts.claims.buffer) == 1


def test_a_claim_with_nothing_due_waits_for_the_next_due_time(make_harness) -> None:
    h = make_harness("due", clock=True, concurrency=1, delay_ms=1000, jitter=0.0)
    h.run(h.frontier.admit([admission("http://a.test/1"), admission("http://a.test/2")]))
    parts = Parts(h)

    async def scenario() -> None:
        await parts.claimed()
        request = parts.claims.pop()
        assert request is not None
        lease = parts.leases.lease_of(ticket_of(request.meta).token)  # type: ignore[union-attr]
        parts.sync.release(Release(lease.host, lease.fingerprint, "done"))
        await parts.flushed()
        await parts.claimed()  # the site's next URL is a second away

    h.run(scenario())
    assert not parts.claims.buffer and not parts.claims.claimable
    assert parts.claims._wakeup is not None  # the claims ask again then, by themselves
    assert parts.asked.count("drained") == 0  # something is delayed: no count needed
    parts.claims.cancel()


def test_a_claim_with_nothing_queued_has_the_counts_read(make_harness) -> None:
    h = make_harness("empty", clock=True, delay_ms=0)
    parts = Parts(h)
    h.run(parts.claimed())
    assert not parts.claims.claimable and parts.asked.count("drained") == 1
    parts.claims.changed()  # something admitted: the next want claims again
    assert parts.claims.claimable


def test_a_heartbeat_renews_held_leases_and_says_the_worker_is_paused(make_harness) -> None:
    h = make_harness("beat", clock=True, delay_ms=0, lease_ms=10_000)
    h.run(h.frontier.admit([admission("http://a.test/")]))
    parts = Parts(h)
    beats = Heartbeats(h.frontier, "w1", parts.leases, parts.stats, parts.health,
                       lambda: parts.paused)
    h.run(parts.claimed())
    parts.paused = "disk full"

    for _ in range(3):  # 24 s in all, past two leases: each beat renews it
        h.clock.advance(8_000)
        h.run(beats.beat())
    assert parts.stats.get_value("frontier/leases/lost") is None
    h.clock.advance(8_000)  # 32 s after the claim, 8 s after the last beat
    assert h.run(h.frontier.claim(1, "w2")).leases == []  # still this worker's
    beat = Heartbeat.parse(h.run(h.client.hget(h.keys.workers(), "w1")))
    assert beat is not None and beat.held == 1 and beat.paused == "disk full"
    h.clock.advance(10_000)  # no beat for a whole lease: another worker takes it
    assert len(h.run(h.frontier.claim(1, "w2")).leases) == 1


def test_a_lease_taken_from_under_its_worker_is_named_with_where_it_went(
        make_harness, caplog: pytest.LogCaptureFixture) -> None:
    h = make_harness("lost", clock=True, delay_ms=0, lease_ms=10_000)
    h.run(h.frontier.admit([admission("http://a.test/"), admission("http://b.test/")]))
    parts = Parts(h)
    beats = Heartbeats(h.frontier, "w1", parts.leases, parts.stats, parts.health,
                       lambda: "")
    h.run(parts.claimed())
    held = parts.leases.leases()
    assert len(held) == 2
    h.clock.advance(11_000)  # past the lease: another worker takes them back
    assert len(h.run(h.frontier.claim(5, "w2")).leases) == 2
    with caplog.at_level(logging.WARNING, logger="crawler.scheduling.heartbeat"):
        h.run(beats.beat())
    assert parts.stats.get_value("frontier/leases/lost") == 2
    line = next(r.getMessage() for r in caplog.records if "expired before" in r.getMessage())
    for lease in held:
        assert f"{lease.host} {lease.fingerprint.hex()[:12]} gone" in line


def test_the_leases_a_worker_lost_are_handed_over_to_be_dropped(make_harness) -> None:
    h = make_harness("lostdrop", clock=True, delay_ms=0, lease_ms=10_000)
    h.run(h.frontier.admit([admission("http://a.test/"), admission("http://b.test/")]))
    parts = Parts(h)
    told: list[list[str]] = []
    beats = Heartbeats(h.frontier, "w1", parts.leases, parts.stats, parts.health,
                       lambda: "", lost=told.append)
    h.run(parts.claimed())
    h.run(beats.beat())
    assert told == []  # renewed: nothing lost
    kept = {lease.token for lease in parts.leases.leases()}
    h.clock.advance(11_000)  # past the lease: another worker takes them
    assert len(h.run(h.frontier.claim(5, "w2")).leases) == 2
    h.run(beats.beat())
    assert len(told) == 1 and set(told[0]) == kept
