"""The crawl resolver's backends: given nameservers, the system's resolver, an IResolverSimple.

Each is a :class:`Lookup`: one lookup of a name's addresses, which fails with
the :class:`~crawler.dns.failures.DNSFailure` of its kind; caching, sharing
lookups and confirming a failure are the resolver's. :func:`build_lookup`
picks the one the settings ask for.

Private Twisted names used here: none. Public attributes set:
``twisted.names.dns.DNSDatagramProtocol.noisy`` (off: Twisted would log two
lines for every query's UDP port).
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Sequence
from typing import Any, Protocol

from scrapy.utils.misc import build_from_crawler, load_object
from twisted.internet import defer
from twisted.internet.threads import deferToThreadPool
from twisted.names import client as names_client
from twisted.names import dns as names_dns
from twisted.names import error as names_error
from twisted.python.failure import Failure

from crawler.dns.answers import MAX_CNAME_HOPS, Answer, addresses_in, ordered
from crawler.dns.failures import NoAddress, ServerFailure, as_failure, failure_for, failure_kind


class Lookup(Protocol):
    """Asks some resolver for a name's addresses (the crawl resolver's backend)."""

    def lookup(self, name: str, confirm: bool = False) -> defer.Deferred[Answer]:
        """The addresses of ``name`` (``confirm``: a second opinion, from another
        server if there is one); fails with a :class:`~crawler.dns.failures.DNSFailure`."""
        ...


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
        return d.addErrback(as_failure, name)

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
            raise failure_for(kind, name, ", ".join(details))
    raise ServerFailure(name, "no answer")


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
        return d.addErrback(as_failure, name)

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
        return d.addErrback(as_failure, name)


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
    from crawler.dns.resolver import CrawlResolver  # not at the top: it imports this module
    if isinstance(inner_cls, type) and issubclass(inner_cls, CrawlResolver):
        raise ValueError("ADDRESS_GUARD_RESOLVER names the crawl resolver itself; name an "
                         "IResolverSimple, or leave it empty for the system's resolver")
    return SimpleLookup(build_from_crawler(inner_cls, crawler, reactor=reactor), timeout)


__all__ = [
    "Lookup", "NameserverLookup", "SimpleLookup", "SystemLookup", "build_lookup",
    "parse_nameservers", "retry_timeouts",
]
