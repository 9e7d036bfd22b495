"""Every default feature on, against a bare Scrapy spider: CPU per page and pages/s.

What a user compares before adopting the project: this crawler as installed
(frontier on its embedded Redis, robots policy, address guard, archive,
metrics, learning: every default on) against the spider they would write
themselves (``bench/vanilla_spider.py``: stock ``LinkExtractor``, Scrapy's
own scheduler and ``RobotsTxtMiddleware``, no project code). Both crawl the
same simulated web with ``CONCURRENT_REQUESTS=64``, 4 per host,
``DOWNLOAD_DELAY=1`` (the project's default; the vanilla spider is given the
same, as a polite user would), ``DEPTH_LIMIT=2`` and ``ROBOTSTXT_OBEY``.

Each crawl and everything it starts (the embedded Redis, which the bench
starts for the project's crawl exactly as the crawl would, then reads INFO
from) is pinned to one core, the web's server to the other: CPU per page is
the cost of one worker core. A third side, ``project-noarchive``, is the
project with ``WARC_ENABLED=False``: the difference prices the archive.

Two webs (``--quick``: a third of the hosts):

- ``small``: 300 hosts, pages of about 3 KB (the simulated web's own links);
- ``large``: 200 hosts, pages of about 60 KB carrying 34 more links each
  (about 45 per page), as real pages do.

CPU = the crawl process (``getrusage(RUSAGE_CHILDREN)``) plus its Redis
(``INFO cpu``), over pages served (robots.txt included, from the web's
ledger). pages/s = pages served / time from the first request to the last
answer. Reactor lag: a 10 ms timer in both crawls (``bench/lagprobe.py``),
its lateness p99. Redis commands per page: ``INFO commandstats`` (commands
run inside scripts included).

``--against REF`` adds a fourth side, ``project@REF``: the project at an
earlier git commit (a temporary worktree), with the same settings, so a
change is priced against the commit before it in the same run (the ratio
of CPU per request, project / project@REF).

    python -m bench.vanilla [--quick] [--runs N] [--web small|large] [--against REF]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from contextlib import ExitStack, contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from bench.common import (
    REPO,
    Check,
    Col,
    Report,
    Table,
    checkout_of,
    child_cpu_seconds,
    finish,
    measured_crawl,
    median_of,
    median_row,
    parse_args,
    python,
    rotated,
)
from tests.crawl_runner import proxy_env
from tests.simweb import SimWebProcess

#: Core 0 serves the web; the crawl and its Redis get core 1.
WEB_CORE, CRAWL_CORE = 0, 1

COMMON: dict[str, Any] = {
    "CONCURRENT_REQUESTS": 64,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 4,
    "DOWNLOAD_DELAY": 1.0,
    "DEPTH_LIMIT": 2,
    "ROBOTSTXT_OBEY": True,
    "LOG_LEVEL": "INFO",
}
WEBS: dict[str, dict[str, Any]] = {
    "small": {"n_hosts": 300, "page_bytes": 3_000, "page_links": 0},
    "large": {"n_hosts": 200, "page_bytes": 60_000, "page_links": 34},
}
SIDES = ("scrapy", "project", "project-noarchive")
LAG = "bench.lagprobe.LagProbe"


@cache
def _project_extensions(checkout: Path | None = None) -> dict[str, Any]:
    """The project's EXTENSIONS (this checkout's, or ``checkout``'s) and the lag probe."""
    if checkout is None:
        from crawler import settings as project

        return {**project.EXTENSIONS, LAG: 0}
    listed = subprocess.run(
        [python(), "-c", "import json, crawler.settings as s; print(json.dumps(s.EXTENSIONS))"],
        cwd=checkout, env={**os.environ, "PYTHONPATH": str(checkout)}, capture_output=True,
        text=True, check=True).stdout
    return {**json.loads(listed), LAG: 0}


def _vanilla_crawl(sim: SimWebProcess, workdir: Path, lag_file: Path) -> tuple[int, float]:
    """``scrapy runspider`` of the bare spider outside the project; (exit code, CPU s)."""
    seeds = workdir / "seeds.txt"
    seeds.write_text("".join(f"{url}\n" for url in sim.web.seed_urls()))
    settings = {
        **COMMON,
        # Safety net only (the proxy carries every request): never the machine's DNS.
        "DNS_RESOLVER": "tests.loopback_resolver.LoopbackOnlyResolver",
        "TWISTED_DNS_RESOLVER": "tests.loopback_resolver.LoopbackOnlyResolver",
        "FEEDS": json.dumps({str(workdir / "items.jsonl"): {"format": "jsonlines"}}),
        "EXTENSIONS": json.dumps({LAG: 0}),
        "BENCH_LAG_FILE": str(lag_file),
    }
    command = [python(), "-m", "scrapy", "runspider",
               str(REPO / "bench" / "vanilla_spider.py"), "-a", f"seeds={seeds}"]
    for name, value in settings.items():
        command += ["-s", f"{name}={value}"]
    env = {k: v for k, v in proxy_env(sim.proxy_url).items() if k != "SCRAPY_SETTINGS_MODULE"}
    sim.reset()
    before = child_cpu_seconds()
    with (workdir / "crawl.log").open("w") as log:
        code = subprocess.run(command, cwd=workdir, env=env, stdout=subprocess.DEVNULL,
                              stderr=log, timeout=900, check=False).returncode
    return code, child_cpu_seconds() - before


def one_crawl(side: str, sim: SimWebProcess, root: Path, checkout: Path | None = None
              ) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"{side.replace('@', '-')}-", dir=root))
    lag_file = workdir / "lag.json"
    redis_cpu, commands, scripts, by_command = 0.0, 0.0, 0.0, {}
    writer_cpu = 0.0
    if side == "scrapy":
        code, cpu = _vanilla_crawl(sim, workdir, lag_file)
        log = (workdir / "crawl.log").read_text()
    else:
        wanted = {**COMMON, "JOBDIR": str(workdir / "job"),
                  "EXTENSIONS": _project_extensions(checkout if "@" in side else None),
                  "BENCH_LAG_FILE": str(lag_file),
                  **({"WARC_ENABLED": False} if side == "project-noarchive" else {})}
        measured = measured_crawl(sim, wanted, workdir, side, timeout=900,
                                  checkout=checkout if "@" in side else None)
        code, cpu, log = measured.result.returncode, measured.crawl_cpu_s, measured.result.log
        writer_cpu = float(measured.result.stat("warc/writer_cpu_seconds") or 0)
        usage = measured.usage
        redis_cpu, commands, scripts = usage.cpu_s, usage.commands, usage.scripts
        by_command = usage.by_command
    entries = sim.ledger().entries
    if code != 0 or not entries:
        raise RuntimeError(f"{side} crawl failed ({code}):\n{log[-3000:]}")
    lag = json.loads(lag_file.read_text())
    shutil.rmtree(workdir, ignore_errors=True)
    pages = len(entries)
    distinct = len({sim.web.page_identity(e["host"], e["path"]) for e in entries})
    start = min(e["arrival"] for e in entries)
    end = max(e["done"] or e["arrival"] for e in entries)
    return {
        "requests": pages,
        "span_s": end - start,
        "pages_per_s": pages / (end - start),
        "distinct_per_s": distinct / (end - start),
        "distinct": distinct,
        "cpu_s": cpu + redis_cpu,
        "cpu_ms_per_page": (cpu + redis_cpu) * 1000 / pages,
        "cpu_ms_per_distinct": (cpu + redis_cpu) * 1000 / distinct,
        "redis_cpu_ms_per_page": redis_cpu * 1000 / pages,
        "writer_share": writer_cpu / (cpu + redis_cpu) if cpu + redis_cpu else 0.0,
        "commands_per_page": commands / pages,
        "scripts_per_page": scripts / pages,
        "top_commands": {c: round(n / pages, 2) for c, n in
                         sorted(by_command.items(), key=lambda kv: -kv[1])[:6]},
        "lag_p99_ms": lag["p99"] * 1000,
        "lag_max_ms": lag["max"] * 1000,
        "kb_per_page": sum(e["bytes"] or 0 for e in entries) / pages / 1024,
    }


@contextmanager
def pinned_web(spec: dict[str, Any]) -> Any:
    with SimWebProcess(seed=7, mix="clean", **spec) as sim:
        os.sched_setaffinity(sim.pid, {WEB_CORE})
        yield sim


def sides_of(against: str | None) -> tuple[str, ...]:
    return SIDES + ((f"project@{against}",) if against else ())


def crawl_web(name: str, spec: dict[str, Any], runs: int, root: Path,
              against: tuple[str, Path] | None = None) -> dict[str, list[dict[str, Any]]]:
    sides = sides_of(against[0] if against else None)
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    with pinned_web(spec) as sim:
        for run in range(runs):
            for side in rotated(sides, run):
                r = one_crawl(side, sim, root, against[1] if against else None)
                results[side].append(r)
                print(f"{name} run {run + 1}/{runs} {side:18} {r['requests']} requests, "
                      f"{r['pages_per_s']:.0f} pages/s, {r['cpu_ms_per_page']:.2f} ms CPU/page "
                      f"(Redis {r['redis_cpu_ms_per_page']:.2f}), lag p99 "
                      f"{r['lag_p99_ms']:.0f} ms, {r['commands_per_page']:.1f} Redis "
                      "commands/page", flush=True)
    return results


def main(argv: list[str] | None = None) -> Report:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--web", choices=sorted(WEBS), action="append",
                            help="crawl only this web (repeatable; default both)")
        parser.add_argument("--from-json", type=Path, metavar="REPORT.json",
                            help="crawl nothing: report again the runs an earlier --json kept")
        parser.add_argument("--against", metavar="REF",
                            help="also crawl with the project at this git commit (a side "
                            "project@REF), to price a change against the commit before it")

    args = parse_args(__doc__.splitlines()[0], argv, options=options)
    started = time.monotonic()
    if args.from_json:
        earlier = Report.load(args.from_json)
        args.runs, args.quick = earlier.runs, earlier.quick
        started -= earlier.seconds
        webs = {name: {**WEBS[name], "n_hosts": WEBS[name]["n_hosts"] // 3 if args.quick
                       else WEBS[name]["n_hosts"]} for name in earlier.raw}
        for runs in earlier.raw.values():  # measures derived since the report was kept
            for run in (r for side in runs.values() for r in side):
                run.setdefault("distinct_per_s", run["distinct"] / run["span_s"])
        return _report(args, webs, earlier.raw, started)
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("bench.vanilla needs two cores: one for the web, one for the crawl")
    os.sched_setaffinity(0, {CRAWL_CORE})  # the crawls and their Redis inherit it
    webs = {name: {**spec, "n_hosts": spec["n_hosts"] // 3 if args.quick else spec["n_hosts"]}
            for name, spec in WEBS.items() if not args.web or name in args.web}
    root = Path(tempfile.mkdtemp(prefix="bench-vanilla-"))
    try:
        with ExitStack() as stack:
            against = ((args.against, stack.enter_context(checkout_of(args.against)))
                       if args.against else None)
            results = {name: crawl_web(name, spec, args.runs, root, against)
                       for name, spec in webs.items()}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return _report(args, webs, results, started)


def _report(args: argparse.Namespace, webs: dict[str, dict[str, Any]],
            results: dict[str, dict[str, list[dict[str, Any]]]], started: float) -> Report:
    report = Report("vanilla", "python -m bench.vanilla", args.runs, args.quick, raw=results)
    cols = [Col("requests", ".0f"), Col("distinct", ".0f"), Col("kb_per_page", ".1f"),
            Col("pages_per_s", ".0f", spread=True), Col("distinct_per_s", ".0f"),
            Col("cpu_ms_per_page", ".2f", spread=True), Col("cpu_ms_per_distinct", ".2f"),
            Col("redis_cpu_ms_per_page", ".2f"), Col("commands_per_page", ".1f"),
            Col("lag_p99_ms", ".0f", spread=True), Col("lag_max_ms", ".0f")]
    for name, runs in results.items():
        spec = webs[name]

        def med(side: str, key: str, runs: dict[str, list[dict[str, Any]]] = runs) -> float:
            return median_of(runs[side], key)

        report.tables.append(Table(
            f"{name}: {spec['n_hosts']} hosts, pages of ~{spec['page_bytes'] // 1000} KB "
            f"(medians, min-max)",
            ["side", "requests served", "distinct pages", "KB/page", "requests/s",
             "distinct pages/s", "CPU ms/request (crawl + Redis)", "CPU ms/distinct page",
             "of which Redis (per request)", "Redis commands/request", "reactor lag p99 ms",
             "lag max ms"],
            [median_row(side, runs[side], cols) for side in runs],
            "One core for the crawl and its Redis, one for the web. Requests served include "
            "robots.txt; distinct pages are the web's pages however spelt (the vanilla "
            "spider fetches the web's disguised duplicates, ?utm_source= and the like, "
            "as pages of their own)."))
        cpu_ratio = med("project", "cpu_ms_per_page") / med("scrapy", "cpu_ms_per_page")
        pps_ratio = med("project", "pages_per_s") / med("scrapy", "pages_per_s")
        archive = 1 - med("project-noarchive", "cpu_ms_per_page") / med("project",
                                                                        "cpu_ms_per_page")
        distinct_cpu = (med("project", "cpu_ms_per_distinct")
                        / med("scrapy", "cpu_ms_per_distinct"))
        distinct_pps = med("project", "distinct_per_s") / med("scrapy", "distinct_per_s")
        report.checks += [
            Check(f"{name}: project / vanilla Scrapy, CPU per request", f"{cpu_ratio:.2f}x",
                  "<= 1.0x (stretch 0.8x)", cpu_ratio <= 1.0),
            Check(f"{name}: project / vanilla Scrapy, CPU per distinct page",
                  f"{distinct_cpu:.2f}x", "(what a page of the web costs)", None),
            Check(f"{name}: project / vanilla Scrapy, requests/s", f"{pps_ratio:.2f}x",
                  ">= 1.0x", pps_ratio >= 1.0),
            Check(f"{name}: project / vanilla Scrapy, distinct pages/s", f"{distinct_pps:.2f}x",
                  "(the web's pages a second)", None),
            Check(f"{name}: archive's share of the project's CPU per page", f"{archive:.0%}",
                  "<= 10%", archive <= 0.10),
        ]
        for side in (side for side in runs if "@" in side):
            change = med("project", "cpu_ms_per_page") / med(side, "cpu_ms_per_page")
            report.checks.append(Check(
                f"{name}: project / {side}, CPU per request (what the change costs)",
                f"{change:.3f}x", "<= 1.02x", change <= 1.02))
        if all("writer_share" in r for r in runs["project"]):  # not in older reports
            report.checks.append(Check(
                f"{name}: the archive's writer thread's share of the project's CPU "
                "(warc/writer_cpu_seconds)", f"{med('project', 'writer_share'):.0%}",
                "(the archive apart from the reactor)", None))
        report.checks += [
            Check(f"{name}: Redis commands per request",
                  f"{med('project', 'commands_per_page'):.1f}",
                  "<= 15", med("project", "commands_per_page") <= 15),
            Check(f"{name}: project reactor lag p99", f"{med('project', 'lag_p99_ms'):.0f} ms",
                  "<= 100 ms", med("project", "lag_p99_ms") <= 100),
        ]
    report.notes.append(
        "Settings on both sides: " + ", ".join(f"{k}={v}" for k, v in COMMON.items())
        + "; the project's other settings are its defaults (archive, metrics, guard, learning "
        "on), the vanilla spider's Scrapy's.")
    finish(report, args, started)
    return report


if __name__ == "__main__":
    main()
