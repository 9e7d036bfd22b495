"""The IP scope's gates: politeness per server address, across names and partitions.

Thousands of names can point at one server (shared hosting, a CDN edge,
wildcard subdomains), so a crawl polite to every name can still hammer the
machine behind them. Each address a crawl connects to gets a gate
(``FRONTIER_IP_CONCURRENCY`` requests in flight, starts ``FRONTIER_IP_DELAY``
apart) for every worker.

The names of one address live in any partition, so its gate cannot live in
theirs: it has a slot of its own (``{ns/ip/ADDR}``, :mod:`crawler.frontier.keys`)
and is taken in a second step, after the site and domain gates
(``lua/start.lua``), the last moment before a connection. A request the
address has no room for is not kept waiting in its worker: its host is
parked in its partition (the release's ``ipwait``) and joins the address's
queue of waiting hosts; the end of a request on the address wakes the next
ones there (:meth:`IpGates.end`). Each step touches one slot, so the scope
works the same on one Redis and on a Cluster; a wake lost between the two
steps (a worker killed) is made up by the parked host's own time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any, NamedTuple

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from crawler.frontier.keys import Keys
from crawler.frontier.partitiondue import PartitionDue
from crawler.frontier.scriptargs import (
    ip_limits,
    ipgate_args,
    ipnote_item,
    ippark_args,
    ipwake_item,
)
from crawler.frontier.store import script_source
from crawler.frontier.values import Limits

#: What the gate answers for an address with as many requests in flight as
#: its concurrency, and for one paused by an operator.
FULL = -2
PAUSED = -1
#: How long a place the address reserved for a woken (or newly joined) host
#: holds: time enough for the host to be claimed and reach the gate.
RESERVED_MS = 5_000
#: What a DNS job notes for a site whose requests are not gated (a proxy
#: connects them, or the name did not resolve).
NO_ADDRESS = "-"


class IpTurn(NamedTuple):
    """The gate's answer: start now (``wait_ms`` 0, owning ``turn``; ``spare``:
    at most half the address's places are taken, this one included), wait
    ``wait_ms`` (in place, or parked that long), or :data:`FULL` / :data:`PAUSED`."""

    wait_ms: int
    turn: int = 0
    spare: bool = False


class DnsNote(NamedTuple):
    """What a DNS job found for a host: its server address (:data:`NO_ADDRESS`:
    none to gate), for how long, and whether it may go now or waits (parked,
    looked at again after ``wake_ms`` at the latest)."""

    host: str
    address: str
    known_ms: int
    go: bool
    wake_ms: int = 0


class Wake(NamedTuple):
    """A parked host the address has room for, and from when it may start."""

    partition: int
    host: str
    at_ms: int


class Joined(NamedTuple):
    """What joining hosts to an address's queue did: per host, whether it may go
    now; and the hosts that waited before them and now have room, to wake."""

    go: list[bool]
    wakes: list[Wake]


def waiter(partition: int, host: str) -> str:
    """How the address's queue names a waiting host."""
    return f"{partition}\n{host}"


def gate_keys(keys: Keys, address: str) -> list[str]:
    """The keys every script of one address's gate takes."""
    return [keys.ip_gate(address), keys.ip_in_flight(address), keys.ip_waiting(address),
            keys.ip_reserved(address)]


def end_args(limits: Limits, members: Iterable[str]) -> list[Any]:
    """``lua/ipend.lua``'s arguments: its limits by name, then the members."""
    return [ip_limits(limits, RESERVED_MS), *members]


def wake_calls(keys: Keys, address: str, wakes: Iterable[Wake]
               ) -> list[tuple[list[Wake], list[str], list[Any]]]:
    """``lua/ipwake.lua`` calls, one per partition: (its wakes, keys, args)."""
    groups: dict[int, list[Wake]] = defaultdict(list)
    for w in wakes:
        groups[w.partition].append(w)
    calls = []
    for part, group in groups.items():
        args = [keys.prefix(part), *(ipwake_item(address, w.host, w.at_ms) for w in group)]
        calls.append((group, [keys.counts(part)], args))
    return calls


def missed(group: list[Wake], reply: list[Any]) -> list[Wake]:
    """The wakes of one ``lua/ipwake.lua`` call whose host was no longer parked."""
    return [w for w, woken in zip(group, reply, strict=True) if not int(woken)]


def parse_wakes(reply: list[Any]) -> list[Wake]:
    """``lua/ipend.lua``'s answer."""
    wakes = []
    for i in range(0, len(reply), 2):
        part, _, host = reply[i + 1].decode().partition("\n")
        wakes.append(Wake(int(part), host, int(reply[i])))
    return wakes


class IpGates:
    """The gates of the server addresses of one frontier (namespace)."""

    def __init__(self, client: Redis | RedisCluster, keys: Keys, limits: Limits,
                 due: PartitionDue | None = None) -> None:
        self.client = client
        self.keys = keys
        self.limits = limits
        #: The worker's frontier's: a woken host, a noted address may make a
        #: partition's host ready.
        self.due = due
        self._gate = client.register_script(script_source("ipgate"))
        self._end = client.register_script(script_source("ipend"))
        self._wake = client.register_script(script_source("ipwake"))
        self._park = client.register_script(script_source("ippark"))
        self._join = client.register_script(script_source("ipjoin"))
        self._note = client.register_script(script_source("ipnote"))

    @property
    def on(self) -> bool:
        return self.limits.ip_concurrency > 0 or self.limits.ip_delay_ms > 0

    async def take(self, address: str, member: str, partition: int, host: str, *,
                   earlier: int | None = None, in_place_ms: int = 0) -> IpTurn:
        """Ask the address's gate for a start now (``member``: the request's lease
        token, or ``"R" + host`` for a robots.txt); see ``lua/ipgate.lua``."""
        reply = await self._gate(
            keys=gate_keys(self.keys, address),
            args=[ipgate_args(self.limits, member, waiter(partition, host), earlier,
                              in_place_ms)])
        return IpTurn(int(reply[0]), int(reply[1]), len(reply) > 2 and bool(int(reply[2])))

    async def end(self, address: str, members: Iterable[str] = ()) -> list[Wake]:
        """Requests on ``address`` ended (none: just look for room); the parked
        hosts to wake now, in the order the address's queue had them."""
        reply = await self._end(keys=gate_keys(self.keys, address),
                                args=end_args(self.limits, members))
        return parse_wakes(reply)

    async def wake(self, address: str, wakes: Iterable[Wake]) -> list[Wake]:
        """Wake parked hosts in their partitions; returns those that were not parked
        any more (woken by their own time already: the address may have room
        for someone else)."""
        out = []
        for group, keys, args in wake_calls(self.keys, address, wakes):
            out += missed(group, await self._wake(keys=keys, args=args))
            self._touch(group[0].partition)
        return out

    def _touch(self, partition: int) -> None:
        if self.due is not None:
            self.due.touch(partition)

    async def park_robots_job(self, partition: int, host: str, address: str, wake_ms: int,
                              known_ms: int) -> bool:
        """Give a robots.txt job back unfetched and park its host for ``address``
        (``lua/ippark.lua``); False if the host is gone."""
        return bool(await self._park(keys=[self.keys.counts(partition)],
                                     args=[self.keys.prefix(partition),
                                           ippark_args(host, address, wake_ms, known_ms)]))

    async def join(self, address: str, hosts: list[tuple[int, str]]) -> Joined:
        """Hosts new to ``address`` (partition, host): which may go now (a place
        reserved), the others wait in its queue; and the waiting hosts the
        address had room for, which the caller wakes (``lua/ipjoin.lua``)."""
        reply = await self._join(
            keys=gate_keys(self.keys, address),
            args=[ip_limits(self.limits, RESERVED_MS),
                  *(waiter(part, host) for part, host in hosts)])
        return Joined([bool(int(x)) for x in reply[:len(hosts)]],
                      parse_wakes(reply[len(hosts):]))

    async def note(self, partition: int, notes: Iterable[DnsNote]) -> int:
        """The outcome of DNS jobs of one partition (``lua/ipnote.lua``): how many
        hosts were parked."""
        args = [self.keys.prefix(partition), *(ipnote_item(n) for n in notes)]
        parked = int(await self._note(keys=[self.keys.counts(partition)], args=args))
        self._touch(partition)
        return parked
