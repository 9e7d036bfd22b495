"""What waiting costs: Redis per page and the pace of a gated domain, on real sockets.

A broad crawl spends most of its time waiting on some gate (a site's delay,
its registered domain's, its server address's), so what a wait costs decides
how far one Redis goes. Three webs of real sockets (``tests/realweb``: names
answered by its own DNS server on 127.0.0.1, servers on their own loopback
addresses), each crawled by one worker on a private redis-server:

- ``domain``: 60 names of one registered domain on one server address, whose
  pages answer in 200 ms, and 10 other hosts, each its own registered domain
  and address; 6 pages a host, robots.txt 404. ``DOWNLOAD_DELAY=0``,
  ``CONCURRENT_REQUESTS_PER_DOMAIN=2``, ``FRONTIER_IP_CONCURRENCY=2``,
  ``FRONTIER_IP_DELAY=0``, the rest default: the domain's gate
  (``FRONTIER_DOMAIN_DELAY`` 0.25 s) binds, 4 pages a second.
- ``shared``: 300 names of 10 registered domains, each domain's 30 names on
  one address of its own; same settings and pages.
- ``crawldelay``: one host whose robots.txt says ``Crawl-delay: 10``, 4 pages:
  what a worker sends Redis while its only host waits.

Measured per web, from Redis's own counters (``INFO commandstats``: commands
inside scripts included, and ``INFO cpu``) and the servers' ledger: commands,
script calls and Redis CPU per page; the shared domain's pages a second
against what its tightest gate allows; the most requests in flight at the
shared address; and the commands a second while every host waits (sampled
between two requests of the Crawl-delay host). Side by side, in the same run,
with the same crawl of the project at ``--against REF`` (default: none) and
with the 300-host simulated web of ``bench.scaleout`` (delay 0), the
reference the targets are ratios of.

    python -m bench.gatedweb [--quick] [--runs N] [--against REF]
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from bench import scaleout
from bench.common import (
    Check,
    Col,
    RedisUsage,
    Report,
    Table,
    checkout_of,
    finish,
    idle_cpu_per_s,
    median_of,
    median_row,
    parse_args,
    private_redis,
    rotated,
    usage_client,
)
from tests.crawl_runner import REPO, finish_crawl, realweb_settings, start_crawl
from tests.realweb import Host, RealWebProcess, Web, links_to
from tests.realweb.sites import chain_site

SETTINGS: dict[str, Any] = {
    "DOWNLOAD_DELAY": 0,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
    "FRONTIER_IP_CONCURRENCY": 2,
    "FRONTIER_IP_DELAY": 0,
    "LOG_LEVEL": "INFO",
    "PROMETHEUS_ENABLED": False,
    "WARC_ENABLED": False,
    "CLOSESPIDER_TIMEOUT": 600,
}
PAGES = 6
ANSWER_S = 0.2
#: The tightest gate of the shared domain: FRONTIER_DOMAIN_DELAY's default.
DOMAIN_DELAY_S = 0.25
CRAWL_DELAY_S = 10


def _site(n_pages: int, delay: float) -> dict[str | bytes, Any]:
    pages: dict[str | bytes, Any] = {"/": links_to(*(f"/{k}" for k in range(1, n_pages)),
                                                   delay=delay)}
    for k in range(1, n_pages):
        pages[f"/{k}"] = links_to("/", title=f"page {k}", delay=delay)
    return pages


def domain_web(quick: bool) -> tuple[Web, list[str]]:
    """60 names of farm.test on one address, 10 hosts of their own (see the docstring)."""
    names = 20 if quick else 60
    hosts = [Host(f"s{i}.farm.test", pages=_site(PAGES, ANSWER_S), share="farm")
             for i in range(1, names + 1)]
    hosts += [Host(f"own{i}.test", pages=_site(PAGES, ANSWER_S)) for i in range(1, 11)]
    return Web(hosts), ["farm.test"]


def shared_web(quick: bool) -> tuple[Web, list[str]]:
    """300 names of 10 registered domains, a domain's names on one address."""
    per = 6 if quick else 30
    hosts = [Host(f"s{i}.d{d}.test", pages=_site(PAGES, ANSWER_S), share=f"d{d}")
             for d in range(1, 11) for i in range(1, per + 1)]
    return Web(hosts), [f"d{d}.test" for d in range(1, 11)]


def crawldelay_web(quick: bool) -> tuple[Web, list[str]]:
    robots = f"User-agent: *\nCrawl-delay: {CRAWL_DELAY_S}\n"
    return Web([Host("slow.test", robots=robots, pages=chain_site(3 if quick else 4))]), []


WEBS = {"domain": domain_web, "shared": shared_web, "crawldelay": crawldelay_web}


class Sampler:
    """Reads Redis's counters every ``every`` seconds in a thread: (time, usage)."""

    def __init__(self, url: str, every: float = 0.5) -> None:
        self.url, self.every = url, every
        self.samples: list[tuple[float, RedisUsage]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        client = usage_client(self.url)
        while not self._stop.is_set():
            self.samples.append((time.time(), RedisUsage.read(client)))
            self._stop.wait(self.every)
        client.close()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def rate(self, start: float, end: float) -> float:
        """Commands a second between the samples nearest inside [start, end]."""
        inside = [(t, u) for t, u in self.samples if start <= t <= end]
        if len(inside) < 2:
            return float("nan")
        (t0, u0), (t1, u1) = inside[0], inside[-1]
        return (u1 - u0).commands / (t1 - t0)


def one_crawl(kind: str, quick: bool, root: Path, checkout: Path | None) -> dict[str, float]:
    web, domains = WEBS[kind](quick)
    workdir = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=root))
    where: dict[str, Any] = ({"cwd": checkout, "env": {"PYTHONPATH": str(checkout)}}
                             if checkout else {"cwd": REPO})
    with RealWebProcess(web) as w, private_redis() as url, Sampler(url) as sampler:
        client = usage_client(url)
        idle = idle_cpu_per_s(client)
        before, read_at = RedisUsage.read(client), time.monotonic()
        seeds = [w.url(h.name) for h in web.hosts]
        started = time.monotonic()
        proc = start_crawl(None, seeds, workdir, {
            **realweb_settings(w.nameserver), **SETTINGS, "REDIS_URL": url}, **where)
        result = finish_crawl(proc, workdir, started, timeout=900)
        usage = RedisUsage.read(client) - before
        window = time.monotonic() - read_at
        client.close()
        ledger = w.ledger()
    shutil.rmtree(workdir, ignore_errors=True)
    if result.returncode != 0:
        raise RuntimeError(f"{kind} crawl failed:\n{result.log[-3000:]}")
    pages = len(list(ledger))
    out = {"pages": pages, "seconds": result.seconds,
           "commands_per_page": usage.commands / pages,
           "scripts_per_page": usage.scripts / pages,
           "redis_cpu_ms_per_page": usage.cpu_s * 1000 / pages,
           "redis_busy_ms_per_page": (usage.cpu_s - idle * window) * 1000 / pages}
    if domains:
        gated = [r for d in domains for r in ledger.for_domain(d)]
        span = max(r.done or r.arrival for r in gated) - min(r.arrival for r in gated)
        allowed = len(domains) / DOMAIN_DELAY_S
        out["domain_pages_per_s"] = len(gated) / span
        out["domain_pace_share"] = len(gated) / span / allowed
        # (each domain's names share one address: the address's requests)
        out["address_max_in_flight"] = max(ledger.max_in_flight_in_domain(d) for d in domains)
    else:
        arrivals = sorted(r.arrival for r in ledger)
        # The wait between the second and third request: every host waits.
        a, b = arrivals[1], arrivals[2]
        out["waiting_commands_per_s"] = sampler.rate(a + 1.0, b - 1.0)
    return out


def main(argv: list[str] | None = None) -> Report:
    def options(parser: Any) -> None:
        parser.add_argument("--against", default=None,
                            help="a git ref crawled side by side (e.g. the last release)")
        parser.add_argument("--webs", nargs="+", default=list(WEBS), choices=list(WEBS))

    args = parse_args(__doc__.splitlines()[0], argv, options=options)
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="bench-gatedweb-"))
    sides = ["project"] + ([f"project@{args.against}"] if args.against else [])
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        s: {k: [] for k in args.webs} for s in sides}
    sim: list[dict[str, float]] = []
    try:
        with (checkout_of(args.against) if args.against else nullcontext()) as checkout:
            for run in range(args.runs):
                for side in rotated(sides, run):
                    for kind in args.webs:
                        r = one_crawl(kind, args.quick, root,
                                      checkout if "@" in side else None)
                        runs[side][kind].append(r)
                        print(f"run {run + 1}/{args.runs} {side} {kind}: {_line(r)}", flush=True)
                r = scaleout.one_side(1, 100 if args.quick else 300, root)
                sim.append(r)
                print(f"run {run + 1}/{args.runs} simulated web (300 hosts): "
                      f"{r['commands_per_page']:.1f} commands/page, "
                      f"{r['redis_cpu_ms_per_page']:.3f} ms Redis CPU/page "
                      f"({r['redis_busy_ms_per_page']:.3f} above idle)", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return _report(args, sides, runs, sim, started)


def _line(r: dict[str, float]) -> str:
    extra = (f", domain {r['domain_pages_per_s']:.2f} pages/s ({r['domain_pace_share']:.0%}"
             f" of its gate), address max {r['address_max_in_flight']:.0f} in flight"
             if "domain_pages_per_s" in r else
             f", {r.get('waiting_commands_per_s', 0):.1f} commands/s while waiting")
    return (f"{r['pages']:.0f} pages in {r['seconds']:.0f} s, {r['commands_per_page']:.1f} "
            f"commands/page, {r['scripts_per_page']:.2f} scripts/page, "
            f"{r['redis_cpu_ms_per_page']:.3f} ms Redis CPU/page "
            f"({r['redis_busy_ms_per_page']:.3f} above idle){extra}")


def _report(args: Any, sides: list[str], runs: dict[str, dict[str, list[dict[str, float]]]],
            sim: list[dict[str, float]], started: float) -> Report:
    report = Report("gatedweb", "python -m bench.gatedweb", args.runs, args.quick,
                    raw={"runs": runs, "simulated": sim})
    _targets(report, args, sides, runs, sim)
    cols = [Col("pages", ".0f"), Col("commands_per_page", ".1f", spread=True),
            Col("scripts_per_page", ".2f"), Col("redis_cpu_ms_per_page", ".3f", spread=True),
            Col("redis_busy_ms_per_page", ".3f", spread=True)]
    rows = [median_row(f"{side}: {kind}", runs[side][kind], cols)
            for side in sides for kind in args.webs]
    rows.append(median_row("simulated web, 300 hosts (reference)",
                           [{**r, "scripts_per_page": float("nan")} for r in sim], cols))
    report.tables.append(Table("Redis per page (medians, min-max)",
                               ["side: web", "pages", "commands/page", "script calls/page",
                                "Redis CPU ms/page", "above idle"], rows,
                               "Above idle: less the server's own CPU a second while nobody "
                               "asks it anything (measured before each crawl) times the "
                               "crawl's length; the targets use it."))
    finish(report, args, started)
    return report


def _targets(report: Report, args: Any, sides: list[str],
             runs: dict[str, dict[str, list[dict[str, float]]]],
             sim: list[dict[str, float]]) -> None:
    sim_cmd = median_of(sim, "commands_per_page")
    sim_cpu = median_of(sim, "redis_busy_ms_per_page")
    mine = runs["project"]
    for kind in [k for k in args.webs if k != "crawldelay"]:
        cmd = median_of(mine[kind], "commands_per_page")
        cpu = median_of(mine[kind], "redis_busy_ms_per_page")
        report.checks += [
            Check(f"{kind}: commands per page / the simulated web's", f"{cmd / sim_cmd:.2f}x "
                  f"({cmd:.1f} / {sim_cmd:.1f})", "<= 2x", cmd <= 2 * sim_cmd),
            Check(f"{kind}: Redis CPU per page above idle / the simulated web's",
                  f"{cpu / sim_cpu:.2f}x "
                  f"({cpu:.3f} / {sim_cpu:.3f} ms)", "<= 2x", cpu <= 2 * sim_cpu),
            Check(f"{kind}: script calls per page",
                  f"{median_of(mine[kind], 'scripts_per_page'):.2f}", "<= 4",
                  median_of(mine[kind], "scripts_per_page") <= 4),
            Check(f"{kind}: gated domains' pages a second / their gate's",
                  f"{median_of(mine[kind], 'domain_pace_share'):.0%}", ">= 90%",
                  median_of(mine[kind], "domain_pace_share") >= 0.9),
            Check(f"{kind}: most requests in flight at a shared address",
                  f"{max(r['address_max_in_flight'] for r in mine[kind]):.0f}", "<= 2",
                  max(r["address_max_in_flight"] for r in mine[kind]) <= 2),
        ]
    if "crawldelay" in args.webs:
        for side in sides:
            report.checks.append(Check(
                f"{side}: commands a second while the only host waits (Crawl-delay "
                f"{CRAWL_DELAY_S} s)",
                f"{median_of(runs[side]['crawldelay'], 'waiting_commands_per_s'):.1f}",
                "the heartbeat and the live settings' watches (about 6)", None))


if __name__ == "__main__":
    main()
