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
   address checked is the address connected to. Addresses are handed out
   IPv4 first (:func:`~crawler.dns.answers.ordered` says why).

Failures are :class:`~crawler.dns.failures.DNSFailure` subclasses,
``DNSLookupError`` s with a ``kind``: ``nxdomain``, ``nodata``, ``servfail``,
``timeout`` (and ``blocked`` for the guard's refusal). The resolver remembers
each name's last failure for the layers above:
:mod:`crawler.scheduling.dnsoutcomes` makes a host outcome of it,
:mod:`crawler.middlewares.addressguard` a refusal. Whether the nameservers
answer at all (a question about the root zone, every
:data:`~crawler.dns.resolver.ALIVE_SECONDS` at most) tells a failing name
from a nameserver outage, which must not count against every host of the
crawl.

Every lookup, and every cache hit, is reported to
:data:`~crawler.dns.events.RECORDER`, a process-wide hub: the resolver
belongs to the process, stats to a crawl, so each crawl's
:class:`~crawler.middlewares.dns.DNSStepMiddleware` subscribes and counts
them (``dns/lookups/<kind>``, ``dns/lookup_ms/max``).

The submodules, each importing only those listed before it (but for
:func:`~crawler.dns.lookups.build_lookup`, which makes sure it is not asked
to wrap the crawl resolver itself):

- :mod:`crawler.dns.failures`: the failure kinds (``RESULTS``, ``PERMANENT``),
  :class:`DNSFailure` and its subclasses, the kind of any error;
- :mod:`crawler.dns.answers`: :class:`Answer`, the IPv4-first order, the
  addresses (CNAMEs followed) in a DNS answer section;
- :mod:`crawler.dns.lookups`: the backends (:class:`NameserverLookup`,
  :class:`SystemLookup`, :class:`SimpleLookup`), ``DNS_NAMESERVERS`` and
  retransmission waits, and :func:`build_lookup`, which picks one from the
  settings;
- :mod:`crawler.dns.cache`: :class:`AnswerCache`;
- :mod:`crawler.dns.events`: :class:`LookupEvent`, :class:`LookupRecorder`
  and the process's :data:`RECORDER`;
- :mod:`crawler.dns.resolver`: :class:`CrawlResolver` itself, the resolver
  this process installed (:func:`installed_resolver`), and the guard's split
  of an answer (:func:`allowed_addresses`).

The package re-exports the submodules' public names listed in ``__all__``;
``crawler.dns.CrawlResolver`` is the path ``TWISTED_DNS_RESOLVER`` names.
"""

from __future__ import annotations

from crawler.dns.answers import Answer, addresses_in, ordered
from crawler.dns.cache import AnswerCache
from crawler.dns.events import RECORDER, LookupEvent, LookupRecorder
from crawler.dns.failures import (
    PERMANENT,
    RESULTS,
    DNSFailure,
    LookupTimeout,
    NameNotFound,
    NoAddress,
    ServerFailure,
    failure_kind,
    gai_kind,
)
from crawler.dns.lookups import (
    NameserverLookup,
    SimpleLookup,
    SystemLookup,
    parse_nameservers,
    retry_timeouts,
)
from crawler.dns.resolver import CrawlResolver, allowed_addresses, installed_resolver

__all__ = [
    "PERMANENT", "RECORDER", "RESULTS", "Answer", "AnswerCache", "CrawlResolver", "DNSFailure",
    "LookupEvent", "LookupRecorder", "LookupTimeout", "NameNotFound", "NameserverLookup",
    "NoAddress", "ServerFailure", "SimpleLookup", "SystemLookup", "addresses_in",
    "allowed_addresses", "failure_kind", "gai_kind", "installed_resolver",
    "ordered", "parse_nameservers", "retry_timeouts",
]
