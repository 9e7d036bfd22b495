"""A worker's memory does not grow with the frontier: RSS at 10k and 1M queued URLs.

The queue lives in Redis; a worker holds only what it is working on (claimed
URLs, leases, robots rules of its hosts, the archive's buffers). This loads
a fresh private redis-server with N queued URLs (``bench.memory``'s loader:
20 links on each of N/20 hosts, the crawl's own records, its default
namespace and partitions), then starts one worker (``scrapy crawl broad``
with every default on, no seeds: it joins the frontier) against the
simulated web that serves those hosts, and samples the worker's resident
set (``VmRSS``) every 0.25 s for ``CRAWL_S`` seconds of crawling. Reported
per size: the peak RSS, the RSS at the end, the pages fetched; and the growth
from the smallest size to the largest. Redis bytes per queued and per done URL
are ``bench.memory``'s.

    python -m bench.workermem [--quick] [--runs N]
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import Check, Report, Table, finish, median, parse_args, private_redis, rotated
from bench.memory import URLS_PER_HOST, Server, load
from tests.crawl_runner import finish_crawl, start_crawl
from tests.simweb import SimWebProcess

SIZES = (10_000, 1_000_000)
QUICK_SIZES = (10_000, 100_000)
CRAWL_S = 30
TARGET_GROWTH_MB = 50.0
NOTE = ("The larger frontier spreads its URLs over 100 times as many hosts (20 URLs a "
        "host), so in the same 30 s the worker meets more hosts and fetches more pages "
        "(the table's pages column): per-host state the worker keeps while it works "
        "(robots rules, DNS answers, connections) is in the growth too. The queue itself "
        "stays in Redis.")
SETTINGS: dict[str, Any] = {
    "CONCURRENT_REQUESTS": 64,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 4,
    "DOWNLOAD_DELAY": 1.0,
    "DEPTH_LIMIT": 2,
    "CLOSESPIDER_TIMEOUT": CRAWL_S,
    "LOG_LEVEL": "INFO",
}


class RssSampler:
    """The resident set of one process, sampled in a thread until it exits."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[int] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def _run(self) -> None:
        status = Path(f"/proc/{self.pid}/status")
        while True:
            try:
                text = status.read_text()
            except (FileNotFoundError, ProcessLookupError):
                return
            for line in text.splitlines():
                if line.startswith("VmRSS:"):
                    self.samples.append(int(line.split()[1]) * 1024)
            if " (zombie)" in text.splitlines()[1]:
                return
            time.sleep(0.25)


def one_run(n_urls: int, root: Path) -> dict[str, Any]:
    n_hosts = n_urls // URLS_PER_HOST
    with private_redis() as url, SimWebProcess(seed=7, mix="clean", n_hosts=n_hosts) as sim:
        t0 = time.monotonic()
        asyncio.run(load([Server("bench", "frontier", url)], n_hosts))
        load_s = time.monotonic() - t0
        workdir = Path(tempfile.mkdtemp(prefix=f"worker-{n_urls}-", dir=root))
        started = time.monotonic()
        proc = start_crawl(sim.proxy_url, None, workdir, {**SETTINGS, "REDIS_URL": url})
        sampler = RssSampler(proc.pid)
        sampler.start()
        result = finish_crawl(proc, workdir, started, timeout=CRAWL_S + 120)
        sampler.join()
        pages = len(sim.ledger().entries)
    if result.returncode != 0 or not sampler.samples:
        raise RuntimeError(f"the worker failed ({result.returncode}):\n{result.log[-3000:]}")
    shutil.rmtree(workdir, ignore_errors=True)
    # The last samples are the close (the archive's files, the stats dump).
    steady = sampler.samples[: max(1, len(sampler.samples) - 8)]
    return {"queued": n_urls, "load_s": load_s, "pages": pages,
            "peak_mb": max(sampler.samples) / 2**20, "steady_mb": steady[-1] / 2**20}


def main(argv: list[str] | None = None) -> Report:
    args = parse_args(__doc__.splitlines()[0], argv)
    started = time.monotonic()
    sizes = QUICK_SIZES if args.quick else SIZES
    root = Path(tempfile.mkdtemp(prefix="bench-workermem-"))
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}
    for run in range(args.runs):
        for n in rotated(sizes, run):
            r = one_run(n, root)
            runs[n].append(r)
            print(f"  run {run + 1}: {n:,} queued: peak {r['peak_mb']:.0f} MB, "
                  f"{r['pages']} pages", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    rows = []
    for n in sizes:
        rs = runs[n]
        rows.append([f"{n:,}", f"{median([r['peak_mb'] for r in rs]):.0f}",
                     f"{median([r['steady_mb'] for r in rs]):.0f}",
                     f"{median([r['pages'] for r in rs]):.0f}",
                     f"{median([r['load_s'] for r in rs]):.0f}"])
    small, large = sizes[0], sizes[-1]
    growth = median([r["peak_mb"] for r in runs[large]]) - median(
        [r["peak_mb"] for r in runs[small]])
    report = Report("workermem", "python -m bench.workermem" + (" --quick" if args.quick else ""),
                    args.runs, args.quick)
    report.tables.append(Table(
        f"One worker, every default on, {CRAWL_S} s of crawling a frontier of N queued URLs",
        ["queued URLs", "peak RSS (MB)", "RSS before the close (MB)", "pages fetched",
         "load (s)"], rows,
        note="RSS sampled every 0.25 s from /proc; the frontier loaded by bench.memory's "
             "loader into a private redis-server before the worker starts."))
    report.checks.append(Check(f"worker peak RSS growth, {small:,} -> {large:,} queued URLs",
                               f"{growth:+.1f} MB", f"< {TARGET_GROWTH_MB:.0f} MB",
                               growth < TARGET_GROWTH_MB))
    report.notes.append(NOTE)
    report.raw = {str(n): rs for n, rs in runs.items()}
    finish(report, args, started)
    return report


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
