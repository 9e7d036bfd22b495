"""A worker's side of the IP scope: which address a request connects to, its
gate, and waking the hosts parked for it.

The gates themselves are :mod:`crawler.frontier.ipgates`. The address gated is
the first of the name's answer from the crawl resolver (IPv4 first): the one
Twisted's endpoint connects to first, and to which every request goes while
that server answers. A request sent through a proxy, or a crawl without the
crawl resolver (no answer to look at), is not gated.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from redis.exceptions import RedisError
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.error import DNSLookupError

from crawler.addressguard import normalise_host
from crawler.dns.resolver import installed_resolver
from crawler.frontier.ipgates import FULL, NO_ADDRESS, DnsNote, IpGates, IpTurn, Wake
from crawler.frontier.store import Frontier
from crawler.lease import AddressPlace
from crawler.proxies import ProxyRoutes
from crawler.scheduling.health import RedisHealth
from crawler.scheduling.ipplaces import KeptPlaces
from crawler.scheduling.tasks import Tasks

if TYPE_CHECKING:
    from crawler.scheduling.dnsoutcomes import DnsOutcomes

logger = logging.getLogger(__name__)

#: A host parked for its address is known to point there this long at most
#: (ms) when the answer's TTL is not known (a literal address: a day).
_KNOWN_MAX_MS = 86_400_000
#: ... and at least this long: an answer about to leave the resolver's cache
#: would otherwise have the name looked up again at once.
_KNOWN_MIN_MS = 10_000
#: DNS jobs' answers are handed to the frontier this many at a time.
_NOTE_BATCH = 16
#: A host whose name did not resolve (its download will meet that) is looked
#: at again after this long; one a proxy connects, after a day.
_UNGATED_MS = 60_000
#: A server address whose next turn is at most this far off (ms) is waited
#: for in place; a longer wait parks the host instead.
WAIT_IN_PLACE_MS = 250
#: Wakes asked for again when the hosts woken were no longer parked.
_WAKE_TRIES = 3


class ServerAddress:
    """A request's server address, and how long (ms) it is known to be that."""

    __slots__ = ("address", "known_ms")

    def __init__(self, address: str, known_ms: int) -> None:
        self.address = address
        self.known_ms = known_ms


class IpScope:
    """The IP scope for one worker (see the module docstring)."""

    def __init__(self, gates: IpGates, dns: DnsOutcomes, store: Frontier, proxies: ProxyRoutes,
                 stats: Any, health: RedisHealth, tasks: Tasks,
                 claim_now: Callable[[], None]) -> None:
        self.gates = gates
        self.dns = dns
        self.store = store
        self.proxies = proxies
        self.stats = stats
        self.health = health
        self.tasks = tasks
        #: Hosts were woken or joined: claim at once.
        self.claim_now = claim_now
        self._robots: dict[str, str] = {}  # host -> the address its robots.txt job holds
        #: Places this worker's requests ended with, kept for its next request
        #: to the same address (``scheduling/ipplaces.py``).
        self.kept = KeptPlaces(self._give_back)

    @property
    def on(self) -> bool:
        return self.gates.on

    def gated(self, host: str) -> bool:
        """Whether requests to the host key ``host`` go through the IP scope: not
        when a proxy connects them, nor without the crawl resolver's answers."""
        name = normalise_host(urlsplit(host).hostname or "")
        return (installed_resolver() is not None and bool(name)
                and not self.proxies.proxied(host, name))

    async def address_of(self, host: str) -> ServerAddress | None:
        """The address a request to the host key ``host`` connects to (None: not
        gated). A failed lookup raises the resolver's DNSLookupError: the
        request meets it here rather than again when it connects."""
        resolver = installed_resolver()
        if resolver is None or not self.gated(host):
            return None
        name = normalise_host(urlsplit(host).hostname or "")
        addresses = await maybe_deferred_to_future(resolver.resolve(name))
        if not addresses:
            return None
        known = resolver.known_for(name)
        known_ms = _KNOWN_MAX_MS if math.isinf(known) else min(round(known * 1000), _KNOWN_MAX_MS)
        return ServerAddress(addresses[0], known_ms)

    async def take(self, server: ServerAddress, member: str, host: str, *,
                   earlier: int | None = None, in_place_ms: int = 0) -> IpTurn:
        """The address's gate for one request (see :meth:`IpGates.take`)."""
        part = self.store.partition(host)
        turn = await self.gates.take(server.address, member, part, host,
                                     earlier=earlier, in_place_ms=in_place_ms)
        if turn.wait_ms != 0:
            self.stats.inc_value("frontier/ip/refused" if turn.wait_ms < 0 or
                                 turn.wait_ms > in_place_ms else "frontier/ip/waits")
        return turn

    async def robots_turn(self, host: str, in_place_ms: int) -> int:
        """A place at the server's address for a robots.txt fetch of ``host``: 0
        (taken, or not gated), the ms to wait in place before asking again, or
        -1: not now (the address has no room, or is paused: the job is given
        back and its host parked for the address, as a page's would be).
        """
        try:
            server = await self.address_of(host)
        except DNSLookupError:
            return 0  # its fetch meets the failure (the DNS step resolved it just now)
        if server is None:
            return 0
        turn = await self.take(server, robots_member(host), host, in_place_ms=in_place_ms)
        frontier = self.store
        if turn.wait_ms == 0:
            self._robots[host] = server.address
            return 0
        if turn.wait_ms > 0 and turn.wait_ms <= in_place_ms:
            return turn.wait_ms
        await self.gates.park_robots_job(frontier.partition(host), host, server.address,
                                         self.wake_ms(turn), server.known_ms)
        self.stats.inc_value("robots/jobs_parked_for_ip")
        return -1

    def wake_ms(self, turn: IpTurn) -> int:
        """When a host parked after ``turn`` (a refusal) is looked at at the latest:
        its turn; for a full address (which wakes it when a request ends) when
        its first place in flight runs out, if sooner than the fallback (a
        dead worker's places end so, and no end wakes anyone); for a paused
        one (woken by the resume) the fallback. Spread, so that hosts parked
        together do not all come back at once."""
        if turn.wait_ms > 0:
            return turn.wait_ms
        fallback = self.fallback_ms()
        if turn.wait_ms == FULL and turn.turn > 0:
            return min(fallback, turn.turn + round(random.uniform(50, 500)))
        return fallback

    def fallback_ms(self) -> int:
        """How long a parked host waits at most for its wake (spread)."""
        return round(self.gates.limits.ip_fallback_ms * random.uniform(1, 1.5))

    def robots_done(self, host: str) -> None:
        """The robots.txt fetch of ``host`` is over: its place is free."""
        address = self._robots.pop(host, None)
        if address is not None:
            self.ended(address, robots_member(host))

    def kept_place(self, address: str) -> AddressPlace | None:
        """A place this worker kept at ``address`` to start a request in now
        (None: none, the request asks the gate)."""
        place = self.kept.reuse(address)
        if place is not None:
            self.stats.inc_value("frontier/ip/places_reused")
        return place

    def free(self, place: AddressPlace) -> None:
        """A request that held ``place`` is over: the place is kept for the
        worker's next request to its address when the gate gave it with half
        the address's places free or more and no delay, else given back."""
        if not (place.spare and place.turn == 0 and self.kept.keep(place)):
            self.ended(place.address, place.member)

    def ended(self, address: str, member: str) -> None:
        """A request that passed the address's gate is over (in the background)."""
        self._give_back(address, [member])

    def _give_back(self, address: str, members: list[str]) -> None:
        self.tasks.spawn(self._ended(address, members))

    async def close(self) -> None:
        """Give back the places this worker kept (it closes)."""
        for address, members in self.kept.take_all().items():
            await self._ended(address, members)

    async def _ended(self, address: str, members: list[str]) -> None:
        try:
            wakes = await self.gates.end(address, members)
            await self._wake(address, wakes)
        except (RedisError, OSError) as exc:
            # The slot runs out with its lease; a parked host wakes at its own time.
            self.stats.inc_value("frontier/redis_errors")
            logger.debug("IP scope: ending a request on %s failed: %s", address, exc)

    async def _wake(self, address: str, wakes: list[Wake]) -> None:
        for _ in range(_WAKE_TRIES):
            if not wakes:
                return
            missed = await self.gates.wake(address, wakes)
            self.stats.inc_value("frontier/ip/woken", len(wakes) - len(missed))
            if len(missed) < len(wakes):
                self.claim_now()
            if not missed:
                return
            wakes = await self.gates.end(address)

    def look_up(self, hosts: list[str]) -> None:
        """DNS jobs a claim handed out: in the background."""
        self.tasks.spawn(self._look_up(hosts))

    async def _look_up(self, hosts: list[str]) -> None:
        """Resolve the hosts' names, join each to its address (first come, first
        served) and tell the frontier: those the address has room for are
        claimed next, the others wait parked. Answers are handled as they come,
        a few at a time, so a quick name is not held up by slow ones. A job
        that fails here runs out and is handed out again."""

        async def one(host: str) -> tuple[str, ServerAddress | None]:
            try:
                return host, await self.address_of(host)
            except DNSLookupError as failure:
                # The host's first contact failed: a DNS outcome (a hold, or
                # dead letters), as its first request's would be.
                await self.dns.name_failed(host, failure)
                return host, None

        done: list[tuple[str, ServerAddress | None]] = []
        try:
            for found in asyncio.as_completed([one(host) for host in hosts]):
                done.append(await found)
                if len(done) >= _NOTE_BATCH:
                    await self._join_and_note(done)
                    done = []
            if done:
                await self._join_and_note(done)
        except (RedisError, OSError) as exc:
            self.health.trouble(exc)

    async def _join_and_note(self, found: list[tuple[str, ServerAddress | None]]) -> None:
        frontier = self.store
        by_address: dict[str, list[tuple[str, ServerAddress]]] = defaultdict(list)
        notes: dict[int, list[DnsNote]] = defaultdict(list)
        for host, server in found:
            if server is None:
                again = _UNGATED_MS if self.gated(host) else _KNOWN_MAX_MS
                notes[frontier.partition(host)].append(DnsNote(host, NO_ADDRESS, again, go=True))
            else:
                by_address[server.address].append((host, server))
        wakes: dict[str, list[Wake]] = {}
        for address, members in by_address.items():
            joined = await self.gates.join(
                address, [(frontier.partition(host), host) for host, _ in members])
            wakes[address] = joined.wakes
            for (host, server), go in zip(members, joined.go, strict=True):
                notes[frontier.partition(host)].append(DnsNote(
                    host, address, max(server.known_ms, _KNOWN_MIN_MS), go,
                    self.fallback_ms()))
        parked = 0
        for part, part_notes in notes.items():
            parked += await self.gates.note(part, part_notes)
        for address, woken in wakes.items():  # after the notes: a woken host is parked
            await self._wake(address, woken)
        self.stats.inc_value("frontier/ip/dns_jobs", len(found))
        if parked:
            self.stats.inc_value("frontier/ip/parked_at_dns", parked)
        self.claim_now()

    def joined(self, waits: list[tuple[str, str]], server_ms: int) -> None:
        """Hosts a claim parked behind others of their address: into its queue."""
        self.tasks.spawn(self._joined(waits, server_ms))

    async def _joined(self, waits: list[tuple[str, str]], server_ms: int) -> None:
        """Queue them at their addresses; one the address has room for after all
        (its parked neighbours are about to be woken) comes back at once."""
        frontier = self.store
        by_address: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for host, address in waits:
            by_address[address].append((frontier.partition(host), host))
        try:
            for address, hosts in by_address.items():
                joined = await self.gates.join(address, hosts)
                back = [Wake(part, host, server_ms)
                        for (part, host), ok in zip(hosts, joined.go, strict=True) if ok]
                await self._wake(address, back + joined.wakes)
        except (RedisError, OSError):
            self.stats.inc_value("frontier/redis_errors")  # they wake at their own time
        self.stats.inc_value("frontier/ip/joined", len(waits))


def robots_member(host: str) -> str:
    """How an address's gate names a robots.txt fetch of ``host``."""
    return "R" + host


__all__ = ["WAIT_IN_PLACE_MS", "IpScope", "ServerAddress", "robots_member"]
