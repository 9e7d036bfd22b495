"""The DNS state of hosts in the frontier: failed lookups in a row, holds, parking.

A name that does not resolve is a fact about a host, not about one of its
URLs, so it is kept with the host (``da`` and ``du`` in its site's record, see
:mod:`crawler.frontier.keys` and ``lua/dns.lua``) where every worker sees
it: the first worker whose lookup fails holds the host for all, and the
count of failed lookups in a row decides, for all, when the host is given up
(its URLs become ``dns-failed`` dead letters). A request's own retry count
could not: the URLs of one host fail together, each with a count of its own.

:mod:`crawler.scheduling.dnsoutcomes` decides what a failure means and calls
this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from crawler.frontier.scriptargs import dns_args
from crawler.frontier.store import script_source

if TYPE_CHECKING:
    from crawler.frontier.store import Frontier


@dataclass(frozen=True, slots=True)
class DNSRetry:
    """How a host whose lookups fail (SERVFAIL, timeout) is retried, in ms."""

    base_ms: int = 30_000  # the first hold, doubled at each failed lookup
    cap_ms: int = 600_000
    max_attempts: int = 6  # failed lookups in a row, then dead letters (0: never)

    @classmethod
    def from_settings(cls, settings: Any) -> DNSRetry:
        """``DNS_RETRY_BASE`` and ``DNS_RETRY_MAX`` (seconds), ``DNS_FAILED_MAX_ATTEMPTS``."""
        return cls(round(settings.getfloat("DNS_RETRY_BASE", 30.0) * 1000),
                   round(settings.getfloat("DNS_RETRY_MAX", 600.0) * 1000),
                   settings.getint("DNS_FAILED_MAX_ATTEMPTS", 6))


class DNSVerdict(NamedTuple):
    """What a failed lookup made of its host: "hold" (for ``wait_ms``), "park" or
    "gone" (the frontier does not know the host); ``counted``: this failure
    started a new hold (False: one was running already)."""

    verdict: str
    attempts: int
    wait_ms: int
    counted: bool


class HostDNS:
    """The DNS state of the hosts of one frontier (``lua/dns.lua``)."""

    def __init__(self, frontier: Frontier, retry: DNSRetry) -> None:
        self.frontier = frontier
        self.retry = retry
        self._script = frontier.client.register_script(script_source("dns"))

    async def failed(self, host: str, *, job: bool = False, count: bool = True,
                     kind: str = "servfail") -> DNSVerdict:
        """Count a failed lookup of ``host``'s name (unless a DNS hold runs) and hold it.

        ``job``: the lookup was made for the host's robots job, whose hold
        (the whole robots fetch's time) is replaced by the DNS hold.
        ``count`` False: the nameservers answer nothing at all (an outage): the
        host is held for its current backoff, the failure not counted.
        ``kind`` (servfail, timeout) is kept with the hold, for the reports of
        what is held and why.
        """
        keys = self.frontier.keys
        part = self.frontier.partition(host)
        reply = await self._script(keys=[keys.counts(part)], args=[
            keys.prefix(part), dns_args(host, self.retry, job=job, count=count, kind=kind)])
        verdict, attempts, wait_ms, counted = reply
        return DNSVerdict(verdict.decode() if isinstance(verdict, bytes) else str(verdict),
                          int(attempts), int(wait_ms), bool(int(counted)))

    async def park(self, host: str, reason: str) -> int:
        """Make the host's queued URLs, and its new ones, dead letters (``reason``: JSON)."""
        return await self.frontier.park_host(host, reason, whole_site=True)
