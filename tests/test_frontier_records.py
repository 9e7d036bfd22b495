"""Requests as JSON records: round trip, and refusals that name the field."""

from __future__ import annotations

import json
import re

import pytest
from scrapy import Request, Spider

from crawler.frontier.records import RecordError, from_record, to_record
from crawler.sitemaps import LASTMOD_META
from crawler.spiders.broad import BroadSpider
from crawler.urls import VERBATIM_META


class _Spider(Spider):
    name = "s"

    def parse(self, response):
        return None

    def parse_item(self, response):
        return None

    def on_error(self, failure):
        return None


KEYS = ("referrer", "retry_times")


def test_round_trip_keeps_what_matters() -> None:
    spider = _Spider()
    request = Request("http://a.test/x", callback=spider.parse_item, errback=spider.on_error,
                      priority=-3, meta={"depth": 2, "referrer": "http://a.test/",
                                         "retry_times": 1, "not_listed": object()},
                      cb_kwargs={"k": [1, 2]})
    record = to_record(request, "http://a.test/x", spider, KEYS)
    assert json.loads(record) == {"u": "http://a.test/x", "d": 2, "p": -3, "cb": "parse_item",
                                  "eb": "on_error", "k": {"k": [1, 2]},
                                  "m": {"referrer": "http://a.test/", "retry_times": 1}}
    back = from_record(record, spider)
    assert (back.url, back.priority, back.cb_kwargs) == ("http://a.test/x", -3, {"k": [1, 2]})
    assert back.callback == spider.parse_item and back.errback == spider.on_error
    assert back.meta == {"depth": 2, "referrer": "http://a.test/", "retry_times": 1,
                         VERBATIM_META: True}
    assert back.dont_filter


def test_a_sitemaps_lastmod_rides_last_in_the_record_and_comes_back() -> None:
    """The frontier keeps when a sitemap said the page changed ("lm"), after
    the depth and priority its scripts read in place, and a claimed
    request carries it again (a retry's record keeps it)."""
    spider = _Spider()
    request = Request("http://a.test/x", priority=2, meta={LASTMOD_META: 1_764_979_200})
    record = to_record(request, "http://a.test/x", spider, KEYS)
    assert record == '{"u":"http://a.test/x","d":0,"p":2,"lm":1764979200}'
    assert from_record(record, spider).meta[LASTMOD_META] == 1_764_979_200
    with pytest.raises(RecordError, match="'lm': str"):
        from_record('{"u": "http://a.test/x", "lm": "2026-12-06"}', spider)


def test_default_callback_is_left_out() -> None:
    spider = _Spider()
    record = to_record(Request("http://a.test/", callback=spider.parse), "http://a.test/",
                       spider, KEYS)
    assert record == '{"u":"http://a.test/","d":0}'
    assert from_record(record, spider).callback == spider.parse


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"method": "POST"}, "method"),
        ({"body": b"x"}, "body"),
        ({"callback": lambda r: None}, "callback"),
        ({"cb_kwargs": {"x": object()}}, "cb_kwargs"),
        ({"meta": {"referrer": {1, 2}}}, "meta['referrer']"),
    ],
)
def test_unserializable_requests_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(RecordError, match=re.escape(f"field '{field}'")):
        to_record(Request("http://a.test/", **kwargs), "http://a.test/", _Spider(), KEYS)


@pytest.mark.parametrize(
    ("url", "host", "stored"),
    [
        ("http://a.test/p/1?q=2", "http://a.test:80", "/p/1?q=2"),
        ("https://a.test/", "https://a.test:443", "/"),
        ("http://a.test:8080/x", "http://a.test:8080", "/x"),
        ("http://[::1]:8080/x", "http://[::1]:8080", "/x"),
    ],
)
def test_records_stored_with_their_host_leave_the_origin_out(
    url: str, host: str, stored: str
) -> None:
    spider = _Spider()
    request = Request(url, callback=spider.parse,
                      meta={"referrer": url.rsplit("/", 1)[0] + "/", "depth": 1})
    record = to_record(request, url, spider, KEYS, host)
    data = json.loads(record)
    assert data["u"] == stored
    back = from_record(record, spider, host)
    assert back.url == url
    assert back.meta["referrer"] == request.meta["referrer"]


def test_relative_record_without_its_host_is_an_error() -> None:
    spider = _Spider()
    record = to_record(Request("http://a.test/x"), "http://a.test/x", spider, KEYS,
                       "http://a.test:80")
    with pytest.raises(RecordError, match="'u'"):
        from_record(record, spider)


def test_a_link_record_fits_a_compact_sorted_set_member() -> None:
    # What the broad spider queues for a link: 16 fingerprint bytes + record
    # must stay within Redis's default zset-max-listpack-value (64) for short paths.
    spider = BroadSpider(seeds="-")
    request = Request("http://h00001.test/p/1", callback=spider.parse, errback=spider.on_error,
                      priority=-1, meta={"referrer": "http://h00001.test/", "depth": 1})
    record = to_record(request, request.url, spider, ("referrer",), "http://h00001.test:80")
    assert 16 + len(record.encode()) <= 64, record


def test_spider_default_errback_is_left_out_but_none_survives() -> None:
    class WithDefault(_Spider):
        frontier_errback = "on_error"

    spider = WithDefault()
    with_eb = to_record(Request("http://a.test/", errback=spider.on_error), "http://a.test/",
                        spider, KEYS)
    without = to_record(Request("http://a.test/"), "http://a.test/", spider, KEYS)
    assert "eb" not in json.loads(with_eb)
    assert from_record(with_eb, spider).errback == spider.on_error
    assert from_record(without, spider).errback is None


def test_a_record_of_another_origin_is_written_absolute_and_refused_from_that_queue() -> None:
    """Never the case in the frontier: a queue's records are its host's URLs."""
    spider = _Spider()
    record = to_record(Request("http://b.test/x"), "http://b.test/x", spider, KEYS,
                       "http://a.test:80")
    assert json.loads(record)["u"] == "http://b.test/x"
    assert from_record(record, spider).url == "http://b.test/x"  # no queue: no host to match
    with pytest.raises(RecordError, match=re.escape("not a URL of its queue's host http://a.test:80")):
        from_record(record, spider, "http://a.test:80")


HOST = "http://a.test:80"


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ("not json", "record: not JSON"),
        ('["/x"]', "record: not a JSON object"),
        ('{"u": "/x", "d": "2"}', "'d': str, not int"),
        ('{"u": "/x", "d": true}', "'d': bool"),
        ('{"u": "/x", "d": -1}', "'d': depth -1 out of range"),
        ('{"u": "/x", "p": 99999999999999999999}', "'p': priority"),
        ('{"u": 7}', "'u': int"),
        ('{"u": "file:///etc/passwd"}', "'u': not an http\\(s\\) URL"),
        ('{"u": "ftp://a.test/x"}', "'u': not an http\\(s\\) URL"),
        ('{"u": "http://evil.test/x"}', "'u': not a URL of its queue's host"),
        ('{"u": "https://a.test/x"}', "'u': not a URL of its queue's host"),  # another port
        ('{"u": "/x", "r": "javascript:alert(1)"}', "'r': not an http\\(s\\) URL"),
        ('{"u": "/x", "cb": "close"}', "'cb': 'close' is not a method of the spider"),
        ('{"u": "/x", "cb": "__init__"}', "'cb': '__init__' is not"),
        ('{"u": "/x", "cb": "crawler"}', "'cb': 'crawler' is not"),
        ('{"u": "/x", "eb": "no_such"}', "'eb': 'no_such' is not"),
        ('{"u": "/x", "m": {"proxy": "http://evil.test:3128"}}', "'m': keys not in"),
        ('{"u": "/x", "m": {"_ticket": 1}}', "'m': keys not in"),
        ('{"u": "/x", "k": ["a"]}', "'k': list, not dict"),
        ('{"u": "/x", "x": 1}', "field 'x': unknown"),
        ('{"u": "/x", "v": "1 d E\\r\\nX-Evil: 1"}', "field 'v': control characters"),
        ('{"u": "/' + "a" * 70000 + '"}', "record: 70,010 characters, over 65,536"),
    ],
)
def test_a_hostile_record_is_refused_naming_the_field(record: str, field: str) -> None:
    with pytest.raises(RecordError, match=field):
        from_record(record, _Spider(), HOST, KEYS)


def test_a_record_too_large_to_read_is_refused_when_written() -> None:
    spider = _Spider()
    request = Request("http://a.test/x", cb_kwargs={"blob": "x" * 70000})
    with pytest.raises(RecordError, match="cb_kwargs and meta"):
        to_record(request, request.url, spider, KEYS, HOST)
