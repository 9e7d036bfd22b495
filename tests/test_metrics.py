"""Metrics plumbing without a crawl: ports, the stats mapping, the endpoint's text."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from crawler.metrics.server import NoFreePort, parse_ports, serve, stop
from crawler.metrics.stats import StatsCollector


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.mark.parametrize(("value", "expected"), [
    ("9410", range(9410, 9411)), (9410, range(9410, 9411)), ("9410-9412", range(9410, 9413)),
    (" 0 ", range(0, 1)),
])
def test_ports_are_a_port_or_a_range(value: str | int, expected: range) -> None:
    assert parse_ports(value) == expected


@pytest.mark.parametrize("value", ["", "abc", "9430-9410", "70000", "1-2-3"])
def test_bad_ports_are_refused_with_the_setting_named(value: str) -> None:
    with pytest.raises(ValueError, match="PROMETHEUS_PORT"):
        parse_ports(value)


def _free_port_pair() -> int:
    """A port p such that p and p+1 were free a moment ago."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port < 65535:
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no two free ports in a row")


def test_a_second_worker_takes_the_next_port_and_a_full_range_is_an_error() -> None:
    port = _free_port_pair()
    ports = range(port, port + 2)
    first = serve(CollectorRegistry(), "127.0.0.1", ports)
    second = serve(CollectorRegistry(), "127.0.0.1", ports)
    try:
        assert (first[2], second[2]) == (port, port + 1)
        assert first[0].server_address[0] == "127.0.0.1"
        with pytest.raises(NoFreePort, match=f"{port}-{port + 1}"):
            serve(CollectorRegistry(), "127.0.0.1", ports)
    finally:
        stop(*first[:2])
        stop(*second[:2])


def test_stats_become_labelled_counters_at_scrape_time() -> None:
    stats = MemoryStatsCollector(get_crawler())
    registry = CollectorRegistry()
    registry.register(StatsCollector(stats))
    server, thread, port = serve(registry, "127.0.0.1", range(0, 1))
    url = f"http://127.0.0.1:{port}/metrics"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        stats.set_value("downloader/request_count", 7)
        stats.set_value("downloader/response_status_count/200", 5)
        stats.set_value("downloader/response_status_count/503", 2)
        stats.set_value("retry/reason_count/http-503", 2)
        stats.set_value("frontier/refused/address-blocked", 1)
        stats.set_value("warc/revisits", 3)
        stats.set_value("warc/records/page", 4)
        stats.set_value("start_time", "not a number")  # not exported, not an error
        first = _samples(opener.open(url, timeout=5).read().decode())
        stats.inc_value("downloader/request_count", 3)  # read again at the next scrape
        second = _samples(opener.open(url, timeout=5).read().decode())
    finally:
        stop(server, thread)
    assert first[("crawler_requests_total", ())] == 7
    assert second[("crawler_requests_total", ())] == 10
    assert first[("crawler_responses_total", (("class", "5xx"), ("code", "503")))] == 2
    assert first[("crawler_responses_total", (("class", "2xx"), ("code", "200")))] == 5
    assert first[("crawler_retries_total", (("reason", "http-503"),))] == 2
    assert first[("crawler_requests_dropped_total",
                  (("reason", "address-blocked"), ("stage", "frontier")))] == 1
    assert first[("crawler_warc_records_total", (("kind", "revisit"),))] == 3
    assert first[("crawler_warc_records_total", (("kind", "page"),))] == 4
    assert not any("start_time" in name for name, _ in first)
