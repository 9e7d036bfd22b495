"""Crawl reports (crawler/reports/), checked against the test web's ground truth.

Two workers crawl the simulated web on one Redis, each with its own output
folder. The report the last one writes when it closes, and the one
``scrapy frontier report`` writes afterwards, must say per host exactly what
the web's server ledger saw: how many pages, with which status codes, how
many bytes; and per seed what became of it, a refused one included.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from crawler.frontier.keys import Keys, layout_json
from tests.crawl_runner import REPO, CrawlResult, finish_crawl, proxy_env, start_crawl
from tests.simweb import SimWebProcess
from tests.simweb.ledger import Ledger, is_robots_path

pytestmark = pytest.mark.crawl

MIX = {"robots:rules": 0.5, "robots:missing": 0.5, "page:normal": 0.8, "page:nonhtml": 0.2}
REFUSED_SEED = "http://127.0.0.1:9/"


class Crawl:
    def __init__(self, results: list[CrawlResult], ledger: Ledger, namespace: str,
                 workdirs: list[Path], seeds: list[str]) -> None:
        self.results = results
        self.ledger = ledger
        self.namespace = namespace
        self.workdirs = workdirs
        self.seeds = seeds


@pytest.fixture(scope="module")
def crawl(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawl]:
    tmp = tmp_path_factory.mktemp("report")
    namespace = f"test:report:{time.time_ns()}"
    settings = {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": namespace,
                "FRONTIER_PARTITIONS": 4, "FRONTIER_SEEN_BUCKETS": 64, "DOWNLOAD_DELAY": 0.05,
                "DEPTH_LIMIT": 2, "ADMISSION_MAX_PAGES_PER_HOST": 8, "FRONTIER_IDLE_WAIT": 3}
    with SimWebProcess(seed=53, n_hosts=8, mix=MIX) as web:
        seeds = web.web.seed_urls()
        started = time.monotonic()
        workdirs = [tmp / f"w{i}" for i in range(2)]
        procs = [start_crawl(web.proxy_url, [*seeds[i::2], *([REFUSED_SEED] if i else [])],
                             workdirs[i], {**settings, "FRONTIER_WORKER_ID": f"w{i}"})
                 for i in range(2)]
        results = [finish_crawl(p, workdirs[i], started) for i, p in enumerate(procs)]
        ledger = web.ledger()
    yield Crawl(results, ledger, namespace, workdirs, seeds)
    client = redis.Redis.from_url(redis_url)
    stale = list(client.scan_iter(match=f"*{namespace}*", count=1000))
    if stale:
        client.delete(*stale)
    client.close()


def _rows(folder: Path, name: str) -> list[dict[str, str]]:
    with (folder / name).open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _truth(ledger: Ledger) -> dict[str, dict[str, Any]]:
    """Per host: the pages the server answered, their statuses and bytes."""
    out: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"pages": 0, "bytes": 0, "statuses": Counter()})
    for entry in ledger:
        if is_robots_path(entry["path"]):
            continue
        host = out[entry["host"]]
        host["pages"] += 1
        host["bytes"] += entry["bytes"]
        host["statuses"][str(entry["status"])] += 1
    return out


def _check(folder: Path, crawl: Crawl) -> None:
    truth = _truth(crawl.ledger)
    hosts = {row["host"]: row for row in _rows(folder, "hosts.csv")}
    assert set(hosts) == set(truth)
    for name, expected in truth.items():
        row = hosts[name]
        assert int(row["pages"]) == expected["pages"], name
        assert int(row["bytes"]) == expected["bytes"], name
        statuses = Counter({k: int(v) for k, v in
                            (pair.split(":") for pair in row["statuses"].split())})
        assert statuses == expected["statuses"], name
        assert row["robots_txt"] in ("200", "404"), (name, row["robots_txt"])
    seeds = {row["seed"]: row for row in _rows(folder, "seeds.csv")}
    assert seeds[REFUSED_SEED]["outcome"] == "refused: loopback"
    for seed in crawl.seeds:
        assert seeds[seed]["outcome"] == "200", seed
        assert int(seeds[seed]["pages_of_site"]) == truth[seed.split("/")[2]]["pages"]
    statuses = {row["status"]: int(row["pages"]) for row in _rows(folder, "statuses.csv")}
    assert sum(statuses.values()) == sum(t["pages"] for t in truth.values())
    report = json.loads((folder / "report.json").read_text())
    assert report["workers"] == ["w0", "w1"]
    assert report["left"]["counts"]["queued"] == 0
    page = (folder / "report.html").read_text()
    # one file a person can open anywhere: nothing fetched, nothing run
    assert "<script" not in page and "src=" not in page and "<link" not in page
    assert "<svg" in page and all(name in page for name in truth)


def test_the_last_worker_to_close_writes_the_whole_crawl_s_report(crawl: Crawl) -> None:
    assert [r.returncode for r in crawl.results] == [0, 0]
    folders = [w / "reports" / crawl.namespace.replace(":", "-") for w in crawl.workdirs]
    written = [f for f in folders if (f / "report.json").is_file()]
    assert len(written) == 2  # each closing worker writes one; the last one has all
    last = max(written, key=lambda f: json.loads((f / "report.json").read_text())[
        "generated_at"])
    _check(last, crawl)
    assert any("Report: " in r.log for r in crawl.results)


def test_scrapy_frontier_report_writes_it_again(crawl: Crawl, redis_url: str,
                                                 tmp_path: Path) -> None:
    out = tmp_path / "again"
    done = subprocess.run(
        [sys.executable, "-m", "scrapy", "frontier", "report", "--out", str(out),
         "-s", f"REDIS_URL={redis_url}", "-s", f"FRONTIER_NAMESPACE={crawl.namespace}",
         "-s", "FRONTIER_PARTITIONS=4"],
        cwd=REPO, env=proxy_env(None), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert str(out / "report.html") in done.stdout
    _check(out, crawl)


def _report(crawl: Crawl, redis_url: str, out: Path, *extra: str
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "frontier", "report", "--out", str(out), *extra,
         "-s", f"REDIS_URL={redis_url}", "-s", f"FRONTIER_NAMESPACE={crawl.namespace}",
         "-s", "FRONTIER_PARTITIONS=4"],
        cwd=REPO, env=proxy_env(None), capture_output=True, text=True, timeout=60)


def test_a_crawl_next_to_another_crawl_id(crawl: Crawl, redis_url: str, tmp_path: Path) -> None:
    """--compare: here with a crawl that a worker opened and that fetched
    nothing, so every host is new."""
    opened = Keys(f"{crawl.namespace}:opened", 4)
    redis.Redis.from_url(redis_url).set(opened.layout(), layout_json(4, opened.seen_buckets))
    out = tmp_path / "compared"
    done = _report(crawl, redis_url, out, "--compare", "opened")
    assert done.returncode == 0, done.stderr[-2000:]
    truth = _truth(crawl.ledger)
    rows = {row["host"]: row for row in _rows(out, "compare.csv")}
    assert set(rows) == set(truth)
    for name, expected in truth.items():
        assert (rows[name]["state"], rows[name]["pages_before"], rows[name]["pages_now"]) == (
            "new", "0", str(expected["pages"]))
    report = json.loads((out / "report.json").read_text())
    assert report["compare"]["with"] == f"{crawl.namespace}:opened"
    assert "Next to the crawl" in (out / "report.html").read_text()


def test_a_crawl_id_nothing_ran_under_is_refused_and_the_known_ones_named(
        crawl: Crawl, redis_url: str, tmp_path: Path) -> None:
    """(Set next to nothing, every host would read as new: a typo's report.)"""
    out = tmp_path / "refused"
    done = _report(crawl, redis_url, out, "--compare", "never-ran")
    assert done.returncode == 1
    assert "no crawl 'never-ran'" in done.stderr and "the crawls it holds: ''" in done.stderr
    assert not out.exists()
