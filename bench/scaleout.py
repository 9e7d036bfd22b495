"""Scale-out: 1, 2 and 4 workers on one Redis, and where one Redis would top out.

Each worker crawls its share of the simulated web's seeds (``N x --hosts``
hosts for N workers, the seeds dealt round-robin) on one frontier in a
private redis-server (Unix socket, persistence off, as in ``bench.vanilla``'s
small web: 3 KB pages, ``DOWNLOAD_DELAY=0``, 64/4 concurrency). Measured per
side: pages/s (the web's ledger: pages served / time from the first request
to the last answer), the workers' CPU per page, Redis's CPU per page (``INFO
cpu``) and commands per page (``INFO commandstats``, commands run inside
scripts included).

One Redis serves at most ``1000 / (Redis CPU ms per page)`` pages a second
on its core; a worker with a core of its own at most ``1000 / (worker CPU ms
per page)``; the knee is the first over the second, in workers.
On 2 cores the crawls, the web and Redis share the machine, so the speed-up
here is bounded by the cores, not by Redis: read the speed-up on a bigger
machine (``--workers 1 2 4 8 12`` with ``--hosts 1000``; the web's server
wants a core of its own per ~2,000 pages/s), and Redis's CPU per page here.

    python -m bench.scaleout [--quick] [--runs N] [--workers 1 2 4] [--hosts N]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import vanilla
from bench.common import (
    Check,
    Col,
    RedisUsage,
    Report,
    Table,
    child_cpu_seconds,
    finish,
    idle_cpu_per_s,
    median_of,
    median_row,
    parse_args,
    private_redis,
    rotated,
    usage_client,
)
from tests.crawl_runner import finish_crawl, start_crawl
from tests.simweb import SimWebProcess

SETTINGS: dict[str, Any] = {**vanilla.COMMON, "DOWNLOAD_DELAY": 0.0,
                            "PROMETHEUS_ENABLED": False}


def one_side(workers: int, hosts_each: int, root: Path) -> dict[str, float]:
    """Crawl a web of ``workers x hosts_each`` hosts with ``workers`` workers."""
    spec = {**vanilla.WEBS["small"], "n_hosts": workers * hosts_each}
    workdir = Path(tempfile.mkdtemp(prefix=f"scale{workers}-", dir=root))
    with private_redis() as url, SimWebProcess(seed=7, mix="clean", **spec) as sim:
        client = usage_client(url)
        idle = idle_cpu_per_s(client)
        before, read_at = RedisUsage.read(client), time.monotonic()
        cpu_before = child_cpu_seconds()
        seeds = sim.web.seed_urls()
        started = time.monotonic()
        procs = [start_crawl(sim.proxy_url, seeds[i::workers], workdir / f"w{i}",
                             {**SETTINGS, "REDIS_URL": url, "FRONTIER_WORKER_ID": f"w{i}",
                              "JOBDIR": str(workdir / f"w{i}" / "job")})
                 for i in range(workers)]
        results = [finish_crawl(p, workdir / f"w{i}", started, timeout=900)
                   for i, p in enumerate(procs)]
        cpu = child_cpu_seconds() - cpu_before
        usage = RedisUsage.read(client) - before
        window = time.monotonic() - read_at
        client.close()
        entries = sim.ledger().entries
    shutil.rmtree(workdir, ignore_errors=True)
    failed = [r for r in results if r.returncode != 0]
    if failed or not entries:
        raise RuntimeError(f"a crawl of {workers} worker(s) failed:\n"
                           + (failed[0].log[-3000:] if failed else "no request served"))
    pages = len(entries)
    span = max(e["done"] or e["arrival"] for e in entries) - min(e["arrival"] for e in entries)
    return {"pages": pages, "pages_per_s": pages / span,
            "worker_cpu_ms_per_page": cpu * 1000 / pages,
            "redis_cpu_ms_per_page": usage.cpu_s * 1000 / pages,
            "redis_busy_ms_per_page": (usage.cpu_s - idle * window) * 1000 / pages,
            "commands_per_page": usage.commands / pages}


def main(argv: list[str] | None = None) -> Report:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
        parser.add_argument("--hosts", type=int, default=150,
                            help="hosts per worker (the web grows with the workers)")

    args = parse_args(__doc__.splitlines()[0], argv, options=options)
    started = time.monotonic()
    hosts = max(20, args.hosts // 3) if args.quick else args.hosts
    root = Path(tempfile.mkdtemp(prefix="bench-scaleout-"))
    runs: dict[int, list[dict[str, float]]] = {n: [] for n in args.workers}
    try:
        for run in range(args.runs):
            for n in rotated(args.workers, run):
                r = one_side(n, hosts, root)
                runs[n].append(r)
                print(f"run {run + 1}/{args.runs}: {n} worker(s): {r['pages']:.0f} pages, "
                      f"{r['pages_per_s']:.0f} pages/s, worker CPU "
                      f"{r['worker_cpu_ms_per_page']:.2f} ms/page, Redis "
                      f"{r['redis_cpu_ms_per_page']:.3f} ms/page "
                      f"({r['redis_busy_ms_per_page']:.3f} above idle), "
                      f"{r['commands_per_page']:.1f} commands/page", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return _report(args, hosts, runs, started)


def _report(args: argparse.Namespace, hosts: int, runs: dict[int, list[dict[str, float]]],
            started: float) -> Report:
    report = Report("scaleout", "python -m bench.scaleout", args.runs, args.quick, raw={
        str(n): r for n, r in runs.items()})
    first = min(runs)  # (the fewest workers: the speed-up's base)
    alone = median_of(runs[first], "pages_per_s") / first
    for side in runs.values():
        for r in side:
            r["speedup"] = r["pages_per_s"] / (alone * first) if alone else 0.0
    cols = [Col("pages", ".0f"), Col("pages_per_s", ".0f", spread=True),
            Col("speedup", ".2f"), Col("worker_cpu_ms_per_page", ".2f", spread=True),
            Col("redis_cpu_ms_per_page", ".3f", spread=True),
            Col("redis_busy_ms_per_page", ".3f", spread=True), Col("commands_per_page", ".1f")]
    report.tables.append(Table(
        f"N workers on one Redis, {hosts} hosts each (medians, min-max)",
        ["workers", "pages", "pages/s", "speed-up", "worker CPU ms/page",
         "Redis CPU ms/page", "above idle", "Redis commands/page"],
        [median_row(f"{n}", runs[n], cols) for n in runs],
        "Everything on this machine's cores: past 1 worker the speed-up is the machine's, "
        "Redis's CPU per page is the frontier's. Above idle: less the server's own CPU a "
        "second while nobody asks it anything, times the crawl's length."))
    most = max(runs)
    redis_ms = median_of(runs[most], "redis_cpu_ms_per_page")
    ceiling = 1000 / redis_ms if redis_ms else float("inf")
    worker_ms = median_of(runs[most], "worker_cpu_ms_per_page")
    per_worker = 1000 / worker_ms if worker_ms else float("inf")
    knee = ceiling / per_worker
    for n in sorted({first, most}):
        busy = median_of(runs[n], "redis_busy_ms_per_page")
        report.checks.append(Check(f"Redis CPU per page above idle at {n} worker(s)",
                                   f"{busy:.3f} ms", "<= 0.25 ms (issue 53)", busy <= 0.25))
    growth = (median_of(runs[most], "commands_per_page")
              / median_of(runs[first], "commands_per_page"))
    report.checks += [
        Check(f"Redis commands per page, {most} workers / {first}", f"{growth:.2f}x",
              "<= 1.1x: no growth with workers (issue 53)", growth <= 1.1),
        Check("one Redis's ceiling (its core at 100%)", f"{ceiling:,.0f} pages/s",
              "(1000 / Redis CPU ms per page)", None),
        Check("the knee: workers (a core each) one Redis can serve", f"{knee:.1f}",
              f"(the ceiling over a busy worker's {per_worker:.0f} pages/s)", None),
    ]
    report.notes.append(
        "Settings: " + ", ".join(f"{k}={v}" for k, v in SETTINGS.items())
        + "; a private redis-server, persistence off; the seeds dealt round-robin.")
    finish(report, args, started)
    return report


if __name__ == "__main__":
    main()
