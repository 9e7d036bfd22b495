"""What losing a Redis master costs a crawl, with and without the replay.

A Redis Cluster of three masters with one replica each (tests/redis_cluster.py)
holds the frontier of one worker crawling a simulated web of 16 hosts. Once
the crawl is under way, the master of slot 0 acknowledges writes for 1.5 s
that its replica never gets (the replica is cut off and frozen), then it is
killed and its replica takes over: what asynchronous replication loses when
a master dies at a bad moment. Two sides, alternating run by run:

- ``replay``: the default, ``FRONTIER_REPLAY_SECONDS = 10``: the worker admits
  again what it sent in the last 10 s once Redis answers again;
- ``no replay``: ``FRONTIER_REPLAY_SECONDS = 0``.

Measured: the web's pages never fetched (lost URLs), pages fetched twice
(their ``done`` went with the master), URLs admitted again, how long the
worker saw Redis away. The price in steady state is measured too: the same
crawl with no failover, both sides, the worker's CPU per page (its process'
user + system time; a crawl this short is dominated by start-up, so this
ratio is noise-level), and, directly, what the window costs per admitted
URL: the time of ``ReplayWindow.sent`` in batches of 40 (a page's links),
and the memory the window holds on to (``tracemalloc``, URLs and records
the size of the simulated web's).

    python -m bench.failover [--quick] [--runs N]
"""

from __future__ import annotations

import re
import resource
import time
import tracemalloc
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from bench.common import (
    Check,
    Col,
    Report,
    Table,
    finish,
    median_of,
    median_row,
    parse_args,
    rotated,
)
from crawler.frontier.values import Admission
from crawler.scheduling.replay import ReplayWindow
from tests.crawl_runner import finish_crawl, start_crawl
from tests.redis_cluster import lose_master, replicated_cluster, url_of, wait_for
from tests.simweb import SimWebProcess

SIDES = {"replay": 10.0, "no replay": 0.0}
UNREPLICATED_S = 1.5


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_crawl(replay_s: float, failover: bool, root: Path, hosts: int) -> dict[str, Any]:
    """One crawl on a fresh cluster; what it fetched, lost and cost."""
    with replicated_cluster(root / "cluster") as nodes, SimWebProcess(
            seed=29, n_hosts=hosts, mix={"robots:allow-all": 1.0, "page:normal": 1.0}) as web:
        cpu = _children_cpu()
        started = time.monotonic()
        proc = start_crawl(web.proxy_url, web.web.seed_urls(), root / "crawl", {
            "REDIS_URL": url_of(nodes), "REDIS_CLUSTER": True, "FRONTIER_NAMESPACE": "bench",
            "FRONTIER_PARTITIONS": 12, "FRONTIER_SEEN_BUCKETS": 64, "DOWNLOAD_DELAY": 0.6,
            "DEPTH_LIMIT": 0, "PROMETHEUS_ENABLED": False, "ROBOTSTXT_OBEY": False,
            "FRONTIER_LEASE_SECONDS": 10, "FRONTIER_REPLAY_SECONDS": replay_s,
        })
        if failover:
            wait_for(lambda: len(web.ledger().entries) >= 20, 60)
            lose_master(nodes, UNREPLICATED_S)
        result = finish_crawl(proc, root / "crawl", started, timeout=300)
        cpu = _children_cpu() - cpu  # the crawl's process, waited for above
        fetched = web.ledger().pages(web.web)
        expected = set(web.web.reachable(web.web.seed_urls(), obey_robots=False))
    away = re.search(r"Redis is back after ([0-9.]+) s", result.log)
    return {
        "ok": result.returncode == 0 and "Traceback" not in result.log,
        "lost": len(expected - set(fetched)),
        "twice": sum(n - 1 for n in fetched.values() if n > 1),
        "pages": sum(fetched.values()),
        "replayed": int(result.stat("frontier/replayed") or 0),
        "away_s": float(away[1]) if away else 0.0,
        "cpu_ms_per_page": 1000 * cpu / max(1, sum(fetched.values())),
        "seconds": result.seconds,
    }


def _admissions(n: int) -> list[Admission]:
    return [Admission(f"http://h{i % 997:05d}.test/p/{i}?a=1", f"http://h{i % 997:05d}.test:80",
                      i.to_bytes(16, "big"), f'{{"u":"/p/{i}?a=1","d":2}}') for i in range(n)]


def _batches(n: int, batch: int) -> list[list[Admission]]:
    items = _admissions(n)
    return [items[i:i + batch] for i in range(0, n, batch)]


def window_price(n: int = 100_000, batch: int = 40) -> tuple[float, float]:
    """(microseconds, bytes) the replay window costs per admitted URL: the time
    of ``sent``, and what a full window keeps alive (the admissions too)."""
    window = ReplayWindow(3600, limit=n)
    batches = _batches(n, batch)
    started = time.perf_counter()
    for chunk in batches:
        window.sent(chunk)
    seconds = time.perf_counter() - started
    del window, batches
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    held = ReplayWindow(3600, limit=n)
    for chunk in _batches(n, batch):
        held.sent(chunk)
    size = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return 1e6 * seconds / n, size / n


def main(argv: list[str] | None = None) -> Report:
    args = parse_args(__doc__.splitlines()[0], argv)
    started = time.monotonic()
    hosts = 8 if args.quick else 16
    runs: dict[tuple[str, bool], list[dict[str, Any]]] = {
        (side, failover): [] for side in SIDES for failover in (True, False)}
    for run in range(args.runs):
        for side in rotated(list(SIDES), run):
            for failover in (True, False):
                with TemporaryDirectory(prefix="bench-failover-") as tmp:
                    measured = one_crawl(SIDES[side], failover, Path(tmp), hosts)
                runs[(side, failover)].append(measured)
                print(f"run {run + 1} {side} failover={failover}: {measured}", flush=True)
    report = Report("failover", "python -m bench.failover", args.runs, args.quick)
    cols = [Col("lost", ".0f", True), Col("twice", ".0f", True), Col("replayed", ".0f"),
            Col("away_s", ".1f"), Col("pages", ".0f"), Col("cpu_ms_per_page", ".2f", True)]
    report.tables.append(Table(
        "A master killed mid-crawl after 1.5 s of writes its replica never got",
        ["side", "URLs lost", "pages fetched twice", "admitted again", "Redis away (s)",
         "pages fetched", "worker CPU ms/page"],
        [median_row(side, runs[(side, True)], cols) for side in SIDES]))
    report.tables.append(Table(
        "The same crawl, no failover (the replay's price in steady state)",
        ["side", "pages fetched", "worker CPU ms/page"],
        [median_row(side, runs[(side, False)], [Col("pages", ".0f"),
                                                Col("cpu_ms_per_page", ".2f", True)])
         for side in SIDES]))
    micros, per_url = min(window_price() for _ in range(args.runs))
    lost = [r["lost"] for r in runs[("replay", True)]]
    price = (median_of(runs[("replay", False)], "cpu_ms_per_page")
             / median_of(runs[("no replay", False)], "cpu_ms_per_page"))
    report.checks += [
        Check("URLs lost to a master's failover, with the replay (every run)",
              f"{max(lost)}", "0", max(lost) == 0),
        Check("URLs lost to a master's failover, without it",
              f"{median_of(runs[('no replay', True)], 'lost'):.0f}", "(what the replay saves)",
              None),
        Check("the replay window's time per admitted URL", f"{micros:.2f} µs",
              "(a page's links: 40x that)", None),
        Check("the replay window's memory per admitted URL", f"{per_url:.0f} B",
              "(10 s at 1,000 links/s: 10,000x that)", None),
        Check("worker CPU per page, replay on / off, no failover (start-up dominated)",
              f"{price:.2f}x", "(noise-level: see the table's ranges)", None),
        Check("every crawl ended cleanly", str(all(r["ok"] for rs in runs.values() for r in rs)),
              "True", all(r["ok"] for rs in runs.values() for r in rs)),
    ]
    report.raw = {f"{side}/{'failover' if f else 'steady'}": rs for (side, f), rs in runs.items()}
    finish(report, args, started)
    return report


if __name__ == "__main__":
    main()
