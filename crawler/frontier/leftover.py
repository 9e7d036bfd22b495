"""What is left in a frontier, host by host: why each host with queued URLs waits.

A finite crawl ends when nothing is queued, leased or delayed. What is left
when it stops early (Ctrl-C, a timeout) or when the only work left is held
for a long time (a name that does not resolve, an open breaker, a long
Retry-After, a paused site) is read here, from ``lua/leftover.lua``: per
host, its state, until when it waits and why. Three readers:

- the end-of-crawl summary (what remains, held by reason, and the command
  that continues);
- the scheduler's decision that only held work is left (a finite crawl then
  ends rather than wait for it: ``FRONTIER_HELD_WAIT``);
- the watchdog, which repairs a host that waits for nothing (the script's
  "lost" state) and wakes one whose wake time has long passed.

Finding the hosts scans the host queues' keys (SCAN, like ``scrapy frontier
status``): one pass over the partitions, then one script call per partition
and batch of hosts, pipelined. Asynchronous, for workers.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from crawler.frontier.account import Account
from crawler.frontier.calls import Call, run_per_partition
from crawler.frontier.keys import STATES, Count, Keys, add_counts, partition_of
from crawler.frontier.refusals import by_reason
from crawler.frontier.scriptargs import leftover_args
from crawler.frontier.store import script_source

#: States of a host that waits on something slow to change: a hold of the
#: server's (Retry-After), its breaker, its name's lookups, its robots.txt,
#: or an operator. The others (ready, paced, robots-job, dns-job, domain,
#: address, busy) are due soon by construction.
HELD: frozenset[str] = frozenset({"dns", "breaker", "retry-after", "robots-unreachable",
                                   "paused"})
#: States of a host in a run of failures (held, or between two tries).
FAILING: frozenset[str] = frozenset({"dns", "breaker", "robots-unreachable"})
#: A host whose URLs will never be claimed unless repaired.
LOST = "lost"
#: What an operator filters hosts by (the console's hosts page): URLs that may
#: be claimed now, that wait for a gate's time (delay, domain, address,
#: robots.txt), that wait on something slow (:data:`HELD`), a host parked
#: (its URLs dead letters until requeued), and nothing left.
GROUPS = ("queued", "waiting", "held", "parked", "finished")


def group_of(state: str) -> str:
    """The group of a host with queued URLs, from its state (``lua/leftover.lua``)."""
    if state == "ready":
        return "queued"
    return "held" if state in HELD or state == LOST else "waiting"
#: Hosts handed to one script call.
BATCH = 200


@dataclass(frozen=True, slots=True)
class HostLeft:
    """One host with queued URLs: its state (``lua/leftover.lua``), until when
    (server ms; -1 until an operator acts) and a detail (the DNS failure's kind
    and attempts, the domain or address it waits for...)."""

    host: str
    queued: int
    state: str
    until_ms: int
    detail: str
    #: In a run of failures (:data:`FAILING`): how long its current hold is (ms;
    #: -1 not known); else 0.
    hold_ms: int = 0

    @property
    def held(self) -> bool:
        return self.state in HELD


@dataclass(slots=True)
class Leftover:
    """A frontier's remaining work as one read found it."""

    server_ms: int
    counts: dict[str, int]
    hosts: list[HostLeft] = field(default_factory=list)
    #: When the earliest delayed URL (a retry) is due, None if none is.
    delayed_next_ms: int | None = None
    #: Partitions whose timer field a repairing read put right.
    timers_repaired: int = 0
    #: False when only the counts were read (``hosts`` is empty): the frontier
    #: was too large to scan in the time given.
    complete: bool = True
    #: URLs refused by reason, every worker's (:func:`crawler.frontier.refusals.by_reason`).
    refused: dict[str, int] = field(default_factory=dict)

    @property
    def account(self) -> Account:
        """The crawl's account as this read found it (what every view counts)."""
        return Account.of(self.counts, self.refused)

    @property
    def queued(self) -> int:
        return self.counts.get(Count.QUEUED, 0)

    @property
    def leased(self) -> int:
        return self.counts.get(Count.LEASED, 0)

    @property
    def delayed(self) -> int:
        return self.counts.get(Count.DELAYED, 0)

    def lost(self) -> list[HostLeft]:
        return [h for h in self.hosts if h.state == LOST]

    def held(self) -> list[HostLeft]:
        return [h for h in self.hosts if h.held]

    def held_by_state(self) -> dict[str, list[HostLeft]]:
        """The held hosts by state, the state with the most hosts first, and the
        longest wait first within each."""
        groups: dict[str, list[HostLeft]] = defaultdict(list)
        for h in self.held():
            groups[h.state].append(h)
        for hosts in groups.values():
            hosts.sort(key=lambda h: (h.until_ms < 0, h.until_ms), reverse=True)
        return dict(sorted(groups.items(), key=lambda kv: -len(kv[1])))

    def urls_by_state(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for h in self.hosts:
            counts[h.state] += h.queued
        return counts

    def only_held(self, bound_ms: int) -> bool:
        """True when URLs remain, nothing is leased, and every host left is held
        for longer than ``bound_ms``: by a run of failures whose hold is that
        long (its lookups, its breaker, its robots.txt), or by a server's
        Retry-After that ends later (not by an operator's pause: the crawl
        waits for the resume); and no delayed URL is due
        within ``bound_ms``. A run of failures is judged by the length of its
        current hold, not by what is left of it: between two tries its host
        is due soon and will most likely fail again, so the decision does not
        depend on the moment it is taken; a run of short holds (settings that
        retry within seconds) is waited for."""
        if self.leased or not (self.queued or self.delayed) or not self.complete:
            return False
        horizon = self.server_ms + bound_ms
        for h in self.hosts:
            if h.state in FAILING and not 0 <= h.hold_ms < bound_ms:
                continue
            if h.state == "retry-after" and h.until_ms > horizon:
                continue
            return False
        return self.delayed_next_ms is None or self.delayed_next_ms > horizon


class LeftoverReader:
    """Reads (and, for the watchdog, repairs) what is left in one frontier."""

    def __init__(self, client: Redis | RedisCluster, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        self._script = client.register_script(script_source("leftover"))

    async def read(self, *, repair: bool = False, grace_ms: int = 0) -> Leftover:
        """Every host with queued URLs and why it waits. ``repair``: put a lost
        host back where it belongs; ``grace_ms``: also wake now the hosts whose
        domain or address wake time passed longer ago than that (0: none)."""
        counts, delayed_next, server_ms, refused = await self._counts()
        left = Leftover(server_ms, counts, delayed_next_ms=delayed_next, refused=refused)
        if not counts.get(Count.QUEUED):
            return left
        by_part: dict[int, list[str]] = defaultdict(list)
        async for key in self.client.scan_iter(match=self.keys.queues_pattern(), count=1000):
            part, host = self.keys.queue_of(key)
            by_part[part].append(host.decode("utf-8", "replace"))
        calls: list[Call] = []
        batches: list[list[str]] = []
        for part, hosts in by_part.items():
            for i in range(0, len(hosts), BATCH):
                batch = hosts[i:i + BATCH]
                calls.append((self._script, [self.keys.counts(part)],
                              [self.keys.prefix(part), leftover_args(repair, grace_ms), *batch]))
                batches.append(batch)
        for batch, reply in zip(batches, await run_per_partition(self.client, calls),
                                strict=True):
            left.server_ms = int(reply[0])  # the scripts' clock (a test's, in tests)
            left.timers_repaired += int(reply[1])
            left.hosts += parse(batch, reply[2:])
        return left

    async def counts_only(self) -> Leftover:
        """The counts and the first delayed URL's time, without the hosts."""
        counts, delayed_next, server_ms, refused = await self._counts()
        return Leftover(server_ms, counts, delayed_next_ms=delayed_next, complete=False,
                        refused=refused)

    async def _counts(self) -> tuple[dict[str, int], int | None, int, dict[str, int]]:
        """The counts summed, the first delayed URL's time, the server's time
        and the refusals by reason."""
        async with self.client.pipeline(transaction=False) as pipe:
            for part in range(self.keys.partitions):
                pipe.hgetall(self.keys.counts(part))
                pipe.zrange(self.keys.delayed(part), 0, 0, withscores=True)
            pipe.hgetall(self.keys.refused())
            *replies, refused = await pipe.execute()
        counts: dict[str, int] = dict.fromkeys(STATES, 0)
        firsts = []
        for raw, first in zip(replies[0::2], replies[1::2], strict=True):
            add_counts(counts, raw)
            if first:
                firsts.append(int(first[0][1]))
        sec, usec = await self.client.time()
        return (counts, (min(firsts) if firsts else None), int(sec) * 1000 + int(usec) // 1000,
                by_reason(refused, counts))


def states_of(client: Any, keys: Keys, hosts: Iterable[str]) -> dict[str, HostLeft]:
    """Why each of ``hosts`` (host keys) waits, read now with a blocking client
    and nothing repaired: the console's hosts page (a host with nothing queued
    is left out)."""
    by_part: dict[int, list[str]] = defaultdict(list)
    for host in hosts:
        by_part[partition_of(host, keys.partitions)].append(host)
    script = client.register_script(script_source("leftover"))
    out: dict[str, HostLeft] = {}
    for part, names in by_part.items():
        for i in range(0, len(names), BATCH):
            batch = names[i:i + BATCH]
            reply = script(keys=[keys.counts(part)],
                           args=[keys.prefix(part), leftover_args(False, 0), *batch])
            out.update((h.host, h) for h in parse(batch, reply[2:]))
    return out


def parse(hosts: Iterable[str], reply: list[Any]) -> list[HostLeft]:
    """``lua/leftover.lua``'s answer for ``hosts`` (five values per host)."""
    out = []
    for i, host in enumerate(hosts):
        state, until, detail, queued, hold = reply[5 * i:5 * i + 5]
        out.append(HostLeft(host, int(queued), _text(state), int(until), _text(detail),
                            int(hold)))
    return [h for h in out if h.state != "empty"]


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


__all__ = ["FAILING", "GROUPS", "HELD", "LOST", "HostLeft", "Leftover", "LeftoverReader",
           "group_of"]
