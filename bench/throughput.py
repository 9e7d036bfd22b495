"""Crawl throughput and CPU per page: the frontier against Scrapy's scheduler.

A real ``scrapy crawl broad`` of the simulated web (1,000 hosts, mix
"clean", every host a seed, ``DEPTH_LIMIT=2``, ``DOWNLOAD_DELAY=0.05``,
``CONCURRENT_REQUESTS=64``; ``--quick``: 300 hosts), once per scheduler and
run, interleaved:

- ``frontier``: the project's scheduler with its embedded Redis (JOBDIR in a
  temp dir). The bench starts that embedded server itself, exactly as the
  crawl would (``EmbeddedRedis``), so its CPU can be read from ``INFO cpu``;
  the crawl adopts it and shuts it down at the end.
- ``scrapy``: ``SCHEDULER=scrapy.core.scheduler.Scheduler`` with the
  AdmissionMiddleware (same admission rules), same JOBDIR: disk queues, as a
  resumable crawl needs.
- ``scrapy-mem`` (only with ``--memory-queues``): the same without JOBDIR:
  memory queues, not resumable; the fastest thing Scrapy offers. Off by
  default to keep ``run_all`` within its time; in a quick run it was within a
  few percent of ``scrapy``.

pages/s = pages the server answered (robots.txt included) / time from the
first request to the last answer, from the server's ledger. CPU = the crawl
process (``getrusage(RUSAGE_CHILDREN)`` around it: startup included, the same
for every side) plus, for the frontier, its Redis server.

    python -m bench.throughput [--quick] [--runs N] [--memory-queues]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis

from bench.common import (
    SCRAPY_SCHEDULER,
    Check,
    Report,
    Table,
    child_cpu_seconds,
    finish,
    median,
    parse_args,
    redis_cpu_seconds,
    rotated,
    spread,
)
from crawler.frontier.embedded import EmbeddedRedis
from tests.crawl_runner import run_crawl
from tests.simweb import SimWebProcess

COMMON: dict[str, Any] = {
    "DEPTH_LIMIT": 2,
    "DOWNLOAD_DELAY": 0.05,
    "CONCURRENT_REQUESTS": 64,
    # Scrapy's robots middleware ignores Crawl-delay (0.2-1 s on this web); the
    # frontier's policy would apply it. Clamped to the delay both use, so the
    # comparison is of schedulers, not of how polite each is.
    "ROBOTS_MAX_CRAWL_DELAY": 0.05,
    # Schedulers are compared, not outputs: the baseline's middlewares have no
    # WARC capture, so the archive is off on both sides (bench/warc.py prices it).
    "WARC_ENABLED": False,
}
VARIANTS: dict[str, dict[str, Any]] = {
    "frontier": {},
    "scrapy": SCRAPY_SCHEDULER,
    "scrapy-mem": {**SCRAPY_SCHEDULER, "JOBDIR": ""},
}


#: The frontier's own stats that say how long claimed URLs wait before they are sent.
DIAGNOSTICS = (
    "frontier/leases/claimed",
    "frontier/claim_to_download_ms/over_20",
    "frontier/claim_to_download_ms/max",
    "frontier/pacing/waits",
)


class RedisCpuWatch:
    """Samples a Redis server's CPU until it goes away (the crawl shuts it down).

    The last sample is at most ``interval`` before the shutdown; what is lost
    is the tail of the crawl's close, a few milliseconds of Redis work.
    """

    def __init__(self, url: str, interval: float = 0.1) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=2)
        self.interval = interval
        self.first = redis_cpu_seconds(self.client)
        self.last = self.first
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="redis-cpu", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.last = redis_cpu_seconds(self.client)
            except (redis.RedisError, OSError):
                return

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(5)
        self.client.close()
        return self.last - self.first


def one_crawl(variant: str, sim: SimWebProcess, root: Path) -> dict[str, Any]:
    """One crawl of the whole simulated web; what the server and the OS saw."""
    workdir = Path(tempfile.mkdtemp(prefix=f"{variant}-", dir=root))
    settings = {**COMMON, "JOBDIR": str(workdir / "job"), **VARIANTS[variant]}
    watch = None
    if variant == "frontier":
        embedded = EmbeddedRedis(workdir / "job" / "frontier")
        watch = RedisCpuWatch(embedded.start())
    sim.reset()
    cpu_before = child_cpu_seconds()
    result = run_crawl(sim.proxy_url, sim.web.seed_urls(), workdir, settings, timeout=600)
    crawl_cpu = child_cpu_seconds() - cpu_before
    redis_cpu = watch.stop() if watch else 0.0
    ledger = sim.ledger()
    shutil.rmtree(workdir, ignore_errors=True)
    if result.returncode != 0:
        raise RuntimeError(f"{variant} crawl failed:\n{result.log[-3000:]}")
    diagnostics = {name: result.stat(name) for name in DIAGNOSTICS} if variant == "frontier" \
        else {}
    entries = ledger.entries
    start = min(e["arrival"] for e in entries)
    end = max(e["done"] or e["arrival"] for e in entries)
    return {
        "requests": len(entries),
        "items": len(result.items),
        "span_s": end - start,
        "wall_s": result.seconds,
        "crawl_cpu_s": crawl_cpu,
        "redis_cpu_s": redis_cpu,
        "pages_per_s": len(entries) / (end - start),
        "cpu_ms_per_page": (crawl_cpu + redis_cpu) * 1000 / len(entries),
        "diagnostics": {k: int(v) for k, v in diagnostics.items() if v is not None},
    }


def main(argv: list[str] | None = None) -> Report:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--memory-queues", action="store_true",
                            help="also crawl with Scrapy's memory queues (no JOBDIR)")

    args = parse_args(__doc__.splitlines()[0], argv, options=options)
    started = time.monotonic()
    n_hosts = 300 if args.quick else 1000
    variants = [v for v in VARIANTS if v != "scrapy-mem" or args.memory_queues]
    root = Path(tempfile.mkdtemp(prefix="bench-throughput-"))
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    try:
        with SimWebProcess(seed=7, n_hosts=n_hosts, mix="clean") as sim:
            for run in range(args.runs):
                for variant in rotated(variants, run):
                    r = one_crawl(variant, sim, root)
                    runs[variant].append(r)
                    print(f"run {run + 1}/{args.runs} {variant:10} {r['requests']} requests in "
                          f"{r['span_s']:.1f} s = {r['pages_per_s']:.0f}/s, CPU "
                          f"{r['crawl_cpu_s']:.1f}+{r['redis_cpu_s']:.1f} s = "
                          f"{r['cpu_ms_per_page']:.2f} ms/page", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    expected = len(sim.web.reachable(sim.web.seed_urls(), max_depth=COMMON["DEPTH_LIMIT"]))

    def med(variant: str, key: str) -> float:
        return median([r[key] for r in runs[variant]])

    report = Report("throughput", "python -m bench.throughput", args.runs, args.quick)
    rows = []
    for variant in variants:
        pps = [r["pages_per_s"] for r in runs[variant]]
        cpu = [r["cpu_ms_per_page"] for r in runs[variant]]
        rows.append([
            variant, f"{med(variant, 'requests'):.0f}", f"{med(variant, 'items'):.0f}",
            f"{med(variant, 'span_s'):.1f}", f"{median(pps):.0f} ({spread(pps)})",
            f"{median(cpu):.2f} ({spread(cpu)})",
            f"{med(variant, 'crawl_cpu_s'):.1f} + {med(variant, 'redis_cpu_s'):.1f}",
            f"{med(variant, 'wall_s'):.1f}",
        ])
    report.tables.append(Table(
        f"Crawl of {n_hosts:,} simulated hosts (medians, min-max)",
        ["scheduler", "requests served", "items", "crawl span s", "pages/s",
         "CPU ms/page", "CPU s: crawl + Redis", "wall s"], rows,
        "requests served include robots.txt; crawl span = first request to last answer at "
        "the server; wall = process start to exit. The simulated web's ground truth for these "
        f"settings is {expected:,} pages; a crawl gets fewer when it first finds a page at a "
        "deeper level than its shortest path (DEPTH_LIMIT then cuts its links), which depends "
        "on the order a scheduler hands pages out."))
    pps_ratio = med("frontier", "pages_per_s") / med("scrapy", "pages_per_s")
    cpu_ratio = med("frontier", "cpu_ms_per_page") / med("scrapy", "cpu_ms_per_page")
    diag = [r["diagnostics"] for r in runs["frontier"]]
    report.tables.append(Table(
        "Frontier: how long claimed URLs waited in the worker (crawl stats, median of runs)",
        ["stat", "value"],
        [[f"`{name}`", f"{median([d.get(name, 0) for d in diag]):.0f}"] for name in DIAGNOSTICS],
        "claim_to_download_ms: from the claim in Redis to the request reaching the downloader."))
    ratio_rows = [["scrapy (JOBDIR, disk queues)", f"**{pps_ratio:.2f}x**",
                   f"**{cpu_ratio:.2f}x**"]]
    report.checks += [
        Check("frontier / scrapy pages/s", f"{pps_ratio:.2f}x", ">= 1.0x", pps_ratio >= 1.0),
        Check("frontier / scrapy CPU per page (crawl + Redis)", f"{cpu_ratio:.2f}x", "<= 1.0x",
              cpu_ratio <= 1.0),
    ]
    if "scrapy-mem" in variants:
        pps_mem = med("frontier", "pages_per_s") / med("scrapy-mem", "pages_per_s")
        cpu_mem = med("frontier", "cpu_ms_per_page") / med("scrapy-mem", "cpu_ms_per_page")
        ratio_rows.append(["scrapy-mem (memory queues)", f"{pps_mem:.2f}x", f"{cpu_mem:.2f}x"])
        report.checks.append(Check("frontier / scrapy-mem pages/s, CPU per page",
                                   f"{pps_mem:.2f}x, {cpu_mem:.2f}x", "(reference)", None))
    report.tables.append(Table("Frontier / Scrapy (ratio of medians)",
                               ["baseline", "pages/s", "CPU per page"], ratio_rows))
    report.notes.append(
        f"Settings: {', '.join(f'{k}={v}' for k, v in COMMON.items())}, the rest the "
        "project's (ROBOTSTXT_OBEY=True: the frontier's robots policy, Scrapy's "
        "RobotsTxtMiddleware for the baselines; CONCURRENT_REQUESTS_PER_DOMAIN=4). The "
        "simulated web runs in its own process on the same 2 cores, so pages/s is bounded "
        "by CPU.")
    report.raw = runs
    finish(report, args, started)
    return report


if __name__ == "__main__":
    main()
