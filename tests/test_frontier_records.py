"""Requests as JSON records: round trip, and refusals that name the field."""

from __future__ import annotations

import json
import re

import pytest
from scrapy import Request, Spider

from crawler.frontier.records import RecordError, from_record, to_record


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
    assert back.meta == {"depth": 2, "referrer": "http://a.test/", "retry_times": 1}
    assert back.dont_filter


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
