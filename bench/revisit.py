"""Recurring crawls: does the second run fetch and archive only what changed?

The same crawl (same JOBDIR, so the same embedded frontier, and the same
crawl id) runs twice over the simulated web (1,000 hosts, mix "clean", every
host a seed, ``DEPTH_LIMIT=2``, ``ADMISSION_MAX_PAGES_PER_HOST=10``,
``DOWNLOAD_DELAY=0.05``; ``--quick``: 100 hosts) with validators on: every
host sends one (five in eight an ETag, the others a Last-Modified) and the
web answers 304 to a matching conditional request; HTML pages weigh 12 to 36
kB (``page_bytes``), static files a few hundred bytes. Run 1
(``FRONTIER_REVISIT_AFTER=7d``) crawls the web as it is (epoch 0); then
``scrapy frontier revisit-now`` stands for the week going by, and run 2
crawls the web a week later (epoch 1: each HTML page changed with
probability 0.1). Side by side, in the same invocation:

- ``relaunch``: run 2 without revisits, as a new crawl
  (``FRONTIER_CRAWL_ID=relaunch``, a fresh JOBDIR): it fetches and archives
  everything again;
- ``scrapy-httpcache``: what a Scrapy user picks for re-crawling: Scrapy's
  scheduler with its HTTP cache (``RFC2616Policy``, one cache directory for
  both runs, a fresh JOBDIR each so the dupefilter starts empty), crawling
  epoch 0 and then epoch 1. It keeps no archive.

Bytes downloaded = body bytes the web sent for pages (its ledger; robots.txt
apart). Archive = the run's ``*.warc.gz`` files. Checked against the model's
ground truth: every page of run 1 whose body changed is fetched in full in
run 2 (a 200 with the new body's length), every unchanged one is asked again
(a 304 or a 200).

    python -m bench.revisit [--quick] [--runs N]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    REPO,
    SCRAPY_SCHEDULER,
    Check,
    Col,
    Report,
    Table,
    finish,
    median,
    median_of,
    median_row,
    parse_args,
    rotated,
)
from tests.crawl_runner import proxy_env, run_crawl
from tests.simweb import SimWebProcess, Web
from tests.simweb.ledger import is_robots_path

SEED = 11
CHANGE_RATE = 0.1
#: Every host sends a validator. With the simulated web's default (0.8: a
#: fifth of the hosts send none), no crawler that sees every change can
#: download less than ~0.29 of run 1: bench/README.md keeps that measurement.
VALIDATOR_SHARE = 1.0
#: Real HTML pages weigh tens of kB; with the ~1 kB default ones the request
#: record every capture keeps would weigh as much as the page.
PAGE_BYTES = 24_000
TARGET = 0.2
COMMON: dict[str, Any] = {
    "DEPTH_LIMIT": 2,
    "ADMISSION_MAX_PAGES_PER_HOST": 10,
    "DOWNLOAD_DELAY": 0.05,
    "CONCURRENT_REQUESTS": 64,
    # Crawl-delay (0.2-1 s on this web) clamped as in bench.throughput: Scrapy's
    # robots middleware ignores it, so both sides crawl at the same pace.
    "ROBOTS_MAX_CRAWL_DELAY": 0.05,
}
REVISITS: dict[str, Any] = {"FRONTIER_REVISIT_AFTER": "7d"}
#: Scrapy's scheduler (and robots middleware) with its HTTP cache; no archive
#: (its middlewares have no WARC capture).
HTTPCACHE: dict[str, Any] = {
    **SCRAPY_SCHEDULER,
    "WARC_ENABLED": False,
    "HTTPCACHE_ENABLED": True,
    "HTTPCACHE_POLICY": "scrapy.extensions.httpcache.RFC2616Policy",
}
#: Crawl stats kept per crawl (the frontier's revisits, Scrapy's cache).
STATS = ("revisit/conditional", "revisit/not_modified", "revisit/unchanged", "revisit/changed",
         "warc/records", "warc/revisits", "warc/errors", "warc/digest_index_errors",
         "httpcache/hit", "httpcache/miss", "httpcache/revalidate")
#: (side, run) pairs, in the order of the tables.
CRAWLS = (("frontier", 1), ("frontier", 2), ("relaunch", 2), ("scrapy-httpcache", 1),
          ("scrapy-httpcache", 2))
#: What each page got from the web in one crawl: (status, body bytes) per request.
Fetches = dict[tuple[str, str], list[tuple[int, int]]]


def simweb(n_hosts: int, epoch: int) -> SimWebProcess:
    """The web in ``epoch`` (same seed and hosts: the same web, ``epoch`` weeks on)."""
    return SimWebProcess(seed=SEED, n_hosts=n_hosts, mix="clean", validators=True, epoch=epoch,
                         change_rate=CHANGE_RATE, validator_share=VALIDATOR_SHARE,
                         page_bytes=PAGE_BYTES, startup_timeout=60)


def crawl(sim: SimWebProcess, workdir: Path, settings: Mapping[str, Any]
          ) -> tuple[dict[str, Any], Fetches]:
    """Crawl every seed of ``sim`` once (a fresh ledger): the crawl's measures, and what
    each page got (for the checks against the model)."""
    sim.reset()
    result = run_crawl(sim.proxy_url, sim.web.seed_urls(), workdir, {**COMMON, **settings},
                       timeout=1200)
    if result.returncode != 0:
        raise RuntimeError(f"crawl in {workdir.name} failed:\n{result.log[-3000:]}")
    fetches: Fetches = {}
    page_bytes = robots_bytes = not_modified = requests = 0
    for e in sim.ledger():
        if is_robots_path(e["path"]):
            robots_bytes += e["bytes"]
            continue
        requests += 1
        page_bytes += e["bytes"]
        not_modified += e["status"] == 304
        key = sim.web.page_identity(e["host"], e["path"])
        fetches.setdefault(key, []).append((e["status"] or 0, e["bytes"]))
    warc = Path(settings.get("WARC_DIR", workdir / "warc"))
    kinds = records(warc)
    stats = {name: int(result.stat(name) or 0) for name in STATS}
    return {
        "requests": requests,
        "page_mb": page_bytes / 1e6,
        "robots_kb": robots_bytes / 1e3,
        "not_modified": not_modified,
        "archive_mb": sum(p.stat().st_size for p in warc.glob("*.warc.gz")) / 1e6,
        "records": kinds,
        "items": len(result.items),
        "wall_s": result.seconds,
        "stats": stats,
    }, fetches


def records(warc: Path) -> dict[str, list[int]]:
    """Count and (compressed) bytes of the archive's records by kind, revisits by profile:
    what an unchanged page costs the archive next to a fresh capture."""
    from warcio.archiveiterator import ArchiveIterator

    kinds: dict[str, list[int]] = {}
    for path in sorted(warc.glob("*.warc.gz")):
        with path.open("rb") as stream:
            it = ArchiveIterator(stream)
            for record in it:
                kind = record.rec_type
                if kind == "revisit":
                    profile = record.rec_headers.get_header("WARC-Profile") or ""
                    kind = f"revisit ({profile.rsplit('/', 1)[-1]})"
                record.content_stream().read()
                entry = kinds.setdefault(kind, [0, 0])
                entry[0] += 1
                entry[1] += it.get_record_length()
    return kinds


def compare(first: Fetches, second: Fetches, before: Web, after: Web) -> dict[str, int]:
    """What run 2 did with each page run 1 fetched (a 200), against the model: a changed
    page (another body now) must come back in full, an unchanged one be asked again.
    ``floor_bytes``: what any crawler that sees every change must download again (the
    changed pages and those served without a validator), to tell the web's share of
    run 2's bytes from the crawler's."""
    out = dict.fromkeys(("pages", "changed", "changed_full", "unchanged", "unchanged_asked",
                         "unchanged_full", "floor_bytes"), 0)
    for (host, path), got in first.items():
        if not any(status == 200 for status, _ in got):
            continue
        old, new = before.resource(host, path), after.resource(host, path)
        again = second.get((host, path), [])
        full = any(s == 200 and n == new.content_length for s, n in again)
        out["pages"] += 1
        validated = any(k.lower() in ("etag", "last-modified") for k, _ in new.headers)
        changed = new.body != old.body or new.content_length != old.content_length
        out["floor_bytes"] += new.content_length if changed or not validated else 0
        if changed:
            out["changed"] += 1
            out["changed_full"] += full
        else:
            out["unchanged"] += 1
            out["unchanged_asked"] += any(s in (200, 304) for s, _ in again)
            out["unchanged_full"] += full
    return out


def revisit_now(jobdir: Path) -> int:
    """``scrapy frontier revisit-now`` on the crawl's embedded frontier (found by its
    JOBDIR, as the crawl finds it): the week has passed. Returns the URLs made due."""
    done = subprocess.run(
        [sys.executable, "-m", "scrapy", "frontier", "revisit-now", "-s", f"JOBDIR={jobdir}"],
        cwd=REPO, env=proxy_env(None), capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"revisit-now failed:\n{done.stdout}{done.stderr[-3000:]}")
    return int(done.stdout.split()[0].replace(",", ""))


def one_run(n_hosts: int, root: Path, run: int) -> dict[tuple[str, int], dict[str, Any]]:
    """Run 1 of the frontier and of Scrapy's cache against epoch 0, then run 2 of both
    and the relaunch against epoch 1 (each group in a rotating order)."""
    d = Path(tempfile.mkdtemp(prefix=f"run{run}-", dir=root))
    settings: dict[tuple[str, int], dict[str, Any]] = {
        ("frontier", 1): {**REVISITS, "JOBDIR": str(d / "job"), "WARC_DIR": str(d / "warc-1")},
        ("frontier", 2): {**REVISITS, "JOBDIR": str(d / "job"), "WARC_DIR": str(d / "warc-2")},
        ("relaunch", 2): {**REVISITS, "JOBDIR": str(d / "relaunch-job"),
                          "WARC_DIR": str(d / "relaunch-warc"), "FRONTIER_CRAWL_ID": "relaunch"},
        **{("scrapy-httpcache", n): {**HTTPCACHE, "JOBDIR": str(d / f"cache-job-{n}"),
                                     "HTTPCACHE_DIR": str(d / "httpcache")} for n in (1, 2)},
    }
    out: dict[tuple[str, int], dict[str, Any]] = {}
    fetches: dict[tuple[str, int], Fetches] = {}
    webs: dict[int, Web] = {}
    due = 0
    for n in (1, 2):
        if n == 2:
            due = revisit_now(d / "job")
        with simweb(n_hosts, n - 1) as sim:
            webs[n] = sim.web
            for key in rotated([k for k in CRAWLS if k[1] == n], run):
                out[key], fetches[key] = crawl(sim, d / f"{key[0]}-{n}", settings[key])
                r = out[key]
                print(f"run {run + 1} {key[0]:16} #{n}: {r['requests']} page requests, "
                      f"{r['page_mb']:.2f} MB, {r['not_modified']} 304s, archive "
                      f"{r['archive_mb']:.2f} MB, {r['wall_s']:.1f} s", flush=True)
    out[("frontier", 2)]["due"] = due
    for side in ("frontier", "relaunch", "scrapy-httpcache"):
        first = fetches[("frontier", 1) if side == "relaunch" else (side, 1)]
        out[(side, 2)]["vs_run1"] = compare(first, fetches[(side, 2)], webs[1], webs[2])
        out[(side, 2)]["floor_mb"] = out[(side, 2)]["vs_run1"]["floor_bytes"] / 1e6
    shutil.rmtree(d, ignore_errors=True)
    return out


def total(runs: Sequence[Mapping[str, Any]], key: str) -> int:
    """A count of the correctness comparison, summed over runs."""
    return sum(int(r["vs_run1"][key]) for r in runs)


def main(argv: list[str] | None = None) -> Report:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--hosts", type=int, default=None,
                            help="hosts of the web (default 1000, --quick 100)")

    # Bytes and the checks are the same run after run; only wall time (info) varies.
    args = parse_args(__doc__.splitlines()[0], argv, default_runs=1, options=options)
    started = time.monotonic()
    n_hosts = args.hosts or (100 if args.quick else 1000)
    root = Path(tempfile.mkdtemp(prefix="bench-revisit-"))
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {k: [] for k in CRAWLS}
    try:
        for run in range(args.runs):
            for key, measures in one_run(n_hosts, root, run).items():
                runs[key].append(measures)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def med(side: str, n: int, key: str) -> float:
        return median_of(runs[(side, n)], key)

    def ratio(a: tuple[str, int], b: tuple[str, int], key: str) -> float:
        return med(*a, key) / med(*b, key) if med(*b, key) else float("nan")

    report = Report("revisit", "python -m bench.revisit", args.runs, args.quick)
    cols = [Col("requests", ".0f"), Col("page_mb", ".2f", spread=True), Col("robots_kb", ".0f"),
            Col("not_modified", ".0f"), Col("archive_mb", ".2f", spread=True),
            Col("wall_s", ".1f", spread=True)]
    report.tables.append(Table(
        f"{n_hosts:,} hosts, run 1 (epoch 0) and run 2 (epoch 1, ~{CHANGE_RATE:.0%} of pages "
        "changed) (medians, min-max)",
        ["crawl", "page requests", "MB downloaded (pages)", "robots.txt kB", "304s",
         "archive MB", "wall s"],
        [median_row(f"{side} run {n}", runs[(side, n)], cols) for side, n in CRAWLS],
        "MB downloaded: body bytes the web sent for pages (headers not counted, robots.txt "
        "apart). archive: the run's *.warc.gz files. scrapy-httpcache keeps no archive."))
    f1, f2, rl = ("frontier", 1), ("frontier", 2), ("relaunch", 2)
    c1, c2 = ("scrapy-httpcache", 1), ("scrapy-httpcache", 2)
    ratios = {(a, b, k): ratio(a, b, k) for a, b in ((f2, f1), (f2, rl), (c2, c1))
              for k in ("page_mb", "archive_mb", "wall_s")}
    report.tables.append(Table(
        "Run 2 / run 1, and run 2 / relaunch (ratio of medians)",
        ["", "bytes downloaded", "archive bytes", "wall time"],
        [[label, *(f"**{ratios[(a, b, k)]:.3f}**" if k != "archive_mb" or a != c2 else "-"
                   for k in ("page_mb", "archive_mb", "wall_s"))]
         for label, a, b in (("frontier: run 2 / run 1", f2, f1),
                             ("frontier: run 2 / relaunch", f2, rl),
                             ("scrapy-httpcache: run 2 / run 1", c2, c1))]))
    truth = [[side, *(str(total(runs[(side, 2)], k)) for k in (
        "pages", "changed", "changed_full", "unchanged", "unchanged_asked", "unchanged_full")),
        str(sum(int(r["not_modified"]) for r in runs[(side, 2)]))]
        for side in ("frontier", "relaunch", "scrapy-httpcache")]
    report.tables.append(Table(
        "Run 2 against the ground truth: the pages run 1 fetched (sums over runs)",
        ["crawl", "pages of run 1", "changed since", "changed, fetched in full",
         "unchanged", "unchanged, asked again", "unchanged, fetched in full", "304s"], truth,
        "Fetched in full: a 200 with the new body's length. The relaunch is compared with the "
        "frontier's run 1. Scrapy's RFC2616Policy treats a response with Last-Modified and no "
        "Cache-Control as fresh for a tenth of its age (Firefox's heuristic): it serves such "
        "pages from its cache without asking, changed or not."))
    stats = [[f"`{s}`", *(f"{median_of([r['stats'] for r in runs[key]], s):.0f}"
                          for key in CRAWLS)] for s in STATS]
    report.tables.append(Table("Crawl stats (medians)",
                               ["stat", *(f"{side} run {n}" for side, n in CRAWLS)], stats,
                               f"URLs made due by revisit-now: "
                               f"{'/'.join(str(r['due']) for r in runs[f2])} (per run)."))

    archived = (f1, f2, rl)
    kinds = sorted({k for key in archived for r in runs[key] for k in r["records"]})

    def cell(key: tuple[str, int], kind: str) -> str:
        count = median([r["records"].get(kind, [0, 0])[0] for r in runs[key]])
        size = median([r["records"].get(kind, [0, 0])[1] for r in runs[key]])
        return f"{count:.0f} x {size / count:.0f} B" if count else "-"

    body = med(*f1, "page_mb") * 1e6 / med(*f1, "requests")
    report.tables.append(Table(
        "Archive by record kind (median count x mean gzipped bytes)",
        ["record", *(f"{side} run {n}" for side, n in archived)],
        [[kind, *(cell(key, kind) for key in archived)] for kind in kinds],
        f"A page of this web is ~{body:,.0f} bytes of body in run 1. Every capture keeps its "
        "request record (~0.5 kB), and an unchanged one a ~0.45 kB revisit record: that "
        "floor is why the archive shrinks less than the bytes downloaded, the more so the "
        "smaller the pages (with the 1 kB pages of the default simulated web, to ~0.7)."))

    changed, full = total(runs[f2], "changed"), total(runs[f2], "changed_full")
    unchanged, asked = total(runs[f2], "unchanged"), total(runs[f2], "unchanged_asked")
    missed = total(runs[c2], "changed") - total(runs[c2], "changed_full")
    bytes_ratio, archive_ratio = ratios[(f2, f1, "page_mb")], ratios[(f2, f1, "archive_mb")]
    report.checks += [
        Check("frontier: run 2 / run 1 bytes downloaded", f"{bytes_ratio:.3f}",
              f"<= {TARGET}", bytes_ratio <= TARGET),
        Check("frontier: run 2 / run 1 archive bytes", f"{archive_ratio:.3f}",
              f"<= {TARGET}", archive_ratio <= TARGET),
        Check("frontier: changed pages fetched in full in run 2", f"{full}/{changed}",
              "all", full == changed and changed > 0),
        Check("frontier: unchanged pages revisited in run 2 (304 or 200)",
              f"{asked}/{unchanged}", "all", asked == unchanged and unchanged > 0),
        Check("frontier: run 2 / relaunch: bytes, archive, wall time",
              " / ".join(f"{ratios[(f2, rl, k)]:.3f}" for k in ("page_mb", "archive_mb",
                                                                 "wall_s")),
              "(baseline: a new crawl id)", None),
        Check("frontier: run 2 bytes / the least this web allows",
              f"{med(*f2, 'page_mb') / med(*f2, 'floor_mb'):.2f} (that least = "
              f"{med(*f2, 'floor_mb') / med(*f1, 'page_mb'):.3f} of run 1)",
              "(1.0: the changed pages and the pages without validators, nothing else)", None),
        Check("frontier: run 2 / run 1 wall time", f"{ratios[(f2, f1, 'wall_s')]:.3f}",
              "(info)", None),
        Check("scrapy-httpcache (RFC2616Policy): run 2 / run 1 bytes downloaded",
              f"{ratios[(c2, c1, 'page_mb')]:.3f} ({missed} changed page(s) served stale "
              "from its cache)", "(baseline)", None),
    ]
    report.notes.append(
        "Settings: " + ", ".join(f"{k}={v}" for k, v in {**COMMON, **REVISITS}.items())
        + f"; web seed {SEED}, validators on, change rate {CHANGE_RATE}; the rest the "
        "project's (embedded frontier, robots obeyed, archive on with revisit records). "
        "Between the runs the web is stopped and started again at the next epoch; "
        "`scrapy frontier revisit-now -s JOBDIR=...` makes every done URL due.")
    report.raw = {f"{side}/{n}": v for (side, n), v in runs.items()}
    finish(report, args, started)
    return report


if __name__ == "__main__":
    main()
