"""The wire tap's reading of a response head (crawler/wiretap.py): pure."""

from __future__ import annotations

import gc

from scrapy import Request

from crawler.wiretap import MAX_HEAD, WireTap, open_tap, tap_of, without_fields

HEAD = b"HTTP/1.1 200 OK\r\nX-A: 1\r\nx-a: 2\r\nConnection: keep-alive\r\n\r\n"


def test_the_head_is_kept_across_chunks_and_the_body_is_not() -> None:
    tap = WireTap()
    data = HEAD + b"<html>body</html>"
    assert not tap.received(data[:7]) and not tap.received(data[7:30])
    assert tap.received(data[30:]) and tap.head == HEAD
    assert tap.received(b"more body") and tap.head == HEAD


def test_an_interim_answer_is_skipped_for_the_final_one() -> None:
    tap = WireTap()
    assert tap.received(b"HTTP/1.1 100 Continue\r\n\r\n" + HEAD + b"x")
    assert tap.head == HEAD


def test_a_head_too_long_is_given_up_on() -> None:
    tap = WireTap()
    assert tap.received(b"HTTP/1.1 200 OK\r\nX: " + b"a" * (MAX_HEAD + 1))
    assert tap.head is None


def test_what_was_written_after_the_request_is_not_its_head() -> None:
    tap = WireTap()
    tap.wrote(b"GET / HTTP/1.1\r\n")
    tap.wrote(b"Host: a\r\n\r\n")
    tap.seal()
    tap.wrote(b"later")
    assert tap.sent == b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"


def test_named_fields_go_with_their_folded_lines_and_nothing_else_moves() -> None:
    head = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n  , more\r\n"
            b"X-Folded: a\r\n\tb\r\ntransfer-encoding: x\r\nETag: \"e\"\r\n\r\n")
    assert without_fields(head, frozenset({b"transfer-encoding"})) == (
        b"HTTP/1.1 200 OK\r\nX-Folded: a\r\n\tb\r\nETag: \"e\"\r\n\r\n")


def test_a_tap_is_its_requests_only_and_goes_with_it() -> None:
    request = Request("http://a.test/")
    tap = open_tap(request)
    assert tap_of(request) is tap
    assert tap_of(request.replace(url="http://a.test/next")) is None  # a redirect hop's copy
    del request
    gc.collect()
    assert tap_of(Request("http://a.test/")) is None
