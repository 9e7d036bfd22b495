"""The DNS outcomes' log (crawler/scheduling/dnsoutcomes.py): one INFO line per
name and outcome for the crawl's lifetime, the repeats at DEBUG, driven on a
real frontier (the lookups themselves: tests/test_dns.py; the
frontier's DNS state: tests/test_dns_state.py).

A failing nameserver fails every name again at each hold's end: an INFO line per
attempt was hundreds a minute, and told the operator nothing new after the first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from crawler.dns.failures import LookupTimeout, NameNotFound, ServerFailure
from crawler.frontier.dnsstate import DNSRetry
from crawler.proxies import ProxyRoutes
from crawler.scheduling.dnsoutcomes import DnsOutcomes
from tests.frontier_harness import Harness, admission

RETRY = DNSRetry(base_ms=200, cap_ms=300, max_attempts=4)
HTTP, HTTPS, GONE = "http://a.test:80", "https://a.test:443", "http://gone.test:80"
LOGGER = "crawler.scheduling.dnsoutcomes"


@pytest.fixture
def harness(make_harness: Callable[..., Harness]) -> Harness:
    h = make_harness("dnslog", clock=True, concurrency=4, delay_ms=0, lease_ms=60_000)
    h.run(h.frontier.admit([admission(u) for u in (
        "http://a.test/0", "http://a.test/1", "https://a.test/2", "http://gone.test/3")]))
    return h


@pytest.fixture
def step(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> Iterator[DnsOutcomes]:
    """The outcomes on the harness's frontier. No resolver is installed: the
    nameservers count as answering, so every failure counts against its name."""
    monkeypatch.setattr("crawler.dns.resolver._installed", None)
    crawler = get_crawler()
    yield DnsOutcomes(harness.frontier, RETRY, ProxyRoutes.from_settings(crawler.settings),
                      MemoryStatsCollector(crawler))


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == level]


def test_one_info_line_per_name_and_outcome_the_repeats_at_debug(
        harness: Harness, step: DnsOutcomes, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)

    def fail(host: str, failure: Exception, then_ms: int = 0) -> None:
        harness.run(step.name_failed(host, failure))
        harness.clock.advance(then_ms)

    fail(HTTP, ServerFailure("a.test"))  # attempt 1: the name's first servfail
    fail(HTTP, ServerFailure("a.test"), 400)  # the same hold: not a new attempt
    fail(HTTP, ServerFailure("a.test"), 400)  # attempt 2
    fail(HTTPS, LookupTimeout("a.test"), 400)  # attempt 3, the name's first timeout
    fail(HTTPS, LookupTimeout("a.test"), 400)  # attempt 4: parked
    fail(HTTP, ServerFailure("a.test"))  # a URL claimed before the park: parked again
    fail(GONE, NameNotFound("gone.test"))  # parked at once
    fail(GONE, NameNotFound("gone.test"))

    info = _lines(caplog, logging.INFO)
    assert len(info) == 4, info
    assert info[0] == "DNS: a.test failed (servfail), attempt 1: host held 0.2 s"
    assert info[1] == "DNS: a.test failed (timeout), attempt 3: host held 0.3 s"
    assert info[2].startswith("DNS: host a.test parked (dns-failed): 3 queued URL(s)")
    # The park is the name's, every scheme and port: so is the requeue it names.
    assert info[2].endswith("requeue --reason dns-failed --host a.test)")
    assert info[3].startswith("DNS: host gone.test parked (dns-nxdomain): 1 queued URL(s)")
    debug = _lines(caplog, logging.DEBUG)
    assert debug[0] == "DNS: a.test failed (servfail), attempt 2: host held 0.3 s"
    assert [line.split(" parked")[0] for line in debug[1:]] == [
        "DNS: host a.test", "DNS: host gone.test"]
    stats = step.stats
    assert stats.get_value("dns/hosts/held") == 3  # every hold is still counted
    assert stats.get_value("dns/dns_jobs/servfail") == 4
    assert stats.get_value("dns/hosts/parked/failed") == 1  # once per name
    assert stats.get_value("dns/hosts/parked/nxdomain") == 1
