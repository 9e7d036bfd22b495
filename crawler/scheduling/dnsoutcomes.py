"""A host whose name does not resolve: held or parked for every worker.

A failed lookup is a host outcome, not a page attempt: the resolver's
verdict (:mod:`crawler.dns`: the failure's ``kind``) decides for the host.

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

Three places meet a failed lookup, all through the worker's one
:class:`DnsOutcomes`: a page request (:mod:`crawler.middlewares.dns`), a
host's robots.txt job (:meth:`DnsOutcomes.before_robots`, asked by
:mod:`.robotsjobs` first, which resolves the name so that a name that does not
resolve is not an "unreachable" robots.txt retried for hours) and the IP
scope's DNS job (:meth:`DnsOutcomes.name_failed`, :mod:`.ipscope`).

Logged once per name and outcome for the crawl's lifetime: the first hold of a
name for ``servfail``, the first for ``timeout``, its park, each one INFO line;
every later hold or park of that name at DEBUG (a failure while the nameservers
answer nothing at all starts no hold of its own and is not logged: the resolver
has said so once, at WARNING). A failing nameserver fails a name again and
again (each hold's end is the next attempt), and every name of the crawl
alike: an INFO line per attempt was hundreds a minute. Names, not host keys: a
name fails, and is parked, for all its schemes and ports (the requeue hint
names the name: ``--host NAME`` takes every scheme and port). Stats:
``dns/robots_jobs/<kind>``, ``dns/dns_jobs/<kind>``, ``dns/hosts/held``
(holds started), ``dns/hosts/held_in_outage`` (failures not counted: the
nameservers were down), ``dns/hosts/parked/<nxdomain|nodata|failed>``.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.error import DNSLookupError

from crawler.addressguard import SeenOnce, normalise_host, parse_ip
from crawler.deadletter import DeadReason
from crawler.dns.failures import PERMANENT, DNSFailure
from crawler.dns.resolver import installed_resolver
from crawler.frontier.dnsstate import DNSRetry, HostDNS
from crawler.frontier.keys import site_of
from crawler.frontier.store import Frontier
from crawler.proxies import ProxyRoutes

logger = logging.getLogger(__name__)

#: What a dead letter's "error" says for each kind.
_WHY = {
    "nxdomain": "the name does not exist (NXDOMAIN, asked twice)",
    "nodata": "the name has no A or AAAA record (asked twice)",
    "servfail": "the nameserver could not answer (SERVFAIL)",
    "timeout": "no answer within DNS_TIMEOUT",
}


class DnsOutcomes:
    """Hold or park hosts whose names do not resolve (see the module docstring)."""

    def __init__(self, frontier: Frontier, retry: DNSRetry, proxies: ProxyRoutes,
                 stats: Any) -> None:
        self.retry = retry
        self.proxies = proxies
        self.stats = stats
        self._hosts = HostDNS(frontier, retry)
        self._logged = SeenOnce()

    async def page_failed(self, host: str, failure: DNSFailure) -> DeadReason | int:
        """A page request of ``host`` met ``failure``: the request dies with the
        host's reason, or is retried in the returned ms."""
        return await self._host_failed(host, failure, job=False)

    async def before_robots(self, host: str) -> bool:
        """Resolve a host's name before its robots.txt is fetched: True to fetch
        it now; False: the name did not resolve, and its outcome (a hold, dead
        letters) is in the frontier already. Not asked of a host whose requests
        go through a proxy (the proxy resolves names then, not us)."""
        resolver = installed_resolver()
        name = hostname(host)
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
        """The IP scope's DNS job could not resolve the host's name: hold or park
        the host as a page's failed lookup would (``failure``: the resolver's error)."""
        if isinstance(failure, DNSFailure):
            self.stats.inc_value(f"dns/dns_jobs/{failure.kind}")
            await self._host_failed(host, failure, job=True)

    async def _host_failed(self, host: str, failure: DNSFailure, *, job: bool
                           ) -> DeadReason | int:
        if failure.kind in PERMANENT:
            reason = _dead_reason(f"dns-{failure.kind}", failure)
            await self._park(host, failure.kind, reason)
            return reason
        count = await _nameservers_answer()
        if not count:
            self.stats.inc_value("dns/hosts/held_in_outage")
        verdict = await self._hosts.failed(host, job=job, count=count, kind=failure.kind)
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

    async def _park(self, host: str, what: str, reason: DeadReason) -> None:
        parked = await self._hosts.park(host, reason.json())
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


async def _nameservers_answer() -> bool:
    resolver = installed_resolver()
    if resolver is None:
        return True
    return await maybe_deferred_to_future(resolver.nameservers_answer())


def _dead_reason(reason: str, failure: DNSFailure, attempts: int = 0) -> DeadReason:
    return DeadReason.now(reason, f"{failure.name}: {_WHY[failure.kind]}", attempts)


def hostname(url: str) -> str:
    """The host name of a URL or host key (``https://[::1]:8443`` -> ``::1``)."""
    try:
        return normalise_host(urlsplit(url).hostname or "")
    except ValueError:
        return ""
