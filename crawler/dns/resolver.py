"""The crawl resolver: literal, cache, one shared lookup, a confirmation, the address guard.

:class:`CrawlResolver` is what ``TWISTED_DNS_RESOLVER`` names; the order in
which it answers a name is in :mod:`crawler.dns`. Twisted's endpoint reports
any failed resolution as a bare "no results" error, so the resolver remembers
each name's last failure (:meth:`CrawlResolver.failure`, bounded) for the
layers above, and tells a failing name from a nameserver outage
(:meth:`CrawlResolver.nameservers_answer`).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IHostnameResolver, IHostResolution
from twisted.python.failure import Failure
from zope.interface import implementer

from crawler.addressguard import AddressPolicy, SeenOnce, normalise_host, parse_ip
from crawler.dns.answers import Answer
from crawler.dns.cache import AnswerCache
from crawler.dns.events import RECORDER, LookupEvent, LookupRecorder
from crawler.dns.failures import PERMANENT, DNSFailure, as_failure, failure_kind
from crawler.dns.lookups import Lookup, build_lookup
from crawler.resolver import BlockedAddressError

if TYPE_CHECKING:
    from twisted.internet.interfaces import IAddress, IResolutionReceiver

logger = logging.getLogger(__name__)

#: How long the answer to "do the nameservers answer at all?" is trusted.
ALIVE_SECONDS = 10.0


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
    """The crawler's ``IHostnameResolver`` (what it does, in order: :mod:`crawler.dns`)."""

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

    def known_for(self, name: str) -> float:
        """How long (s) the addresses :meth:`resolve` just gave for ``name`` hold:
        the rest of their cached TTL; an address literal's, for ever."""
        host = normalise_host(name)
        if parse_ip(host) is not None:
            return float("inf")
        return self.cache.remaining(host)

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
                result = as_failure(result, host)
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


__all__ = ["ALIVE_SECONDS", "CrawlResolver", "allowed_addresses", "installed_resolver"]
