"""WARC cost: does archiving every answer slow the crawl?

A real ``scrapy crawl broad`` of the simulated web (300 hosts, mix "clean",
every host a seed, ``DEPTH_LIMIT=2``, ``DOWNLOAD_DELAY=0.05``,
``CONCURRENT_REQUESTS=64``; ``--quick``: 100 hosts), with the archive on
(the project's default: capture middleware, writer thread, revisits, CDXJ)
and off (``WARC_ENABLED=False``), interleaved run by run.

pages/s = requests the server answered / time from the first request to the
last answer (server's ledger). CPU = the crawl process
(``getrusage(RUSAGE_CHILDREN)``: its writer thread and embedded Redis
included). Compressing and writing happen on the writer thread, not on the
reactor, so on a machine with cores to spare the archive costs no pages/s.
This benchmark has none: the crawl, the simulated web and Redis saturate
two cores, so every CPU millisecond the archive takes (warcio building two
records per answer, gzip, digests, the CDXJ line, one digest lookup per batch)
comes out of the crawl's rate, and the pages/s ratio is the price of that
CPU. Read the CPU ms/page difference as the archive's cost per page.

    python -m bench.warc [--quick] [--runs N]
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    Check,
    Report,
    Table,
    child_cpu_seconds,
    finish,
    median,
    parse_args,
    rotated,
    spread,
)
from tests.crawl_runner import run_crawl
from tests.simweb import SimWebProcess

COMMON: dict[str, Any] = {
    "DEPTH_LIMIT": 2,
    "DOWNLOAD_DELAY": 0.05,
    "CONCURRENT_REQUESTS": 64,
    "ROBOTS_MAX_CRAWL_DELAY": 0.05,
}
VARIANTS: dict[str, dict[str, Any]] = {"warc": {}, "no-warc": {"WARC_ENABLED": False}}


def one_crawl(variant: str, sim: SimWebProcess, root: Path) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"{variant}-", dir=root))
    settings = {**COMMON, "JOBDIR": str(workdir / "job"), **VARIANTS[variant]}
    sim.reset()
    cpu_before = child_cpu_seconds()
    result = run_crawl(sim.proxy_url, sim.web.seed_urls(), workdir, settings, timeout=600)
    cpu = child_cpu_seconds() - cpu_before
    entries = sim.ledger().entries
    warc_bytes = sum(p.stat().st_size for p in (workdir / "job" / "warc").glob("*.warc.gz"))
    shutil.rmtree(workdir, ignore_errors=True)
    if result.returncode != 0:
        raise RuntimeError(f"{variant} crawl failed:\n{result.log[-3000:]}")
    start = min(e["arrival"] for e in entries)
    span = max(e["done"] or e["arrival"] for e in entries) - start
    return {
        "requests": len(entries),
        "span_s": span,
        "pages_per_s": len(entries) / span,
        "cpu_ms_per_page": cpu * 1000 / len(entries),
        "warc_bytes_per_page": warc_bytes / len(entries),
        "lag_max_s": float(result.stat("warc/lag_max_seconds") or 0),
        "revisits": int(result.stat("warc/revisits") or 0),
        "wall_s": result.seconds,
    }


def main(argv: list[str] | None = None) -> Report:
    args = parse_args(__doc__.splitlines()[0], argv)
    started = time.monotonic()
    n_hosts = 100 if args.quick else 300
    root = Path(tempfile.mkdtemp(prefix="bench-warc-"))
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    try:
        with SimWebProcess(seed=3, n_hosts=n_hosts, mix="clean") as sim:
            for run in range(args.runs):
                for variant in rotated(list(VARIANTS), run):
                    r = one_crawl(variant, sim, root)
                    runs[variant].append(r)
                    print(f"run {run + 1}/{args.runs} {variant:8} {r['requests']} requests in "
                          f"{r['span_s']:.1f} s = {r['pages_per_s']:.1f}/s, "
                          f"{r['cpu_ms_per_page']:.2f} CPU ms/page", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def med(variant: str, key: str) -> float:
        return median([r[key] for r in runs[variant]])

    speed = med("warc", "pages_per_s") / med("no-warc", "pages_per_s")
    cpu = med("warc", "cpu_ms_per_page") / med("no-warc", "cpu_ms_per_page")
    report = Report("warc", "python -m bench.warc", args.runs, args.quick)
    rows = [[v, f"{med(v, 'pages_per_s'):.1f} ({spread([r['pages_per_s'] for r in runs[v]])})",
             f"{med(v, 'cpu_ms_per_page'):.2f} "
             f"({spread([r['cpu_ms_per_page'] for r in runs[v]])})",
             f"{med(v, 'requests'):.0f}", f"{med(v, 'warc_bytes_per_page'):.0f}",
             f"{med(v, 'lag_max_s'):.3f}", f"{med(v, 'revisits'):.0f}"]
            for v in VARIANTS]
    report.tables.append(Table(
        f"{n_hosts} hosts, archive on and off (medians, min-max)",
        ["archive", "pages/s", "CPU ms/page", "requests", "WARC bytes/page", "writer lag max s",
         "revisits"], rows,
        "WARC bytes/page: the gzipped request + response (or revisit) records, warcinfo "
        "included. Writer lag: download to record written."))
    report.checks.append(Check("pages/s, archive on / off (2 saturated cores)", f"{speed:.2f}x",
                               "(price of the archive's CPU)", None))
    extra = med("warc", "cpu_ms_per_page") - med("no-warc", "cpu_ms_per_page")
    report.checks.append(Check("CPU ms/page, archive on / off", f"{cpu:.2f}x (+{extra:.2f} ms)",
                               "(cost)", None))
    report.notes.append("Settings: " + ", ".join(f"{k}={v}" for k, v in COMMON.items())
                        + "; the rest the project's (embedded frontier, robots obeyed).")
    report.raw = runs
    finish(report, args, started)
    return report


if __name__ == "__main__":
    main()
