"""The retry policy's decisions: Retry-After, backoff with jitter, give-up, health."""

from __future__ import annotations

import email.utils
import random
import time

import pytest
from scrapy import Request, Spider
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from scrapy.utils.test import get_crawler
from twisted.internet.error import ConnectionRefusedError, TimeoutError

import crawler.settings
from crawler.deadletter import DeadReason
from crawler.lease import TICKET_META, Ticket, Verdict
from crawler.middlewares.retry import RetryPolicyMiddleware, full_jitter, retry_after_seconds

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(b"3", 3.0), (b" 120 ", 120.0), ("0", 0.0),
     (email.utils.formatdate(NOW + 30, usegmt=True), 30.0),
     (email.utils.formatdate(NOW - 300, usegmt=True), 0.0),  # a past date means now
     (b"soon", None), (b"-5", None), (b"1.5", None), (b"", None), (None, None),
     (b"Mon, 99 Foo 2026 25:61:00 GMT", None)],
    ids=["delta", "delta-spaces", "zero", "http-date", "past-date", "garbage", "negative",
         "fraction", "empty", "absent", "broken-date"],
)
def test_retry_after_forms(value: bytes | str | None, seconds: float | None) -> None:
    got = retry_after_seconds(value, NOW)
    assert got == seconds if seconds is None else got == pytest.approx(seconds, abs=1)


def test_full_jitter_spreads_over_the_whole_window() -> None:
    rnd = random.Random(7)
    waits = [full_jitter(3, 1.0, 600.0, rnd) for _ in range(2000)]
    assert 0 <= min(waits) < 0.5 and 7.5 < max(waits) <= 8.0  # window: 1 x 2^3
    bins = [sum(1 for w in waits if k <= w < k + 1) for k in range(8)]
    assert all(150 < n < 350 for n in bins), bins  # uniform: 250 a second
    assert max(full_jitter(30, 1.0, 600.0, rnd) for _ in range(100)) <= 600.0


def _mw(**settings: object) -> RetryPolicyMiddleware:
    base = {k: getattr(crawler.settings, k) for k in dir(crawler.settings) if k.isupper()}
    return RetryPolicyMiddleware(get_crawler(settings_dict={**base, **settings}))


def _request(**meta: object) -> Request:
    return Request("http://a.test/p", meta={TICKET_META: Ticket("tok"), **meta})


def _verdict(request: Request) -> Verdict | None:
    return request.meta[TICKET_META].verdict


def test_429_with_retry_after_waits_in_the_frontier_and_holds_the_host() -> None:
    mw, request = _mw(), _request()
    response = Response(request.url, status=429, headers={"Retry-After": "3"})
    with pytest.raises(IgnoreRequest):
        mw.process_response(request, response)
    outcome = _verdict(request)
    assert outcome is not None and outcome.op == "retry" and outcome.health == "ok"
    assert int(outcome.arg) == pytest.approx(3000, abs=1000)
    assert outcome.hold_ms == int(outcome.arg)  # the whole host waits as long
    assert request.meta["retry_times"] == 1


def test_a_huge_retry_after_is_capped() -> None:
    mw, request = _mw(RETRY_AFTER_MAX=60), _request()
    with pytest.raises(IgnoreRequest):
        mw.process_response(request, Response(request.url, status=503,
                                              headers={"Retry-After": str(365 * 86400)}))
    assert _verdict(request) == Verdict("retry", "60000", 60000, "fail")
    assert mw.stats.get_value("retry/retry_after_capped") == 1


def test_500_backs_off_without_holding_the_host_and_fails_the_breaker() -> None:
    mw, request = _mw(RETRY_BACKOFF_BASE=1.0), _request(retry_times=2)
    with pytest.raises(IgnoreRequest):
        mw.process_response(request, Response(request.url, status=500))
    outcome = _verdict(request)
    assert outcome is not None and outcome.op == "retry"
    assert 0 <= int(outcome.arg) <= 4000 and outcome.hold_ms == 0  # 1 x 2^2 s
    assert outcome.health == "fail"


def test_after_max_attempts_the_url_is_dead_with_its_reason() -> None:
    mw, request = _mw(RETRY_TIMES=3), _request(retry_times=3)
    response = Response(request.url, status=503)
    assert mw.process_response(request, response) is response  # the spider sees it
    outcome = _verdict(request)
    assert outcome is not None and outcome.op == "dead"
    reason = DeadReason.parse(outcome.arg)
    assert (reason.reason, reason.error, reason.attempts) == ("http-503", "HTTP 503", 4)
    assert reason.time is not None and abs(reason.time - time.time()) < 5


def test_network_errors_retry_and_fail_the_breaker_others_do_not() -> None:
    mw = _mw()
    for error in (ConnectionRefusedError(), TimeoutError()):
        request = _request()
        with pytest.raises(IgnoreRequest):
            mw.process_exception(request, error)
        outcome = _verdict(request)
        assert outcome is not None and outcome.health == "fail"
    request = _request()
    assert mw.process_exception(request, ValueError("not transient")) is None
    assert _verdict(request) is None


def test_answers_that_are_not_retried_still_report_health() -> None:
    mw = _mw()
    for status, health in ((200, "ok"), (404, "ok"), (501, "fail")):
        request = _request()
        mw.process_response(request, Response(request.url, status=status))
        assert _verdict(request) == Verdict("done", health=health)
    plain = Request("http://a.test/robots.txt")  # not from the frontier: left alone
    mw.process_response(plain, Response(plain.url, status=503))
    assert TICKET_META not in plain.meta


def test_under_scrapy_s_scheduler_a_retry_is_scrapy_s_retry() -> None:
    mw = _mw(SCHEDULER="scrapy.core.scheduler.Scheduler", RETRY_TIMES=2)
    mw.crawler.spider = Spider.from_crawler(mw.crawler, name="plain")
    request = Request("http://a.test/p")
    for attempt in (1, 2):
        again = mw.process_response(request, Response(request.url, status=503,
                                                      headers={"Retry-After": "60"}))
        assert isinstance(again, Request) and again.url == request.url
        assert again.meta["retry_times"] == attempt and again.dont_filter
        request = again
    last = Response(request.url, status=503)
    assert mw.process_response(request, last) is last  # RETRY_TIMES reached: the spider's
    assert mw.stats.get_value("retry/count") == 2
    assert mw.stats.get_value("retry/max_reached") == 1
    failed = mw.process_exception(Request("http://a.test/q"), ConnectionRefusedError())
    assert isinstance(failed, Request) and failed.meta["retry_times"] == 1
    assert mw.process_exception(Request("http://a.test/r"), ValueError("no")) is None
    kept = Request("http://a.test/s", meta={"dont_retry": True})
    assert mw.process_response(kept, Response(kept.url, status=503)).status == 503
