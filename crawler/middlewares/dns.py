"""Downloader middleware: a failed lookup is a host outcome, not a page attempt.

Without it a name that does not resolve is a download error like any other:
each of its host's URLs is retried on its own until the circuit breaker
parks the host, about half an hour of cool-downs per dead name, and a finite
crawl stays alive long after its real work is done. Here a page request that
met the crawl resolver's verdict hands it to the worker's
:class:`crawler.scheduling.dnsoutcomes.DnsOutcomes`, which holds or parks
the host for every worker (what each kind means is said there), and the
request is retried when the hold ends or dies with the host's reason. None of
it counts against the breaker (the lease is released with no health), and
every dead letter comes back with ``scrapy frontier requeue --reason R``.

Placed between the address guard (955, which turns refused answers into
``address-blocked`` first) and ``FrontierOutcomeMiddleware`` (950), so neither
the frontier nor the retry policy (550) sees the error. (A host's robots.txt
job and the IP scope's DNS job meet a failed lookup in the frontier, through
the same ``DnsOutcomes``.)

It also counts every lookup of the process's resolver for this crawl (the
resolver exists before any crawl, see :data:`crawler.dns.events.RECORDER`). Stats:
``dns/lookups/<ok|nxdomain|nodata|servfail|timeout|blocked>``,
``dns/lookup_ms/max``, ``dns/cache_hits``, ``dns/nxdomain_unconfirmed`` (the
confirming lookup found the name after all), ``dns/addresses_refused``;
``dns/requests/<kind>`` (page requests that met a failed lookup). The signal
:data:`crawler.signals.dns_lookup_done` carries each lookup's time for the
Prometheus histogram.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from redis.exceptions import RedisError
from scrapy import signals
from scrapy.exceptions import CannotResolveHostError, IgnoreRequest
from twisted.internet.error import DNSLookupError

from crawler.deadletter import DeadReason
from crawler.dns.events import RECORDER, LookupEvent
from crawler.dns.failures import PERMANENT, DNSFailure
from crawler.dns.resolver import installed_resolver
from crawler.lease import ticket_of
from crawler.scheduling.dnsoutcomes import hostname
from crawler.scheduling.worker import frontier_of
from crawler.signals import dns_lookup_done

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler


class DNSStepMiddleware:
    """Turn failed lookups into host outcomes; count the resolver's lookups."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        RECORDER.subscribe(self.observe)
        crawler.signals.connect(self._stopped, signal=signals.engine_stopped)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DNSStepMiddleware:
        return cls(crawler)

    def _stopped(self) -> None:
        RECORDER.unsubscribe(self.observe)

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

    async def process_exception(self, request: Request, exception: Exception) -> None:
        ticket = ticket_of(request.meta)
        if ticket is None or not isinstance(exception, DNSLookupError | CannotResolveHostError):
            return
        frontier = frontier_of(self.crawler)
        dns = frontier.dns if frontier is not None else None
        host = frontier.host_of(ticket.token) if frontier is not None else None
        failure = _failure_of(exception, hostname(request.url))
        if host is None or failure is None or dns is None:
            return  # not the crawl resolver's verdict: the retry policy's case
        self.stats.inc_value(f"dns/requests/{failure.kind}")
        try:
            outcome = await dns.page_failed(host, failure)
        except (RedisError, OSError):
            self.stats.inc_value("frontier/redis_errors")
            outcome = dns.retry.base_ms
        if isinstance(outcome, DeadReason):
            ticket.dead(outcome)
        else:
            ticket.retry_after(outcome)
        raise IgnoreRequest(f"DNS: {failure.name}: {failure.kind}") from exception


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
