"""Faults: do broken hosts slow the healthy ones down?

One simulated web, crawled twice side by side: once with every tenth host
broken (connections reset, requests that hang, bodies that trickle, 503
bursts, a robots.txt that answers 503) and once with those same hosts
answering normally. Measured from the server's ledger on the *healthy*
hosts only: their pages per second, from the first request until the last
healthy page is done. ratio = with faults / without; the target is >= 0.9x:
breakers, timeouts and backoff keep broken hosts from holding the slots the
healthy ones need.

Each web is crawled by each scheduler, interleaved run by run:

- ``frontier``: the project's scheduler and its policy (robots, retries that
  wait in the frontier, per-host breakers);
- ``scrapy``: Scrapy's scheduler with the AdmissionMiddleware, and Scrapy's own
  robots and retry middlewares (the project's need the frontier): no breaker;
  a request that fails is re-queued at once, up to RETRY_TIMES times;
- ``scrapy-redis``: the same with scrapy-redis's scheduler and dupefilter on a
  fresh private redis-server.

The fault-free crawl also fetches the pages of the hosts that are broken in
the other crawl, so it does more work in all; the ratio only compares the
healthy hosts' rate. Settings make the faulty crawl end in minutes rather
than hours: a 5 s download timeout, one breaker opening before a host is
parked, robots.txt unreachable parked after one try (the last two only mean
something to the frontier).

    python -m bench.faults [--quick] [--runs N]
"""

from __future__ import annotations

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
    median_of,
    median_row,
    parse_args,
    rotated,
    scheduler_redis,
)
from tests.crawl_runner import run_crawl
from tests.simweb import SimWebProcess
from tests.simweb.ledger import is_robots_path

FAULTS = ("reset", "hang", "trickle", "unavailable", "robots:error-503")
SETTINGS: dict[str, Any] = {
    "CONCURRENT_REQUESTS": 32,
    "DOWNLOAD_DELAY": 0.1,
    "DEPTH_LIMIT": 1,
    "DOWNLOAD_TIMEOUT": 5,
    "RETRY_BACKOFF_BASE": 0.5,
    "BREAKER_THRESHOLD": 3,
    "BREAKER_COOLDOWN": 2,
    "BREAKER_MAX_OPENINGS": 1,
    "ROBOTS_TIMEOUT": 5,
    "ROBOTS_UNREACHABLE_MAX_ATTEMPTS": 1,
}
SCHEDULERS: dict[str, dict[str, Any]] = {
    "frontier": {},
    "scrapy": SCRAPY_SCHEDULER,
    "scrapy-redis": SCRAPY_REDIS_SCHEDULER,
}
TARGET = 0.9


def pins(n_hosts: int, faulty: bool) -> dict[int, str]:
    """Every tenth host broken (a different way each time), or pinned normal."""
    broken = range(5, n_hosts, 10)
    if not faulty:
        return dict.fromkeys(broken, "robots:allow-all,normal")
    return {i: FAULTS[k % len(FAULTS)] if FAULTS[k % len(FAULTS)].startswith("robots:")
            else f"robots:allow-all,{FAULTS[k % len(FAULTS)]}" for k, i in enumerate(broken)}


def one_crawl(scheduler: str, n_hosts: int, faulty: bool, root: Path) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"{scheduler}-{'faulty' if faulty else 'clean'}-",
                                    dir=root))
    pinned = pins(n_hosts, faulty)
    mix = {"robots:allow-all": 1.0, "robots:rules": 1.0, "page:normal": 1.0}
    wanted = {**SETTINGS, **SCHEDULERS[scheduler]}
    with (SimWebProcess(seed=17, n_hosts=n_hosts, mix=mix, pinned=pinned, hang_max=30) as sim,
          scheduler_redis(wanted, workdir / "job", "faults", keep_frontier=False)
          as (settings, _)):
        result = run_crawl(sim.proxy_url, sim.web.seed_urls(), workdir, settings, timeout=900)
        entries = sim.ledger().entries
        broken = {sim.web.hosts[i].name for i in pinned}
    if result.returncode != 0:
        raise RuntimeError(f"{scheduler} crawl failed:\n{result.log[-3000:]}")
    shutil.rmtree(workdir, ignore_errors=True)
    start = min(e["arrival"] for e in entries)
    healthy = [e for e in entries if e["host"] not in broken and not is_robots_path(e["path"])
               and e["status"] == 200]
    span = max(e["done"] or e["arrival"] for e in healthy) - start
    broken_requests = sum(1 for e in entries if e["host"] in broken
                          and not is_robots_path(e["path"]))
    return {"healthy_pages": len({(e["host"], e["path"]) for e in healthy}),
            "span_s": span, "pages_per_s": len(healthy) / span,
            "broken_requests": broken_requests, "wall_s": result.seconds}


def main(argv: list[str] | None = None) -> Report:
    args = parse_args(__doc__.splitlines()[0], argv)
    started = time.monotonic()
    n_hosts = 100 if args.quick else 200
    root = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    runs: dict[tuple[str, bool], list[dict[str, Any]]] = {
        (s, f): [] for s in SCHEDULERS for f in (True, False)}
    try:
        for run in range(args.runs):
            for scheduler in rotated(list(SCHEDULERS), run):
                for faulty in rotated((True, False), run):
                    r = one_crawl(scheduler, n_hosts, faulty, root)
                    runs[(scheduler, faulty)].append(r)
                    print(f"run {run + 1}/{args.runs} {scheduler:12} "
                          f"{'faults' if faulty else 'clean ':6} {r['healthy_pages']} healthy "
                          f"pages in {r['span_s']:.1f} s = {r['pages_per_s']:.1f}/s; "
                          f"{r['broken_requests']} requests to broken hosts; wall "
                          f"{r['wall_s']:.0f} s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    ratios = {s: median_of(runs[(s, True)], "pages_per_s")
              / median_of(runs[(s, False)], "pages_per_s") for s in SCHEDULERS}
    report = Report("faults", "python -m bench.faults", args.runs, args.quick)
    cols = [Col("pages_per_s", ".1f", spread=True), Col("span_s"), Col("healthy_pages", ".0f"),
            Col("broken_requests", ".0f"), Col("wall_s", ".0f")]
    rows = [[s, *median_row("with faults" if f else "without", runs[(s, f)], cols)]
            for s in SCHEDULERS for f in (True, False)]
    report.tables.append(Table(
        f"{n_hosts} hosts, every tenth broken ({', '.join(FAULTS)}) or not (medians, min-max)",
        ["scheduler", "web", "healthy pages/s", "healthy span s", "healthy pages",
         "requests to the broken hosts", "wall s"], rows,
        "healthy span: first request to the last healthy page done, at the server. Wall "
        "time includes the breaker cool-downs and timeouts of the broken hosts."))
    report.tables.append(Table(
        "Healthy pages/s, with faults / without (ratio of medians)",
        ["scheduler", "with faults / without"],
        [[s, f"**{ratios[s]:.2f}x**"] for s in SCHEDULERS],
        "Compare the ratios, not the rates across schedulers: about half of these hosts ask "
        "for a Crawl-delay (0.2-1 s) in robots.txt, which the frontier obeys and Scrapy's "
        "robots middleware ignores, so the baselines crawl the healthy hosts in a shorter "
        "span (a few seconds: their ratios are the noisier ones)."))
    report.checks.append(Check("frontier: healthy pages/s, with faults / without",
                               f"{ratios['frontier']:.2f}x", f">= {TARGET}x",
                               ratios["frontier"] >= TARGET))
    report.checks.append(Check(
        "scrapy / scrapy-redis: healthy pages/s, with faults / without",
        f"{ratios['scrapy']:.2f}x / {ratios['scrapy-redis']:.2f}x", "(baseline)", None))
    report.notes.append("Settings: " + ", ".join(f"{k}={v}" for k, v in SETTINGS.items())
                        + "; the rest the project's (robots obeyed). Scrapy's retry middleware "
                        "re-queues a timeout, a connection error or a 503 at once (RETRY_TIMES=3), "
                        "with no backoff and no breaker.")
    report.raw = {f"{s}/{'faulty' if f else 'clean'}": v for (s, f), v in runs.items()}
    finish(report, args, started)
    return report


if __name__ == "__main__":
    main()
