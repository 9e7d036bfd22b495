"""The end-of-crawl summary, the "every seed was refused" line, the setting hints of
refused seeds and the progress line's pages part: plain functions of stats, no crawl.

(The same, seen in a real crawl: tests/test_seed_refusals_crawl.py.)
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from scrapy.settings import Settings

from crawler.addressguard import AddressBlocked, AddressPolicy
from crawler.extensions.progress import progress_text
from crawler.extensions.summary import crawl_summary
from crawler.frontier.leftover import HostLeft, Leftover
from crawler.seedrefusals import all_seeds_refused, allow_hint

STATS: dict[str, Any] = {
    "finish_reason": "finished",
    "elapsed_time_seconds": 184.4,
    "response_received_count": 2106,  # pages and robots.txt: not what the summary counts
    "pages/fetched": 1847,
    "pages/hosts": 97,
    "robots/fetch/status/200": 80,
    "robots/fetch/status/404": 23,
    "robots/denied": 310,
    "frontier/duplicates": 5120,
    "frontier/refused/address-blocked": 10,
    "frontier/refused/host-budget": 2,
    "frontier/leases/dead": 41,
    "retry/gave_up/http-503": 31,
    "retry/gave_up/timeout": 8,
    "download/aborted/too-large": 1,
    "dns/hosts/parked/nxdomain": 3,
    "robots/hosts_parked": 2,
    "item_scraped_count": 1847,
    "warc/files": 3,
    "seeds/loaded": 100,
    "seeds/refused/loopback": 1,
}


def test_the_summary_says_what_the_crawl_did_in_at_most_ten_lines() -> None:
    lines = crawl_summary(STATS, feeds=[("output/broad.jsonl", 1847)], archive="/job/warc")
    assert 2 <= len(lines) <= 10
    text = "\n".join(lines)
    assert lines[0] == "Crawl summary (finished, 3 min 4 s):"
    assert "pages fetched: 1847 from 97 host(s) (and 103 robots.txt fetches)" in text
    assert "2106" not in text  # robots.txt answers are not pages
    assert "310 denied by robots.txt" in text
    assert "5120 duplicate links skipped" in text
    assert "12 refused (address-blocked 10, host-budget 2)" in text
    assert ("dead letters: 41 URLs (gave up retrying: http-503 31, timeout 8; too large: 1; "
            "download errors: 1); 5 host(s) parked (nxdomain 3, robots.txt unreachable 2)"
            in text)
    assert "seeds refused: 1 of 100 (loopback 1" in text
    # An item per page: the number is said once, with where the items are.
    assert "  items: one per page, in output/broad.jsonl" in lines
    assert "  archive: 3 WARC file(s) in /job/warc" in lines


def test_what_learning_ended_and_learned_is_in_the_summary() -> None:
    stats = {**STATS, "learned/dropped/duplicate-variant": 7, "learned/dropped/trap-pattern": 40,
             "learning/params_learned": 2, "traps/patterns": 3}
    lines = crawl_summary(stats, feeds=[("output/broad.jsonl", 1847)], archive="/job/warc")
    text = "\n".join(lines)
    assert "47 ended by a learned rule (trap-pattern 40, duplicate-variant 7)" in text
    assert "  learned: 2 noise parameter(s), 3 trap pattern(s)" in text
    assert "  archive: 3 WARC file(s) in /job/warc" in lines  # nothing cut
    assert "learned" not in "\n".join(crawl_summary(STATS, feeds=[("o.jsonl", 1847)]))


def test_a_quiet_crawl_has_a_short_summary_and_names_a_missing_feed() -> None:
    lines = crawl_summary({"finish_reason": "finished", "elapsed_time_seconds": 2.2,
                           "pages/fetched": 3, "pages/hosts": 1, "item_scraped_count": 2},
                          feeds=[("items.jsonl", 2)])
    assert lines == ["Crawl summary (finished, 2 s):",
                     "  pages fetched: 3 from 1 host(s)",
                     "  items: 2, in items.jsonl"]
    assert crawl_summary({"item_scraped_count": 4})[-1] == \
        "  items: 4, written to no feed (FEEDS is empty)"


def test_every_seed_refused_only_when_all_were_and_there_were_seeds() -> None:
    line = all_seeds_refused({"seeds/loaded": 3, "seeds/refused/loopback": 2,
                              "seeds/refused/localhost": 1})
    assert line is not None
    assert line.startswith("every seed was refused: 3 of 3 (1 localhost, 2 loopback)")
    assert all_seeds_refused({"seeds/loaded": 3, "seeds/refused/loopback": 2}) is None
    assert all_seeds_refused({}) is None  # a resumed crawl, or one fed through Redis


GUARD_PARKED = {"finish_reason": "finished", "seeds/loaded": 3, "seeds/refused/localhost": 1,
                "guard/hosts_parked": 2}


def test_seeds_whose_names_the_guard_refused_later_are_refused_seeds_too() -> None:
    blocked = [AddressBlocked("docs.test", "loopback", "127.0.1.1"),
               AddressBlocked("lan.test", "private", "10.1.2.3")]
    line = all_seeds_refused(GUARD_PARKED, blocked)
    assert line == (
        "every seed was refused: 3 of 3 (1 localhost at once), so nothing was crawled: the "
        "address guard refused their hosts: docs.test (127.0.1.1) is loopback, lan.test "
        "(10.1.2.3) is private; to crawl them, set ADDRESS_GUARD_ALLOW=127.0.0.0/8 and "
        "ADDRESS_GUARD_ALLOW=10.1.2.3 (e.g. scrapy crawl ... -s ADDRESS_GUARD_ALLOW=127.0.0.0/8 "
        "-s ADDRESS_GUARD_ALLOW=10.1.2.3)")
    # the decision is the stats' alone (scrapy crawl's exit code): no names, still refused
    assert all_seeds_refused(GUARD_PARKED) is not None
    many = [AddressBlocked(f"h{i}.test", "loopback", f"127.0.2.{i}") for i in range(7)]
    many_line = all_seeds_refused(GUARD_PARKED, many)
    assert many_line is not None and "h4.test (127.0.2.4) is loopback and 2 more" in many_line
    assert many_line.count("ADDRESS_GUARD_ALLOW=127.0.0.0/8") == 2  # said once, shown once


@pytest.mark.parametrize("other", [
    {"frontier/leases/claimed": 1},  # it had work: a seed's host was crawled
    {"robots/hosts_parked": 1},  # another host's robots.txt stayed unreachable
    {"dns/hosts/parked/nxdomain": 1},  # a seed's name does not exist
    {"finish_reason": "closespider_timeout"},  # cut short: seeds may still be queued
])
def test_a_crawl_with_other_fates_than_the_guard_is_not_every_seed_refused(
        other: dict[str, Any]) -> None:
    assert all_seeds_refused({**GUARD_PARKED, **other}) is None


@pytest.mark.parametrize(("url", "reason", "hint"), [
    ("http://127.0.0.1:8101/", "loopback", "ADDRESS_GUARD_ALLOW=127.0.0.0/8"),
    ("http://127.9.0.1/", "loopback", "ADDRESS_GUARD_ALLOW=127.0.0.0/8"),
    ("http://2130706433/", "loopback", "ADDRESS_GUARD_ALLOW=127.0.0.0/8"),
    ("http://[::ffff:127.0.0.1]/", "ipv4-mapped-loopback", "ADDRESS_GUARD_ALLOW=127.0.0.0/8"),
    ("http://[::1]:8101/", "loopback", "ADDRESS_GUARD_ALLOW=::1"),
    ("http://localhost:8101/", "localhost", "ADDRESS_GUARD_ALLOW_HOSTS=localhost"),
    ("http://LocalHost./", "localhost", "ADDRESS_GUARD_ALLOW_HOSTS=localhost"),
    ("http://web.localhost/", "localhost", "ADDRESS_GUARD_ALLOW_HOSTS=web.localhost"),
    ("http://intranet/", "single-label", "ADDRESS_GUARD_ALLOW_HOSTS=intranet"),
    ("http://10.1.2.3/", "private", "ADDRESS_GUARD_ALLOW=10.1.2.3"),
])
def test_the_hint_names_a_setting_that_really_allows_the_seed(url: str, reason: str,
                                                              hint: str) -> None:
    policy = AddressPolicy.from_settings(Settings())
    assert policy.check_url(url) == reason
    assert allow_hint(urlsplit(url).hostname or "", reason) == hint
    name, value = hint.split("=", 1)
    assert AddressPolicy.from_settings(Settings({name: value})).check_url(url) is None


def test_no_hint_for_a_host_no_setting_allows() -> None:
    assert allow_hint("1.2.3.4.5", "bad-address") is None
    assert allow_hint("", "no-host") is None


def test_the_error_share_needs_enough_downloads() -> None:
    idle = {"pages": 0, "useful": 0, "errors": 1, "finished": 1}
    assert "errors - (1 downloads)" in progress_text(50, idle, 1.0, 60)
    assert "%" not in progress_text(50, idle, 1.0, 60)
    busy = {"pages": 40, "useful": 36, "errors": 2, "finished": 40}
    assert progress_text(90, busy, 1.0, 60) == (
        "Progress: 90 pages fetched; last 60 s: 40 pages/min (36 2xx answers/min), "
        "errors 5.0% of 40 downloads")
    assert "errors -" in progress_text(90, busy, 1.0, 60, min_sample=41)


def _left() -> Leftover:
    now = 1_800_000_000_000
    hosts = [HostLeft("http://broken.test:80", 3, "dns", now + 120_000, "servfail 2"),
             HostLeft("http://quiet.test:80", 1, "dns", now + 60_000, "timeout 1"),
             HostLeft("https://shop.test:443", 4, "breaker", now + 1_800_000, "2"),
             HostLeft("http://ops.test:80", 2, "paused", -1, "site"),
             HostLeft("http://slow.test:80", 5, "paced", now + 3_000, "")]
    return Leftover(now, {"queued": 15, "leased": 0, "delayed": 2, "done": 40, "dead": 7},
                    hosts, delayed_next_ms=now + 90_000)


def test_the_summary_says_what_is_left_why_and_how_to_continue() -> None:
    lines = crawl_summary({"finish_reason": "shutdown"}, left=_left(),
                          resume="scrapy crawl broad -s JOBDIR=job")
    text = "\n".join(lines)
    assert len(lines) <= 14
    assert ("  left in the frontier: 15 URL(s) queued on 5 host(s), 2 delayed for a retry "
            "(the first at ") in text
    assert "7 dead letter(s) in all (scrapy frontier dead)" in text
    held = next(line for line in lines if line.startswith("    held: "))
    # By reason, the most hosts first, each host with why and until when.
    assert held.startswith("    held: dns 2 host(s) (http://broken.test:80: dns-servfail, 2 "
                           "failed lookup(s), retry at ")
    assert "http://quiet.test:80: dns-timeout, 1 failed lookup(s), retry at" in held
    assert "breaker 1 host(s) (https://shop.test:443: open, opening 2, retry at" in held
    assert "paused 1 host(s) (http://ops.test:80: site, until an operator acts)" in held
    assert "    not held (due soon): paced 5 URL(s)" in lines
    assert lines[-1] == "  continue with: scrapy crawl broad -s JOBDIR=job"


def test_a_frontier_left_empty_adds_nothing() -> None:
    empty = Leftover(0, {"queued": 0, "leased": 0, "delayed": 0, "done": 9, "dead": 0,
                         "hf": 2, "seeds": 1})
    stats = {"finish_reason": "finished", "frontier/leases/done": 9}
    with_left = crawl_summary(stats, left=empty, resume="x")
    assert with_left[1] == "  pages fetched: 9 from 2 host(s), 1 seed(s)"
    assert with_left[2:] == crawl_summary(stats)[2:]


def test_a_frontier_too_large_to_read_gives_its_counts() -> None:
    left = Leftover(0, {"queued": 2_000_000, "leased": 0, "delayed": 0, "dead": 0},
                    complete=False)
    lines = crawl_summary({"finish_reason": "shutdown"}, left=left, resume="scrapy crawl broad")
    assert "  left in the frontier: 2000000 URL(s) queued on ? host(s)" in lines
    assert not left.only_held(0)  # nothing is known of its hosts: never "only held"
