"""The IP scope: many names on two servers must not slow the ordinary hosts down.

A web of real sockets (``tests/realweb``: names answered by its own DNS
server on 127.0.0.1, hosts on their own loopback addresses): 1,000 names on
two servers (500 names a server, one page each, answering after 0.1 s) and 50
ordinary hosts (8 pages each, answering after 50 ms, each on an address of
its own). With ``FRONTIER_IP_CONCURRENCY=2`` each server gets two requests at
a time, so its names drain slowly; the question is what that costs the
ordinary hosts. Their pace is their own politeness (``DOWNLOAD_DELAY=0.25``,
two at a time), not the 64 global slots nor the CPU: a scheduler that lets
requests waiting for a busy server hold slots slows them down, one that
parks them does not. For each scheduler, from the servers' ledger:

- the time from the first request until the 400 ordinary pages are done,
  with the 1,000 names in the crawl (seeded after the ordinary hosts) and
  without them: ratio = with / without, 1.0 meaning the busy servers cost
  the others nothing; and how long each ordinary host took, first request
  to last page (median over hosts);
- the most requests either shared server had open at once.

Schedulers: ``frontier`` (the project's defaults, ``FRONTIER_IP_CONCURRENCY=2``,
every name its own registered domain) and ``scrapy`` (vanilla Scrapy's
scheduler: it knows names, not servers). Both resolve through the web's DNS
server; no packet leaves the machine.

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
    "CONCURRENT_REQUESTS": 64,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
    "DOWNLOAD_DELAY": 0.25,
    "DOWNLOAD_DELAY_JITTER": 0,
    "ROBOTSTXT_OBEY": False,
    "LOG_LEVEL": "INFO",
    "PROMETHEUS_ENABLED": False,
    "WARC_ENABLED": False,
}
SCHEDULERS: dict[str, dict[str, Any]] = {
    "frontier": {"FRONTIER_IP_CONCURRENCY": 2},
    "scrapy": SCRAPY_SCHEDULER,
}
TARGET = 1.1
SERVERS = 2
NAME_SECONDS = 0.1
PAGE_SECONDS = 0.05
ORDINARY = 50
PAGES = 8


def build_web(names: int) -> Web:
    """``names`` one-page names on two shared addresses, and the ordinary hosts."""
    hosts = [Host(f"n{i:04d}.test", share=f"server{i % SERVERS}",
                  pages={"/": links_to(delay=NAME_SECONDS)}) for i in range(names)]
    for i in range(ORDINARY):
        pages = {"/": links_to(*(f"/p/{k}" for k in range(1, PAGES)), delay=PAGE_SECONDS)}
        pages |= {f"/p/{k}": links_to("/", delay=PAGE_SECONDS) for k in range(1, PAGES)}
        hosts.append(Host(f"o{i:03d}.test", pages=pages))
    return Web(hosts)


def seeds(web: RealWebProcess, names: int) -> list[str]:
    """The ordinary hosts' roots, then the names': the engine takes seeds one at
    a time (a few ms each), so seeding the names first would delay the
    ordinary hosts by the seeding alone, whatever the scheduler. Seeded after,
    the names arrive while the ordinary hosts crawl, and compete with them."""
    return ([web.url(f"o{i:03d}.test") for i in range(ORDINARY)]
            + [web.url(f"n{i:04d}.test") for i in range(names)])


def one_crawl(scheduler: str, names: int, web: RealWebProcess, root: Path) -> dict[str, Any]:
    """Crawl the web once; what its servers saw."""
    workdir = Path(tempfile.mkdtemp(prefix=f"{scheduler}-", dir=root))
    web.reset()
    settings = {**realweb_settings(web.nameserver), **COMMON, **SCHEDULERS[scheduler],
                "CLOSESPIDER_TIMEOUT": 600}
    result = run_crawl(None, seeds(web, names), workdir, settings, timeout=900)
    shutil.rmtree(workdir, ignore_errors=True)
    if result.returncode != 0:
        raise RuntimeError(f"{scheduler} crawl failed:\n{result.log[-3000:]}")
    ledger = web.ledger()
    start = min(r.arrival for r in ledger)
    ordinary = ledger.where(lambda r: (r.host or "").startswith("o"))
    spans = sorted(max(r.done or r.arrival for r in reqs) - min(r.arrival for r in reqs)
                   for reqs in (ledger.for_host(f"o{i:03d}.test") for i in range(ORDINARY)))
    shared = {web.address(f"n{i:04d}.test") for i in range(min(names, SERVERS))}
    return {
        "host_span_s": median(spans),
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
                              f"host span {r['host_span_s']:.2f} s, ordinary done "
                              f"{r['ordinary_done_s']:.2f} s "
                              f"({r['ordinary_pages']} pages), server max in flight "
                              f"{r['server_max_in_flight']}, wall {r['wall_s']:.1f} s",
                              flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    report = Report("ipscope", "python -m bench.ipscope", args.runs, args.quick)
    rows, ratios, conc = [], {}, {}
    for name in SCHEDULERS:
        w, wo = runs[(name, True)], runs[(name, False)]
        done = [r["ordinary_done_s"] for r in w]
        done0 = [r["ordinary_done_s"] for r in wo]
        ratios[name] = median(done) / median(done0)
        conc[name] = max(r["server_max_in_flight"] for r in w)
        rows.append([name, f"{median(done):.2f} ({spread(done)})",
                     f"{median(done0):.2f} ({spread(done0)})", f"**{ratios[name]:.2f}x**",
                     f"{median([r['host_span_s'] for r in w]):.2f} / "
                     f"{median([r['host_span_s'] for r in wo]):.2f}",
                     str(conc[name]), "/".join(str(r["ordinary_pages"]) for r in w),
                     f"{median([r['wall_s'] for r in w]):.1f}"])
    report.tables.append(Table(
        f"{names} names on {SERVERS} servers + {ORDINARY} ordinary hosts: seconds until the "
        f"{ORDINARY * PAGES} ordinary pages are done, from the first request (median, min-max)",
        ["scheduler", "with the names", "without", "ratio",
         "one ordinary host, median (with / without)", "a shared server's max in flight",
         "ordinary pages fetched", "wall s (with)"], rows))
    frontier_vs = median([r["ordinary_done_s"] for r in runs[("frontier", True)]]) / median(
        [r["ordinary_done_s"] for r in runs[("scrapy", True)]])
    report.checks += [
        Check("frontier: ordinary pages done, with names / without",
              f"{ratios['frontier']:.2f}x", f"<= {TARGET}x", ratios["frontier"] <= TARGET),
        Check("frontier: a shared server's max in flight", str(conc["frontier"]), "<= 2",
              conc["frontier"] <= 2),
        Check("frontier: every name fetched once",
              "/".join(str(r["names_done"]) for r in runs[("frontier", True)]),
              f"{names} each run", all(r["names_done"] == names
                                       for r in runs[("frontier", True)])),
        Check("scrapy: ordinary pages done, with names / without",
              f"{ratios['scrapy']:.2f}x (server max in flight {conc['scrapy']})",
              "(baseline: no notion of servers)", None),
        Check("ordinary pages done, with the names: frontier / scrapy",
              f"{frontier_vs:.2f}", "(below 1: the frontier sooner)", None),
    ]
    report.notes.append(
        f"Settings: CONCURRENT_REQUESTS=64, CONCURRENT_REQUESTS_PER_DOMAIN=2, "
        "DOWNLOAD_DELAY=0.25 (no jitter), ROBOTSTXT_OBEY=False, WARC off; names answer after "
        f"{NAME_SECONDS:g} s, ordinary pages after {PAGE_SECONDS:g} s; every name is its "
        "own registered domain, so only the IP scope groups them. The web is the tests' "
        "real-socket web (tests/realweb), one process for DNS and every server, on loopback.")
    report.raw = {f"{s}/{'names' if w else 'nonames'}": v for (s, w), v in runs.items()}
    finish(report, args, started)
    return report


if __name__ == "__main__":
    main()
