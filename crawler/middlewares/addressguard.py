"""Downloader middleware: no request to a loopback, private or otherwise non-public address.

The URL half of the address guard (:mod:`crawler.addressguard`; what is
checked where is in :mod:`crawler.resolver`). ``process_request`` refuses
every request whose URL host is a non-public address in any spelling or a
name that always means the local machine or network. It runs for every
request: seeds, links, robots.txt fetches, and redirects (the redirect
middleware's new request goes through the middlewares again), with or
without a proxy, since even a proxy would fetch ``http://127.0.0.1/`` from
*its* machine.

``process_exception`` turns a lookup that the resolver (:class:`~crawler.dns.
CrawlResolver`, or the older :class:`~crawler.resolver.GuardedResolver`)
refused (after DNS, without a proxy) into the same refusal,
so it is neither retried nor counted as a download error. For that it must
see exceptions before ``RetryMiddleware`` (550) and the frontier's
``FrontierOutcomeMiddleware`` (950): its order must be above 950.

A refused request raises :class:`~crawler.addressguard.AddressBlocked` (an
``IgnoreRequest``) and blocks the request's lease ticket: its URL becomes a
dead letter of reason ``address-blocked`` whose error names the address and
the setting that allows it. The guard's settings are the operator's, so the
URL is theirs to bring back (``scrapy frontier requeue --reason
address-blocked``, after allowing it); it never ends as done. Stats: ``guard/blocked/<reason>``
(reason as in :mod:`crawler.addressguard`) and ``guard/blocked_after_dns``.
Each refused host is logged once at INFO, with the host in ``extra``.

There is no ``dont_*`` meta key to skip the guard: a security check that a
request can switch off is one bug away from off. Allow networks or hosts
with the ``ADDRESS_GUARD_ALLOW*`` settings instead.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy.exceptions import CannotResolveHostError, NotConfigured
from scrapy.utils.misc import load_object
from twisted.internet.error import DNSLookupError

from crawler.addressguard import (
    BLOCKED_REASON,
    AddressBlocked,
    AddressPolicy,
    SeenOnce,
    normalise_host,
)
from crawler.deadletter import DeadReason
from crawler.dns.resolver import CrawlResolver, installed_resolver
from crawler.lease import ticket_of
from crawler.resolver import BlockedAddressError, GuardedResolver
from crawler.scheduling.worker import frontier_of
from crawler.seedrefusals import SeedRefusals, is_seed

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

# Handlers that connect through the reactor's resolver (see crawler.resolver).
_TWISTED_HANDLERS = frozenset({
    "scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler",
    "scrapy.core.downloader.handlers.http2.H2DownloadHandler",
    "scrapy.core.downloader.handlers.http.HTTPDownloadHandler",
})


class AddressGuardMiddleware:
    """Refuse requests whose URL or resolved address is not public."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.policy = AddressPolicy.from_settings(crawler.settings)
        #: The installed guarded resolver; found on the running reactor when None.
        self.resolver: GuardedResolver | CrawlResolver | None = None
        self._logged = SeenOnce()
        self._seed_refusals = SeedRefusals(crawler.stats, crawler.signals)
        _warn_if_dns_unchecked(crawler.settings)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> AddressGuardMiddleware:
        if not crawler.settings.getbool("ADDRESS_GUARD_ENABLED", True):
            raise NotConfigured("ADDRESS_GUARD_ENABLED is off")
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        reason = self.policy.check_url(request.url)
        if reason is not None:
            self._refuse(request, AddressBlocked(_host(request.url), reason))

    def process_exception(self, request: Request, exception: Exception) -> None:
        if not isinstance(exception, DNSLookupError | CannotResolveHostError):
            return
        blocked = _blocked_cause(exception)
        host = _host(request.url)
        if blocked is None and (resolver := self._resolver()) is not None:
            blocked = resolver.blocked(host)
        if blocked is None:
            return  # a genuine DNS failure
        self.stats.inc_value("guard/blocked_after_dns")
        self._refuse(request, AddressBlocked(host, blocked.reason, blocked.address),
                     cause=exception, logged=True)

    def _refuse(self, request: Request, error: AddressBlocked, *,
                cause: Exception | None = None, logged: bool = False) -> None:
        ticket = ticket_of(request.meta)
        if ticket is not None:
            ticket.block(DeadReason.now(BLOCKED_REASON, error.explained()))
        self.stats.inc_value(f"guard/blocked/{error.reason}")
        if is_seed(request):  # the operator asked for it: a WARNING with the setting
            self._seeds().refused(request, BLOCKED_REASON, error.reason)
        # After DNS the resolver has already logged the host (with its address).
        elif not logged and self._logged.first(error.host):
            logger.info("Address guard: refused %s (%s)", request.url, error.reason,
                        extra={"host": error.host, "reason": error.reason, "url": request.url})
        raise error from cause

    def _seeds(self) -> SeedRefusals:
        """The frontier's refused seeds when it schedules the crawl (one line per
        host for both), else this middleware's own."""
        frontier = frontier_of(self.crawler)
        return frontier.intake.seed_refusals if frontier is not None else self._seed_refusals

    def _resolver(self) -> GuardedResolver | CrawlResolver | None:
        if self.resolver is None:
            self.resolver = installed_resolver()
        if self.resolver is None:
            # Never import the reactor here: that would install one.
            reactor = sys.modules.get("twisted.internet.reactor")
            resolver = getattr(reactor, "resolver", None)
            if isinstance(resolver, GuardedResolver):
                self.resolver = resolver
        return self.resolver


def _host(url: str) -> str:
    try:
        return normalise_host(urlsplit(url).hostname or "")
    except ValueError:
        return ""


def _blocked_cause(exception: BaseException) -> BlockedAddressError | None:
    """The resolver's refusal when it reached us (through ``connectTCP``), maybe wrapped."""
    while exception is not None:
        if isinstance(exception, BlockedAddressError):
            return exception
        exception = exception.__cause__  # type: ignore[assignment]
    return None


def _warn_if_dns_unchecked(settings: BaseSettings) -> None:
    """Say at startup when resolved addresses will not be checked: a silent gap is worse."""
    try:
        resolver = load_object(settings.get("TWISTED_DNS_RESOLVER"))
    except (ImportError, NameError, ValueError, AttributeError):
        resolver = None
    if not (isinstance(resolver, type) and issubclass(resolver, CrawlResolver | GuardedResolver)):
        logger.warning(
            "Address guard: DNS answers are not checked, only URLs: TWISTED_DNS_RESOLVER "
            "is %s, not crawler.dns.CrawlResolver", settings.get("TWISTED_DNS_RESOLVER"))
    handlers = settings.getwithbase("DOWNLOAD_HANDLERS")
    for scheme in ("http", "https"):
        handler = handlers.get(scheme)
        if handler is not None and not _resolves_through_twisted(handler):
            logger.warning("Address guard: DNS answers are not checked for %s: its download "
                           "handler %s does not resolve through Twisted", scheme, handler)


def _resolves_through_twisted(handler: object) -> bool:
    """Scrapy's Twisted handlers, or a subclass (crawler.handlers' is one)."""
    try:
        cls = load_object(handler) if isinstance(handler, str) else handler
    except (ImportError, NameError, ValueError, AttributeError):
        return False
    return isinstance(cls, type) and any(
        f"{base.__module__}.{base.__qualname__}" in _TWISTED_HANDLERS for base in cls.__mro__)
