"""Revisits in the frontier: a done URL due again, behind its host's new URLs,
on the scripts' own clock; and the schedule's rules as units."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import redis
from scrapy.http.headers import Headers

from crawler.frontier.admin import FrontierAdmin, parse_host_match
from crawler.frontier.values import Admission, Release
from crawler.lease import Ticket
from crawler.revisit import Refetch, RevisitPolicy, RevisitState, parse_duration, validator_of
from crawler.scheduling.revisits import Revisits, keep_state
from tests.frontier_harness import Harness, admission

HOUR_MS = 3_600_000


@pytest.fixture
def harness(make_harness: Callable[..., Harness]) -> Harness:
    return make_harness("rv", clock=True, concurrency=4, delay_ms=0, lease_ms=60_000)


def _done(lease, revisit_ms: int, record: str = "") -> Release:
    return Release(lease.host, lease.fingerprint, "done", record=record, revisit_ms=revisit_ms)


def test_a_done_url_is_claimed_again_when_its_revisit_is_due(harness: Harness) -> None:
    f = harness.frontier
    harness.run(f.admit([admission("http://a.test/page")]))
    lease = harness.run(f.claim(5, "w")).leases[0]
    kept = json.dumps({"u": "/page", "d": 0, "v": "2s0 ABC Ex"}, separators=(",", ":"))
    assert harness.run(f.release([_done(lease, HOUR_MS, kept)], "w")).released == 1
    counts = harness.run(f.counts())
    assert (counts["done"], counts["revisit"], counts["queued"]) == (1, 1, 0)

    due_ms = -(-(harness.clock.now_ms() + HOUR_MS) // 1000) * 1000
    early = harness.run(f.claim(5, "w"))
    assert early.leases == []
    # The partition's timers still hold the released lease's expiry (a
    # release never raises them): the claim then finds the revisit, due in
    # an hour on a whole second (rounded up), and the worker sleeps till then.
    assert early.next_ready_ms == harness.clock.now_ms() + 60_000
    harness.clock.advance(60_000)
    early = harness.run(f.claim(5, "w"))
    assert early.leases == []
    assert early.next_ready_ms == due_ms
    harness.clock.advance(due_ms - harness.clock.now_ms() - 1)
    assert harness.run(f.claim(5, "w")).leases == []
    harness.clock.advance(1)
    again = harness.run(f.claim(5, "w")).leases
    assert [lease.record for lease in again] == [kept]  # with what the last fetch found
    counts = harness.run(f.counts())
    assert (counts["done"], counts["revisit"], counts["leased"], counts["revisited"]) == (
        0, 0, 1, 1)


def _with_lastmod(url: str, lastmod_s: int) -> Admission:
    """A sitemap's mention of ``url``: its record says when the page last changed."""
    plain = admission(url)
    record = json.dumps({"u": "/page", "d": 1, "lm": lastmod_s}, separators=(",", ":"))
    return Admission(plain.url, plain.host, plain.fingerprint, record)


def test_a_sitemap_that_says_a_done_page_changed_since_its_fetch_brings_its_revisit_forward(
        harness: Harness, redis_url: str) -> None:
    """A done URL waits a day for its revisit. The sitemap, read again, names
    it with a lastmod before its fetch: nothing moves. With a lastmod after
    its fetch: its revisit is due now and the next claim hands it out, once;
    the same mention again (after the refetch) moves nothing."""
    f = harness.frontier
    url = "http://a.test/page"
    fetched_s = harness.clock.now_ms() // 1000
    harness.run(f.admit([_with_lastmod(url, fetched_s - 86_400)]))
    lease = harness.run(f.claim(5, "w")).leases[0]
    # (its interval, 1uo0 in base 36: a day)
    kept = json.dumps({"u": "/page", "d": 1, "lm": fetched_s - 86_400, "v": "1uo0 ABC Ex"},
                      separators=(",", ":"))
    assert harness.run(f.release([_done(lease, 86_400_000, kept)], "w")).released == 1
    part = f.partition(lease.host)
    with redis.Redis.from_url(redis_url) as client:
        assert client.hlen(f"{harness.keys.prefix(part)}:vm:{lease.host}") == 1
    harness.clock.advance(120_000)  # (past the released lease's timer)

    # Changed before the fetch: the revisit keeps its day.
    result = harness.run(f.admit([_with_lastmod(url, fetched_s - 3600)]))
    assert (result.duplicates, result.forward) == (1, 0)
    assert harness.run(f.claim(5, "w")).leases == []
    # Changed after it: due now.
    result = harness.run(f.admit([_with_lastmod(url, fetched_s + 60)]))
    assert (result.duplicates, result.forward) == (1, 1)
    (again,) = harness.run(f.claim(5, "w")).leases
    assert again.record == kept and again.fingerprint == lease.fingerprint
    with redis.Redis.from_url(redis_url) as client:
        assert client.hlen(f"{harness.keys.prefix(part)}:vm:{lease.host}") == 0
    # Fetched again: a mention with the same lastmod is older than this fetch.
    harness.clock.advance(1000)
    harness.run(f.release([_done(again, 86_400_000, kept)], "w"))
    harness.clock.advance(120_000)
    result = harness.run(f.admit([_with_lastmod(url, fetched_s + 60)]))
    assert (result.duplicates, result.forward) == (1, 0)
    assert harness.run(f.claim(5, "w")).leases == []
    counts = harness.run(f.counts())
    assert (counts["done"], counts["revisit"], counts["revisited"]) == (1, 1, 1)


def test_revisits_kept_with_due_times_in_ms_still_come_due(harness: Harness,
                                                            redis_url: str) -> None:
    """A build before 2026-12-03 kept due times in ms: they are not read as seconds."""
    f = harness.frontier
    harness.run(f.admit([admission("http://a.test/page")]))
    lease = harness.run(f.claim(5, "w")).leases[0]
    harness.run(f.release([_done(lease, HOUR_MS)], "w"))
    part = f.partition(lease.host)
    due_ms = harness.clock.now_ms() + HOUR_MS
    with redis.Redis.from_url(redis_url) as client:
        key = f"{harness.keys.prefix(part)}:v:{lease.host}"
        (entry,) = client.zrange(key, 0, -1)
        client.zadd(key, {entry: due_ms})  # as the older build wrote it
        client.zadd(harness.keys.revisits_due(part), {lease.host: due_ms})
        # (and without the per-set timer fields, which it did not write)
        client.hdel(harness.keys.counts(part), "mt:vdue")
    harness.clock.advance(HOUR_MS - 1000)
    assert harness.run(f.claim(5, "w")).leases == []
    harness.clock.advance(1000)
    assert [x.fingerprint for x in harness.run(f.claim(5, "w")).leases] == [lease.fingerprint]


def test_without_a_revisit_a_done_url_is_never_claimed_again(harness: Harness) -> None:
    f = harness.frontier
    harness.run(f.admit([admission("http://a.test/page")]))
    lease = harness.run(f.claim(5, "w")).leases[0]
    harness.run(f.release([_done(lease, 0)], "w"))
    harness.clock.advance(1000 * HOUR_MS)
    result = harness.run(f.claim(5, "w"))
    assert (result.leases, result.next_ready_ms) == ([], None)
    assert harness.run(f.counts()).get("revisit", 0) == 0


@pytest.mark.parametrize("new_first", [True, False])
def test_a_hosts_new_urls_come_before_its_revisits(make_harness, new_first: bool) -> None:
    h = make_harness("rvo", clock=True, concurrency=1, delay_ms=0, lease_ms=60_000,
                     revisit_new_first=new_first)
    f = h.frontier
    h.run(f.admit([admission("http://a.test/old", priority=1)]))
    lease = h.run(f.claim(1, "w")).leases[0]
    # the record kept, as records.py writes it: the priority right after the depth
    kept = '{"u":"http://a.test/old","d":0,"p":1,"v":"1"}'
    h.run(f.release([_done(lease, 1000, kept)], "w"))
    h.clock.advance(2000)  # due on the whole second after 1 s
    h.run(f.admit([admission("http://a.test/new")]))
    order = []
    for _ in range(2):
        lease = h.run(f.claim(1, "w")).leases[0]
        order.append(json.loads(lease.record)["u"].rsplit("/", 1)[1])
        h.run(f.release([_done(lease, 0)], "w"))
    # by priority the revisit would go first; new_first puts the new URL ahead
    assert order == (["new", "old"] if new_first else ["old", "new"])


def test_a_dropped_hosts_revisits_become_dead_letters(harness: Harness, redis_url: str) -> None:
    f = harness.frontier
    harness.run(f.admit([admission("http://a.test/1"), admission("http://b.test/1")]))
    leases = harness.run(f.claim(5, "w")).leases
    harness.run(f.release([_done(lease, 1000) for lease in leases], "w"))
    with redis.Redis.from_url(redis_url) as client:
        FrontierAdmin(client, harness.keys).drop_host("http://a.test:80")
    harness.clock.advance(2000)  # due on the whole second after 1 s
    again = harness.run(f.claim(5, "w")).leases
    assert [lease.host for lease in again] == ["http://b.test:80"]
    counts = harness.run(f.counts())
    assert (counts["dead"], counts["done"], counts["revisit"]) == (1, 0, 0)


def test_revisits_are_moved_a_bounded_number_at_a_time(make_harness) -> None:
    h = make_harness("rvb", clock=True, concurrency=100, delay_ms=0, lease_ms=60_000,
                     move_max=7)
    f = h.frontier
    h.run(f.admit([admission(f"http://a.test/{i}") for i in range(20)]))
    leases = []
    while len(leases) < 20:
        leases += h.run(f.claim(20, "w")).leases
    h.run(f.release([_done(lease, 1000) for lease in leases], "w"))
    h.clock.advance(2000)  # due on the whole second after 1 s
    assert len(h.run(f.claim(100, "w")).leases) == 7
    assert len(h.run(f.claim(100, "w")).leases) == 7
    assert len(h.run(f.claim(100, "w")).leases) == 6


# --- the schedule's rules, as units ---------------------------------------------------


def test_durations_read_as_an_operator_writes_them() -> None:
    assert [parse_duration(v) for v in ("90", "45s", "30m", "12h", "7d", "2w", 1.5, "0.5h")] == [
        90, 45, 1800, 43200, 604800, 1209600, 1.5, 1800]
    for bad in ("", "7 days", "-1", "1y", None):
        with pytest.raises(ValueError, match="revisit="):
            parse_duration(bad, "revisit")


def test_the_interval_lengthens_while_unchanged_and_shortens_on_change() -> None:
    policy = RevisitPolicy(after=1000, factor=2)  # bounds 250 .. 8000
    first = policy.next_state(None, Refetch("D1", "E1"))
    assert first == RevisitState(1000, "D1", "E1")
    same = policy.next_state(first, Refetch("D1", "E1"))
    assert same.interval == 2000
    not_modified = policy.next_state(same, Refetch(validator="", not_modified=True))
    assert not_modified == RevisitState(4000, "D1", "E1")  # keeps digest and validator
    capped = policy.next_state(RevisitState(7000, "D1"), Refetch("D1"))
    assert capped.interval == 8000
    changed = policy.next_state(capped, Refetch("D2", "T1796119200"))
    assert changed == RevisitState(4000, "D2", "T1796119200")
    floor = policy.next_state(RevisitState(300, "D2"), Refetch("D3"))
    assert floor.interval == 250
    # nothing downloaded (robots.txt said no): the URL keeps what it had
    assert policy.next_state(changed, None) == changed


def test_seeds_start_with_their_own_interval() -> None:
    policy = RevisitPolicy(after=7 * 86400, seeds=86400)
    assert policy.next_state(None, Refetch("D"), seed=True).interval == 86400
    assert policy.next_state(None, Refetch("D"), seed=False).interval == 7 * 86400


def test_the_state_is_one_short_string_that_reads_back() -> None:
    for state in (RevisitState(604800, "QOLB63EVDS", "E5f3c2a9be01d4c77"), RevisitState(1),
                  RevisitState(5, "", "Eabc"),
                  RevisitState(7, "D", "MTue, 01 Dec 2026 10:00:00 GMT")):
        assert RevisitState.of_record({"v": state.field()}) == state
    assert RevisitState(604800, "QOLB63EVDS", "E5f3c2a9be01d4c77").field() == (
        "cyo0 QOLB63EVDS E5f3c2a9be01d4c77")  # 33 bytes where JSON lists took 45
    assert RevisitState.of_record({"v": "zz!"}) is None
    assert RevisitState.of_record({"v": [3600, "D"]}) is None


def test_one_validator_is_kept_and_sent_back_verbatim() -> None:
    both = Headers({"etag": 'W/"5f3c-1"', "Last-Modified": "Tue, 01 Dec 2026 10:00:00 GMT"})
    assert validator_of(both) == "W5f3c-1"  # weak: W/ and the quotes put back when sent
    assert validator_of(Headers({"ETag": '"abc"'})) == "Eabc"
    assert validator_of(Headers({"ETag": "abc"})) == "Uabc"  # not quoted: kept as it came
    # a date kept as Unix seconds when they write back to exactly the same text
    assert validator_of(Headers({"Last-Modified": "Tue, 01 Dec 2026 10:00:00 GMT"})) == (
        "T1796119200")
    assert validator_of(Headers({"Last-Modified": "Tuesday, 01-Dec-26 10:00:00 GMT"})) == (
        "MTuesday, 01-Dec-26 10:00:00 GMT")  # RFC 850: verbatim
    assert validator_of(Headers({"ETag": "  "})) == validator_of(Headers()) == ""
    for kept, sent in (("W5f3c-1", 'W/"5f3c-1"'), ("Eabc", '"abc"'), ("Uabc", "abc")):
        assert RevisitState(1, "", kept).conditional_headers() == {"If-None-Match": sent}
    for kept in ("T1796119200", "MTue, 01 Dec 2026 10:00:00 GMT"):
        assert RevisitState(1, "", kept).conditional_headers() == {
            "If-Modified-Since": "Tue, 01 Dec 2026 10:00:00 GMT"}
    assert RevisitState(1).conditional_headers() == {}


def test_a_done_urls_record_keeps_its_state_and_a_retry_keeps_it_too() -> None:
    class Stats:
        def __init__(self) -> None:
            self.values: dict[str, int] = {}

        def inc_value(self, key: str) -> None:
            self.values[key] = self.values.get(key, 0) + 1

    stats = Stats()
    revisits = Revisits(RevisitPolicy(after=3600, factor=2), stats)
    record = '{"u":"/a","d":1,"p":-1}'
    ticket = Ticket("t")
    ticket.fetched(Refetch("D1", "E1"))
    kept, ms = revisits.release(record, ticket)
    # the interval in base 36 (3600 s: "2s0"), the short digest, the validator
    assert (kept, ms) == ('{"u":"/a","d":1,"p":-1,"v":"2s0 D1 E1"}', 3_600_000)

    again = Ticket("t", revisit=Revisits.state_of(kept))
    again.fetched(Refetch(not_modified=True))
    kept2, ms2 = revisits.release(kept, again)
    assert ms2 == 7_200_000 and json.loads(kept2)["v"] == "5k0 D1 E1"
    assert stats.values == {"revisit/not_modified": 1}
    # a retried request's record is rebuilt from the request: the state stays
    assert json.loads(keep_state(kept2, '{"u":"/a","d":1,"p":-1,"m":{"retry_times":1}}'))[
        "v"] == "5k0 D1 E1"
    assert keep_state('{"u":"/a","d":1}', '{"u":"/a","d":1,"m":{}}') == '{"u":"/a","d":1,"m":{}}'


def test_an_operator_makes_revisits_due_now(harness: Harness, redis_url: str) -> None:
    f = harness.frontier
    harness.run(f.admit([admission(f"http://{h}.test/{i}") for h in "ab" for i in range(3)]))
    leases = harness.run(f.claim(10, "w")).leases
    harness.run(f.release([_done(lease, 7 * 24 * HOUR_MS) for lease in leases], "w"))
    assert harness.run(f.claim(10, "w")).leases == []
    with redis.Redis.from_url(redis_url) as client:
        admin = FrontierAdmin(client, harness.keys)
        assert admin.revisit_now("http://a.test:80") == (1, 3)
        assert {lease.host for lease in harness.run(f.claim(10, "w")).leases} == {
            "http://a.test:80"}
        assert admin.revisit_now() == (1, 3)  # b: a's are queued, not waiting any more
    assert len(harness.run(f.claim(10, "w")).leases) == 3


def test_revisit_now_of_a_name_takes_every_scheme_and_port(harness: Harness,
                                                          redis_url: str) -> None:
    f = harness.frontier
    harness.run(f.admit([admission(u) for u in (
        "http://a.test/0", "https://a.test/1", "https://a.test/2", "http://b.test/3")]))
    leases = harness.run(f.claim(10, "w")).leases
    harness.run(f.release([_done(lease, 7 * 24 * HOUR_MS) for lease in leases], "w"))
    with redis.Redis.from_url(redis_url) as client:
        admin = FrontierAdmin(client, harness.keys)
        assert admin.revisit_now(parse_host_match("a.test")) == (2, 3)
    assert {lease.host for lease in harness.run(f.claim(10, "w")).leases} == {
        "http://a.test:80", "https://a.test:443"}


def test_status_says_how_many_wait_and_when_the_next_is_due(make_harness, redis_url: str
                                                            ) -> None:
    from crawler.commands.frontier_output import format_status

    h = make_harness("rvs", concurrency=4, delay_ms=0, lease_ms=60_000)  # the server's clock
    h.run(h.frontier.admit([admission("http://a.test/1"), admission("http://a.test/2")]))
    leases = h.run(h.frontier.claim(10, "w")).leases
    h.run(h.frontier.release([_done(leases[0], HOUR_MS // 2), _done(leases[1], 2 * HOUR_MS)],
                             "w"))
    with redis.Redis.from_url(redis_url) as client:
        status = FrontierAdmin(client, h.keys).status()
    assert status.counts["revisit"] == 2
    assert status.next_revisit_s is not None and 1790 < status.next_revisit_s <= 1801
    assert "Revisits  2 done URL(s) waiting; the next is due in 30m" in format_status(status, "r")


def test_the_metrics_export_the_revisits_waiting_and_the_next_one(make_harness,
                                                                  redis_url: str) -> None:
    from crawler.metrics.frontier import FrontierCollector

    h = make_harness("rvm", concurrency=4, delay_ms=0, lease_ms=60_000)
    h.run(h.frontier.admit([admission("http://a.test/1"), admission("http://a.test/2")]))
    leases = h.run(h.frontier.claim(10, "w")).leases
    h.run(h.frontier.release([_done(leases[0], HOUR_MS), _done(leases[1], 0)], "w"))
    with redis.Redis.from_url(redis_url) as client:
        collector = FrontierCollector(client, h.keys, "w")
        status = collector.reader.read(oldest=False)
        samples = {s.name: s.value for family in collector.families(status, "f")
                   for s in family.samples}
    assert samples["crawler_frontier_revisits_waiting"] == 1
    assert samples["crawler_frontier_revisits_total"] == 0
    assert 3590 < samples["crawler_frontier_next_revisit_seconds"] <= 3601
