"""``python -m tests.simweb demo``: watch a real crawl, offline.

Starts the simulated web, runs ``scrapy crawl broad`` against it exactly as
an operator would (through the web's proxy), shows the crawl's own log, then
prints what the web's ledger saw: requests, hosts, pages per second, and
whether any robots rule or page was broken. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="start the simulated web and crawl it with `scrapy crawl broad`"
    )
    parser.add_argument("--hosts", type=int, default=300, help="hosts in the web")
    parser.add_argument("--seeds", type=int, default=100, help="hosts given as seeds")
    parser.add_argument("--seed", type=int, default=1, help="the web's random seed")
    parser.add_argument("--mix", default="default", help="host mix (default, clean, e2e)")
    parser.add_argument("--depth", type=int, default=3, help="DEPTH_LIMIT of the crawl")
    parser.add_argument("--delay", type=float, default=0.25, help="DOWNLOAD_DELAY per host")
    parser.add_argument("--timeout", type=float, default=10, help="DOWNLOAD_TIMEOUT")
    parser.add_argument("--out", type=Path, default=Path("output/demo"),
                        help="output folder: job/ (the frontier, reset each run), warc/ "
                             "(the archive, kept), pages.jsonl")
    parser.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    # Imported here: `serve` imports this module too and needs none of it.
    from tests.crawl_runner import crawl_command, proxy_env
    from tests.simweb.process import SimWebProcess

    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    # The demo's frontier (its embedded Redis): job state only, so a demo always
    # starts afresh by deleting it. Its archive is kept apart, in out/warc, and
    # never deleted: each run adds its files next to the earlier runs' ones.
    jobdir = out / "job"
    warc = out / "warc"
    shutil.rmtree(jobdir, ignore_errors=True)
    before = set(warc.glob("*.warc.gz"))
    with SimWebProcess(seed=args.seed, n_hosts=args.hosts, mix=args.mix, hang_max=60) as sim:
        seeds = out / "seeds.txt"
        seeds.write_text("".join(f"{u}\n" for u in sim.web.seed_urls(args.seeds)))
        print(f"Simulated web: {args.hosts} hosts on {sim.proxy_url} (an HTTP proxy); "
              f"crawling from {args.seeds} seeds in {seeds}, following links to every "
              "host (SCOPE=any)\n", flush=True)
        # A demo should end in minutes: hosts whose robots.txt is unreachable
        # are parked after one try (not retried for ~3 h), broken hosts after
        # one breaker opening, and retries wait seconds, not minutes.
        # The demo crawls the whole simulated web from a few of its hosts: its
        # scope is every link (a crawl's default is its seeds' domains).
        settings = {"SCOPE": "any", "DEPTH_LIMIT": args.depth, "DOWNLOAD_DELAY": args.delay,
                    "DOWNLOAD_TIMEOUT": args.timeout, "LOGSTATS_INTERVAL": 10,
                    "JOBDIR": str(jobdir), "WARC_DIR": str(warc), "ROBOTS_TIMEOUT": 5,
                    "REPORT_DIR": str(out / "reports"),
                    "ROBOTS_UNREACHABLE_MAX_ATTEMPTS": 1, "BREAKER_COOLDOWN": 5,
                    "BREAKER_MAX_OPENINGS": 1, "RETRY_BACKOFF_BASE": 1.0,
                    "RETRY_AFTER_MAX": 10}
        command = crawl_command(seeds, out / "pages.jsonl", settings)
        started = time.monotonic()
        code = subprocess.run(command, env=proxy_env(sim.proxy_url), check=False).returncode
        seconds = time.monotonic() - started
        _report(sim, seconds, out)
        _report_archive(sim, warc, before)
        _report_files(out, jobdir)
    return code


def _report_files(out: Path, jobdir: Path) -> None:
    """Where the crawl's report is, and how to look at its frontier in a browser."""
    pages = sorted((out / "reports").glob("*/report.html"))
    if pages:
        print(f"Crawl report: {pages[-1]} (CSV and JSON beside it)")
    print(f"Its frontier in a browser: .venv/bin/scrapy frontier serve -s JOBDIR={jobdir}")


def _report(sim: Any, seconds: float, out: Path) -> None:
    ledger = sim.ledger()
    pages = [e for e in ledger.entries if not e["path"].startswith("/robots.txt")]
    answered = [e for e in pages if e["status"] is not None]
    # The crawler's policy: five redirects at most, the first 500 KiB of a file.
    from crawler.robots.rules import MAX_ROBOTS_BYTES
    from tests.simweb.ledger import is_robots_path
    from tests.simweb.model import DEFAULT_ROBOTS_POLICY

    policy = {**DEFAULT_ROBOTS_POLICY, "redirect-6": "allow"}
    web = sim.web
    disallowed = [e for e in pages if not is_robots_path(e["path"]) and web.host(e["host"])
                  and not web.allowed(e["host"], web.page_identity(e["host"], e["path"])[1],
                                      "BroadCrawl", robots_policy=policy,
                                      robots_max_bytes=MAX_ROBOTS_BYTES)]
    page_counts = ledger.pages(sim.web)
    repeated = sum(1 for n in page_counts.values() if n > 1)
    print(
        "\nWhat the simulated web saw:\n"
        f"  wall time            {seconds:.1f} s\n"
        f"  requests received    {len(ledger.entries)} "
        f"({len(pages)} pages, {len(ledger.entries) - len(pages)} robots.txt)\n"
        f"  pages answered       {len(answered)}  ({len(answered) / seconds:.1f} pages/s)\n"
        f"  hosts visited        {len(ledger.hosts())}\n"
        f"  robots violations    {len(disallowed)}  (pages robots.txt did not allow, RFC 9309)\n"
        f"  pages fetched twice  {repeated}  (retries of 429/503 pages and the like)\n"
        f"Items (JSON lines): {out / 'pages.jsonl'}; crawl seeds: {out / 'seeds.txt'}"
    )


def _report_archive(sim: Any, warc: Path, before: set[Path]) -> None:
    """Where this run's WARC files are, and how to get a page back from them."""
    ledger = sim.ledger()
    warcs = sorted(set(warc.glob("*.warc.gz")) - before)
    if not warcs:
        print(f"WARC archive: no new file in {warc}")
        return
    size = sum(w.stat().st_size for w in warcs) / 1e6
    earlier = f"; {len(before)} file(s) of earlier demos are kept there" if before else ""
    ok = next((e for e in ledger.entries if e["status"] == 200
               and not e["path"].startswith("/robots.txt")), None)
    example = f"http://{ok['host']}{ok['path']}" if ok else "URL"
    print(f"WARC archive: {len(warcs)} new file(s), {size:.1f} MB, with CDXJ indexes, in "
          f"{warc}{earlier}\n  a page back: .venv/bin/scrapy warc get {example} "
          f"-s WARC_DIR={warc}")
