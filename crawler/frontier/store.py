"""The frontier's operations on Redis: admit, claim, release, renew, count.

Each operation is one Lua script per partition (see ``lua/``), and a batch
that spans partitions is sent as one pipeline: one round trip for a page's
hundred links, one for a claim across every partition. The class speaks to
``redis.asyncio`` so the reactor never blocks on Redis.
"""

from __future__ import annotations

import pkgutil
import random
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from crawler.frontier.keys import Keys, partition_of

STATES = ("queued", "leased", "delayed", "done", "dead")


def _lua(name: str) -> str:
    data = pkgutil.get_data("crawler.frontier", f"lua/{name}.lua")
    assert data is not None, name
    return data.decode("utf-8")


def script_source(name: str) -> str:
    """A script's source with the shared helpers (lua/common.lua) in front."""
    return _lua("common") + _lua(name)


@dataclass(frozen=True, slots=True)
class Admission:
    """One URL to admit: canonical URL, its host key, fingerprint and record."""

    url: str
    host: str
    fingerprint: bytes
    record: str
    priority: int = 0
    host_config: str = ""  # "concurrency:delay_ms" for hosts with their own limits


@dataclass(frozen=True, slots=True)
class Lease:
    """A claimed URL: the worker must release it exactly once."""

    host: str
    fingerprint: bytes
    record: str

    @property
    def token(self) -> str:
        return self.fingerprint.hex()


@dataclass(frozen=True, slots=True)
class Release:
    """What became of a lease: done, return, retry (after delay_ms) or dead."""

    host: str
    fingerprint: bytes
    op: str
    arg: str = ""
    record: str = ""  # a new record (retry) or "" to keep the old one


@dataclass(slots=True)
class ClaimResult:
    leases: list[Lease]
    server_ms: int
    next_ready_ms: int | None  # earliest time something may become claimable


@dataclass(slots=True)
class AdmitResult:
    added: int = 0
    duplicates: int = 0
    refused: int = 0  # over the host's budget
    blocked: int = 0  # the host was dropped


@dataclass(slots=True)
class Limits:
    """Per-host defaults and the crawl's budgets, in the units the scripts use."""

    concurrency: int = 4
    delay_ms: int = 1000
    jitter: float = 0.5
    budget: int = 0
    lease_ms: int = 60_000
    move_max: int = 500
    extra: dict[str, Any] = field(default_factory=dict)


class Frontier:
    """The shared crawl state of one namespace, in one Redis."""

    def __init__(self, client: Redis, keys: Keys, limits: Limits) -> None:
        self.client = client
        self.keys = keys
        self.limits = limits
        self._admit = client.register_script(script_source("admit"))
        self._claim = client.register_script(script_source("claim"))
        self._release = client.register_script(script_source("release"))
        self._renew = client.register_script(script_source("renew"))
        self._start = client.register_script(script_source("start"))
        self._next_partition = random.randrange(keys.partitions)

    def partition(self, host: str) -> int:
        return partition_of(host, self.keys.partitions)

    async def admit(self, items: Iterable[Admission]) -> AdmitResult:
        """Dedup and queue URLs; one script call per partition, one round trip."""
        groups: dict[int, list[str | int]] = defaultdict(list)
        for item in items:
            bucket, member = self.keys.seen_slot(item.fingerprint)
            groups[self.partition(item.host)] += [
                bucket, member, item.host, item.priority,
                item.fingerprint + item.record.encode("utf-8"), item.host_config,
            ]
        result = AdmitResult()
        if not groups:
            return result
        pipe = self.client.pipeline(transaction=False)
        for part, args in groups.items():
            head = [self.keys.prefix(part), self.limits.concurrency, self.limits.delay_ms,
                    self.limits.budget]
            await self._admit(keys=[self.keys.counts(part)], args=head + args, client=pipe)
        for added, dups, refused, blocked in await pipe.execute():
            result.added += added
            result.duplicates += dups
            result.refused += refused
            result.blocked += blocked
        return result

    async def claim(self, n: int, worker: str) -> ClaimResult:
        """Lease up to ``n`` URLs whose hosts may be contacted now.

        The claim is spread over the partitions (starting at a rotating one)
        in one pipelined round trip; what is missing is asked again of the
        partitions that gave all they were asked for and of those not asked
        yet (at most four rounds), so a crawl whose ready hosts sit in one
        partition is not starved, and never more than ``n`` are leased.
        """
        parts = self.keys.partitions
        start = self._next_partition
        self._next_partition = (start + 1) % parts
        candidates = [(start + i) % parts for i in range(parts)]
        result = ClaimResult([], 0, None)
        for _ in range(4):
            missing = n - len(result.leases)
            if missing <= 0 or not candidates:
                break
            # Exactly ``missing`` in all: never lease more than the caller can
            # start, or the extras would hold their hosts' slots while waiting.
            q, r = divmod(missing, len(candidates))
            asks = [(part, q + (i < r)) for i, part in enumerate(candidates)]
            full = await self._claim_round([a for a in asks if a[1] > 0], worker, result)
            candidates = full + [part for part, want in asks if want == 0]
        return result

    async def _claim_round(
        self, asks: list[tuple[int, int]], worker: str, result: ClaimResult
    ) -> list[int]:
        """One pipelined round; returns the partitions that gave all they were asked."""
        pipe = self.client.pipeline(transaction=False)
        for part, want in asks:
            args = [self.keys.prefix(part), want, self.limits.lease_ms, worker,
                    random.random(), self.limits.jitter, self.limits.move_max]
            await self._claim(keys=[self.keys.counts(part)], args=args, client=pipe)
        full = []
        for (part, want), reply in zip(asks, await pipe.execute(), strict=True):
            result.server_ms = max(result.server_ms, int(reply[0]))
            nxt = int(reply[1])
            if nxt >= 0:
                result.next_ready_ms = nxt if result.next_ready_ms is None else min(
                    result.next_ready_ms, nxt)
            for i in range(2, len(reply), 2):
                entry = reply[i + 1]
                result.leases.append(
                    Lease(reply[i].decode(), entry[:16], entry[16:].decode("utf-8")))
            if (len(reply) - 2) // 2 == want:
                full.append(part)
        return full

    async def release(self, releases: Iterable[Release], worker: str) -> tuple[int, int]:
        """Release leases (each exactly once); returns (released, stale)."""
        groups: dict[int, list[Any]] = defaultdict(list)
        for rel in releases:
            groups[self.partition(rel.host)] += [
                rel.fingerprint, rel.op, rel.arg,
                rel.fingerprint + rel.record.encode("utf-8") if rel.record else "",
            ]
        if not groups:
            return 0, 0
        pipe = self.client.pipeline(transaction=False)
        for part, args in groups.items():
            await self._release(keys=[self.keys.counts(part)],
                                args=[self.keys.prefix(part), worker, *args], client=pipe)
        released = stale = 0
        for done, old in await pipe.execute():
            released += done
            stale += old
        return released, stale

    async def renew(self, leases: Iterable[Lease], worker: str) -> int:
        """Push back the expiry of leases this worker still holds."""
        groups: dict[int, list[bytes]] = defaultdict(list)
        for lease in leases:
            groups[self.partition(lease.host)].append(lease.fingerprint)
        if not groups:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for part, fps in groups.items():
            await self._renew(keys=[self.keys.counts(part)],
                              args=[self.keys.prefix(part), worker, self.limits.lease_ms, *fps],
                              client=pipe)
        return sum(await pipe.execute())

    async def start_gate(self, host: str) -> int:
        """0 if a request to ``host`` may start now, else the ms to wait first."""
        key = self.keys.host(self.partition(host), host)
        return int(await self._start(keys=[key], args=[self.limits.jitter]))

    async def counts(self) -> dict[str, int]:
        """Counts per state (and dup, refused, expired, hosts), summed over partitions."""
        pipe = self.client.pipeline(transaction=False)
        for part in range(self.keys.partitions):
            pipe.hgetall(self.keys.counts(part))
        total: dict[str, int] = dict.fromkeys(STATES, 0)
        for reply in await pipe.execute():
            for key, value in reply.items():
                name = key.decode()
                if name != "seq":
                    total[name] = total.get(name, 0) + int(value)
        return total
