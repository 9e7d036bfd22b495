"""The frontier's operations on Redis: admit, claim, release, renew, count.

Each operation is one Lua script per partition (see ``lua/``), and a batch
that spans partitions is sent as one pipeline (:mod:`crawler.frontier.calls`):
one round trip for a page's hundred links, one for a claim across every
partition. The class speaks to ``redis.asyncio`` so the reactor never
blocks on Redis.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from crawler.frontier.calls import Call, run_per_partition
from crawler.frontier.keys import STATES, Keys, add_counts, domain_of, partition_of
from crawler.frontier.luabuild import script_source
from crawler.frontier.partitiondue import PartitionDue
from crawler.frontier.scriptargs import (
    admit_limits,
    claim_args,
    claim_limits,
    drop_host_args,
    hold_args,
    release_item,
    release_limits,
    renew_args,
    robots_args,
    start_args,
)
from crawler.frontier.values import (
    Admission,
    AdmitResult,
    BreakerEvent,
    BudgetSpent,
    ClaimResult,
    Lease,
    Limits,
    Release,
    ReleaseResult,
    RobotsOutcome,
    RobotsRetry,
    Turn,
)

#: A claim asks a partition for this many URLs at least (fewer partitions,
#: each asked for more), when it wants that many.
CLAIM_SHARE = 4


class Frontier:
    """The shared crawl state of one namespace, in one Redis or one Redis Cluster.

    Every script touches the keys of one partition only, which share a hash
    tag (one slot), so on a Cluster each runs on its partition's node.
    """

    def __init__(self, client: Redis | RedisCluster, keys: Keys, limits: Limits) -> None:
        self.client = client
        self.keys = keys
        self.limits = limits
        self.cluster = isinstance(client, RedisCluster)
        self._admit = client.register_script(script_source("admit"))
        self._claim = client.register_script(script_source("claim"))
        #: Each lease this process claimed and holds: its member of PP:leased,
        #: which its release, renewal and start name (by worker, fingerprint).
        self._members: dict[tuple[str, bytes], bytes] = {}
        self._release = client.register_script(script_source("release"))
        self._renew = client.register_script(script_source("renew"))
        self._start = client.register_script(script_source("start"))
        self._hold = client.register_script(script_source("hold"))
        self._robots = client.register_script(script_source("robots"))
        self._drop = client.register_script(script_source("drop_host"))
        self._next_partition = random.randrange(keys.partitions)
        self.due = PartitionDue(keys.partitions, limits.claim_sweep_ms)

    def partition(self, host: str) -> int:
        return partition_of(host, self.keys.partitions)

    async def admit(self, items: Iterable[Admission]) -> AdmitResult:
        """Dedup and queue URLs; one script call per partition, one round trip."""
        calls, parts = self._admit_calls(items)
        return self._admitted(await self._per_partition(calls), parts)

    async def admit_and_release(self, items: Iterable[Admission], releases: Iterable[Release],
                                worker: str) -> tuple[AdmitResult, ReleaseResult]:
        """:meth:`admit`, then :meth:`release`, in one round trip on one Redis.

        Redis runs a pipeline's scripts in order, so the links are in before the
        leases end, as with two round trips. On a Cluster, whose nodes run
        their calls in parallel, the admissions are waited for first. A failed
        call raises once the rest have run: the caller sends both again (each
        is idempotent; a release that went through counts as stale then).
        """
        releases = list(releases)
        admit_calls, admit_parts = self._admit_calls(items)
        release_calls, release_parts = self._release_calls(releases, worker)
        if self.cluster:
            admitted = await self._per_partition(admit_calls)
            released = await self._per_partition(release_calls)
        else:
            replies = await self._per_partition(admit_calls + release_calls)
            admitted, released = replies[:len(admit_calls)], replies[len(admit_calls):]
        self._forget(releases, worker)
        return (self._admitted(admitted, admit_parts),
                self._released(released, release_parts))

    def _admit_calls(self, items: Iterable[Admission]) -> tuple[list[Call], list[int]]:
        groups: dict[int, list[str | int]] = defaultdict(list)
        for item in items:
            bucket, member = self.keys.seen_slot(item.fingerprint)
            groups[self.partition(item.host)] += [
                bucket, member, item.host, item.priority,
                item.fingerprint + item.record.encode("utf-8"), item.host_config,
                domain_of(item.host),
            ]
        limits = admit_limits(self.limits)
        calls: list[Call] = [
            (self._admit, [self.keys.counts(part)],
             [self.keys.prefix(part), limits, *args])
            for part, args in groups.items()]
        return calls, list(groups)

    def _admitted(self, replies: list[Any], parts: list[int]) -> AdmitResult:
        result = AdmitResult()
        for part, (added, dups, refused, blocked, parked, spent, soonest, forward) in zip(
                parts, replies, strict=True):
            result.added += added
            result.duplicates += dups
            result.refused += refused
            result.blocked += blocked
            result.parked += parked
            result.spent += spent
            result.forward += forward
            self.due.told(part, int(soonest))
        return result

    async def claim(self, n: int, worker: str, window_ms: int | None = None,
                    later: int = 0) -> ClaimResult:
        """Lease up to ``n`` URLs whose hosts may be contacted now, each with its
        start turn for ``window_ms`` (default ``Limits.start_window_ms``), and
        with them up to about ``later`` more of the same sites due later (their
        reservations, ``Limits.reserve_ms`` ahead at most).

        The claim is spread over the partitions with something due (starting
        at a rotating one; see partitiondue.py), at least ``CLAIM_SHARE`` URLs
        asked of each, in one pipelined round trip;
        what is missing is asked again of the partitions that gave all they
        were asked for and of those not asked yet (at most four rounds), so a
        crawl whose ready hosts sit in one partition is not starved, and never
        more than ``n`` are leased.
        """
        parts = self.keys.partitions
        start = self._next_partition
        self._next_partition = (start + 1) % parts
        candidates = self.due.due([(start + i) % parts for i in range(parts)])
        result = ClaimResult([], self.due.now(), None)
        window = self.limits.start_window_ms if window_ms is None else window_ms
        for _ in range(4):
            missing = n - sum(lease.offset_ms == 0 for lease in result.leases)
            if missing <= 0 or not candidates:
                break
            # Exactly ``missing`` in all: never lease more than the caller can
            # start, or the extras would hold their hosts' slots while waiting;
            # and CLAIM_SHARE at least of a partition (a script call has a
            # cost of its own), the rotation spreading the claims over them.
            asked = candidates[:-(-missing // CLAIM_SHARE)]  # at least one
            q, r = divmod(missing, len(asked))
            asks = [(part, q + (i < r)) for i, part in enumerate(asked)]
            full = await self._claim_round(asks, worker, result, window,
                                           -(-later // len(asks)) if later > 0 else 0)
            candidates = full + candidates[len(asked):]
        result.next_ready_ms = self.due.next_ms()
        return result

    async def _claim_round(
        self, asks: list[tuple[int, int]], worker: str, result: ClaimResult, window_ms: int,
        later: int,
    ) -> list[int]:
        """One pipelined round; returns the partitions that gave all they were asked
        and have more due now."""
        limits = claim_limits(self.limits)
        calls = [(self._claim, [self.keys.counts(part)],
                  [self.keys.prefix(part), worker,
                   claim_args(want, random.random(), window_ms, later), limits])
                 for part, want in asks]
        stamps = [self.due.stamp(part) for part, _ in asks]
        full = []
        replies = await self._per_partition(calls)
        result.calls += len(calls)
        for (part, want), stamp, reply in zip(asks, stamps, replies, strict=True):
            self.due.heard(int(reply[0]))
            result.server_ms = int(reply[0])
            nxt = int(reply[1])
            claimed = 0
            for i in range(2, len(reply), 4):
                host, entry = reply[i].decode(), reply[i + 1]
                if entry == b"W":
                    result.ip_waits.append((host, reply[i + 2].decode()))
                    continue
                if entry == b"D":
                    result.dns_jobs.append(host)
                    continue
                if entry == b"B":
                    result.budget_jobs.append((host, BudgetSpent.parse(reply[i + 2].decode())))
                    continue
                if entry == b"R":
                    claimed += 1
                    result.robots_jobs.append(host)
                else:
                    *numbers, score = reply[i + 3].split()
                    site, domain, offset, latest, delay, floor = map(int, numbers)
                    claimed += offset == 0
                    self._members[worker, entry[:16]] = b"\n".join(
                        (reply[i], score, worker.encode(), entry))
                    result.leases.append(Lease(host, entry[:16], entry[16:].decode("utf-8"),
                                               int(reply[i + 2]), (site, domain),
                                               offset, latest, (delay, floor)))
            # All it was asked, and more due now: asked again in this claim.
            more = claimed == want and 0 <= nxt <= result.server_ms
            self.due.answered(part, stamp, nxt, more)
            if more:
                full.append(part)
        return full

    def _member(self, worker: str, fingerprint: bytes) -> bytes:
        """The lease's member of ``PP:leased`` (``lease_fields`` in lua/common.lua),
        as its claim wrote it; the fingerprint alone for a lease this process
        did not claim (the scripts find no such lease: it is stale)."""
        return self._members.get((worker, fingerprint), fingerprint)

    def _forget(self, releases: Iterable[Release], worker: str) -> None:
        """Released (or found stale): the leases' members are not needed again."""
        for rel in releases:
            self._members.pop((worker, rel.fingerprint), None)

    async def release(self, releases: Iterable[Release], worker: str) -> ReleaseResult:
        """Release leases (each exactly once): how many, how many stale, breaker events."""
        releases = list(releases)
        calls, parts = self._release_calls(releases, worker)
        result = self._released(await self._per_partition(calls), parts)
        self._forget(releases, worker)
        return result

    def _release_calls(self, releases: Iterable[Release], worker: str
                       ) -> tuple[list[Call], list[int]]:
        groups: dict[int, list[Any]] = defaultdict(list)
        # (by host: release.lua reads and writes a site once for its leases in a row)
        for rel in sorted(releases, key=lambda r: r.host):
            groups[self.partition(rel.host)] += [
                self._member(worker, rel.fingerprint),
                rel.fingerprint + rel.record.encode("utf-8") if rel.record else "",
                release_item(rel)]
        limits = release_limits(self.limits)
        calls: list[Call] = [
            (self._release, [self.keys.counts(part)], [self.keys.prefix(part), worker, limits,
                                                       *args])
            for part, args in groups.items()]
        return calls, list(groups)

    def _released(self, replies: list[Any], parts: list[int]) -> ReleaseResult:
        released = stale = 0
        events: list[BreakerEvent] = []
        for part, reply in zip(parts, replies, strict=True):
            released += reply[0]
            stale += reply[1]
            self.due.told(part, int(reply[2]))
            events += [BreakerEvent(reply[i].decode(), reply[i + 1].decode(), int(reply[i + 2]))
                       for i in range(3, len(reply), 3)]
        return ReleaseResult(released, stale, tuple(events))

    async def renew(self, leases: Iterable[Lease], worker: str) -> int:
        """Push back the expiry of leases this worker still holds."""
        groups: dict[int, list[bytes]] = defaultdict(list)
        for lease in leases:
            groups[self.partition(lease.host)].append(self._member(worker, lease.fingerprint))
        if not groups:
            return 0
        args = renew_args(self.limits.lease_ms)
        calls = [(self._renew, [self.keys.counts(part)],
                  [self.keys.prefix(part), worker, args, *fps])
                 for part, fps in groups.items()]
        return sum(await self._per_partition(calls))

    async def lease_places(self, leases: list[Lease], worker: str) -> list[str]:
        """Where each of ``leases`` is now: "leased" (still this worker's),
        "delayed", "dead", or "gone" (back in its queue, done, or another
        worker's). Read when a renewal missed some, to say where they went."""
        pipe = self.client.pipeline(transaction=False)
        for lease in leases:
            part = self.partition(lease.host)
            pipe.zscore(self.keys.leased(part), self._member(worker, lease.fingerprint))
            pipe.hexists(self.keys.delayed_details(part), lease.fingerprint)
            pipe.hexists(self.keys.dead(part), lease.fingerprint)
        replies = await pipe.execute()
        return ["leased" if held is not None else "delayed" if delayed else
                "dead" if dead else "gone"
                for held, delayed, dead in zip(replies[0::3], replies[1::3], replies[2::3],
                                               strict=True)]

    async def _per_partition(self, calls: list[Call]) -> list[Any]:
        return await run_per_partition(self.client, calls)

    async def start_gate(self, host: str) -> int:
        """0 if a request to ``host`` may start now, else the ms to wait first
        (-1: an operator paused the host or its domain).

        The gates are its site's (every scheme and port of the name share it)
        and its registered domain's.
        """
        return (await self.start_turn(host)).wait_ms

    async def start_turn(self, host: str, earlier: tuple[int, int, int] | None = None,
                         lease: tuple[bytes, str] | None = None, window_ms: int = 0) -> Turn:
        """The start gate's answer, with the turns it gave (see ``lua/start.lua``).

        ``earlier`` is what an earlier pass of the same request got: if no
        other request of the site (or domain) started since, this pass does
        not wait for its own reservation. ``lease`` (fingerprint, worker): the
        request starts only while its worker still holds its lease (else
        ``LEASE_LOST``: it ran out while the worker stood still). ``window_ms``:
        how long after the answer the request may still start on this turn
        (the next start of the site and domain waits that much longer).
        """
        part = self.partition(host)
        fingerprint, worker = lease or (b"", "")
        wait_ms, turn, dturn = await self._start(
            keys=[self.keys.site(part, host), self.keys.domain(part, host),
                  self.keys.leased(part)],
            args=[self._member(worker, fingerprint) if lease else b"",
                  start_args(self.limits, earlier, worker, window_ms)])
        return Turn(int(wait_ms), int(turn), int(dturn))

    async def hold(self, host: str, ms: int) -> bool:
        """Hold ``host`` back for ``ms`` for every worker: no claim, no start (False: unknown)."""
        part = self.partition(host)
        return bool(await self._hold(keys=[self.keys.counts(part)],
                                     args=[self.keys.prefix(part), hold_args(host, ms)]))

    async def store_robots(
        self, host: str, blob: bytes | None, ttl_ms: int, concurrency: int, delay_ms: int,
        floor_ms: int, first_gap_ms: int, retry: RobotsRetry, wait_ms: int = 0,
    ) -> RobotsOutcome:
        """Store a robots.txt outcome for every worker (``blob`` None: unreachable;
        ``wait_ms``: the Retry-After it came with, the shortest wait before a retry)."""
        part = self.partition(host)
        args = [self.keys.prefix(part), blob or b"", robots_args(
            host, blob is not None, ttl_ms, concurrency, delay_ms, floor_ms, first_gap_ms,
            retry, wait_ms)]
        state, attempts, version = await self._robots(keys=[self.keys.counts(part)], args=args)
        self.due.touch(part)
        return RobotsOutcome(state.decode(), int(attempts), int(version))

    async def robots_blob(self, host: str) -> bytes | None:
        """The stored robots rules of a host (as :meth:`store_robots` got them)."""
        part = self.partition(host)
        return await self.client.hget(self.keys.robots_rules(part), host)

    async def park_host(self, host: str, reason: str, batch: int = 1000, *,
                        whole_site: bool = False, spent: bool = False) -> int:
        """Make a host's queued URLs, and its new ones, dead letters; how many now.

        ``whole_site``: every host of its site (a name that does not resolve, a
        server whose breaker kept opening), not only this scheme and port (a
        robots.txt that stays unreachable). ``spent``: the site spent its
        budget, so its new links are refused instead (not seen: admitted once
        the budget is raised and the host requeued). ``scrapy frontier requeue
        --host`` (or ``--reason``) unparks a host.
        """
        part = self.partition(host)
        hosts = [host]
        if whole_site:
            members = await self.client.smembers(self.keys.site_hosts(part, host))
            hosts = sorted({host, *(m.decode() for m in members)})
        moved = 0
        for one in hosts:
            while True:
                queued, _, left = await self._drop(
                    keys=[self.keys.counts(part)],
                    args=[self.keys.prefix(part),
                          drop_host_args(one, reason, batch, "q" if spent else "p")])
                moved += int(queued)
                if not queued or not left:
                    break
        return moved

    async def ready_hosts(self) -> tuple[int, int]:
        """Hosts with queued URLs that may be claimed now, and those waiting
        (pacing, a hold), over every partition."""
        now_ms = int(time.time() * 1000)
        async with self.client.pipeline(transaction=False) as pipe:
            for part in range(self.keys.partitions):
                pipe.zcount(self.keys.ready(part), "-inf", now_ms)
                pipe.zcount(self.keys.ready(part), f"({now_ms}", "+inf")
            replies = await pipe.execute()
        return sum(replies[0::2]), sum(replies[1::2])

    async def counts(self) -> dict[str, int]:
        """Counts per state (and dup, refused, expired, hosts), summed over partitions."""
        async with self.client.pipeline(transaction=False) as pipe:
            for part in range(self.keys.partitions):
                pipe.hgetall(self.keys.counts(part))
            replies = await pipe.execute()
        total: dict[str, int] = dict.fromkeys(STATES, 0)
        for reply in replies:
            add_counts(total, reply)
        return total
