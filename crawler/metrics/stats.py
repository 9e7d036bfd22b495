"""Scrapy's stats as Prometheus metrics, read when Prometheus scrapes.

A stats key such as ``downloader/response_status_count/404`` is one sample
of ``crawler_responses_total{code="404",class="4xx"}``. The mapping is a
table (:data:`COUNTERS`): a stats key, or a key prefix whose remainder
becomes one label. Keys are read from a copy of the stats dict taken under
the GIL (``dict.copy`` is atomic), so a scrape from the HTTP thread never
sees a half-updated dict. Label values come from a bounded set in practice
(status codes, exception types, the crawler's own reasons); nothing here
labels by host or URL.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


@dataclass(frozen=True, slots=True)
class Rule:
    """``key`` exactly (``label`` None) or every ``key<value>`` (the value is ``label``)."""

    name: str  # without the "_total" suffix of a counter
    key: str
    doc: str
    label: str | None = None
    fixed: tuple[tuple[str, str], ...] = ()  # labels every sample of this key gets


#: Counters (monotonic stats). Several rules may feed one metric name with
#: different fixed labels; their samples are merged.
COUNTERS: tuple[Rule, ...] = (
    Rule("crawler_requests", "downloader/request_count", "Requests sent to the downloader."),
    Rule("crawler_responses", "downloader/response_status_count/",
         "Responses received, by HTTP status code (and class).", "code"),
    Rule("crawler_response_bytes", "downloader/response_bytes",
         "Bytes of responses received (headers and bodies)."),
    Rule("crawler_exceptions", "downloader/exception_type_count/",
         "Download exceptions, by type.", "type"),
    Rule("crawler_retries", "retry/reason_count/", "Retries scheduled, by reason.", "reason"),
    Rule("crawler_retries_given_up", "retry/gave_up/",
         "URLs that reached the maximum attempts, by reason.", "reason"),
    Rule("crawler_requests_dropped", "frontier/refused/",
         "Requests not sent, by stage and reason.", "reason", (("stage", "frontier"),)),
    Rule("crawler_requests_dropped", "admission/refused/",
         "Requests not sent, by stage and reason.", "reason", (("stage", "admission"),)),
    Rule("crawler_requests_dropped", "guard/blocked/",
         "Requests not sent, by stage and reason.", "reason", (("stage", "address-guard"),)),
    Rule("crawler_requests_dropped", "download/aborted/",
         "Requests not sent, by stage and reason.", "reason", (("stage", "download"),)),
    Rule("crawler_requests_dropped", "scope/rejected/",
         "Requests not sent, by stage and reason.", "reason", (("stage", "scope"),)),
    Rule("crawler_scope_events", "scope/hops",
         "What the scope did besides dropping links, by event.", None, (("event", "hop"),)),
    Rule("crawler_scope_events", "scope/seed_redirects",
         "What the scope did besides dropping links, by event.", None,
         (("event", "seed_redirect"),)),
    Rule("crawler_scope_events", "scope/held_admitted",
         "What the scope did besides dropping links, by event.", None,
         (("event", "held_admitted"),)),
    Rule("crawler_scope_events", "scope/changes",
         "What the scope did besides dropping links, by event.", None, (("event", "change"),)),
    Rule("crawler_budget_urls_ended", "budget/ended",
         "Queued URLs ended as dead letters because their host or domain spent its budget."),
    Rule("crawler_budget_hosts_spent", "budget/sites_spent/",
         "Hosts this worker found with a spent budget, by whose (site, domain) and which "
         "(pages, bytes, seconds).", "budget"),
    Rule("crawler_robots_decisions", "robots/allowed", "Robots decisions on requests.",
         None, (("decision", "allowed"),)),
    Rule("crawler_robots_decisions", "robots/denied", "Robots decisions on requests.",
         None, (("decision", "denied"),)),
    Rule("crawler_robots_decisions", "robots/unchecked", "Robots decisions on requests.",
         None, (("decision", "unchecked"),)),
    Rule("crawler_robots_files", "robots/fetch/status/",
         "robots.txt fetches, by HTTP status or error.", "outcome"),
    Rule("crawler_robots_files", "robots/fetch/error/",
         "robots.txt fetches, by HTTP status or error.", "outcome"),
    Rule("crawler_robots_hosts_parked", "robots/hosts_parked",
         "Hosts whose robots.txt stayed unreachable: their URLs became dead letters."),
    Rule("crawler_guard_hosts_parked", "guard/hosts_parked",
         "Hosts whose name resolved to an address the guard refuses: their URLs "
         "became dead letters."),
    Rule("crawler_breaker_transitions", "breaker/",
         "Circuit breaker transitions (all hosts), by event.", "event"),
    Rule("crawler_backoff_host_holds", "backoff/host_holds",
         "429/503 answers that held their whole host back."),
    Rule("crawler_dns_lookups", "dns/lookups/",
         "DNS lookups (not cache hits), by result.", "result"),
    Rule("crawler_dns_cache_hits", "dns/cache_hits", "Names answered from the DNS cache."),
    Rule("crawler_dns_host_holds", "dns/hosts/held",
         "Hosts held because their lookup failed (SERVFAIL, timeout)."),
    Rule("crawler_dns_hosts_parked", "dns/hosts/parked/",
         "Hosts whose name did not resolve, so their URLs became dead letters, by kind.",
         "kind"),
    Rule("crawler_items", "item_scraped_count", "Items (pages) through the pipelines."),
    Rule("crawler_items_dropped", "item_dropped_count", "Items dropped by a pipeline."),
    Rule("crawler_warc_records", "warc/records/", "WARC response records written, by kind.",
         "kind"),
    Rule("crawler_warc_records", "warc/revisits", "WARC response records written, by kind.",
         None, (("kind", "revisit"),)),
    Rule("crawler_warc_payload_bytes", "warc/payload_bytes", "Payload bytes archived."),
    Rule("crawler_warc_errors", "warc/errors", "Answers the archive failed to write."),
    Rule("crawler_warc_backpressure_waits", "warc/backpressure_waits",
         "Times a download waited for room in the WARC writer's queue."),
    Rule("crawler_warc_writer_cpu_seconds", "warc/writer_cpu_seconds",
         "CPU seconds the WARC writer thread used (compression, digests, writes)."),
    Rule("crawler_leases", "frontier/leases/",
         "This worker's frontier leases, by event (claimed, done, retried, dead, ...).",
         "event"),
    Rule("crawler_links_offered", "frontier/offered",
         "URLs this worker offered to the frontier."),
    Rule("crawler_links_admitted", "frontier/admitted",
         "URLs this worker's offers added to the frontier (not seen before)."),
    Rule("crawler_duplicates", "dedup/",
         "Links to a page already known: exact (the same identity) or variant (another "
         "spelling, by a learned noise parameter), by kind.", "kind"),
    Rule("crawler_requests_dropped", "learned/dropped/",
         "Requests not sent, by stage and reason.", "reason", (("stage", "learned"),)),
    Rule("crawler_learning", "learning/",
         "What learning did: noise parameters learned or withdrawn, links rewritten, "
         "observation batches lost, by event.", "event"),
    Rule("crawler_learning", "traps/patterns",
         "What learning did: noise parameters learned or withdrawn, links rewritten, "
         "observation batches lost, by event.", None, (("event", "trap_patterns"),)),
    Rule("crawler_redis_errors", "frontier/redis_errors",
         "Frontier operations that failed on a Redis error."),
    Rule("crawler_frontier_stalls_repaired", "frontier/stalls_repaired",
         "Hosts the watchdog found waiting for nothing (or a wake missed) and woke: "
         "a bug of the frontier's, which should stay at 0."),
    Rule("crawler_storage_pauses", "storage/pauses",
         "Times this worker stopped claiming URLs for want of disk room or a failing archive."),
    Rule("crawler_feed_rows_lost", "feed/rows_lost",
         "Feed rows that could not be written (a full or failing disk)."),
    Rule("crawler_reactor_stalls", "reactor/stalls",
         "Times the reactor ran LOOPLAG_STALL seconds or more late."),
    Rule("crawler_seeds", "seeds/loaded", "Seed lines read.", None, (("result", "loaded"),)),
    Rule("crawler_seeds", "seeds/malformed", "Seed lines read.", None,
         (("result", "malformed"),)),
)

#: Gauges (point-in-time stats).
GAUGES: tuple[Rule, ...] = (
    Rule("crawler_warc_lag_seconds", "warc/lag_seconds",
         "Seconds between the download and the WARC write of the last record."),
    Rule("crawler_warc_lag_max_seconds", "warc/lag_max_seconds",
         "Largest download-to-write lag of the crawl so far."),
    Rule("crawler_storage_paused", "storage/paused",
         "1 while this worker claims nothing for want of disk room (WARC_MIN_FREE) or "
         "because the archive cannot write; 0 otherwise."),
    Rule("crawler_storage_free_bytes", "storage/free_bytes/",
         "Free bytes where the crawl writes, by place (warc_dir, jobdir, feed, ...).",
         "place"),
    Rule("crawler_reactor_lag_max_seconds", "reactor/lag_max",
         "Latest the reactor ran a timer so far (seconds past due)."),
)


class StatsCollector(Collector):
    """Yields the metrics of :data:`COUNTERS` and :data:`GAUGES` from a stats dict."""

    def __init__(self, stats: Any) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        values = self.stats.get_stats().copy()
        yield from families(values)


def families(values: Mapping[str, Any]) -> Iterator[Metric]:
    """The metric families of one snapshot of the stats."""
    counters: dict[str, CounterMetricFamily] = {}
    gauges: dict[str, GaugeMetricFamily] = {}
    for rules, made, kind in ((COUNTERS, counters, CounterMetricFamily),
                              (GAUGES, gauges, GaugeMetricFamily)):
        for rule in rules:
            family = made.get(rule.name)
            labels = _label_names(rule, rules)
            if family is None:
                family = made[rule.name] = kind(rule.name, rule.doc, labels=labels)
            for label_values, value in _samples(rule, values):
                family.add_metric([*label_values][: len(labels)], value)
    yield from counters.values()
    yield from gauges.values()
    yield duplicate_ratio(values)


def duplicate_ratio(values: Mapping[str, Any]) -> GaugeMetricFamily:
    """Duplicates of each kind / every link this worker offered or dropped as a
    variant: the share of links that named a page already known."""
    family = GaugeMetricFamily(
        "crawler_duplicate_ratio",
        "Links to a page already known / links offered (exact: the same identity; "
        "variant: another spelling, by a learned noise parameter), by kind.",
        labels=["kind"])
    links = sum(float(values.get(key, 0) or 0)
                for key in ("frontier/offered", "learned/dropped/duplicate-variant"))
    for kind in ("exact", "variant"):
        family.add_metric([kind], float(values.get(f"dedup/{kind}", 0) or 0) / links
                          if links else 0.0)
    return family


def _label_names(rule: Rule, rules: tuple[Rule, ...]) -> list[str]:
    """The labels of the metric ``rule`` feeds (the same for every rule of that name)."""
    first = next(r for r in rules if r.name == rule.name)
    names = [name for name, _ in first.fixed]
    if first.label:
        names.append(first.label)
    if first.name == "crawler_responses":
        names.append("class")
    return names


def _samples(rule: Rule, values: Mapping[str, Any]) -> Iterator[tuple[list[str], float]]:
    fixed = [value for _, value in rule.fixed]
    if rule.label is None:
        if rule.key in values and _number(values[rule.key]):
            yield fixed, float(values[rule.key])
        return
    for key, value in values.items():
        if key.startswith(rule.key) and len(key) > len(rule.key) and _number(value):
            label = key[len(rule.key):]
            extra = [f"{label[0]}xx"] if rule.name == "crawler_responses" else []
            yield [*fixed, label, *extra], float(value)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
