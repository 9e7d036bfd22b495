"""The crawl report's parts without a crawl: tallies, what changed, the latest run, the
files, and every worker's tallies read back from a real Redis."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from crawler.frontier import reports as saved_reports
from crawler.frontier.account import Account
from crawler.reports import tally as tally_module
from crawler.reports.build import build, latest_run
from crawler.reports.compare import compare
from crawler.reports.compare import rows as compare_rows
from crawler.reports.tally import OTHER_HOSTS, Tally, change_of
from crawler.reports.write import write
from tests.frontier_world import filled_world


def _tally() -> Tally:
    t = Tally()
    t.page("a.test", 200, "text/html", 100, 0.5, 10.0)
    t.page("a.test", 404, "text/html", 10, 0.1, 12.0)
    t.error("a.test", "TimeoutError")
    t.robots("a.test", "200")
    t.denied("a.test")
    t.seed("http://a.test/", "200")
    t.seed("http://b.test/", "error: DNSLookupError")
    t.change("a.test", "new")
    return t


def test_tallies_of_two_workers_add_up_and_a_reached_seed_wins() -> None:
    one, two = _tally(), Tally()
    two.page("a.test", 200, "image/png", 5, 0.2, 8.0)
    two.seed("http://b.test/", "200")
    two.off_scope["elsewhere.test"] += 3
    one.merge(Tally.of(json.loads(json.dumps(two.as_dict()))))  # as saved in Redis
    a = one.hosts["a.test"]
    assert (a.pages, a.bytes, a.first, a.last) == (3, 115, 8.0, 12.0)
    assert a.statuses == {"200": 2, "404": 1} and a.mimes == {"text/html": 2, "image/png": 1}
    assert (a.errors, a.robots, a.robots_denied) == ({"TimeoutError": 1}, "200", 1)
    assert one.seeds == {"http://a.test/": "200", "http://b.test/": "200"}
    assert one.off_scope == {"elsewhere.test": 3}


def test_a_tally_folds_hosts_past_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tally_module, "MAX_HOSTS", 2)
    t = Tally()
    for name in ("a", "b", "c", "d"):
        t.page(name, 200, "text/html", 1, 0.0, 1.0)
    assert sorted(t.hosts) == sorted([OTHER_HOSTS, "a", "b"])
    assert t.hosts[OTHER_HOSTS].pages == 2 and t.folded_hosts == 2


@pytest.mark.parametrize(("status", "previous", "digest", "what"), [
    (200, None, "x", "new"), (404, None, "x", "new"), (304, "d1", "", "unchanged"),
    (200, "d1", "d1", "unchanged"), (200, "d1", "d2", "changed"), (200, "", "d2", "changed"),
    (404, "d1", "", "gone"), (410, "d1", "", "gone"), (301, "d1", "", None),
    (503, "d1", "", None)])
def test_a_page_next_to_its_last_fetch(status: int, previous: str | None, digest: str,
                                       what: str | None) -> None:
    assert change_of(status, previous, lambda: digest) == what


def test_the_latest_run_is_the_last_started_and_every_worker_running_then() -> None:
    saved = {"w-last-week": {"started": 100.0, "ended": 200.0},
             "w0": {"started": 1000.0, "ended": 1500.0},
             "w1": {"started": 1005.0, "ended": 1490.0}}
    assert latest_run(saved) == {"w0": [1000.0, 1500.0], "w1": [1005.0, 1490.0]}
    assert latest_run({}) == {}


def test_the_files_hold_the_tables_and_the_page_runs_nothing(tmp_path: Path) -> None:
    counts = {"queued": 2, "dead": 1, "done": 1, "hf": 1, "seeds": 2, "x:http-404": 1,
              "p:robots-unreachable": 1}
    account = Account.of(counts, {"budget": 1})
    report = {"crawl": "c", "generated_at": 1.0, "workers": ["w0"],
              "account": account.as_dict(),
              "tally": _tally().as_dict(), "latest_runs": {"w0": [0.0, 1.0]},
              "changes": {"a.test": {"new": 1}},
              "left": {"counts": {"queued": 2, "dead": 1}, "refused": {"budget": 1},
                       "queued": {"b.test": 2}, "dead": {"a.test": {"http-404": 1}},
                       "dead_complete": True}}
    page = write(report, tmp_path)
    with (tmp_path / "hosts.csv").open() as f:
        hosts = list(csv.DictReader(f))
    assert [(h["host"], h["pages"], h["statuses"], h["errors"]) for h in hosts] == [
        ("a.test", "2", "200:1 404:1", "1")]
    assert (tmp_path / "left.csv").read_text().splitlines()[1:] == [
        "b.test,2,0,", "a.test,0,1,http-404:1"]
    assert (tmp_path / "changes.csv").read_text().splitlines() == [
        "host,new,changed,unchanged,gone", "a.test,1,0,0,0"]
    assert json.loads((tmp_path / "report.json").read_text()) == report
    html = page.read_text()
    assert "<script" not in html and "What changed in the latest run" in html
    # the cards are the crawl's account; the answers the tallies'
    for card, shown in [("fetched", 1), ("hosts", 1), ("seeds", 2), ("refused", 1),
                        ("dead", 1), ("parked", 1)]:
        assert f'id="account-{card}">' in html and f"<b>{shown}</b>" in html.split(
            f'id="account-{card}">')[1].split("</div>")[0], card
    assert 'data-reason="http-404" data-n="1"' in html
    assert 'data-reason="robots-unreachable" data-n="1"' in html
    assert not list(tmp_path.glob(".*.tmp"))


def test_two_crawls_side_by_side_host_by_host() -> None:
    def report(name: str, hosts: dict[str, tuple[int, dict[str, int]]]) -> dict:
        return {"crawl": name, "tally": {"hosts": {
            h: {"pages": p, "bytes": p * 10, "statuses": s} for h, (p, s) in hosts.items()}}}

    before = report("week1", {"a.test": (5, {"200": 5}), "gone.test": (2, {"200": 2})})
    now = report("week2", {"a.test": (4, {"200": 3, "404": 1}), "new.test": (1, {"200": 1})})
    result = compare(before, now)
    assert result["totals"] == {"hosts_new": 1, "hosts_gone": 1, "hosts_in_both": 1,
                                "pages": [7, 5]}
    assert result["hosts"]["a.test"]["status_changes"] == {"200": -2, "404": 1}
    assert compare_rows(result) == [
        ["gone.test", "gone", 2, 0, -2, 20, 0, "200:-2"],
        ["a.test", "both", 5, 4, -1, 50, 40, "200:-2 404:+1"],
        ["new.test", "new", 0, 1, 1, 0, 10, "200:+1"]]


def test_a_report_read_during_the_crawl_counts_what_every_worker_did_so_far(
        redis_url: str, redis_prefix: str) -> None:
    world = filled_world(redis_url, redis_prefix + "live")

    def pages(n: int) -> dict[str, Any]:
        t = Tally()
        for i in range(n):
            t.page("a.test", 200, "text/html", 10, 0.1, float(i))
        return t.as_dict()

    async def save_all(*calls: tuple[Any, ...]) -> None:
        client = Redis.from_url(redis_url)
        try:
            for fn, worker, tally in calls:
                await fn(client, world.keys, worker, tally)
        finally:
            await client.aclose()

    try:
        # w1 saved 2 pages in an earlier run and fetched 1 so far in this one;
        # w2, running for the first time, 3 so far
        asyncio.run(save_all(
            (saved_reports.save, "w1", {"total": pages(2), "run": pages(2), "started": 1.0,
                                        "ended": 2.0}),
            (saved_reports.save_live, "w1", {"total": pages(1), "run": pages(1),
                                             "started": 10.0, "ended": 11.0}),
            (saved_reports.save_live, "w2", {"total": pages(3), "run": pages(3),
                                             "started": 10.5, "ended": 11.0})))
        report = build(world.admin)
        assert report["tally"]["hosts"]["a.test"]["pages"] == 6
        assert report["workers"] == ["w1", "w1 (running)", "w2 (running)"]
        assert sorted(report["latest_runs"]) == ["w1 (running)", "w2 (running)"]
        # w1 closes: its total takes the place of its live tally, counted once
        asyncio.run(save_all((saved_reports.save, "w1", {
            "total": pages(3), "run": pages(1), "started": 10.0, "ended": 12.0})))
        report = build(world.admin)
        assert report["tally"]["hosts"]["a.test"]["pages"] == 6
        assert report["workers"] == ["w1", "w2 (running)"]
    finally:
        world.close()
