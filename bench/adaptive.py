"""Adaptive pacing: does a server that slows down under load get asked less?

A little web (``bench/holweb.py``, as a forward proxy on 127.0.0.1): 8 hosts
that answer in 0.2 s times the requests they have open (a server that
slows down as it is asked more at once) and 40 healthy hosts answering in
20 ms, 16 pages each, every page linking to its host's 16. Four requests
per host allowed, 32 in all, no fixed delay (``DOWNLOAD_DELAY=0``): what a
host gets is what the pacing under test gives it. For each side, from
the server's ledger:

- the loaded hosts: mean and 90th percentile answer time, the most requests
  one had open at once, and their pages done;
- the healthy hosts: pages a second (their pages / the time from the first
  request to their last page done).

Sides: the frontier with ``FRONTIER_ADAPTIVE_FACTOR=2`` (the default) and with
0 (adaptation off); vanilla Scrapy's scheduler with AutoThrottle (its
latency-based pacing, ``AUTOTHROTTLE_TARGET_CONCURRENCY=1``), and without.

    python -m bench.adaptive [--quick] [--runs N]
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    SCRAPY_SCHEDULER,
    Check,
    Report,
    Table,
    finish,
    median,
    parse_args,
    rotated,
    scheduler_redis,
    spread,
)
from bench.holweb import HolWeb, max_in_flight
from tests.crawl_runner import run_crawl

COMMON: dict[str, Any] = {
    "CONCURRENT_REQUESTS": 32,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 4,
    "DOWNLOAD_DELAY": 0,
    "ROBOTSTXT_OBEY": False,
    "WARC_ENABLED": False,
}
#: Each host is a registered domain of its own here: the domain's delay
#: (FRONTIER_DOMAIN_DELAY, 0.25 s) would space its requests before adaptation
#: does, so it is off on both frontier sides.
FRONTIER = {"FRONTIER_DOMAIN_DELAY": 0}
SIDES: dict[str, dict[str, Any]] = {
    "frontier adaptive": {**FRONTIER, "FRONTIER_ADAPTIVE_FACTOR": 2.0},
    "frontier fixed": {**FRONTIER, "FRONTIER_ADAPTIVE_FACTOR": 0},
    "scrapy autothrottle": {**SCRAPY_SCHEDULER, "AUTOTHROTTLE_ENABLED": True,
                            "AUTOTHROTTLE_START_DELAY": 0.05,
                            "AUTOTHROTTLE_TARGET_CONCURRENCY": 1.0},
    # With DOWNLOAD_DELAY=0 Scrapy's downloader does not keep its per-host
    # limit (bench/headofline.py); a 1 ms delay does.
    "scrapy": {**SCRAPY_SCHEDULER, "DOWNLOAD_DELAY": 0.001},
}
LOADED, HEALTHY, PAGES = 8, 40, 16
LOAD_SECONDS, HEALTHY_SECONDS = 0.2, 0.02


def one_crawl(side: str, root: Path) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="adaptive-", dir=root))
    wanted = {**COMMON, **SIDES[side]}
    with (HolWeb(n_fast=HEALTHY, pages=PAGES, with_slow=False, fast_seconds=HEALTHY_SECONDS,
                 loaded=LOADED, load_seconds=LOAD_SECONDS) as web,
          scheduler_redis(wanted, workdir / "job", "adaptive", keep_frontier=False)
          as (settings, _)):
        result = run_crawl(web.proxy_url, web.seeds(), workdir, settings, timeout=600)
        hits = list(web.hits)
        loaded_hosts, healthy_hosts = set(web.loaded_hosts), set(web.fast_hosts)
    shutil.rmtree(workdir, ignore_errors=True)
    if result.returncode != 0:
        raise RuntimeError(f"{side} crawl failed:\n{result.log[-3000:]}")
    start = min(h.arrival for h in hits)
    loaded = [h for h in hits if h.host in loaded_hosts and h.done is not None]
    healthy = [h for h in hits if h.host in healthy_hosts and h.status == 200]
    times = sorted(h.done - h.arrival for h in loaded)  # type: ignore[operator]
    healthy_end = max(h.done or h.arrival for h in healthy)
    return {
        "loaded_mean_s": sum(times) / len(times),
        "loaded_p90_s": times[int(0.9 * (len(times) - 1))],
        "loaded_max_in_flight": max(max_in_flight(hits, h) for h in loaded_hosts),
        "loaded_pages": len({(h.host, h.path) for h in loaded}),
        "healthy_pages_s": len(healthy) / (healthy_end - start),
        "healthy_pages": len({(h.host, h.path) for h in healthy}),
        "wall_s": result.seconds,
    }


def main(argv: list[str] | None = None) -> Report:
    args = parse_args(__doc__.splitlines()[0], argv)
    started = time.monotonic()
    sides = list(SIDES) if not args.quick else ["frontier adaptive", "frontier fixed"]
    root = Path(tempfile.mkdtemp(prefix="bench-adaptive-"))
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
    try:
        for run in range(args.runs):
            for side in rotated(sides, run):
                r = one_crawl(side, root)
                runs[side].append(r)
                print(f"run {run + 1}/{args.runs} {side:20} loaded: mean "
                      f"{r['loaded_mean_s']:.2f} s, p90 {r['loaded_p90_s']:.2f} s, max in "
                      f"flight {r['loaded_max_in_flight']}; healthy "
                      f"{r['healthy_pages_s']:.1f} pages/s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def med(side: str, key: str) -> float:
        return median([r[key] for r in runs[side]])

    report = Report("adaptive", "python -m bench.adaptive", args.runs, args.quick)
    rows = []
    for side in sides:
        mean = [r["loaded_mean_s"] for r in runs[side]]
        rate = [r["healthy_pages_s"] for r in runs[side]]
        rows.append([side, f"{median(mean):.2f} ({spread(mean)})",
                     f"{med(side, 'loaded_p90_s'):.2f}",
                     str(max(r["loaded_max_in_flight"] for r in runs[side])),
                     "/".join(str(r["loaded_pages"]) for r in runs[side]),
                     f"{median(rate):.1f} ({spread(rate)})",
                     "/".join(str(r["healthy_pages"]) for r in runs[side]),
                     f"{med(side, 'wall_s'):.1f}"])
    report.tables.append(Table(
        f"{LOADED} hosts slowing down under load ({LOAD_SECONDS:g} s x requests open) and "
        f"{HEALTHY} healthy hosts ({HEALTHY_SECONDS * 1000:g} ms), {PAGES} pages each "
        "(median of runs, min-max)",
        ["side", "loaded: mean answer s", "loaded: p90 s", "loaded: max in flight",
         "loaded pages", "healthy pages/s", "healthy pages", "wall s"], rows))
    on, off = "frontier adaptive", "frontier fixed"
    latency_ratio = med(on, "loaded_mean_s") / med(off, "loaded_mean_s")
    healthy_ratio = med(on, "healthy_pages_s") / med(off, "healthy_pages_s")
    report.checks += [
        Check("frontier: loaded hosts' mean answer time, adaptation on / off",
              f"{latency_ratio:.2f}x", "< 1x (the server is spared)", latency_ratio < 1.0),
        Check("frontier: a loaded host's most requests open, adaptation on",
              str(max(r["loaded_max_in_flight"] for r in runs[on])),
              f"< off's {max(r['loaded_max_in_flight'] for r in runs[off])}",
              max(r["loaded_max_in_flight"] for r in runs[on])
              < max(r["loaded_max_in_flight"] for r in runs[off])),
        Check("frontier: healthy hosts' pages/s, adaptation on / off", f"{healthy_ratio:.2f}x",
              ">= 0.9x", healthy_ratio >= 0.9),
        Check("every page fetched (frontier, both)",
              "/".join(str(r["loaded_pages"] + r["healthy_pages"]) for s in (on, off)
                       for r in runs[s]), f"{(LOADED + HEALTHY) * PAGES} each run",
              all(r["loaded_pages"] + r["healthy_pages"] == (LOADED + HEALTHY) * PAGES
                  for s in (on, off) for r in runs[s])),
    ]
    if "scrapy autothrottle" in runs:
        report.checks.append(Check(
            "scrapy: loaded hosts' mean answer time, AutoThrottle on / off",
            f"{med('scrapy autothrottle', 'loaded_mean_s') / med('scrapy', 'loaded_mean_s'):.2f}x",
            "(baseline)", None))
    report.notes.append(
        "Settings: CONCURRENT_REQUESTS=32, CONCURRENT_REQUESTS_PER_DOMAIN=4, "
        "DOWNLOAD_DELAY=0, ROBOTSTXT_OBEY=False, WARC off; the web answers every host "
        "itself as a forward proxy (bench/holweb.py), so the IP scope does not apply.")
    report.raw = runs
    finish(report, args, started)
    return report


if __name__ == "__main__":
    main()
