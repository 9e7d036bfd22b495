"""The shared frontier's state as Prometheus metrics, exported by one worker.

Every worker of a crawl sees the same frontier. If each exported it, a
``sum()`` over workers would count every URL once per worker; so the worker
with the smallest id among those alive (heartbeats in ``<namespace>:workers``)
is the *reporter* and the only one exporting the ``crawler_frontier_*``
state; every worker exports ``crawler_frontier_reporter`` (1 on the
reporter), so a dashboard can tell. When the reporter stops, the next worker
takes over once its heartbeat is gone (one lease, 10 s at least: see
:mod:`crawler.frontier.workers`).

Reads are cheap and rate-limited: one pipelined round trip over the
partitions' count hashes and ready sets at most every ``interval`` seconds
(:meth:`FrontierStatus.read` without its scan), and the oldest queued URL's
age, which scans the host queues (about a second per 100k hosts), at most
every ``oldest_interval`` seconds and only on the reporter. A scrape never
waits on Redis longer than the client's timeout; on an error the last good
values are served and the error is counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from crawler.frontier.account import Account
from crawler.frontier.capacity import Capacity
from crawler.frontier.keys import STATES, Count, Keys
from crawler.frontier.schema import refused_at_lease
from crawler.frontier.status import FrontierStatus, Status
from crawler.frontier.values import Limits
from crawler.frontier.workers import DEFAULT_LEASE_SECONDS

logger = logging.getLogger(__name__)

#: Frontier counts that only grow, exported as counters.
OFFER_RESULTS = {Count.DUP: "duplicate", Count.REFUSED: "refused", Count.BLOCKED: "blocked"}


class FrontierCollector(Collector):
    """Frontier metrics for Prometheus (thread-safe: scrapes may overlap)."""

    def __init__(self, client: redis.Redis, keys: Keys, worker: str, *,
                 interval: float = 5.0, oldest_interval: float = 60.0,
                 lease_seconds: float = DEFAULT_LEASE_SECONDS,
                 limits: Limits | None = None,
                 active: Callable[[], bool] = lambda: True) -> None:
        self.reader = FrontierStatus(client, keys, lease_seconds=lease_seconds, limits=limits)
        self.worker = worker
        #: False once this worker's frontier closes: it has left the workers
        #: (or is about to), so it no longer reports, whatever its cached
        #: status says; the next worker takes over at its next read.
        self.active = active
        self.interval = interval
        self.oldest_interval = oldest_interval
        self._lock = threading.Lock()
        self._status: Status | None = None
        self._read_at = 0.0
        self._oldest: float | None = None
        self._capacity: Capacity | None = None
        self._oldest_at = 0.0
        self.errors = 0

    def collect(self) -> Iterator[Metric]:
        status = self.refresh()
        frontier = self.reader.keys.namespace
        reporter = status is not None and self.is_reporter(status)
        gauge = GaugeMetricFamily(
            "crawler_frontier_reporter",
            "1 on the one worker that exports the shared frontier's state.",
            labels=["frontier"])
        gauge.add_metric([frontier], 1.0 if reporter else 0.0)
        yield gauge
        errors = CounterMetricFamily("crawler_frontier_metrics_errors",
                                     "Failed reads of the frontier for metrics.",
                                     labels=["frontier"])
        errors.add_metric([frontier], self.errors)
        yield errors
        if reporter and status is not None:
            yield from self.families(status, frontier)

    def refresh(self) -> Status | None:
        """The cached status, read again when older than ``interval``."""
        with self._lock:
            now = time.monotonic()
            if self._status is not None and now - self._read_at < self.interval:
                return self._status
            try:
                status = self.reader.read(oldest=False)
                if self.is_reporter(status) and (
                        now - self._oldest_at >= self.oldest_interval):
                    self._oldest, self._capacity = self.reader.scanned(status)
                    self._oldest_at = now
            except (redis.RedisError, OSError) as exc:
                self.errors += 1
                logger.debug("Frontier metrics: %s", exc)
                return self._status
            self._status, self._read_at = status, now
            return status

    def close(self) -> None:
        """Close the client (the frontier's Redis may stop with the spider)."""
        self.reader.client.close()

    def is_reporter(self, status: Status) -> bool:
        alive = sorted(w.id for w in status.workers if w.state == "alive")
        return bool(alive) and alive[0] == self.worker and self.active()

    def families(self, status: Status, frontier: str) -> Iterator[Metric]:
        counts = status.counts
        urls = GaugeMetricFamily("crawler_frontier_urls", "URLs in the frontier, by state.",
                                 labels=["frontier", "state"])
        for state in STATES:
            urls.add_metric([frontier, state], counts.get(state, 0))
        lease_refused = sum(refused_at_lease(counts).values())
        urls.add_metric([frontier, "refused"], lease_refused)
        yield urls
        hosts = GaugeMetricFamily(
            "crawler_frontier_hosts",
            "Hosts with URLs by state: ready (may be claimed now), waiting (paced, backing "
            "off or in cool-down until a later time), idle (every slot busy, or nothing queued).",
            labels=["frontier", "state"])
        for state, key in (("ready", "ready_now"), ("waiting", "paced"), ("idle", "other")):
            hosts.add_metric([frontier, state], status.hosts.get(key, 0))
        yield hosts
        breaker = GaugeMetricFamily("crawler_frontier_hosts_breaker",
                                    "Host names by circuit breaker state (open, parked).",
                                    labels=["frontier", "state"])
        breaker.add_metric([frontier, "open"], counts.get(Count.BREAKER_OPEN, 0))
        breaker.add_metric([frontier, "parked"], counts.get(Count.BREAKER_PARKED, 0))
        yield breaker
        yield _gauge("crawler_frontier_revisits_waiting",
                     "Done URLs kept for a revisit (FRONTIER_REVISIT_AFTER), not due yet.",
                     frontier, counts.get(Count.REVISIT, 0))
        revisited = CounterMetricFamily("crawler_frontier_revisits",
                                        "Done URLs that came due and were queued again.",
                                        labels=["frontier"])
        revisited.add_metric([frontier], counts.get(Count.REVISITED, 0))
        yield revisited
        if status.next_revisit_s is not None:
            yield _gauge("crawler_frontier_next_revisit_seconds",
                         "Seconds until the next done URL is due for its revisit.",
                         frontier, status.next_revisit_s)
        yield from _offer_families(status, frontier, lease_refused)
        yield from _account_families(status.account, frontier)
        yield from _lease_and_robots_families(counts, frontier)
        if self._oldest is not None or not counts.get(Count.QUEUED):
            age = self._oldest if counts.get(Count.QUEUED) else 0.0
            yield _gauge("crawler_frontier_oldest_queued_age_seconds",
                         "How long the oldest queued URL has waited (within 10 s; read at "
                         "most once a minute; 0 when nothing is queued).", frontier, age or 0.0)
        if self._capacity is not None:
            yield from _capacity_families(self._capacity, frontier)
        workers = GaugeMetricFamily("crawler_frontier_workers",
                                    "Workers by heartbeat state (alive, gone).",
                                    labels=["frontier", "state"])
        for state in ("alive", "gone"):
            workers.add_metric([frontier, state],
                               sum(1 for w in status.workers if w.state == state))
        yield workers


def _lease_and_robots_families(counts: dict[str, int], frontier: str) -> Iterator[Metric]:
    """Leases that expired, and robots.txt fetches by result."""
    expired = CounterMetricFamily(
        "crawler_frontier_leases_expired",
        "Leases that expired (their worker vanished) and were put back in the queues.",
        labels=["frontier"])
    expired.add_metric([frontier], counts.get(Count.EXPIRED, 0))
    yield expired
    robots = CounterMetricFamily("crawler_frontier_robots_fetches",
                                 "robots.txt fetches stored by every worker, by result.",
                                 labels=["frontier", "result"])
    robots.add_metric([frontier, "fetched"], counts.get(Count.ROBOTS_FETCHED, 0))
    robots.add_metric([frontier, "failed"], counts.get(Count.ROBOTS_FAILED, 0))
    yield robots


def _account_families(account: Account, frontier: str) -> Iterator[Metric]:
    """The crawl's account beside the states (pages fetched are ``urls{state="done"}``,
    refusals ``refused{reason}``): what every other view shows."""
    hosts = CounterMetricFamily("crawler_frontier_hosts_fetched",
                                "Hosts with at least one page fetched, since the crawl began.",
                                labels=["frontier"])
    hosts.add_metric([frontier], account.hosts_fetched)
    yield hosts
    seeds = CounterMetricFamily("crawler_frontier_seeds",
                                "Seed URLs admitted, since the crawl began.", labels=["frontier"])
    seeds.add_metric([frontier], account.seeds)
    yield seeds
    dead = GaugeMetricFamily("crawler_frontier_dead_letters",
                             "Dead letters by reason (the labels of scrapy frontier dead "
                             "--reason); a requeue takes them off.", labels=["frontier", "reason"])
    parked = GaugeMetricFamily("crawler_frontier_hosts_parked",
                               "Hosts parked by reason; their URLs wait as dead letters of "
                               "that reason.", labels=["frontier", "reason"])
    for family, found in ((dead, account.dead), (parked, account.parked)):
        for reason, n in found.items():
            family.add_metric([frontier, reason], n)
        yield family


def _offer_families(status: Status, frontier: str, lease_refused: int) -> Iterator[Metric]:
    """Offers by result, the duplicate ratio and refusals by reason."""
    counts = status.counts
    offers = CounterMetricFamily(
        "crawler_frontier_offers",
        "URLs offered to the frontier by every worker, by result.",
        labels=["frontier", "result"])
    admitted = sum(counts.get(state, 0) for state in STATES) + lease_refused
    offers.add_metric([frontier, "admitted"], admitted)
    for key, result in OFFER_RESULTS.items():
        offers.add_metric([frontier, result], counts.get(key, 0))
    yield offers
    offered = admitted + sum(counts.get(key, 0) for key in OFFER_RESULTS)
    yield _gauge("crawler_frontier_duplicate_ratio",
                 "Offers refused as already seen / all offers, since the crawl started.",
                 frontier, counts.get(Count.DUP, 0) / offered if offered else 0.0)
    refused = CounterMetricFamily(
        "crawler_frontier_refused",
        "URLs refused by every worker and the frontier, by reason (a trap rule, the "
        "address guard, a host budget...; scrapy frontier refused lists them).",
        labels=["frontier", "reason"])
    for reason, n in status.refused.items():
        refused.add_metric([frontier, reason], n)
    yield refused


def _capacity_families(cap: Capacity, frontier: str) -> Iterator[Metric]:
    """The ceiling and the time to drain (crawler/frontier/capacity.py): the
    signal for scheduling or autoscaling workers."""
    yield _gauge("crawler_frontier_ceiling_pages_per_second",
                 "Pages a second the crawl could reach with unlimited workers: the sum of "
                 "what politeness allows each site with queued URLs (read at most once a "
                 "minute).", frontier, cap.ceiling)
    if cap.current is not None:
        yield _gauge("crawler_frontier_pages_per_second",
                     "Answers a second the alive workers received lately (their heartbeats).",
                     frontier, cap.current)
    drain = GaugeMetricFamily(
        "crawler_frontier_drain_seconds",
        "Time to fetch what is queued now: at the current pace, and at the ceiling.",
        labels=["frontier", "at"])
    for at, value in (("current", cap.drain_at_current_s), ("ceiling", cap.drain_at_ceiling_s)):
        if value is not None:
            drain.add_metric([frontier, at], value)
    yield drain
    if cap.workers_for_ceiling is not None:
        yield _gauge("crawler_frontier_workers_for_ceiling",
                     "Workers as fast as today's that would reach the ceiling.",
                     frontier, cap.workers_for_ceiling)


def _gauge(name: str, doc: str, frontier: str, value: float) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily(name, doc, labels=["frontier"])
    gauge.add_metric([frontier], value)
    return gauge
