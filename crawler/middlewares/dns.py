"""Downloader middleware: a failed lookup is a host outcome, not a page attempt.

Without it a name that does not resolve is a download error like any other:
each of its host's URLs is retried on its own until the circuit breaker
parks the host, about half an hour of cool-downs per dead name, and a finite
crawl stays alive long after its real work is done. Here the resolver's
verdict (:mod:`crawler.dns`: the failure's ``kind``) decides for the host:

- ``nxdomain`` (the name does not exist, asked twice) or ``nodata`` (it has no
  address): the host is parked at once, its queued and future URLs become dead
  letters ``dns-nxdomain`` / ``dns-nodata``, the failed URL too;
- ``servfail`` or ``timeout``: the host is held for every worker,
  ``DNS_RETRY_BASE`` seconds doubling up to ``DNS_RETRY_MAX``, and the URL
  waits as long (its retry count untouched); the next lookup after the hold
  is the host's next attempt. After ``DNS_FAILED_MAX_ATTEMPTS`` failed lookups
  in a row its URLs become ``dns-failed`` dead letters. The count is kept in
  the frontier (:mod:`crawler.frontier.dnsstate`), and any answer from the
  host ends the run. While the nameservers answer nothing at all (not even a
  question about the root zone), failures hold their hosts without counting:
  a nameserver outage must not turn the whole crawl into dead letters.

None of it counts against the breaker (the lease is released with no health),
and every dead letter comes back with ``scrapy frontier requeue --reason R``.

Two places meet a failed lookup:

- page requests: ``process_exception``. Placed between the address guard (955,
  which turns refused answers into ``address-blocked`` first) and
  ``FrontierOutcomeMiddleware`` (950), so neither the frontier nor the retry
  policy (550) sees the error;
- a host's first contact, its robots.txt fetch (with ``ROBOTSTXT_OBEY``): the
  scheduler asks :meth:`DNSStepMiddleware.before_robots` first, which resolves
  the name (the answer is then cached for the fetch). A failure holds or parks
  the host as above instead of making its robots.txt "unreachable" (retried
  for hours by the robots policy). Skipped when the host's requests go through
  a proxy (``http_proxy``...): the proxy resolves names then, not us.

Logged once per name and outcome for the crawl's lifetime: the first hold of a
name for ``servfail``, the first for ``timeout``, its park, each one INFO line;
every later hold or park of that name at DEBUG (a failure while the nameservers
answer nothing at all starts no hold of its own and is not logged: the resolver
has said so once, at WARNING). A failing nameserver fails a name again and
again (each hold's end is the next attempt), and every name of the crawl
alike: an INFO line per attempt was hundreds a minute. The stats below count
every one. Names, not host keys: a name fails, and is parked, for all its
schemes and ports (the requeue hint names the name: ``--host NAME`` takes
every scheme and port).

It also counts every lookup of the process's resolver for this crawl (the
resolver exists before any crawl, see :data:`crawler.dns.events.RECORDER`). Stats:
``dns/lookups/<ok|nxdomain|nodata|servfail|timeout|blocked>``,
``dns/lookup_ms/max``, ``dns/cache_hits``, ``dns/nxdomain_unconfirmed`` (the
confirming lookup found the name after all), ``dns/addresses_refused``;
``dns/requests/<kind>`` (page requests that met a failed lookup),
``dns/robots_jobs/<kind>``, ``dns/hosts/held`` (holds started),
``dns/hosts/held_in_outage`` (failures not counted: the nameservers were down),
``dns/hosts/parked/<nxdomain|nodata|failed>``. The signal
:data:`crawler.signals.dns_lookup_done` carries each lookup's time for the
Prometheus histogram.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from redis.exceptions import RedisError
from scrapy import signals
from scrapy.exceptions import CannotResolveHostError, IgnoreRequest
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.error import DNSLookupError

from crawler.addressguard import SeenOnce, normalise_host, parse_ip
from crawler.deadletter import DeadReason
from crawler.dns.events import RECORDER, LookupEvent
from crawler.dns.failures import PERMANENT, DNSFailure
from crawler.dns.resolver import installed_resolver
from crawler.frontier.dnsstate import DNSRetry, HostDNS, register_dns_step
from crawler.frontier.keys import site_of
from crawler.lease import ticket_of
from crawler.proxies import ProxyRoutes
from crawler.scheduling.scheduler import scheduler_of
from crawler.signals import dns_lookup_done

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: What a dead letter's "error" says for each kind.
_WHY = {
    "nxdomain": "the name does not exist (NXDOMAIN, asked twice)",
    "nodata": "the name has no A or AAAA record (asked twice)",
    "servfail": "the nameserver could not answer (SERVFAIL)",
    "timeout": "no answer within DNS_TIMEOUT",
}


class DNSStepMiddleware:
    """Turn failed lookups into host outcomes; count the resolver's lookups."""

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.retry = DNSRetry.from_settings(s)
        self.proxies = ProxyRoutes.from_settings(s)
        self._hosts: HostDNS | None = None
        self._logged = SeenOnce()
        RECORDER.subscribe(self.observe)
        crawler.signals.connect(self._stopped, signal=signals.engine_stopped)
        register_dns_step(crawler, self)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DNSStepMiddleware:
        return cls(crawler)

    def _stopped(self) -> None:
        RECORDER.unsubscribe(self.observe)

    # ------------------------------------------------------------ counting lookups

    def observe(self, event: LookupEvent) -> None:
        """Count one of the resolver's lookups (or cache hits) in this crawl's stats."""
        if event.result == "cached":
            self.stats.inc_value("dns/cache_hits")
            return
        self.stats.inc_value(f"dns/lookups/{event.result}")
        self.stats.max_value("dns/lookup_ms/max", round(event.seconds * 1000))
        if event.rounds > 1 and event.result not in PERMANENT:
            self.stats.inc_value("dns/nxdomain_unconfirmed")
        if event.refused:
            self.stats.inc_value("dns/addresses_refused", event.refused)
        self.crawler.signals.send_catch_log(dns_lookup_done, result=event.result,
                                            seconds=event.seconds)

    # ------------------------------------------------------------ page requests

    async def process_exception(self, request: Request, exception: Exception) -> None:
        ticket = ticket_of(request.meta)
        if ticket is None or not isinstance(exception, DNSLookupError | CannotResolveHostError):
            return
        scheduler = scheduler_of(self.crawler)
        host = scheduler.host_of(ticket.token) if scheduler is not None else None
        failure = _failure_of(exception, _hostname(request.url))
        if host is None or failure is None:
            return  # not the crawl resolver's verdict: the retry policy's case
        self.stats.inc_value(f"dns/requests/{failure.kind}")
        try:
            outcome = await self._host_failed(host, failure, job=False)
        except (RedisError, OSError):
            self.stats.inc_value("frontier/redis_errors")
            outcome = self.retry.base_ms
        if isinstance(outcome, DeadReason):
            ticket.dead(outcome)
        else:
            ticket.retry_after(outcome)
        raise IgnoreRequest(f"DNS: {failure.name}: {failure.kind}") from exception

    # ------------------------------------------------------------ robots jobs

    async def before_robots(self, host: str) -> bool:
        """Resolve a host's name before its robots.txt is fetched (see the module docstring)."""
        resolver = installed_resolver()
        name = _hostname(host)
        if (resolver is None or not name or parse_ip(name) is not None
                or self.proxies.proxied(host, name)):
            return True
        try:
            await maybe_deferred_to_future(resolver.resolve(name))
        except DNSFailure as failure:
            self.stats.inc_value(f"dns/robots_jobs/{failure.kind}")
            await self._host_failed(host, failure, job=True)
            return False
        except DNSLookupError:
            return True  # the guard refused every address: the fetch ends address-blocked
        return True

    async def name_failed(self, host: str, failure: Exception) -> None:
        """The IP scope's DNS job could not resolve the host's name (see
        :class:`crawler.frontier.dnsstate.RobotsGate`)."""
        if isinstance(failure, DNSFailure):
            self.stats.inc_value(f"dns/dns_jobs/{failure.kind}")
            await self._host_failed(host, failure, job=True)

    # ------------------------------------------------------------ host outcomes

    async def _host_failed(self, host: str, failure: DNSFailure, *, job: bool
                           ) -> DeadReason | int:
        """Hold or park ``host``: the URL that met the failure dies with the
        host's reason, or is retried in the returned ms."""
        if failure.kind in PERMANENT:
            reason = _dead_reason(f"dns-{failure.kind}", failure)
            await self._park(host, failure.kind, reason)
            return reason
        hosts = self._host_dns()
        count = await self._nameservers_answer()
        if not count:
            self.stats.inc_value("dns/hosts/held_in_outage")
        verdict = await hosts.failed(host, job=job, count=count, kind=failure.kind)
        if verdict.verdict == "park":
            reason = _dead_reason("dns-failed", failure, verdict.attempts)
            await self._park(host, "failed", reason)
            return reason
        wait_ms = verdict.wait_ms if verdict.verdict == "hold" else self.retry.base_ms
        if verdict.counted:
            self.stats.inc_value("dns/hosts/held")
            first = self._logged.first(f"{site_of(host)} {failure.kind}")
            logger.log(logging.INFO if first else logging.DEBUG,
                       "DNS: %s failed (%s), attempt %d: host held %.1f s", failure.name,
                       failure.kind, verdict.attempts, wait_ms / 1000,
                       extra={"host": host, "dns": failure.kind, "attempts": verdict.attempts})
        return wait_ms

    @staticmethod
    async def _nameservers_answer() -> bool:
        resolver = installed_resolver()
        if resolver is None:
            return True
        return await maybe_deferred_to_future(resolver.nameservers_answer())

    async def _park(self, host: str, what: str, reason: DeadReason) -> None:
        parked = await self._host_dns().park(host, reason.json())
        site = site_of(host)
        first = self._logged.first(f"{site} park")
        if first:  # parked once per name: every later failure of it parks it again
            self.stats.inc_value(f"dns/hosts/parked/{what}")
        label = reason.reason
        # The site's name: a park is of every scheme and port, and so is the requeue.
        logger.log(logging.INFO if first else logging.DEBUG,
                   "DNS: host %s parked (%s): %d queued URL(s) are dead letters "
                   "(requeue with: scrapy frontier requeue --reason %s --host %s)",
                   site, label, parked, label, site,
                   extra={"host": host, "dns": what, "parked": parked})

    def _host_dns(self) -> HostDNS:
        if self._hosts is None:
            scheduler = scheduler_of(self.crawler)
            if scheduler is None or scheduler.frontier is None:
                raise RuntimeError("the DNS step needs the frontier scheduler, open")
            self._hosts = HostDNS(scheduler.frontier, self.retry)
        return self._hosts


def _failure_of(exception: BaseException, host: str) -> DNSFailure | None:
    """The crawl resolver's failure behind a download's DNS error.

    Twisted's endpoint reports a failed resolution as a bare "no results"
    error, so the kind comes from the resolver's memory of the name; an error
    raised through ``connectTCP`` (a proxy's tunnel) keeps ours as a cause.
    """
    cause: BaseException | None = exception
    while cause is not None:
        if isinstance(cause, DNSFailure):
            return cause
        cause = cause.__cause__
    resolver = installed_resolver()
    error = resolver.failure(host) if resolver is not None and host else None
    return error if isinstance(error, DNSFailure) else None


def _dead_reason(reason: str, failure: DNSFailure, attempts: int = 0) -> DeadReason:
    return DeadReason.now(reason, f"{failure.name}: {_WHY[failure.kind]}", attempts)


def _hostname(url: str) -> str:
    """The host name of a URL or host key (``https://[::1]:8443`` -> ``::1``)."""
    try:
        return normalise_host(urlsplit(url).hostname or "")
    except ValueError:
        return ""
