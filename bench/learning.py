"""Learning from the pages: noise parameters and traps, before and after.

A web of hosts that punish a crawler which takes every URL at face value
(``tests/trapweb``, seed 1, 4 hosts of each kind; ``--quick``: 2): ``noise``
hosts whose links add a parameter the host ignores (same bytes, a canonical
link without it), ``select`` and ``miscanon`` hosts where a parameter does
select a page (or canonicals lie), endless ``calendar``, ``session`` and
``facet`` traps, and ``catalogue`` hosts whose 300 pages of one template really
differ. Every host is a seed, ``DEPTH_LIMIT=0``. Crawlers, in the same
invocation, run by run in a rotating order:

- ``learned``: the project's defaults (``LEARN_ENABLED``: per host, noise
  parameters learned from canonicals and identical payloads, URL patterns of
  near-duplicate pages refused);
- ``before``: the same frontier with ``LEARN_ENABLED=False``;
- ``scrapy``: vanilla Scrapy's scheduler (the broad spider, the project's
  admission middleware: its static trap rules only).

A crawl still running after 240 s (``--quick``: 120 s) is stopped (SIGINT)
and counted as not ending by itself. Everything is measured from the web's
ledger, never from the crawl's stats: page fetches (robots.txt apart); a
duplicate is a request showing a required page some earlier request already
showed (another spelling), counted on every host for the duplicate rate and
per ``noise`` host; trap requests are requests to a trap host that show none
of its required pages. A ``session`` trap's pages are its required pages
under ever new session ids, so its trap requests are duplicates: "beyond"
counts both, every request to a trap host but the first fetch of each of its
required pages (the goal is checked on it). A page is lost when no spelling of
it was fetched.

    python -m bench.learning [--quick] [--runs N]
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import redis

from bench.common import (
    SCRAPY_SCHEDULER,
    Check,
    Report,
    Table,
    finish,
    median,
    parse_args,
    rotated,
)
from crawler.frontier.embedded import EmbeddedRedis
from tests.crawl_runner import CrawlResult, finish_crawl, start_crawl
from tests.simweb.ledger import is_robots_path
from tests.trapweb import KINDS, TRAP_KINDS, TrapWebProcess

SEED = 1
COMMON: dict[str, Any] = {
    "DOWNLOAD_DELAY": 0.1,
    "ROBOTS_MAX_CRAWL_DELAY": 0.1,
    "DEPTH_LIMIT": 0,
    "CONCURRENT_REQUESTS": 32,
    "PROMETHEUS_ENABLED": False,
    "WARC_ENABLED": False,
    "LOG_LEVEL": "INFO",
}
CRAWLERS: dict[str, dict[str, Any]] = {
    "learned": {},
    "before": {"LEARN_ENABLED": False},
    "scrapy": SCRAPY_SCHEDULER,
}
#: The issue's goals for ``learned``.
MAX_VARIANTS = 1  # duplicate fetches per noise host
MAX_TRAP = 100  # requests per trap host
#: Seconds a crawl stopped by SIGINT gets to close before it is killed.
GRACE = 60


def crawl(process: TrapWebProcess, settings: Mapping[str, Any], workdir: Path,
          cap: float) -> tuple[CrawlResult, bool]:
    """Crawl every seed once (fresh ledger, fresh JOBDIR): the result and whether
    it ended by itself before ``cap`` seconds (else SIGINT, then a kill)."""
    process.reset()
    started = time.monotonic()
    proc = start_crawl(process.proxy_url, process.web.seed_urls(), workdir,
                       {**COMMON, **settings})
    try:
        proc.wait(timeout=cap)
        ended = True
    except subprocess.TimeoutExpired:
        ended = False
        proc.send_signal(signal.SIGINT)  # Scrapy's graceful shutdown
    result = finish_crawl(proc, workdir, started, timeout=GRACE)
    # A killed crawl leaves its embedded frontier running: adopt it and shut it down.
    embedded = EmbeddedRedis(workdir / "job" / "frontier")
    if embedded.socket.exists() and answers(embedded.url):
        embedded.start()
        embedded.leave()
    return result, ended


def answers(url: str) -> bool:
    """Whether a Redis answers at ``url``."""
    client = redis.Redis.from_url(url, socket_timeout=2)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def measure(process: TrapWebProcess) -> dict[str, Any]:
    """What the web's ledger says about the last crawl."""
    web = process.web
    fetched: dict[str, set[str]] = {host: set() for host in web.hosts()}
    required = {host: web.required_pages(host) for host in web.hosts()}
    dups = dict.fromkeys(web.hosts(), 0)
    traps = dict.fromkeys((h for k in sorted(TRAP_KINDS) for h in web.hosts(k)), 0)
    fetches = 0
    for e in sorted(process.ledger(), key=lambda e: e["arrival"]):
        host, path = e["host"], e["path"]
        if is_robots_path(path) or host not in fetched:
            continue
        fetches += 1
        page = web.page_of(host, path)
        if page in required[host]:
            if page in fetched[host]:
                dups[host] += 1
            fetched[host].add(page)
        elif host in traps:
            traps[host] += 1
    noise = [dups[h] for h in web.hosts("noise")]
    beyond = [traps[h] + dups[h] for h in traps]
    by_kind = {kind: sum(dups[h] for h in web.hosts(kind)) for kind in KINDS}
    lost = {h: sorted(required[h] - fetched[h]) for h in web.hosts() if required[h] - fetched[h]}
    return {
        "fetches": fetches,
        "duplicates": sum(dups.values()),
        "dups_by_kind": by_kind,
        "dup_rate": sum(dups.values()) / fetches if fetches else 0.0,
        "noise_dups_max": max(noise),
        "noise_dups_mean": sum(noise) / len(noise),
        "trap_max": max(traps.values()),
        "trap_mean": sum(traps.values()) / len(traps),
        "trap_by_host": traps,
        "beyond_max": max(beyond),
        "beyond_mean": sum(beyond) / len(beyond),
        "lost": sum(len(v) for v in lost.values()),
        "lost_pages": lost,
    }


def cell(runs: Sequence[Mapping[str, Any]], key: str, fmt: str = ".0f") -> str:
    """Median of a measure over runs, with min-max when there are several."""
    values = [float(r[key]) for r in runs]
    shown = format(median(values), fmt)
    low, high = format(min(values), fmt), format(max(values), fmt)
    return shown if len(values) < 2 else f"{shown} ({low}-{high})"


def main(argv: list[str] | None = None) -> Report:
    args = parse_args(__doc__.splitlines()[0], argv)
    started = time.monotonic()
    per_kind = 2 if args.quick else 4
    cap = 120 if args.quick else 240
    root = Path(tempfile.mkdtemp(prefix="bench-learning-"))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CRAWLERS}
    try:
        with TrapWebProcess(seed=SEED, per_kind=per_kind, startup_timeout=60) as process:
            n_required = sum(len(process.web.required_pages(h)) for h in process.web.hosts())
            for run in range(args.runs):
                for name in rotated(list(CRAWLERS), run):
                    workdir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
                    result, ended = crawl(process, CRAWLERS[name], workdir, cap)
                    if ended and result.returncode != 0:
                        raise RuntimeError(f"{name} crawl failed:\n{result.log[-3000:]}")
                    r = {**measure(process), "wall_s": result.seconds, "ended": ended,
                         "tracebacks": result.log.count("Traceback")}
                    shutil.rmtree(workdir, ignore_errors=True)
                    runs[name].append(r)
                    print(f"run {run + 1}/{args.runs} {name:8} {r['fetches']} page fetches, "
                          f"{r['duplicates']} duplicates ({r['dup_rate']:.1%}), noise host "
                          f"max {r['noise_dups_max']}, trap host max {r['trap_max']} "
                          f"(mean {r['trap_mean']:.0f}, beyond max {r['beyond_max']}), "
                          f"{r['lost']} pages lost, "
                          f"{r['wall_s']:.1f} s{'' if ended else ' (stopped)'}", flush=True)
                    print(f"    duplicates by kind: {r['dups_by_kind']}; trap requests by "
                          f"host: {r['trap_by_host']}", flush=True)
                    if r["lost"]:
                        print(f"    lost: {r['lost_pages']}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report = Report("learning", "python -m bench.learning", args.runs, args.quick)
    describe(report, runs, per_kind, cap, n_required)
    finish(report, args, started)
    return report


def describe(report: Report, runs: Mapping[str, Sequence[Mapping[str, Any]]], per_kind: int,
             cap: float, n_required: int) -> None:
    """The report's tables, checks and notes from the crawls' measures."""
    rows = [[name, cell(rs, "fetches"), cell(rs, "duplicates"),
             f"{median([r['dup_rate'] for r in rs]):.1%}",
             f"{cell(rs, 'noise_dups_max')} / {median([r['noise_dups_mean'] for r in rs]):.1f}",
             f"{cell(rs, 'trap_max')} / {median([r['trap_mean'] for r in rs]):.0f}",
             f"{cell(rs, 'beyond_max')} / {median([r['beyond_mean'] for r in rs]):.0f}",
             cell(rs, "lost"), cell(rs, "wall_s", ".1f"),
             f"{sum(r['ended'] for r in rs)}/{len(rs)}"] for name, rs in runs.items()]
    report.tables.append(Table(
        f"Trap web, {per_kind} hosts of each of 7 kinds ({n_required:,} required pages), "
        f"crawl stopped after {cap} s (medians, min-max)",
        ["crawler", "page fetches", "duplicate fetches", "duplicate rate",
         "duplicates per noise host, max / mean", "trap requests per trap host, max / mean",
         "beyond required per trap host, max / mean",
         "pages lost", "wall s", "ended by itself"], rows,
        "From the web's ledger. A duplicate fetch shows a required page an earlier request "
        "already showed (any host). Trap requests: calendar, session and facet hosts' "
        "requests that show none of their required pages (a session host's trap pages are "
        "its required pages under new ids, so they count as duplicates there); beyond "
        "required: a trap host's requests but the first fetch of each required page "
        "(trap requests + duplicates). Wall: process start to exit (a stopped crawl: the "
        "cap plus its shutdown)."))

    report.tables.append(Table(
        "Duplicate fetches by host kind (medians)", ["crawler", *KINDS],
        [[name, *(f"{median([r['dups_by_kind'][k] for r in rs]):.0f}" for k in KINDS)]
         for name, rs in runs.items()],
        "A session page shows one of the host's required pages under every new session "
        "id: there, the trap's requests are duplicates."))

    def med(name: str, key: str) -> float:
        return median([float(r[key]) for r in runs[name]])

    def ratio(a: str, b: str, key: str) -> str:
        return f"**{med(a, key) / med(b, key):.3f}**" if med(b, key) else "-"

    report.tables.append(Table(
        "learned / before and learned / scrapy (ratio of medians)",
        ["", "duplicate rate", "trap requests per trap host (max / mean)",
         "beyond required per trap host (max / mean)"],
        [[f"learned / {b}", ratio("learned", b, "dup_rate"),
          f"{ratio('learned', b, 'trap_max')} / {ratio('learned', b, 'trap_mean')}",
          f"{ratio('learned', b, 'beyond_max')} / {ratio('learned', b, 'beyond_mean')}"]
         for b in ("before", "scrapy")]))

    learned = runs["learned"]
    worst = {k: max(float(r[k]) for r in learned)
             for k in ("noise_dups_max", "trap_max", "beyond_max", "lost")}
    report.checks += [
        Check("learned: variant duplicates per noise host (worst host)",
              f"{med('learned', 'noise_dups_max'):.0f} (worst run {worst['noise_dups_max']:.0f})",
              f"<= {MAX_VARIANTS}", worst["noise_dups_max"] <= MAX_VARIANTS),
        Check("learned: requests per trap host beyond its required pages (worst host)",
              f"{med('learned', 'beyond_max'):.0f} (worst run {worst['beyond_max']:.0f}; "
              f"trap pages alone {med('learned', 'trap_max'):.0f})",
              f"<= {MAX_TRAP}", worst["beyond_max"] <= MAX_TRAP),
        Check("learned: required pages lost", f"{med('learned', 'lost'):.0f} of {n_required:,} "
              f"(worst run {worst['lost']:.0f})", "0", worst["lost"] == 0),
        Check("learned: the crawl ends by itself",
              f"{sum(r['ended'] for r in learned)}/{len(learned)} runs, "
              f"{med('learned', 'wall_s'):.1f} s", f"every run, within {cap} s",
              all(r["ended"] for r in learned)),
        Check("duplicate rate, learned / before / scrapy",
              " / ".join(f"{med(n, 'dup_rate'):.1%}" for n in CRAWLERS), "(info)", None),
        Check("beyond required per trap host (max), learned / before / scrapy",
              " / ".join(f"{med(n, 'beyond_max'):.0f}" for n in CRAWLERS), "(info)", None),
    ]
    report.notes.append(
        "Settings: " + ", ".join(f"{k}={v}" for k, v in COMMON.items() if k != "LOG_LEVEL")
        + f"; trap web seed {SEED}, every host a seed; the rest the project's (embedded "
        "frontier, robots obeyed; Scrapy's robots middleware for `scrapy`). A crawl still "
        f"running after {cap} s gets SIGINT (Scrapy's graceful stop), and is killed "
        f"{GRACE} s later if still running. Tracebacks in the crawl logs: "
        f"{sum(r['tracebacks'] for rs in runs.values() for r in rs)}.")
    report.raw = dict(runs)


if __name__ == "__main__":
    main()
