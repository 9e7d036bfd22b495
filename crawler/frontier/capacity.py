"""What the crawl could do, and when it will end: the politeness-bound ceiling.

The frontier knows every site's pace, so it knows how fast the crawl could
go with unlimited workers: each site with work may have ``c`` requests in
flight, answers in about its latency ``L`` (``lt``: the mean of its recent
answers, ``lua/release.lua``), and starts no sooner than its delay ``d``
after the last; so it yields at most ``min(c / L, 1 / d)`` pages a second
(one at a time, ``1 / (L + a)`` while adaptation asks it to wait ``a`` after
each answer). Every registered domain and every server address caps the sum
of its sites the same way (``FRONTIER_DOMAIN_*``, ``FRONTIER_IP_*``, and
operators' overrides), paused ones give nothing. The sum is the **ceiling**:
more workers than it takes to reach it only wait for politeness.

:class:`Capacity` puts that next to what the workers do now (their
heartbeats say how many answers a second they received over the last
minute): the time to drain what is queued now at the current rate and at
the ceiling, and how many workers, each as fast as today's, would reach the
ceiling. It is the signal for scheduling or autoscaling workers. URLs found
from here on are not in it: a crawl that still discovers hosts drains later.

Read by ``scrapy frontier status`` and the metrics' reporter, outside the
reactor: one pipelined ``HMGET`` per site with work (about a second for
100k sites), so not on every scrape.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from crawler.frontier.keys import Keys, domain_of, partition_of, site_of
from crawler.frontier.schema import IP_GATE, SITE
from crawler.frontier.values import Limits

#: A site whose answers have not been timed yet is taken to answer this fast
#: (ms), unless other sites of the crawl say otherwise (their median).
DEFAULT_LATENCY_MS = 1000.0
_BATCH = 1000
_SITE_FIELDS = (SITE.concurrency, SITE.delay, SITE.floor, SITE.adaptive, SITE.ctl_concurrency,
                SITE.ctl_delay, SITE.ctl_paused, SITE.latency, SITE.breaker, SITE.address,
                SITE.address_until)


@dataclass(slots=True)
class Capacity:
    """The ceiling, the current pace and what follows from both (see the module
    docstring). Rates are pages a second; times seconds; None: not known."""

    ceiling: float
    current: float | None
    queued: int
    sites_with_work: int
    workers_alive: int
    drain_at_current_s: float | None
    drain_at_ceiling_s: float | None
    workers_for_ceiling: int | None
    #: Sites by what bounds them: their delay, their concurrency (and
    #: latency), their domain, their server address, or a pause.
    bound_by: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class _Site:
    rate: float
    latency: float
    bound: str
    domain: str
    address: str | None


def _num(raw: list[bytes | None], i: int, default: float = 0.0) -> float:
    value = raw[i]
    return float(value) if value is not None else default


def site_pace(raw: list[bytes | None], limits: Limits, default_latency: float
              ) -> tuple[float, float, str]:
    """A site's pages a second at most, its latency (ms) and what bounds it,
    from its record's ``_SITE_FIELDS`` (the rules of ``lua/common.lua``)."""
    if raw[6] is not None or raw[8] == b"x":  # paused by an operator, or parked
        return 0.0, default_latency, "paused"
    conc = _num(raw, 4, _num(raw, 0, limits.concurrency))
    delay = _num(raw, 5, _num(raw, 1))
    floor, adaptive = _num(raw, 2), _num(raw, 3)
    latency = _num(raw, 7, default_latency) or default_latency
    if adaptive > delay and adaptive > floor:
        # One at a time, each a factor of its answer's time after the last.
        return 1000.0 / (latency + adaptive), latency, "delay"
    if floor > 0:
        conc = min(conc, 1)
    delay = max(delay, floor)
    by_conc = conc * 1000.0 / latency if conc > 0 else math.inf
    by_delay = 1000.0 / delay if delay > 0 else math.inf
    if by_delay <= by_conc:
        return by_delay, latency, "delay"
    return by_conc, latency, "concurrency"


def _cap(conc: float, delay_ms: float, latency: float) -> float:
    """Pages a second a domain or an address allows (0 limits: none)."""
    by_conc = conc * 1000.0 / latency if conc > 0 else math.inf
    by_delay = 1000.0 / delay_ms if delay_ms > 0 else math.inf
    return min(by_conc, by_delay)


class CapacityReader:
    """Computes :class:`Capacity` for one frontier, with the crawl's limits."""

    def __init__(self, client: redis.Redis, keys: Keys, limits: Limits) -> None:
        self.client = client
        self.keys = keys
        self.limits = limits

    def read(self, hosts: Iterable[bytes | str], queued: int, now_ms: int,
             worker_rates: list[float | None]) -> Capacity:
        """The capacity, for the host keys with queued URLs (``hosts``: what the
        status's scan of the queues found) and the alive workers' rates."""
        sites = sorted({site_of(h.decode() if isinstance(h, bytes) else h) for h in hosts})
        raw = dict(self._fetch(sites))
        known = sorted(_num(r, 7) for r in raw.values() if r[7] is not None)
        default_latency = known[len(known) // 2] if known else DEFAULT_LATENCY_MS
        paced = {}
        for site, fields in raw.items():
            rate, latency, bound = site_pace(fields, self.limits, default_latency)
            ip = fields[9].decode() if fields[9] is not None else None
            fresh = ip if ip and ip != "-" and _num(fields, 10) > now_ms else None
            paced[site] = _Site(rate, latency, bound, domain_of(site), fresh)
        self._cap_groups(paced, "domain", self._domain_limits(paced))
        self._cap_groups(paced, "address", self._address_limits(paced))
        ceiling = sum(s.rate for s in paced.values())
        bound_by: dict[str, int] = defaultdict(int)
        for s in paced.values():
            bound_by[s.bound] += 1
        rates = [r for r in worker_rates if r is not None]
        current = sum(rates) if rates else None
        per_worker = current / len(rates) if rates and current else None
        return Capacity(
            ceiling=round(ceiling, 2), current=None if current is None else round(current, 2),
            queued=queued, sites_with_work=len(paced), workers_alive=len(worker_rates),
            drain_at_current_s=round(queued / current, 1) if current else None,
            drain_at_ceiling_s=round(queued / ceiling, 1) if ceiling else None,
            workers_for_ceiling=math.ceil(ceiling / per_worker) if per_worker else None,
            bound_by=dict(bound_by))

    def _fetch(self, sites: list[str]) -> Iterator[tuple[str, list[bytes | None]]]:
        for i in range(0, len(sites), _BATCH):
            chunk = sites[i:i + _BATCH]
            pipe = self.client.pipeline(transaction=False)
            for site in chunk:
                pipe.hmget(self.keys.site(self.keys_partition(site), site), _SITE_FIELDS)
            yield from zip(chunk, pipe.execute(), strict=True)

    def keys_partition(self, name: str) -> int:
        return partition_of(name, self.keys.partitions)

    def _domain_limits(self, paced: dict[str, _Site]) -> dict[str, tuple[float, float, bool]]:
        domains = {s.domain for s in paced.values()}
        return self._limits({d: self.keys.domain(self.keys_partition(d), d) for d in domains},
                            self.limits.domain_concurrency, self.limits.domain_delay_ms)

    def _address_limits(self, paced: dict[str, _Site]) -> dict[str, tuple[float, float, bool]]:
        addresses = {s.address for s in paced.values() if s.address}
        return self._limits({a: self.keys.ip_gate(a) for a in addresses},
                            self.limits.ip_concurrency, self.limits.ip_delay_ms)

    def _limits(self, records: dict[str, str], conc: float, delay_ms: float
                ) -> dict[str, tuple[float, float, bool]]:
        """Each domain's or address's concurrency and delay in force (an operator's
        override, else the settings) and whether it is paused."""
        names = sorted(records)
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.hmget(records[name], (IP_GATE.ctl_concurrency, IP_GATE.ctl_delay,
                                       IP_GATE.ctl_paused))  # (a domain's alike)
        return {name: (float(xc) if xc is not None else conc,
                       float(xd) if xd is not None else delay_ms, xp is not None)
                for name, (xc, xd, xp) in zip(names, pipe.execute(), strict=True)}

    @staticmethod
    def _cap_groups(paced: dict[str, _Site], scope: str,
                    limits: dict[str, tuple[float, float, bool]]) -> None:
        """Scale the sites of each domain (or address) down to what it allows."""
        groups: dict[str, list[_Site]] = defaultdict(list)
        for s in paced.values():
            key = s.domain if scope == "domain" else s.address
            if key is not None:
                groups[key].append(s)
        for key, members in groups.items():
            conc, delay, paused = limits.get(key, (0.0, 0.0, False))
            total = sum(s.rate for s in members)
            latency = sum(s.latency for s in members) / len(members)
            cap = 0.0 if paused else _cap(conc, delay, latency)
            if total > cap:
                scale = cap / total if total else 0.0
                for s in members:
                    s.rate *= scale
                    s.bound = "paused" if paused else scope
