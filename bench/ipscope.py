"""The IP scope: many names on two servers must not slow the ordinary hosts down.

A web of real sockets (``tests/realweb``: names answered by its own DNS
server on 127.0.0.1, hosts on their own loopback addresses): 1,000 names on
two servers (500 names a server, one page each, answering after 0.1 s) and 50
ordinary hosts (8 pages each, instant, each on an address of its own). With
``FRONTIER_IP_CONCURRENCY=2`` each server gets two requests at a time, so its
names drain slowly; the question is what that costs the ordinary hosts. For
each scheduler, from the servers' ledger:

- the time from the first request until the 400 ordinary pages are done,
  with the 1,000 names in the crawl (seeded first) and without them: ratio
  = with / without, 1.0 meaning the busy servers cost the others nothing;
- the most requests either shared server had open at once.

Schedulers: ``frontier`` (the project's defaults, ``FRONTIER_IP_CONCURRENCY=2``,
every name its own registered domain) and ``scrapy-1ms`` (vanilla Scrapy's
scheduler with ``DOWNLOAD_DELAY=0.001``, which keeps its per-slot limit: it
knows names, not servers). Both resolve through the web's DNS server; no
packet leaves the machine.

    python -m bench.ipscope [--quick] [--runs N]
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
    spread,
)
from tests.crawl_runner import realweb_settings, run_crawl
from tests.realweb import Host, RealWebProcess, Web, links_to

COMMON: dict[str, Any] = {
    "CONCURRENT_REQUESTS": 16,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
    "ROBOTSTXT_OBEY": False,
    "LOG_LEVEL": "INFO",
    "PROMETHEUS_ENABLED": False,
    "WARC_ENABLED": False,
}
SCHEDULERS: dict[str, dict[str, Any]] = {
    "frontier": {"DOWNLOAD_DELAY": 0, "FRONTIER_IP_CONCURRENCY": 2},
    "scrapy-1ms": {**SCRAPY_SCHEDULER, "DOWNLOAD_DELAY": 0.001},
}
TARGET = 1.1
SERVERS = 2
NAME_SECONDS = 0.1
ORDINARY = 50
PAGES = 8


def build_web(names: int) -> Web:
    """``names`` one-page names on two shared addresses, and the ordinary hosts."""
    hosts = [Host(f"n{i:04d}.test", share=f"server{i % SERVERS}",
                  pages={"/": links_to(delay=NAME_SECONDS)}) for i in range(names)]
    for i in range(ORDINARY):
        pages = {"/": links_to(*(f"/p/{k}" for k in range(1, PAGES)))}
        pages |= {f"/p/{k}": links_to("/") for k in range(1, PAGES)}
        hosts.append(Host(f"o{i:03d}.test", pages=pages))
    return Web(hosts)


def one_crawl(scheduler: str, names: int, web: RealWebProcess, root: Path) -> dict[str, Any]:
    """Crawl the web once (the names seeded first); what its servers saw."""
    workdir = Path(tempfile.mkdtemp(prefix=f"{scheduler}-", dir=root))
    web.reset()
    seeds = [web.url(f"n{i:04d}.test") for i in range(names)]
    seeds += [web.url(f"o{i:03d}.test") for i in range(ORDINARY)]
    settings = {**realweb_settings(web.nameserver), **COMMON, **SCHEDULERS[scheduler],
                "CLOSESPIDER_TIMEOUT": 600}
    result = run_crawl(None, seeds, workdir, settings, timeout=900)
    shutil.rmtree(workdir, ignore_errors=True)
    if result.returncode != 0:
        raise RuntimeError(f"{scheduler} crawl failed:\n{result.log[-3000:]}")
    ledger = web.ledger()
    start = min(r.arrival for r in ledger)
    ordinary = ledger.where(lambda r: (r.host or "").startswith("o"))
    shared = {web.address(f"n{i:04d}.test") for i in range(min(names, SERVERS))}
    return {
        "ordinary_done_s": max(r.done or r.arrival for r in ordinary) - start,
        "ordinary_pages": len({(r.host, r.target) for r in ordinary}),
        "names_done": len(ledger.where(lambda r: (r.host or "").startswith("n"))),
        "server_max_in_flight": max((ledger.max_in_flight_at(a) for a in shared), default=0),
        "wall_s": result.seconds,
    }


def main(argv: list[str] | None = None) -> Report:
    args = parse_args(__doc__.splitlines()[0], argv)
    started = time.monotonic()
    names = 300 if args.quick else 1000
    root = Path(tempfile.mkdtemp(prefix="bench-ipscope-"))
    runs: dict[tuple[str, bool], list[dict[str, Any]]] = {
        (s, w): [] for s in SCHEDULERS for w in (True, False)}
    try:
        with RealWebProcess(build_web(names), startup_timeout=120) as web:
            for run in range(args.runs):
                for name in rotated(list(SCHEDULERS), run):
                    for with_names in (True, False):
                        r = one_crawl(name, names if with_names else 0, web, root)
                        runs[(name, with_names)].append(r)
                        print(f"run {run + 1}/{args.runs} {name:10} names={with_names!s:5} "
                              f"ordinary done {r['ordinary_done_s']:.2f} s "
                              f"({r['ordinary_pages']} pages), server max in flight "
                              f"{r['server_max_in_flight']}, wall {r['wall_s']:.1f} s",
                              flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    report = Report("ipscope", "python -m bench.ipscope", args.runs, args.quick)
    rows, ratios, conc = [], {}, {}
    for name in SCHEDULERS:
        with_n = [r["ordinary_done_s"] for r in runs[(name, True)]]
        without = [r["ordinary_done_s"] for r in runs[(name, False)]]
        ratios[name] = median(with_n) / median(without)
        conc[name] = max(r["server_max_in_flight"] for r in runs[(name, True)])
        rows.append([name, f"{median(with_n):.2f} ({spread(with_n)})",
                     f"{median(without):.2f} ({spread(without)})", f"**{ratios[name]:.2f}x**",
                     str(conc[name]),
                     "/".join(str(r["ordinary_pages"]) for r in runs[(name, True)]),
                     f"{median([r['wall_s'] for r in runs[(name, True)]]):.1f}"])
    report.tables.append(Table(
        f"{names} names on {SERVERS} servers + {ORDINARY} ordinary hosts: seconds until the "
        f"{ORDINARY * PAGES} ordinary pages are done (median, min-max)",
        ["scheduler", "with the names", "without", "ratio", "a shared server's max in flight",
         "ordinary pages fetched", "wall s (with)"], rows))
    frontier_vs = median([r["ordinary_done_s"] for r in runs[("frontier", True)]]) / median(
        [r["ordinary_done_s"] for r in runs[("scrapy-1ms", True)]])
    report.checks += [
        Check("frontier: with names / without", f"{ratios['frontier']:.2f}x", f"<= {TARGET}x",
              ratios["frontier"] <= TARGET),
        Check("frontier: a shared server's max in flight", str(conc["frontier"]), "<= 2",
              conc["frontier"] <= 2),
        Check("frontier: every name fetched once",
              "/".join(str(r["names_done"]) for r in runs[("frontier", True)]),
              f"{names} each run", all(r["names_done"] == names
                                       for r in runs[("frontier", True)])),
        Check("scrapy-1ms: with names / without",
              f"{ratios['scrapy-1ms']:.2f}x (server max in flight {conc['scrapy-1ms']})",
              "(baseline: no notion of servers)", None),
        Check("ordinary hosts done, with the names: frontier / scrapy-1ms",
              f"{frontier_vs:.2f}", "(below 1: the frontier sooner)", None),
    ]
    report.notes.append(
        f"Settings: CONCURRENT_REQUESTS=16, CONCURRENT_REQUESTS_PER_DOMAIN=2, "
        f"ROBOTSTXT_OBEY=False, WARC off; names answer after {NAME_SECONDS:g} s, ordinary "
        "pages at once; every name is its own registered domain, so only the IP scope "
        "groups them. The web is the tests' real-socket web (tests/realweb), one process "
        "for DNS and every server, on loopback.")
    report.raw = {f"{s}/{'names' if w else 'nonames'}": v for (s, w), v in runs.items()}
    finish(report, args, started)
    return report


if __name__ == "__main__":
    main()
