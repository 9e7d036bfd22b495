"""Admission rules: traps as plain decisions, and the middleware's host budget."""

from __future__ import annotations

import pytest
from scrapy import Request
from scrapy.utils.test import get_crawler

from crawler.admission import TrapRules
from crawler.middlewares.admission import AdmissionMiddleware


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://a.test/p/1", None),
        ("http://a.test/calendar/2026/05", None),
        ("http://a.test/calendar/2031/05", "trap-calendar"),
        ("http://a.test/calendar/1990/01", "trap-calendar"),
        ("http://a.test/events?date=1971-01-01", "trap-calendar"),
        ("http://a.test/events?month=1&year=2090", "trap-calendar"),
        ("http://a.test/products/1850", None),
        ("http://a.test/a/b/a/b/a/b", "trap-repeated-segment"),
        ("http://a.test/a/b/a/b", None),
        ("http://a.test/" + "/".join(f"s{i}" for i in range(30)), "trap-deep-path"),
        ("http://a.test/?" + "&".join(f"k{i}=1" for i in range(20)), None),
        ("http://a.test/?" + "&".join(f"k{i}=1" for i in range(40)), "trap-many-params"),
        # dates by their shape or their parameter's name, never a bare number
        ("http://a.test/news/2031-05-01-launch.html", "trap-calendar"),
        ("http://a.test/cal?date=20310501", "trap-calendar"),
        ("http://a.test/cal?from=1950-01&view=month", "trap-calendar"),
        ("http://a.test/pub/18204", None),
        ("http://a.test/issue?@action=search&bpo=18011", None),
        ("http://a.test/wiki/Q190512", None),
        ("http://a.test/title/tt1853728/", None),
        ("http://a.test/item?id=18995", None),
        ("http://a.test/2019/05/17/a-story", None),
        # a run repeated in a row, not a name met again
        ("http://a.test/django/django/blob/main/django/template/context.py", None),
        ("http://a.test/x/x/x", "trap-repeated-segment"),
        ("http://a.test/a/b/a/b/a/", "trap-repeated-segment"),
        ("http://a.test/src/src/main.c", None),
        ("http://a.test/docs/a/b/c/b/c/b/c/", "trap-repeated-segment"),
    ],
)
def test_trap_rules(url: str, reason: str | None) -> None:
    assert TrapRules().check(url, year=2026) == reason


def test_rules_can_be_switched_off() -> None:
    rules = TrapRules(max_segment_repeats=0, years_past=0, years_future=0)
    assert rules.check("http://a.test/a/a/a/a/1900/01", year=2026) is None


def _middleware(**settings: object) -> AdmissionMiddleware:
    crawler = get_crawler(settings_dict=settings)
    crawler.stats.open_spider()
    return AdmissionMiddleware.from_crawler(crawler)


def test_host_budget_counts_distinct_canonical_urls() -> None:
    mw = _middleware(ADMISSION_MAX_PAGES_PER_HOST=2)
    admit = lambda url: mw.get_processed_request(Request(url), None) is not None  # noqa: E731
    assert admit("http://a.test/1")
    assert admit("http://A.test:80/1?utm_source=x")  # same page: costs nothing
    assert admit("http://a.test/2")
    assert not admit("http://a.test/3")
    assert admit("https://a.test/3")  # another authority, another budget
    assert admit("http://b.test/3")
    stats = mw.stats.get_stats()
    assert stats["admission/refused/host-budget"] == 1
    assert stats["admission/admitted"] == 5


def test_traps_and_non_http_are_refused_with_stats() -> None:
    mw = _middleware()
    assert mw.get_processed_request(Request("http://a.test/x/x/x"), None) is None
    assert mw.get_processed_request(Request("ftp://a.test/"), None) is None
    internal = Request("http://a.test/x/x/x", meta={"dont_admit": True})
    assert mw.get_processed_request(internal, None) is internal
    stats = mw.stats.get_stats()
    assert stats["admission/refused/trap-repeated-segment"] == 1
    assert stats["admission/refused/not-http-url"] == 1
