"""The robots policy's own decisions: cache time, pacing, redirects, stored form.

The rules themselves are tested in test_robots_rules.py, the frontier's side
in test_frontier_robots_store.py and whole crawls in test_robots_crawl.py.
"""

from __future__ import annotations

import pytest
from scrapy.http import Response
from scrapy.utils.test import get_crawler

import crawler.settings
from crawler.robots.fetch import Fetched, _fetched, _max_age, _redirect_target
from crawler.robots.policy import RobotsPolicy, decode_blob, encode_blob
from crawler.robots.rules import Rules, prepare


def _policy(**settings: object) -> RobotsPolicy:
    base = {k: getattr(crawler.settings, k) for k in dir(crawler.settings) if k.isupper()}
    return RobotsPolicy(get_crawler(settings_dict={**base, **settings}))


@pytest.mark.parametrize(
    ("max_age", "ttl_s"),
    [(None, 86400), (3600, 3600), (10 * 86400, 86400), (0, 900), (60, 900)],
    ids=["2.4-no-header-24h", "2.4-shorter-max-age", "2.4-never-over-24h",
         "max-age-0-floored", "max-age-under-floor"],
)
def test_cache_time_honours_a_shorter_max_age(max_age: int | None, ttl_s: int) -> None:
    assert _policy()._ttl_ms(Fetched(200, max_age=max_age)) == ttl_s * 1000


def test_max_age_is_read_from_cache_control() -> None:
    assert _max_age(b"public, max-age=600") == 600
    assert _max_age(b'max-age="30", must-revalidate') == 30
    assert _max_age(b"no-store") is None and _max_age(None) is None


@pytest.mark.parametrize(
    ("status", "location", "target"),
    [(301, b"/robots-new.txt", "http://a.test/robots-new.txt"),
     (308, b"https://b.test/robots.txt", "https://b.test/robots.txt"),
     (302, None, None),  # 2.3.1.2: no Location -> the 3xx itself ("unavailable")
     (200, b"/elsewhere", None), (304, b"/x", None)],
)
def test_redirect_targets(status: int, location: bytes | None, target: str | None) -> None:
    headers = {"Location": location} if location else {}
    response = Response("http://a.test/robots.txt", status=status, headers=headers)
    assert _redirect_target(response) == target


def test_a_stopped_download_is_a_truncated_file() -> None:
    response = Response("http://a.test/robots.txt", body=b"User-agent: *\n",
                        flags=["download_stopped"], headers={"Cache-Control": "max-age=99"})
    fetched = _fetched(response, redirects=2)
    assert (fetched.truncated, fetched.redirects, fetched.max_age) == (True, 2, 99)


def _rules(text: str) -> Rules:
    return Rules.parse(prepare(text.encode()), "BroadCrawl")


def test_pacing_without_a_robots_delay_is_the_projects() -> None:
    pacing = _policy().pacing("http://a.test:80", _rules("User-agent: *\nDisallow: /x\n"),
                              4, 1000, 0.5)
    assert (pacing.concurrency, pacing.delay_ms, pacing.floor_ms, pacing.first_gap_ms) == (
        4, 1000, 0, 500)


def test_crawl_delay_and_request_rate_slow_the_host_down() -> None:
    policy = _policy()
    pacing = policy.pacing("h", _rules("User-agent: *\nCrawl-delay: 2\n"), 4, 1000, 0.5)
    # The Crawl-delay is a floor waited exactly; the project's delay keeps its jitter
    # (so 2 s apart, not 2-3 s: jitter on the robots delay would stretch it by half).
    assert (pacing.concurrency, pacing.delay_ms, pacing.floor_ms) == (1, 1000, 2000)
    # Request-rate 1/5: one request per 5 s; the larger of the two wins
    both = policy.pacing("h", _rules("User-agent: *\nCrawl-delay: 2\nRequest-rate: 1/5\n"),
                         4, 1000, 0.5)
    assert (both.delay_ms, both.floor_ms) == (1000, 5000)
    # a project delay longer than the robots one stays the delay; the floor holds
    slower = policy.pacing("h", _rules("User-agent: *\nCrawl-delay: 0.5\n"), 4, 3000, 0.5)
    assert (slower.concurrency, slower.delay_ms, slower.floor_ms) == (1, 3000, 500)


def test_an_absurd_crawl_delay_is_clamped_and_counted() -> None:
    policy = _policy(ROBOTS_MAX_CRAWL_DELAY=30)
    pacing = policy.pacing("h", _rules("User-agent: *\nCrawl-delay: 86400\n"), 4, 1000, 0.5)
    assert (pacing.delay_ms, pacing.floor_ms) == (1000, 30_000)
    assert policy.stats.get_value("robots/crawl_delay/clamped") == 1


def test_stored_form_round_trips_and_a_broken_one_allows_nothing() -> None:
    text = prepare(b"User-agent: *\nDisallow: /private/\n")
    blob = encode_blob("rules", Fetched(200, b"User-agent: *\nDisallow: /private/\n"), text)
    assert decode_blob(blob) == ("rules", text)
    kind, broken = decode_blob(b"R1{not json\nxx")
    rules = Rules.parse(broken, "BroadCrawl")
    assert kind == "rules" and not rules.allowed("http://a.test/")


def test_the_agent_is_the_product_token() -> None:
    assert _policy().settings.agent == "BroadCrawl"
    assert _policy(ROBOTSTXT_USER_AGENT=None, USER_AGENT="Other/2.0 (+x)").settings.agent == "Other"
