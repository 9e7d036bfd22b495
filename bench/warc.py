"""WARC cost: does archiving every answer slow the crawl?

A real ``scrapy crawl broad`` of the simulated web (200 hosts, mix "clean",
every host a seed, ``DEPTH_LIMIT=2``, ``DOWNLOAD_DELAY=0.05``,
``CONCURRENT_REQUESTS=64``; ``--quick``: 100 hosts), with the archive on
(the project's default: capture middleware, writer thread, revisits, CDXJ)
and off (``WARC_ENABLED=False``), and, side by side in the same run, the two
baselines without an archive (they have none): ``scrapy`` (Scrapy's
scheduler, JOBDIR disk queues) and ``scrapy-redis`` (its scheduler and
dupefilter on a private redis-server), as in ``bench.throughput``. All four
interleaved run by run.

pages/s = requests the server answered / time from the first request to the
last answer (server's ledger). CPU = the crawl process
(``getrusage(RUSAGE_CHILDREN)``: its writer thread included) plus its Redis
(the frontier's embedded server, scrapy-redis's server; ``INFO cpu`` before
and after). Compressing and writing happen on the writer thread, not on the
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
    SCRAPY_REDIS_SCHEDULER,
    SCRAPY_SCHEDULER,
    Check,
    Col,
    Report,
    Table,
    finish,
    measured_crawl,
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
    "ROBOTS_MAX_CRAWL_DELAY": 0.05,
}
NO_ARCHIVE = {"WARC_ENABLED": False}
VARIANTS: dict[str, dict[str, Any]] = {
    "warc": {},
    "no-warc": NO_ARCHIVE,
    "scrapy": {**SCRAPY_SCHEDULER, **NO_ARCHIVE},
    "scrapy-redis": {**SCRAPY_REDIS_SCHEDULER, **NO_ARCHIVE},
}
LABELS = {"warc": "frontier + archive", "no-warc": "frontier, no archive",
          "scrapy": "scrapy (no archive)", "scrapy-redis": "scrapy-redis (no archive)"}


def one_crawl(variant: str, sim: SimWebProcess, root: Path, run: int) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"{variant}-", dir=root))
    wanted = {**COMMON, "JOBDIR": str(workdir / "job"), "WARC_DIR": str(workdir / "warc"),
              **VARIANTS[variant]}
    measured = measured_crawl(sim, wanted, workdir, f"warc-{run}")
    result, cpu, redis_cpu = measured.result, measured.crawl_cpu_s, measured.usage.cpu_s
    entries = sim.ledger().entries
    warc_bytes = sum(p.stat().st_size for p in (workdir / "warc").glob("*.warc.gz"))
    shutil.rmtree(workdir, ignore_errors=True)
    if result.returncode != 0:
        raise RuntimeError(f"{variant} crawl failed:\n{result.log[-3000:]}")
    start = min(e["arrival"] for e in entries)
    span = max(e["done"] or e["arrival"] for e in entries) - start
    return {
        "requests": len(entries),
        "span_s": span,
        "pages_per_s": len(entries) / span,
        "cpu_ms_per_page": (cpu + redis_cpu) * 1000 / len(entries),
        "redis_cpu_ms_per_page": redis_cpu * 1000 / len(entries),
        "warc_bytes_per_page": warc_bytes / len(entries),
        "lag_max_s": float(result.stat("warc/lag_max_seconds") or 0),
        "revisits": int(result.stat("warc/revisits") or 0),
        "wall_s": result.seconds,
    }


def main(argv: list[str] | None = None) -> Report:
    args = parse_args(__doc__.splitlines()[0], argv)
    started = time.monotonic()
    n_hosts = 100 if args.quick else 200
    root = Path(tempfile.mkdtemp(prefix="bench-warc-"))
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    try:
        with SimWebProcess(seed=3, n_hosts=n_hosts, mix="clean") as sim:
            for run in range(args.runs):
                for variant in rotated(list(VARIANTS), run):
                    r = one_crawl(variant, sim, root, run)
                    runs[variant].append(r)
                    print(f"run {run + 1}/{args.runs} {variant:12} {r['requests']} requests in "
                          f"{r['span_s']:.1f} s = {r['pages_per_s']:.1f}/s, "
                          f"{r['cpu_ms_per_page']:.2f} CPU ms/page", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def med(variant: str, key: str) -> float:
        return median_of(runs[variant], key)

    def ratio(a: str, b: str, key: str) -> float:
        return med(a, key) / med(b, key)

    report = Report("warc", "python -m bench.warc", args.runs, args.quick)
    cols = [Col("pages_per_s", ".1f", spread=True), Col("cpu_ms_per_page", ".2f", spread=True),
            Col("redis_cpu_ms_per_page", ".2f"), Col("requests", ".0f"),
            Col("warc_bytes_per_page", ".0f"), Col("lag_max_s", ".3f"), Col("revisits", ".0f")]
    report.tables.append(Table(
        f"{n_hosts} hosts, archive on and off, and the baselines (medians, min-max)",
        ["crawl", "pages/s", "CPU ms/page (crawl + Redis)", "of which Redis", "requests",
         "WARC bytes/page", "writer lag max s", "revisits"],
        [median_row(LABELS[v], runs[v], cols) for v in VARIANTS],
        "WARC bytes/page: the gzipped request + response (or revisit) records, warcinfo "
        "included. Writer lag: download to record written."))
    pairs = [("warc", "no-warc"), ("warc", "scrapy"), ("warc", "scrapy-redis"),
             ("no-warc", "scrapy"), ("no-warc", "scrapy-redis")]
    report.tables.append(Table(
        "Side by side (ratio of medians)", ["", "pages/s", "CPU ms/page"],
        [[f"{LABELS[a]} / {LABELS[b]}", f"**{ratio(a, b, 'pages_per_s'):.2f}x**",
          f"**{ratio(a, b, 'cpu_ms_per_page'):.2f}x**"] for a, b in pairs],
        "The archive's price is the first row; the next two are what a crawl with the "
        "archive costs against a baseline that keeps none."))
    extra = med("warc", "cpu_ms_per_page") - med("no-warc", "cpu_ms_per_page")
    report.checks += [
        Check("pages/s, archive on / off (2 saturated cores)",
              f"{ratio('warc', 'no-warc', 'pages_per_s'):.2f}x",
              "(price of the archive's CPU)", None),
        Check("CPU ms/page, archive on / off",
              f"{ratio('warc', 'no-warc', 'cpu_ms_per_page'):.2f}x (+{extra:.2f} ms)",
              "(cost)", None),
        Check("frontier + archive / scrapy, scrapy-redis (no archive): pages/s",
              f"{ratio('warc', 'scrapy', 'pages_per_s'):.2f}x, "
              f"{ratio('warc', 'scrapy-redis', 'pages_per_s'):.2f}x", "(baseline)", None),
        Check("frontier + archive / scrapy, scrapy-redis (no archive): CPU ms/page",
              f"{ratio('warc', 'scrapy', 'cpu_ms_per_page'):.2f}x, "
              f"{ratio('warc', 'scrapy-redis', 'cpu_ms_per_page'):.2f}x", "(baseline)", None),
    ]
    report.notes.append("Settings: " + ", ".join(f"{k}={v}" for k, v in COMMON.items())
                        + "; the rest the project's (embedded frontier, robots obeyed; "
                        "Scrapy's robots middleware for the baselines).")
    report.raw = runs
    finish(report, args, started)
    return report


if __name__ == "__main__":
    main()
