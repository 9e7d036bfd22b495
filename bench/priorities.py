"""Priorities under a budget: does a 100-page budget buy a host's most linked pages?

A web of real sockets (``tests/realweb``) of four hosts built alike: the home
page links to 10 sections, each section to 10 lists, each list first to 10 of
the host's 100 "top" pages (a navigation block: picked at random, so each top
page has about 10 inlinks) and then to 20 leaves of its own (one inlink
each). The top pages are the 100 most linked, and they sit three links
deep, where breadth-first reaches them last. Each host's first 100 page
requests (robots.txt aside), from the servers' ledger, are its budget; the
measure is how many of them were top pages.

Sides:

- ``inlinks``: the project with ``BUDGET_HOST_PAGES=100``, under which
  ``FRONTIER_INLINK_PRIORITY`` is on: each link found to a queued URL raises
  it by one priority (one depth level);
- ``breadth-first``: the same with ``FRONTIER_INLINK_PRIORITY=False``
  (priority by depth alone, ``DEPTH_PRIORITY=1``);
- ``vanilla``: the bare Scrapy spider of ``bench/vanilla_spider.py`` (Scrapy's
  scheduler, its default order, stock ``LinkExtractor``), stopped after
  ``CLOSESPIDER_PAGECOUNT`` pages; it resolves the web's names through the
  project's resolver pointed at the web's DNS server (nothing else of the
  project), so no name goes to the machine's resolver.

All: ``CONCURRENT_REQUESTS_PER_DOMAIN=2``, ``DOWNLOAD_DELAY=0.05``, robots.txt
obeyed (every host allows all), WARC off; the project's learning off
(``LEARN_ENABLED=False``): the web's list pages are alike by design, and
learning would refuse them as a trap before they are fetched (issue 39 is
about that rule), which is not what this measures.

    python -m bench.priorities [--quick] [--runs N]
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import (
    REPO,
    Check,
    Report,
    Table,
    finish,
    median,
    parse_args,
    python,
    rotated,
    spread,
)
from tests.crawl_runner import realweb_settings, run_crawl
from tests.realweb import Host, RealWebProcess, Web, links_to
from tests.realweb.sites import ALLOW_ALL

HOSTS = 4
SECTIONS, LISTS, TOPS_PER_LIST, LEAVES, TOPS = 10, 10, 10, 20, 100
BUDGET = 100
COMMON: dict[str, Any] = {
    "CONCURRENT_REQUESTS": 32,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
    "DOWNLOAD_DELAY": 0.05,
    "ROBOTSTXT_OBEY": True,
    "LOG_LEVEL": "INFO",
}
SIDES = ("inlinks", "breadth-first", "vanilla")


def build_site(name: str, rng: random.Random) -> tuple[Host, Counter[str]]:
    """One host of the web, and the inlinks of each of its pages."""
    pages: dict[str, Any] = {}
    inlinks: Counter[str] = Counter()

    def page(path: str, *links: str) -> None:
        pages[path] = links_to(*links)
        inlinks.update(links)

    sections = [f"/s{i}" for i in range(SECTIONS)]
    page("/", *sections)
    for s in sections:
        lists = [f"{s}/l{j}" for j in range(LISTS)]
        page(s, *lists)
        for lst in lists:
            tops = [f"/top/{t}" for t in rng.sample(range(TOPS), TOPS_PER_LIST)]
            leaves = [f"{lst}/p{k}" for k in range(LEAVES)]
            page(lst, *tops, *leaves)
            for leaf in leaves:
                page(leaf)
    for t in range(TOPS):
        page(f"/top/{t}")
    return Host(name, robots=ALLOW_ALL, pages=pages), inlinks


def build_web(seed: int = 7) -> tuple[Web, dict[str, set[bytes]]]:
    """The web, and each host's 100 most linked pages."""
    rng = random.Random(seed)
    hosts, top = [], {}
    for h in range(HOSTS):
        name = f"site{h}.test"
        host, inlinks = build_site(name, rng)
        hosts.append(host)
        top[name] = {path.encode() for path, _ in inlinks.most_common(TOPS)}
    return Web(hosts), top


def _vanilla(web: RealWebProcess, workdir: Path) -> int:
    seeds = workdir / "seeds.txt"
    seeds.write_text("".join(f"{web.url(f'site{h}.test')}\n" for h in range(HOSTS)))
    settings = {
        **COMMON, "CLOSESPIDER_PAGECOUNT": 3 * BUDGET * HOSTS,
        "TWISTED_DNS_RESOLVER": "crawler.dns.CrawlResolver",
        **realweb_settings(web.nameserver),
    }
    command = [python(), "-m", "scrapy", "runspider",
               str(REPO / "bench" / "vanilla_spider.py"), "-a", f"seeds={seeds}"]
    for name, value in settings.items():
        command += ["-s", f"{name}={value}"]
    with (workdir / "crawl.log").open("w") as log:
        return subprocess.run(command, cwd=workdir, stdout=subprocess.DEVNULL, stderr=log,
                              timeout=900, check=False).returncode


def one_crawl(side: str, web: RealWebProcess, top: dict[str, set[bytes]], root: Path
              ) -> dict[str, Any]:
    """Crawl once; per host, how many of its first 100 pages were top pages."""
    workdir = Path(tempfile.mkdtemp(prefix=f"{side}-", dir=root))
    web.reset()
    started = time.monotonic()
    if side == "vanilla":
        code, log = _vanilla(web, workdir), (workdir / "crawl.log").read_text
    else:
        settings = {**realweb_settings(web.nameserver), **COMMON, "WARC_ENABLED": False,
                    "LEARN_ENABLED": False,
                    "PROMETHEUS_ENABLED": False, "BUDGET_HOST_PAGES": BUDGET,
                    "ADDRESS_GUARD_ALLOW": "127.0.0.0/8", "CLOSESPIDER_TIMEOUT": 600,
                    "FRONTIER_INLINK_PRIORITY": side == "inlinks"}
        result = run_crawl(None, [web.url(f"site{h}.test") for h in range(HOSTS)], workdir,
                           settings, timeout=900)
        code, log = result.returncode, lambda: result.log
    seconds = time.monotonic() - started
    if code != 0:
        raise RuntimeError(f"{side} crawl failed:\n{log()[-3000:]}")
    shutil.rmtree(workdir, ignore_errors=True)
    ledger = web.ledger()
    shares, fetched = [], []
    for name, wanted in top.items():
        pages = [r.target for r in sorted(ledger.for_host(name), key=lambda r: r.arrival)
                 if r.target != b"/robots.txt"]
        first = pages[:BUDGET]
        fetched.append(len(pages))
        shares.append(sum(1 for t in first if t in wanted) / BUDGET)
    return {"top_share": median(shares), "shares": shares, "pages": fetched,
            "wall_s": seconds}


def main(argv: list[str] | None = None) -> Report:
    args = parse_args(__doc__.splitlines()[0], argv)
    started = time.monotonic()
    web_spec, top = build_web()
    root = Path(tempfile.mkdtemp(prefix="bench-priorities-"))
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    try:
        with RealWebProcess(web_spec, startup_timeout=120) as web:
            for run in range(args.runs):
                for side in rotated(list(SIDES), run):
                    r = one_crawl(side, web, top, root)
                    runs[side].append(r)
                    print(f"run {run + 1}/{args.runs} {side:14} top pages in the first "
                          f"{BUDGET}: {json.dumps(r['shares'])}, pages per host "
                          f"{r['pages']}, {r['wall_s']:.1f} s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    report = Report("priorities", "python -m bench.priorities", args.runs, args.quick)
    share = {side: median([r["top_share"] for r in runs[side]]) for side in SIDES}
    rows = [[side, f"**{share[side]:.0%}** ({spread([r['top_share'] for r in runs[side]])})",
             "/".join(str(min(p)) for p in (r["pages"] for r in runs[side])),
             f"{median([r['wall_s'] for r in runs[side]]):.1f}"] for side in SIDES]
    report.tables.append(Table(
        f"{HOSTS} hosts of {1 + SECTIONS + SECTIONS * LISTS * (1 + LEAVES) + TOPS} pages, the "
        f"{TOPS} most linked three links deep: share of them in each host's first {BUDGET} "
        "page requests (median over hosts, then runs; min-max of runs)",
        ["side", "top pages in the budget", "fewest pages a host served (per run)", "wall s"],
        rows))

    def ratio(a: str, b: str) -> str:
        return f"{share[a] / share[b]:.2f}x" if share[b] else "(baseline fetched none)"

    report.checks += [
        Check("inlinks / breadth-first, top pages in a 100-page budget",
              ratio("inlinks", "breadth-first"), "> 1 (the most linked first)",
              share["inlinks"] > share["breadth-first"]),
        Check("inlinks / vanilla Scrapy", ratio("inlinks", "vanilla"), "(baseline)", None),
        Check("inlinks: a host's budget held",
              "/".join(str(max(r["pages"])) for r in runs["inlinks"]), f"{BUDGET} pages",
              all(max(r["pages"]) == BUDGET for r in runs["inlinks"])),
    ]
    report.notes.append(
        "Each inlink raises a queued URL by one priority, as much as one depth level "
        "(DEPTH_PRIORITY=1): a page three links deep goes before the pages one level up "
        "once it has three more inlinks than they.")
    report.raw = runs
    finish(report, args, started)
    return report


if __name__ == "__main__":
    main()
