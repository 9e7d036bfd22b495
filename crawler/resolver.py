"""The after-DNS half of the address guard: a resolver that refuses non-public answers.

The crawler's default resolver is now :class:`crawler.dns.CrawlResolver`,
which checks every answer itself (IPv4 and IPv6, given nameservers, failures
by kind); :class:`BlockedAddressError` is its refusal too. This module's
:class:`GuardedResolver`, an ``IResolverSimple`` around another one (IPv4
only), stays for a project that sets ``TWISTED_DNS_RESOLVER`` to it. What is
checked where (below) holds for both.

A URL's host name says nothing about where it points: ``db.attacker.example``
may resolve to 10.0.0.5 and ``127.0.0.1.nip.io`` to 127.0.0.1. So the
address a connection will use must be checked after DNS. Scrapy 2.19's HTTP
handlers (``http11``, the default, and ``http2``) and the FTP handler connect
through Twisted, which asks the reactor's installed resolver:

- a direct request goes through ``HostnameEndpoint``, which asks
  ``reactor.nameResolver``; after ``reactor.installResolver(r)`` that is a
  wrapper that calls ``r.getHostByName`` (``SimpleResolverComplexifier``);
- an HTTPS request through a proxy opens its tunnel with ``connectTCP``, which
  calls ``reactor.resolve`` and so ``getHostByName`` for the proxy's name.

``TWISTED_DNS_RESOLVER`` chooses that resolver (Scrapy's default:
``CachingThreadedResolver``, an ``IResolverSimple``, IPv4 only). Setting it to
:class:`GuardedResolver` puts the guard on that path: it resolves through the
resolver named by ``ADDRESS_GUARD_RESOLVER`` (default: Scrapy's) and fails
the lookup when the answer is not allowed by
:meth:`~crawler.addressguard.AddressPolicy.check_ip`. The answer checked is
the one connected to, cached answers included, so DNS rebinding (a public
answer when checked, a private one when connecting) has no gap to use.

What is checked where
---------------------
Without a proxy, both: the URL (the middleware: literal addresses in every
spelling and local names, refused before any lookup) and the address every
connection resolves to (this resolver).

With a proxy (``http_proxy`` or ``meta["proxy"]``), the proxy resolves the
names, not the crawler: only what the URL itself says can be checked (literal
addresses, ``localhost``, local names), by the middleware, which runs for
every request whatever its proxy. A public name that resolves to a private
address (``127.0.0.1.nip.io``) reaches the proxy, which must refuse it itself
if that matters (e.g. Squid's ``acl ... dst`` rules). The only name this
resolver then sees is the proxy's own, when the proxy is given by name: the
proxy is the operator's choice and is not checked; list its name in
``ADDRESS_GUARD_ALLOW_HOSTS`` if it resolves to a private address.

Not checked at all: the proxy's address, and downloads by handlers that do
not connect through Twisted's resolver (the ``httpx`` and ``aiohttp``
handlers, ``s3:`` via botocore): for them only the URL check applies.

Literal addresses passed to the resolver (a URL's ``127.0.0.1``, or a proxy
given as an address) are handed to the inner resolver unchecked: a URL's
literal was judged by the middleware, and a proxy's is the operator's choice.
Odd spellings (``127.1``) are not literals here: their answer is checked.

A refused lookup fails with :class:`BlockedAddressError`, a
``DNSLookupError``, because Twisted's wrapper passes on only that kind of
error quietly (any other is logged with a traceback). The wrapper turns it
into a plain "couldn't find the hostname", so the reason is kept here as
well (:meth:`GuardedResolver.blocked`) for the middleware, which makes the
request end as ``address-blocked`` instead of a DNS error that is retried.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import build_from_crawler, load_object
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IResolverSimple
from zope.interface import implementer

from crawler.addressguard import AddressPolicy, SeenOnce, normalise_host, parse_ip

if TYPE_CHECKING:
    from collections.abc import Sequence

    from twisted.internet.defer import Deferred
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)

DEFAULT_INNER_RESOLVER = "scrapy.resolver.CachingThreadedResolver"


class BlockedAddressError(DNSLookupError):
    """A name resolved to an address the guard refuses."""

    #: As the kinds of :class:`crawler.dns.failures.DNSFailure`: how the lookup ended.
    kind = "blocked"

    def __init__(self, name: str, address: str, reason: str) -> None:
        super().__init__(f"{name} resolves to {address} ({reason}): refused by the address guard")
        self.name = name
        self.address = address
        self.reason = reason


@implementer(IResolverSimple)
class GuardedResolver:
    """Resolve through an inner ``IResolverSimple``; refuse answers the policy refuses.

    Settings: ``ADDRESS_GUARD_RESOLVER`` (the inner resolver, built like
    ``TWISTED_DNS_RESOLVER``) and the ``ADDRESS_GUARD_*`` policy settings.
    """

    def __init__(self, reactor: Any, inner: Any, policy: AddressPolicy,
                 *, remember: int = 10_000) -> None:
        if not callable(getattr(inner, "getHostByName", None)):
            raise TypeError(
                f"ADDRESS_GUARD_RESOLVER must be an IResolverSimple (with getHostByName), "
                f"not {type(inner).__name__}; an IHostnameResolver such as "
                "scrapy.resolver.CachingHostnameResolver cannot be wrapped")
        self.reactor = reactor
        self.inner = inner
        self.policy = policy
        self._remember = remember
        self._blocked: OrderedDict[str, BlockedAddressError] = OrderedDict()
        self._logged = SeenOnce(remember)

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: Any) -> GuardedResolver:
        # ``crawler`` is the CrawlerProcess here (Scrapy builds the resolver
        # before any crawler): only its settings may be used.
        settings = crawler.settings
        inner_cls = load_object(settings.get("ADDRESS_GUARD_RESOLVER") or DEFAULT_INNER_RESOLVER)
        if isinstance(inner_cls, type) and issubclass(inner_cls, GuardedResolver):
            raise ValueError("ADDRESS_GUARD_RESOLVER names the guard itself; name the "
                             "resolver it should wrap (e.g. " + DEFAULT_INNER_RESOLVER + ")")
        inner = build_from_crawler(inner_cls, crawler, reactor=reactor)
        return cls(reactor, inner, AddressPolicy.from_settings(settings))

    def install_on_reactor(self) -> None:
        self.reactor.installResolver(self)

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> Deferred[str]:
        d: Deferred[str] = self.inner.getHostByName(name, timeout)
        host = normalise_host(name)
        if not self.policy.enabled or parse_ip(name) is not None or self.policy.host_trusted(host):
            return d
        return d.addCallbacks(self._judge, self._failed, callbackArgs=(name, host),
                              errbackArgs=(host,))

    def blocked(self, host: str) -> BlockedAddressError | None:
        """The error of the last lookup of ``host`` if the guard refused it, else ``None``.

        Forgotten when a later lookup of the name succeeds or fails otherwise,
        so a genuine DNS failure is never taken for a refusal.
        """
        return self._blocked.get(normalise_host(host))

    def _judge(self, address: str, name: str, host: str) -> str:
        reason = self.policy.check_ip(address, resolved=True)
        if reason is None:
            self._blocked.pop(host, None)
            return address
        error = BlockedAddressError(name, address, reason)
        self._blocked[host] = error
        self._blocked.move_to_end(host)
        if len(self._blocked) > self._remember:
            self._blocked.popitem(last=False)
        if self._logged.first(host):
            logger.info("Address guard: %s resolves to %s (%s), not connecting",
                        name, address, reason,
                        extra={"host": host, "address": address, "reason": reason})
        raise error

    def _failed(self, failure: Failure, host: str) -> Failure:
        self._blocked.pop(host, None)
        return failure
