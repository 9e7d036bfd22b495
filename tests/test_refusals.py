"""URLs refused before the frontier, kept for every worker to see
(crawler/frontier/refusals.py, crawler/scheduling/refusalnotes.py), on a real
Redis; and on the real-socket web, the same numbers in the status as in the
crawl's summary, with the URLs themselves."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import redis.asyncio

from crawler.frontier.keys import Count
from crawler.frontier.refusals import EXAMPLES, by_reason, with_examples
from crawler.scheduling.refusalnotes import RefusalNotes
from tests.crawl_runner import REPO, crawl_realweb, proxy_env
from tests.frontier_harness import Harness
from tests.realweb import Host, RealWebProcess, Web, links_to, page
from tests.realweb.sites import ALLOW_ALL
from tests.redis_server import free_port


def test_refusals_reach_the_frontier_with_their_newest_examples(
        make_harness: Callable[..., Harness], redis_url: str) -> None:
    h = make_harness("refusals")
    notes = RefusalNotes(h.client, h.keys)
    for i in range(EXAMPLES + 5):
        notes.note("trap-calendar", f"http://a.test/cal/{2090 + i}/01")
    notes.note("not-http-url", "ftp://a.test/")
    assert h.run(notes.flush())
    notes.note("trap-calendar", "http://a.test/cal/2200/01")
    assert h.run(notes.flush()) and h.run(notes.flush())  # (nothing new: no call)
    sync = redis.Redis.from_url(redis_url)
    raw = sync.hgetall(h.keys.refused())
    found = with_examples(sync, h.keys, by_reason(raw, {Count.REFUSED: 3}))
    assert [(r.reason, r.count) for r in found] == [
        ("trap-calendar", EXAMPLES + 6), ("host-budget", 3), ("not-http-url", 1)]
    calendar = found[0].examples
    assert len(calendar) == EXAMPLES and calendar[0] == "http://a.test/cal/2200/01"
    assert calendar[1] == f"http://a.test/cal/{2090 + EXAMPLES + 4}/01"  # newest first
    assert found[1].examples == () and found[2].examples == ("ftp://a.test/",)
    # The status and the metrics read the same numbers.
    from crawler.metrics.frontier import FrontierCollector

    collector = FrontierCollector(sync, h.keys, "w")
    status = collector.reader.read(oldest=False)
    assert status.refused == {"trap-calendar": EXAMPLES + 6, "not-http-url": 1}
    samples = {s.labels["reason"]: s.value for family in collector.families(status, "f")
               for s in family.samples if s.name == "crawler_frontier_refused_total"}
    assert samples == status.refused


def test_refusals_wait_in_the_worker_while_redis_is_away(
        make_harness: Callable[..., Harness], redis_url: str) -> None:
    h = make_harness("refusals-away")
    away = redis.asyncio.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    notes = RefusalNotes(away, h.keys)
    notes.note("trap-calendar", "http://a.test/cal/2090/01")
    assert not h.run(notes.flush())
    h.run(away.aclose())
    notes.note("trap-calendar", "http://a.test/cal/2091/01")
    notes.client = h.client  # Redis is back
    assert h.run(notes.flush())
    sync = redis.Redis.from_url(redis_url)
    assert sync.hget(h.keys.refused(), "trap-calendar") == b"2"
    assert sync.lrange(h.keys.refused_examples("trap-calendar"), 0, -1) == [
        b"http://a.test/cal/2091/01", b"http://a.test/cal/2090/01"]


def _frontier(workdir: Path, *argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "scrapy", "frontier", *argv,
                           "-s", f"JOBDIR={workdir / 'job'}"],
                          cwd=REPO, env=proxy_env(None), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.crawl
def test_status_and_summary_count_the_same_refusals_and_list_them(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    traps = ["/events/2090/01/", "/a/b/a/b/a/b/", "/cal?date=1900-01-01"]
    web = realweb(Web([Host("r.test", robots=ALLOW_ALL, pages={
        "/": links_to(*traps, "/ok"), "/ok": page("fine")})]))
    result = crawl_realweb(web.nameserver, [web.url("r.test")], tmp_path,
                           {"DOWNLOAD_DELAY": 0})
    assert sorted(r.target for r in web.ledger()) == [b"/", b"/ok", b"/robots.txt"]
    summary = {m.group(1): int(m.group(2))
               for m in re.finditer(r"'frontier/refused/([a-z-]+)': (\d+)", result.log)}
    assert summary == {"trap-calendar": 2, "trap-repeated-segment": 1}
    status = json.loads(_frontier(tmp_path, "status", "--json"))
    assert status["refused"] == summary
    assert "Refused  3 URL(s): trap-calendar 2, trap-repeated-segment 1" in _frontier(
        tmp_path, "status")
    listed = {row["reason"]: row for row in map(json.loads, _frontier(
        tmp_path, "refused", "--json").splitlines())}
    assert set(listed) == set(summary)
    assert sorted(listed["trap-calendar"]["examples"]) == sorted(
        web.url("r.test", t) for t in (traps[0], traps[2]))
    assert listed["trap-repeated-segment"]["examples"] == [web.url("r.test", traps[1])]
