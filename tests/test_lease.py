"""The lease ticket's verbs and verdicts, and the dead-letter reason's one shape."""

from __future__ import annotations

import re
import time
from pathlib import Path

from crawler.deadletter import DeadReason
from crawler.frontier.admin import parse_dead
from crawler.lease import FETCHED, TICKET_META, Ticket, Verdict, ticket_of

LUA = Path(__file__).resolve().parent.parent / "crawler" / "frontier" / "lua"


def test_a_request_nobody_spoke_about_is_done_and_healthy() -> None:
    assert Ticket("t").ending() == FETCHED == Verdict("done", health="ok")


def test_the_last_verdict_stands() -> None:
    ticket = Ticket("t")
    ticket.done("ok")
    ticket.retry_after(1500, health="fail", hold_ms=1500)
    assert ticket.ending() == Verdict("retry", "1500", 1500, "fail")
    ticket.give_back()
    assert ticket.ending() == Verdict("return")


def test_a_download_error_without_a_verdict_is_a_dead_letter() -> None:
    ticket = Ticket("t")
    ticket.failed("ConnectionLost")
    ending = ticket.ending()
    why = DeadReason.parse(ending.arg)
    assert (ending.op, why.reason, why.error) == ("dead", "download-error", "ConnectionLost")
    ticket.retry_after(10)  # the retry policy took the error on: its word wins
    assert ticket.ending() == Verdict("retry", "10")


def test_a_refusal_is_final() -> None:
    # Robots refuses by raising; the exception then passes the retry policy
    # and the download-error note, which must not undo the refusal.
    ticket = Ticket("t")
    ticket.refuse("robots")
    ticket.failed("IgnoreRequest")
    ticket.retry_after(1000, health="fail")
    ticket.dead(DeadReason.now("download-error"))
    assert ticket.ending() == Verdict("refused", "robots", unsent=True)


def test_a_block_is_a_dead_letter_and_final() -> None:
    ticket = Ticket("t")
    why = DeadReason.now("address-blocked", "a.test (10.0.0.1) is private")
    ticket.block(why)
    ticket.failed("AddressBlocked")
    ticket.retry_after(1000, health="fail")
    assert ticket.ending() == Verdict("dead", why.json(), unsent=True)


def test_a_download_cut_by_the_close_goes_back_untouched_for_good() -> None:
    ticket = Ticket("t")
    ticket.abandon()
    ticket.failed("CancelledError")
    ticket.ignored_by("cut: the crawl closed during its download")
    ticket.retry_after(1000, health="fail")
    assert ticket.ending() == Verdict("return")


def test_an_unexplained_ignore_is_never_done() -> None:
    # An IgnoreRequest from a component that knows nothing of tickets (Scrapy's
    # offsite filter, a user's middleware): not fetched, so a dead letter.
    ticket = Ticket("t")
    ticket.ignored_by("Filtered offsite request to 'b.test'")
    ending = ticket.ending()
    assert (ending.op, ending.unsent) == ("dead", True)
    why = DeadReason.parse(ending.arg)
    assert (why.reason, why.error) == ("ignored", "Filtered offsite request to 'b.test'")
    # the same after an answer came (a spider's own choice on a fetched page): done
    answered = Ticket("u")
    answered.received(10)
    answered.ignored_by("not wanted")
    assert answered.ending().op == "done"


def test_the_ticket_is_found_only_under_its_key() -> None:
    ticket = Ticket("t")
    assert ticket_of({TICKET_META: ticket}) is ticket
    assert ticket_of({}) is None
    assert ticket_of({TICKET_META: "t"}) is None  # not ours: never trusted


def test_a_dead_reason_round_trips_and_omits_what_it_lacks() -> None:
    why = DeadReason.now("http-503", "HTTP 503", 4)
    assert abs((why.time or 0) - time.time()) < 5
    assert DeadReason.parse(why.json()) == why
    assert DeadReason("dropped").json() == '{"reason": "dropped"}'


def test_any_stored_reason_parses() -> None:
    assert DeadReason.parse("not json") == DeadReason("not json")
    assert DeadReason.parse("[1, 2]") == DeadReason("[1, 2]")
    assert DeadReason.parse('{"error": "x", "t": "soon", "attempts": "3"}') == DeadReason(
        "?", "x")


def test_the_lua_parked_reason_has_the_same_shape() -> None:
    source = (LUA / "admit.lua").read_text()
    constant = re.search(r"local parked_reason = '(\{.*\})'", source)
    assert constant is not None
    assert DeadReason.parse(constant.group(1)) == DeadReason("robots-unreachable", "host parked")


def test_the_admin_reads_a_dead_letter_through_the_reason_type() -> None:
    why = DeadReason("dns-nxdomain", "nope.test: the name does not exist", 0, 1_800_000_000)
    entry = b"\x00\n" * 8 + b'{"u": "/a"}'  # a fingerprint may hold newlines
    letter = parse_dead(b"fp", b"http://nope.test\n" + why.json().encode() + b"\n" + entry)
    assert (letter.host, letter.reason, letter.error, letter.time) == (
        "http://nope.test", "dns-nxdomain", "nope.test: the name does not exist", 1_800_000_000)
