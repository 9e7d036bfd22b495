"""Name resolution for the crawl: IPv4 and IPv6, given nameservers, failures by kind.

``TWISTED_DNS_RESOLVER = "crawler.dns.CrawlResolver"``. Scrapy builds it once
per process, before any crawler exists, and installs it with
``reactor.installNameResolver``, so every connection Twisted makes asks it:

- a direct request goes through ``HostnameEndpoint``, which asks
  ``reactor.nameResolver`` (this resolver) for every address of a name;
- an HTTPS request through a proxy opens its tunnel with ``connectTCP``, which
  calls ``reactor.resolve``; after ``installNameResolver`` that is Twisted's
  wrapper around this resolver, asking for IPv4 addresses only.

What it does, in order, for a name:

1. a literal address (``127.0.0.1``, ``::1``) is handed back as it is, no DNS
   (the URL middleware judged a URL's literal; a proxy's is the operator's);
2. a cached answer is used while its TTL runs (clamped to
   ``DNS_CACHE_MIN_TTL`` .. ``DNS_CACHE_MAX_TTL``; ``DNSCACHE_SIZE`` names at
   most, the least recently used go first);
3. otherwise one lookup, shared by every request that asks meanwhile: A and
   AAAA at once from ``DNS_NAMESERVERS`` through :mod:`twisted.names` (no
   ``/etc/hosts``, no system configuration, no fallback), or, with no
   nameservers set, the machine's resolver (``getaddrinfo`` in a thread, or
   the ``IResolverSimple`` named by ``ADDRESS_GUARD_RESOLVER``); within
   ``DNS_TIMEOUT`` seconds, retransmissions included;
4. an NXDOMAIN (or an answer without any address) is asked once more, from
   the next nameserver when there are several, before it stands: one lost
   or stale answer must not turn a whole host into dead letters;
5. every address is judged by the address guard
   (:meth:`~crawler.addressguard.AddressPolicy.check_ip` with
   ``resolved=True``); refused ones are dropped, and a name with nothing
   left fails as the guard's refusal (:class:`~crawler.resolver.
   BlockedAddressError`). Cached answers are judged again each time, so the
   address checked is the address connected to.

Failures are :class:`DNSFailure` subclasses, ``DNSLookupError`` s with a
``kind``: ``nxdomain``, ``nodata``, ``servfail``, ``timeout`` (and
``blocked`` for the guard's refusal). Twisted's endpoint reports any failed
resolution as a bare "no results" error, so the resolver remembers each name's
last failure (:meth:`CrawlResolver.failure`, bounded) for the layers above:
:mod:`crawler.middlewares.dns` makes a host outcome of it,
:mod:`crawler.middlewares.addressguard` a refusal. Whether the nameservers
answer at all (:meth:`CrawlResolver.nameservers_answer`: a question about the
root zone, every ``ALIVE_SECONDS`` at most) tells a failing name from a
nameserver outage, which must not count against every host of the crawl.

Every lookup, and every cache hit, is reported to :data:`RECORDER`, a
process-wide hub: the resolver belongs to the process, stats to a crawl, so
each crawl's :class:`~crawler.middlewares.dns.DNSStepMiddleware` subscribes
and counts them (``dns/lookups/<kind>``, ``dns/lookup_ms/max``).

Addresses are handed out IPv4 first: on a machine without IPv6 routes an
IPv6 address fails at once, but Twisted's endpoint waits 0.3 s before it
tries the next address, which every dual-stack host would cost. An
IPv6-only host has only IPv6 addresses and is crawled through them.

Private Twisted names used here: none. Public attributes set:
``twisted.names.dns.DNSDatagramProtocol.noisy`` (off: Twisted would log two
lines for every query's UDP port).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from scrapy.utils.misc import build_from_crawler, load_object
from twisted.internet import defer
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IHostnameResolver, IHostResolution
from twisted.internet.threads import deferToThreadPool
from twisted.names import client as names_client
from twisted.names import dns as names_dns
from twisted.names import error as names_error
from twisted.python.failure import Failure
from zope.interface import implementer

from crawler.addressguard import AddressPolicy, SeenOnce, normalise_host, parse_ip
from crawler.resolver import BlockedAddressError

if TYPE_CHECKING:
    from twisted.internet.interfaces import IAddress, IResolutionReceiver

logger = logging.getLogger(__name__)

#: Every result a lookup can have, as counted in ``dns/lookups/<result>``.
RESULTS = ("ok", "nxdomain", "nodata", "servfail", "timeout", "blocked")
#: Kinds that say the name has no address at all (confirmed once, then final).
PERMANENT = frozenset({"nxdomain", "nodata"})
#: CNAME links followed at most (a longer chain is a loop or a broken zone).
MAX_CNAME_HOPS = 8
#: How long the answer to "do the nameservers answer at all?" is trusted.
ALIVE_SECONDS = 10.0


# ---------------------------------------------------------------------- failures


class DNSFailure(DNSLookupError):
    """A lookup that found no address, and why (``kind``).

    A ``DNSLookupError``: Twisted's resolution wrappers pass only that kind of
    error on quietly (any other is logged with a traceback).
    """

    kind: ClassVar[str] = "servfail"

    def __init__(self, name: str, detail: str = "") -> None:
        super().__init__(f"{name}: {self.kind}" + (f" ({detail})" if detail else ""))
        self.name = name
        self.detail = detail


class NameNotFound(DNSFailure):
    """NXDOMAIN: the name does not exist (asked twice)."""

    kind = "nxdomain"


class NoAddress(DNSFailure):
    """The name exists but has no A or AAAA record (asked twice)."""

    kind = "nodata"


class ServerFailure(DNSFailure):
    """SERVFAIL, REFUSED, a malformed answer, or the system resolver's temporary failure."""

    kind = "servfail"


class LookupTimeout(DNSFailure):
    """No answer within ``DNS_TIMEOUT``."""

    kind = "timeout"


_BY_KIND: dict[str, type[DNSFailure]] = {
    cls.kind: cls for cls in (NameNotFound, NoAddress, ServerFailure, LookupTimeout)}


def failure_kind(failure: Failure | BaseException) -> str:
    """The kind of a failed query: what Twisted, the system or the inner resolver raised."""
    error = failure.value if isinstance(failure, Failure) else failure
    if isinstance(error, DNSFailure | BlockedAddressError):
        return error.kind
    if isinstance(error, names_error.DNSNameError):
        return "nxdomain"
    if isinstance(error, defer.TimeoutError | defer.CancelledError):
        return "timeout"
    if isinstance(error, socket.gaierror):
        return gai_kind(error.errno)
    return "servfail"


def gai_kind(code: int | None) -> str:
    """The kind of a ``getaddrinfo`` error (glibc says EAI_AGAIN for SERVFAIL and timeouts)."""
    if code == socket.EAI_NONAME:
        return "nxdomain"
    if code == getattr(socket, "EAI_NODATA", None):
        return "nodata"
    return "servfail"


# ---------------------------------------------------------------------- answers


@dataclass(frozen=True, slots=True)
class Answer:
    """The addresses a name resolved to, and how long they may be kept (None: unknown)."""

    addresses: tuple[str, ...]
    ttl: float | None = None


class Lookup(Protocol):
    """Asks some resolver for a name's addresses (the crawl resolver's backend)."""

    def lookup(self, name: str, confirm: bool = False) -> defer.Deferred[Answer]:
        """The addresses of ``name`` (``confirm``: a second opinion, from another
        server if there is one); fails with a :class:`DNSFailure`."""
        ...


def ordered(addresses: Sequence[str]) -> tuple[str, ...]:
    """Distinct addresses, IPv4 first (see the module docstring), else in the order given."""
    unique = list(dict.fromkeys(addresses))
    return tuple([a for a in unique if ":" not in a] + [a for a in unique if ":" in a])


def addresses_in(name: str, answers: Sequence[names_dns.RRHeader], qtype: int
                 ) -> tuple[list[str], int | None, str | None]:
    """The ``qtype`` addresses of ``name`` in an answer section, following its CNAMEs.

    Returns (addresses, smallest TTL of the records used, and the CNAME target
    still to be asked when the server gave the chain but not its end).
    """
    cnames = {_owner(rr): rr for rr in answers if rr.type == names_dns.CNAME}
    current, ttls, seen = name, [], {name}
    while current in cnames and len(seen) <= MAX_CNAME_HOPS:
        record = cnames[current]
        ttls.append(record.ttl)
        current = record.payload.name.name.decode("ascii", "replace").rstrip(".").lower()
        if current in seen:
            break  # a loop: no address at its end
        seen.add(current)
    found = [rr for rr in answers if rr.type == qtype and _owner(rr) == current]
    ttls += [rr.ttl for rr in found]
    addresses = [_address(rr) for rr in found]
    dangling = current if not addresses and current != name and current not in cnames else None
    return addresses, min(ttls) if ttls else None, dangling


def _owner(record: names_dns.RRHeader) -> str:
    return record.name.name.decode("ascii", "replace").rstrip(".").lower()


def _address(record: names_dns.RRHeader) -> str:
    if record.type == names_dns.A:
        return record.payload.dottedQuad()
    return socket.inet_ntop(socket.AF_INET6, record.payload.address)


def retry_timeouts(total: float) -> tuple[float, ...]:
    """Retransmission waits for one query that add up to ``total`` seconds: 1, 2, 4, ... s.

    A lost UDP datagram is asked again after a second, not after the whole
    timeout, and the waits grow so a slow server still gets its time.
    """
    waits: list[float] = []
    wait = min(1.0, total)
    while sum(waits) + wait < total - 1e-9:
        waits.append(wait)
        wait *= 2
    rest = round(total - sum(waits), 6)
    if rest > 0:
        waits.append(rest)
    return tuple(waits)


def parse_nameservers(entries: Sequence[str]) -> list[tuple[str, int]]:
    """``DNS_NAMESERVERS`` entries ("host", "host:port", "[v6]:port", "v6") as (address, port).

    Addresses only: a nameserver given by name would need a resolver to find it.
    A malformed entry raises ``ValueError``, so a typo stops the crawl
    instead of sending its lookups elsewhere.
    """
    servers = []
    for raw in entries:
        entry = str(raw).strip()
        host, port = entry, 53
        if entry.startswith("["):
            host, _, rest = entry[1:].partition("]")
            if rest:
                port = _port(rest.removeprefix(":"), entry)
        elif entry.count(":") == 1:
            host, _, text = entry.partition(":")
            port = _port(text, entry)
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"DNS_NAMESERVERS: {raw!r} is not an IP address "
                             "(optionally with :port)") from None
        servers.append((str(address), port))
    return servers


def _port(text: str, entry: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"DNS_NAMESERVERS: {entry!r} has no valid port")
    return int(text)


# ---------------------------------------------------------------------- backends


class NameserverLookup:
    """A and AAAA from the given nameservers, through :mod:`twisted.names`.

    ``client.Resolver(servers=...)`` reads no ``resolv.conf`` and no
    ``/etc/hosts`` (``createResolver`` would), so the machine's resolver is
    never asked. One client per starting server: the confirming lookup
    starts at the next one.
    """

    def __init__(self, reactor: Any, servers: Sequence[tuple[str, int]], timeout: float) -> None:
        if not servers:
            raise ValueError("NameserverLookup needs at least one nameserver")
        names_dns.DNSDatagramProtocol.noisy = False
        self.reactor = reactor
        self.servers = list(servers)
        self.timeout = timeout
        waits = retry_timeouts(timeout)
        rotations = [self.servers[i:] + self.servers[:i] for i in range(min(2, len(servers)))]
        self._clients = [names_client.Resolver(servers=r, timeout=waits, reactor=reactor)
                         for r in rotations]

    def lookup(self, name: str, confirm: bool = False) -> defer.Deferred[Answer]:
        resolver = self._clients[-1 if confirm else 0]
        asks = [self._ask(resolver, name, names_dns.A, MAX_CNAME_HOPS),
                self._ask(resolver, name, names_dns.AAAA, MAX_CNAME_HOPS)]
        d: defer.Deferred[Any] = defer.DeferredList(asks, consumeErrors=True)
        d.addCallback(_combine, name)
        d.addTimeout(self.timeout, self.reactor)
        return d.addErrback(_as_failure, name)

    def _ask(self, resolver: Any, name: str, qtype: int, hops: int
             ) -> defer.Deferred[tuple[list[str], int | None]]:
        query = resolver.lookupAddress if qtype == names_dns.A else resolver.lookupIPV6Address
        d = defer.maybeDeferred(query, name)  # no UDP port left raises at once

        def found(sections: tuple[list[Any], list[Any], list[Any]]) -> Any:
            addresses, ttl, dangling = addresses_in(name, sections[0], qtype)
            if dangling is None or hops <= 0:
                return addresses, ttl
            return self._ask(resolver, dangling, qtype, hops - 1).addCallback(
                lambda more: (more[0], _smallest(ttl, more[1])))

        return d.addCallback(found)

    def alive(self) -> defer.Deferred[bool]:
        """Whether the first nameserver answers at all: a question about the root zone.

        Any answer but SERVFAIL or REFUSED will do (a recursive resolver knows
        the root's servers, an authoritative one says NXDOMAIN or NOTIMP): it
        tells a dead or cut-off nameserver from a name of its that fails.
        """
        d = defer.maybeDeferred(self._clients[0].lookupNameservers, "")
        d.addTimeout(self.timeout, self.reactor)
        return d.addCallbacks(lambda _: True, _answered)


def _answered(failure: Failure) -> bool:
    error = failure.value
    return isinstance(error, names_error.DomainError) and not isinstance(
        error, names_error.DNSServerError | names_error.DNSQueryRefusedError)


def _smallest(*ttls: float | None) -> float | None:
    known = [t for t in ttls if t is not None]
    return min(known) if known else None


def _combine(results: list[tuple[bool, Any]], name: str) -> Answer:
    """One answer from the A and the AAAA query; when neither has an address, the
    failure that says most: NXDOMAIN (about the name itself), then a server
    failure, a timeout, and last "no address" (both answered, both empty)."""
    addresses: list[str] = []
    ttls: list[float | None] = []
    kinds: set[str] = set()
    details: list[str] = []
    for ok, value in results:
        if ok:
            addresses += value[0]
            if value[0]:
                ttls.append(value[1])
            else:
                kinds.add("nodata")
        else:
            kinds.add(failure_kind(value))
            details.append(type(value.value).__name__)
    if addresses:
        return Answer(ordered(addresses), _smallest(*ttls))
    for kind in ("nxdomain", "servfail", "timeout", "nodata"):
        if kind in kinds:
            raise _BY_KIND[kind](name, ", ".join(details))
    raise ServerFailure(name, "no answer")


def _as_failure(failure: Failure, name: str) -> Failure:
    """Any failure as a :class:`DNSFailure` (a timeout cancels a query: CancelledError)."""
    if isinstance(failure.value, DNSFailure):
        return failure
    kind = failure_kind(failure)
    return Failure(_BY_KIND.get(kind, ServerFailure)(name, type(failure.value).__name__))


class SystemLookup:
    """The machine's resolver: ``getaddrinfo`` in the reactor's thread pool, IPv4 and IPv6.

    ``AI_ADDRCONFIG``: no AAAA question on a machine without an IPv6 address.
    It says no TTL, so its answers are kept ``DNS_CACHE_MIN_TTL``.
    """

    def __init__(self, reactor: Any, timeout: float) -> None:
        self.reactor = reactor
        self.timeout = timeout

    def lookup(self, name: str, confirm: bool = False) -> defer.Deferred[Answer]:
        d = deferToThreadPool(self.reactor, self.reactor.getThreadPool(), self._resolve, name)
        d.addTimeout(self.timeout, self.reactor)
        return d.addErrback(_as_failure, name)

    def _resolve(self, name: str) -> Answer:
        infos = socket.getaddrinfo(name, None, socket.AF_UNSPEC, socket.SOCK_STREAM, 0,
                                   socket.AI_ADDRCONFIG)
        addresses = [info[4][0].partition("%")[0] for info in infos
                     if info[0] in (socket.AF_INET, socket.AF_INET6)]
        if not addresses:
            raise NoAddress(name)
        return Answer(ordered(addresses))


class SimpleLookup:
    """An ``IResolverSimple`` (``ADDRESS_GUARD_RESOLVER``): one IPv4 address, no TTL.

    Such a resolver reports every failure alike, so its failures count as
    ``servfail`` (held, then ``dns-failed``), or ``timeout``.
    """

    def __init__(self, inner: Any, timeout: float) -> None:
        if not callable(getattr(inner, "getHostByName", None)):
            raise TypeError(f"ADDRESS_GUARD_RESOLVER must be an IResolverSimple (with "
                            f"getHostByName), not {type(inner).__name__}")
        self.inner = inner
        self.timeout = timeout

    def lookup(self, name: str, confirm: bool = False) -> defer.Deferred[Answer]:
        d = defer.maybeDeferred(self.inner.getHostByName, name, (self.timeout,))
        d.addCallback(lambda address: Answer((address,)))
        return d.addErrback(_as_failure, name)


# ---------------------------------------------------------------------- the cache


class AnswerCache:
    """Answers by name for their TTL (clamped), the ``size`` most recently used.

    A floor, because a broad crawl asks for each of its hosts' names again and
    again and some names come with TTLs of a few seconds; a ceiling, because a
    crawl runs for days and a host that moved should be followed within it.
    Answers without a TTL (the system's resolver) are kept for the floor.
    """

    def __init__(self, size: int, min_ttl: float, max_ttl: float) -> None:
        self.size = size
        self.min_ttl = min_ttl
        self.max_ttl = max(max_ttl, min_ttl)
        self._entries: OrderedDict[str, tuple[float, tuple[str, ...]]] = OrderedDict()

    def get(self, name: str) -> tuple[str, ...] | None:
        entry = self._entries.get(name)
        if entry is None:
            return None
        if entry[0] <= time.monotonic():
            del self._entries[name]
            return None
        self._entries.move_to_end(name)
        return entry[1]

    def put(self, name: str, answer: Answer) -> None:
        ttl = self.min_ttl if answer.ttl is None else answer.ttl
        ttl = min(max(ttl, self.min_ttl), self.max_ttl)
        if self.size <= 0 or ttl <= 0:
            return
        self._entries[name] = (time.monotonic() + ttl, answer.addresses)
        self._entries.move_to_end(name)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


# ---------------------------------------------------------------------- the recorder


@dataclass(frozen=True, slots=True)
class LookupEvent:
    """One lookup: its name, result (:data:`RESULTS`, or "cached" for a cache hit),
    time and rounds."""

    name: str
    result: str
    seconds: float
    rounds: int = 1  # 2: an NXDOMAIN or no-address answer was asked again
    refused: int = 0  # addresses the address guard dropped


class LookupRecorder:
    """The process's lookups, for whoever counts them (each crawl's DNS middleware).

    The resolver exists before any crawl and outlives it, so it cannot hold a
    crawl's stats; crawls subscribe here instead. A listener that raises is
    logged, never breaks a lookup.
    """

    def __init__(self) -> None:
        self._listeners: list[Callable[[LookupEvent], None]] = []

    def subscribe(self, listener: Callable[[LookupEvent], None]) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[LookupEvent], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def record(self, event: LookupEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                logger.exception("DNS: a lookup listener failed")


#: The process-wide recorder the crawl resolver reports to.
RECORDER = LookupRecorder()


# ---------------------------------------------------------------------- the resolver


def allowed_addresses(policy: AddressPolicy, addresses: Sequence[str]
                      ) -> tuple[list[str], list[tuple[str, str]]]:
    """Split DNS answers into those the guard allows and the refused ones, with reasons."""
    allowed: list[str] = []
    refused: list[tuple[str, str]] = []
    for address in addresses:
        reason = policy.check_ip(address, resolved=True)
        if reason is None:
            allowed.append(address)
        else:
            refused.append((address, reason))
    return allowed, refused


@implementer(IHostResolution)
class _Resolution:
    def __init__(self, name: str) -> None:
        self.name = name

    def cancel(self) -> None:  # pragma: no cover - Twisted's endpoints never cancel one
        raise NotImplementedError("a lookup cannot be cancelled")


_installed: CrawlResolver | None = None


def installed_resolver() -> CrawlResolver | None:
    """The crawl resolver this process installed on its reactor, if any."""
    return _installed


@implementer(IHostnameResolver)
class CrawlResolver:
    """The crawler's ``IHostnameResolver`` (see the module docstring)."""

    def __init__(self, reactor: Any, lookup: Lookup, policy: AddressPolicy, cache: AnswerCache,
                 *, recorder: LookupRecorder = RECORDER, remember: int = 10_000) -> None:
        self.reactor = reactor
        self.lookup = lookup
        self.policy = policy
        self.cache = cache
        self.recorder = recorder
        self._remember = remember
        self._failures: OrderedDict[str, DNSLookupError] = OrderedDict()
        self._inflight: dict[str, list[defer.Deferred[Answer]]] = {}
        self._logged = SeenOnce(remember)
        self._alive: tuple[float, bool] | None = None  # (when asked, answered)
        self._alive_waiting: list[defer.Deferred[bool]] = []

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: Any) -> CrawlResolver:
        # ``crawler`` is the CrawlerProcess here (Scrapy builds the resolver
        # before any crawler): only its settings may be used.
        s = crawler.settings
        size = s.getint("DNSCACHE_SIZE", 100_000) if s.getbool("DNSCACHE_ENABLED", True) else 0
        cache = AnswerCache(size, s.getfloat("DNS_CACHE_MIN_TTL", 60.0),
                            s.getfloat("DNS_CACHE_MAX_TTL", 3600.0))
        return cls(reactor, build_lookup(crawler, reactor), AddressPolicy.from_settings(s), cache)

    def install_on_reactor(self) -> None:
        global _installed
        self.reactor.installNameResolver(self)
        _installed = self

    # ------------------------------------------------------------ IHostnameResolver

    def resolveHostName(self, resolutionReceiver: IResolutionReceiver, hostName: str,
                        portNumber: int = 0, addressTypes: Sequence[type[IAddress]] | None = None,
                        transportSemantics: str = "TCP") -> IHostResolution:
        resolution = _Resolution(hostName)
        resolutionReceiver.resolutionBegan(resolution)
        d = self.resolve(hostName)
        transport = "TCP" if transportSemantics == "TCP" else "UDP"
        d.addCallbacks(self._deliver, self._deliver_none,
                       callbackArgs=(resolutionReceiver, portNumber, addressTypes, transport),
                       errbackArgs=(resolutionReceiver,))
        d.addErrback(_log_unexpected)
        return resolution

    @staticmethod
    def _deliver(addresses: tuple[str, ...], receiver: IResolutionReceiver, port: int,
                 types: Sequence[type[IAddress]] | None, transport: str) -> None:
        for address in addresses:
            cls = IPv6Address if ":" in address else IPv4Address
            if types is None or cls in types:
                receiver.addressResolved(cls(transport, address, port))  # type: ignore[arg-type]
        receiver.resolutionComplete()

    @staticmethod
    def _deliver_none(failure: Failure, receiver: IResolutionReceiver) -> None:
        if not isinstance(failure.value, DNSLookupError):
            _log_unexpected(failure)
        receiver.resolutionComplete()  # no address: the endpoint fails with DNSLookupError

    # ------------------------------------------------------------ lookups

    def resolve(self, name: str) -> defer.Deferred[tuple[str, ...]]:
        """The addresses of ``name`` the guard allows, IPv4 first.

        Fails with a :class:`DNSFailure` or a :class:`~crawler.resolver.
        BlockedAddressError` (every address refused).
        """
        host = normalise_host(name)
        literal = parse_ip(host)
        if literal is not None:
            return defer.succeed((str(literal),))
        cached = self.cache.get(host)
        if cached is not None:
            self.recorder.record(LookupEvent(host, "cached", 0.0))
            return defer.maybeDeferred(self._judge, name, host, cached)
        return self._shared(host).addCallback(lambda answer: self._judge(name, host,
                                                                          answer.addresses))

    def nameservers_answer(self) -> defer.Deferred[bool]:
        """Whether the nameservers answer other questions (checked at most every
        ``ALIVE_SECONDS``; True when there is nothing to ask, the system's resolver).

        A name's SERVFAIL or timeout counts against its host only while they
        do: when the nameservers are down, every host fails alike, and none of
        them should be given up for it.
        """
        alive = getattr(self.lookup, "alive", None)
        if alive is None:
            return defer.succeed(True)
        now = time.monotonic()
        if self._alive is not None and now - self._alive[0] < ALIVE_SECONDS:
            return defer.succeed(self._alive[1])
        d: defer.Deferred[bool] = defer.Deferred()
        self._alive_waiting.append(d)
        if len(self._alive_waiting) == 1:
            defer.maybeDeferred(alive).addBoth(self._alive_known, now)
        return d

    def _alive_known(self, result: bool | Failure, asked: float) -> None:
        answers = result is True
        if not answers and (self._alive is None or self._alive[1]):
            logger.warning("DNS: the nameservers do not answer (a question about the root "
                           "zone failed); failed lookups do not count against hosts meanwhile")
        elif answers and self._alive is not None and not self._alive[1]:
            logger.warning("DNS: the nameservers answer again")
        self._alive = (asked, answers)
        waiting, self._alive_waiting = self._alive_waiting, []
        for d in waiting:
            d.callback(answers)

    def failure(self, host: str) -> DNSLookupError | None:
        """The error of the last lookup of ``host`` if it failed (forgotten when one succeeds)."""
        return self._failures.get(normalise_host(host))

    def blocked(self, host: str) -> BlockedAddressError | None:
        """The guard's refusal of the last lookup of ``host``, else ``None`` (as
        :meth:`crawler.resolver.GuardedResolver.blocked`)."""
        error = self.failure(host)
        return error if isinstance(error, BlockedAddressError) else None

    def _shared(self, host: str) -> defer.Deferred[Answer]:
        """One lookup per name at a time: those who ask meanwhile wait for the same answer."""
        d: defer.Deferred[Answer] = defer.Deferred()
        waiting = self._inflight.get(host)
        if waiting is not None:
            waiting.append(d)
            return d
        self._inflight[host] = [d]
        started = time.monotonic()
        rounds = [1]
        first = defer.maybeDeferred(self.lookup.lookup, host)
        first.addErrback(self._confirm, host, rounds)
        first.addBoth(self._looked_up, host, started, rounds)
        return d

    def _confirm(self, failure: Failure, host: str, rounds: list[int]) -> Any:
        """An NXDOMAIN or an empty answer is asked once more, bypassing the cache."""
        if failure_kind(failure) not in PERMANENT:
            return failure
        rounds[0] = 2
        return defer.maybeDeferred(self.lookup.lookup, host, confirm=True)

    def _looked_up(self, result: Answer | Failure, host: str, started: float,
                   rounds: list[int]) -> None:
        waiting = self._inflight.pop(host, [])
        if isinstance(result, Failure):
            if not isinstance(result.value, DNSFailure):
                result = _as_failure(result, host)
            self._note(host, result.value)
            kind, refused = result.value.kind, 0
        else:
            self.cache.put(host, result)
            kind, refused = "ok", 0
            if self.policy.enabled and not self.policy.host_trusted(host):
                allowed, refused_list = allowed_addresses(self.policy, result.addresses)
                kind = "ok" if allowed else "blocked"
                refused = len(refused_list)
        self.recorder.record(LookupEvent(host, kind, time.monotonic() - started, rounds[0],
                                         refused))
        for d in waiting:
            if isinstance(result, Failure):
                d.errback(result)
            else:
                d.callback(result)

    def _judge(self, name: str, host: str, addresses: tuple[str, ...]) -> tuple[str, ...]:
        """The addresses the guard allows; all refused: :class:`BlockedAddressError`."""
        if not self.policy.enabled or self.policy.host_trusted(host):
            self._note(host, None)
            return addresses
        allowed, refused = allowed_addresses(self.policy, addresses)
        if allowed:
            self._note(host, None)
            if refused and self._logged.first(host):
                logger.info("Address guard: %s also resolves to %s, not used", name,
                            ", ".join(f"{a} ({r})" for a, r in refused),
                            extra={"host": host, "refused": [a for a, _ in refused]})
            return tuple(allowed)
        address, reason = refused[0]
        error = BlockedAddressError(name, address, reason)
        self._note(host, error)
        if self._logged.first(host):
            logger.info("Address guard: %s resolves to %s, not connecting", name,
                        ", ".join(f"{a} ({r})" for a, r in refused),
                        extra={"host": host, "address": address, "reason": reason})
        raise error

    def _note(self, host: str, error: DNSLookupError | None) -> None:
        if error is None:
            self._failures.pop(host, None)
            return
        self._failures[host] = error
        self._failures.move_to_end(host)
        while len(self._failures) > self._remember:
            self._failures.popitem(last=False)


def _log_unexpected(failure: Failure) -> None:
    logger.error("DNS: resolution failed unexpectedly",
                 exc_info=(failure.type, failure.value, failure.getTracebackObject()))


def _list_setting(settings: Any, name: str) -> list[str]:
    """A list setting, also when given on the command line as JSON
    (``-s 'DNS_NAMESERVERS=["10.0.0.53"]'``) rather than comma-separated."""
    value = settings.get(name)
    if isinstance(value, str) and value.strip().startswith('["'):
        try:
            decoded = json.loads(value)
        except ValueError:
            decoded = None
        if isinstance(decoded, list):
            return [str(v) for v in decoded]
    return settings.getlist(name)


def build_lookup(crawler: Any, reactor: Any) -> Lookup:
    """The backend the settings ask for: ``DNS_NAMESERVERS``, else ``ADDRESS_GUARD_RESOLVER``,
    else the system's resolver."""
    s = crawler.settings
    timeout = s.getfloat("DNS_TIMEOUT", 5.0)
    servers = parse_nameservers(_list_setting(s, "DNS_NAMESERVERS"))
    if servers:
        return NameserverLookup(reactor, servers, timeout)
    inner_path = s.get("ADDRESS_GUARD_RESOLVER")
    if not inner_path:
        return SystemLookup(reactor, timeout)
    inner_cls = load_object(inner_path)
    if isinstance(inner_cls, type) and issubclass(inner_cls, CrawlResolver):
        raise ValueError("ADDRESS_GUARD_RESOLVER names the crawl resolver itself; name an "
                         "IResolverSimple, or leave it empty for the system's resolver")
    return SimpleLookup(build_from_crawler(inner_cls, crawler, reactor=reactor), timeout)


__all__ = [
    "PERMANENT", "RECORDER", "RESULTS", "Answer", "AnswerCache", "CrawlResolver", "DNSFailure",
    "LookupEvent", "LookupRecorder", "LookupTimeout", "NameNotFound", "NameserverLookup",
    "NoAddress", "ServerFailure", "SimpleLookup", "SystemLookup", "addresses_in",
    "allowed_addresses", "failure_kind", "gai_kind", "installed_resolver",
    "ordered", "parse_nameservers", "retry_timeouts",
]
