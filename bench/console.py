"""What the operator's console and the crawl reports cost a crawl.

A real ``scrapy crawl broad`` of the simulated web (600 hosts, mix "clean",
every host a seed, ``DEPTH_LIMIT=2``; ``--quick``: 200 hosts), in two ways,
interleaved, on the crawl's embedded Redis:

- ``without``: ``REPORT_ENABLED`` and ``CONSOLE_LIVE_SECONDS`` off, no console:
  what the crawl cost before them;
- ``reports``: the defaults (every download tallied, the recent fetches
  written every 5 s, the report written at the end), no console;
- ``with``: the defaults and ``scrapy frontier serve`` on the same Redis,
  with a client that reads the crawl's page, the hosts page, the busiest
  host's page and the status JSON once a second, as a person watching would
  (and more often).

pages/s = pages the server answered / first request to last answer (the
server's ledger). CPU = the crawl process plus its Redis server (the
console's own process is not the crawl's, and runs on no worker). A few
percent is within these crawls' run-to-run noise on two shared cores, so the
reports' cost per answer is also timed alone (``timeit`` of what the report
middleware does with each answer), as a share of the crawl's CPU per page.

    python -m bench.console [--quick] [--runs N]
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import (
    Check,
    Col,
    RedisUsage,
    Report,
    Table,
    child_cpu_seconds,
    finish,
    median_of,
    median_row,
    parse_args,
    python,
    rotated,
    scheduler_redis,
    usage_client,
)
from tests.crawl_runner import REPO, proxy_env, run_crawl
from tests.simweb import SimWebProcess

COMMON: dict[str, Any] = {
    "DEPTH_LIMIT": 2, "DOWNLOAD_DELAY": 0.05, "CONCURRENT_REQUESTS": 64,
    "ROBOTS_MAX_CRAWL_DELAY": 0.05, "WARC_ENABLED": False,
}
VARIANTS: dict[str, dict[str, Any]] = {
    "without": {"REPORT_ENABLED": False, "CONSOLE_LIVE_SECONDS": 0},
    "reports": {},
    "with": {},
}
PAGES = ("/", "/hosts", "/api/status")


class Watcher:
    """``scrapy frontier serve`` on a crawl's Redis, and a reader of its pages."""

    def __init__(self, redis_url: str) -> None:
        self.proc = subprocess.Popen(
            [python(), "-m", "scrapy", "frontier", "serve", "--port", "0",
             "--redis-url", redis_url, "-s", "CONSOLE_SAMPLE_SECONDS=2"],
            cwd=REPO, env=proxy_env(None), stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        line = ""
        while "console of" not in line:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                raise RuntimeError("the console did not start")
        found = re.search(r"at (http://127\.0\.0\.1:\d+)/", line)
        assert found is not None, line
        self.base = found.group(1)
        self.reads = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while not self.stop.wait(1.0):
            for page in PAGES:
                try:
                    with opener.open(self.base + page, timeout=10) as response:
                        body = response.read().decode()
                    self.reads += 1
                except OSError:
                    continue
                if page == "/hosts" and (m := re.search(r'href="(/host\?name=[^"]+)"', body)):
                    try:
                        with opener.open(self.base + m.group(1).replace("&amp;", "&"),
                                         timeout=10) as response:
                            response.read()
                        self.reads += 1
                    except OSError:
                        pass

    def close(self) -> int:
        self.stop.set()
        self.thread.join(15)
        self.proc.terminate()
        self.proc.wait(15)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        return self.reads


def one_crawl(variant: str, sim: SimWebProcess, root: Path, run: int) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"{variant}-", dir=root))
    wanted = {**COMMON, "JOBDIR": str(workdir / "job"),
              "REPORT_DIR": str(workdir / "reports"), **VARIANTS[variant]}
    with scheduler_redis(wanted, workdir / "job", f"console-{run}") as (settings, url):
        assert url is not None
        client = usage_client(url)
        watcher = Watcher(url) if variant == "with" else None
        try:
            before = RedisUsage.read(client)
            sim.reset()
            cpu_before = child_cpu_seconds()
            result = run_crawl(sim.proxy_url, sim.web.seed_urls(), workdir, settings,
                               timeout=600)
            cpu = child_cpu_seconds() - cpu_before
            usage = RedisUsage.read(client) - before
        finally:
            reads = watcher.close() if watcher is not None else 0
            client.close()
    if result.returncode != 0:
        raise RuntimeError(f"{variant} crawl failed:\n{result.log[-3000:]}")
    written = re.search(r"written in ([0-9.]+) s", result.log)
    report_s = float(written.group(1)) if written else 0.0
    shutil.rmtree(workdir, ignore_errors=True)
    entries = sim.ledger().entries
    pages = len(entries)
    span = max(e["done"] or e["arrival"] for e in entries) - min(e["arrival"] for e in entries)
    return {"requests": pages, "span_s": span, "pages_per_s": pages / span,
            "cpu_ms_per_page": (cpu + usage.cpu_s) * 1000 / pages,
            "redis_cpu_ms_per_page": usage.cpu_s * 1000 / pages,
            "commands_per_page": usage.per_page(pages)["commands_per_page"],
            "console_reads": reads, "report_s": report_s}


def per_answer_us(n: int = 50_000) -> float:
    """Microseconds the report middleware spends on one answer: the host's key,
    its tally and its recent fetches (URLs of 600 hosts, as in the crawl)."""
    from crawler.frontier.live import LiveFetches
    from crawler.middlewares.report import _site
    from crawler.reports.tally import Tally

    tally, live = Tally(), LiveFetches()
    urls = [f"http://h{i % 600:05d}.test/p/{i}" for i in range(n)]

    def answer(url: str) -> None:
        host = _site(url)
        tally.page(host, 200, "text/html", 1000, 0.01, time.time())
        live.fetched(host, url, "200", 0.01, 1000)

    began = time.perf_counter()
    for url in urls:
        answer(url)
    return (time.perf_counter() - began) / n * 1e6


def main(argv: list[str] | None = None) -> Report:
    args = parse_args(__doc__.splitlines()[0], argv)
    started = time.monotonic()
    n_hosts = 200 if args.quick else 600
    root = Path(tempfile.mkdtemp(prefix="bench-console-"))
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    try:
        with SimWebProcess(seed=7, n_hosts=n_hosts, mix="clean") as sim:
            for run in range(args.runs):
                for variant in rotated(list(VARIANTS), run):
                    r = one_crawl(variant, sim, root, run)
                    runs[variant].append(r)
                    print(f"run {run + 1}/{args.runs} {variant:8} {r['requests']} requests, "
                          f"{r['pages_per_s']:.0f}/s, {r['cpu_ms_per_page']:.2f} ms CPU/page, "
                          f"{r['commands_per_page']:.1f} Redis commands/page, "
                          f"{r['console_reads']} console reads", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def med(variant: str, key: str) -> float:
        return median_of(runs[variant], key)

    report = Report("console", "python -m bench.console", args.runs, args.quick)
    cols = [Col("requests", ".0f"), Col("pages_per_s", ".0f", spread=True),
            Col("cpu_ms_per_page", ".2f", spread=True), Col("redis_cpu_ms_per_page", ".3f"),
            Col("commands_per_page", ".1f"), Col("console_reads", ".0f"), Col("report_s", ".2f")]
    report.tables.append(Table(
        f"Crawl of {n_hosts:,} simulated hosts (medians, min-max)",
        ["", "requests", "pages/s", "CPU ms/page (crawl + Redis)", "of which Redis",
         "Redis commands/page", "console page reads", "report written in, s"],
        [median_row(v, runs[v], cols) for v in VARIANTS]))
    for side, what in (("reports", "the reports and recent fetches"),
                       ("with", "those and a console read four times a second")):
        pps = med(side, "pages_per_s") / med("without", "pages_per_s")
        cpu = med(side, "cpu_ms_per_page") / med("without", "cpu_ms_per_page")
        commands = med(side, "commands_per_page") - med("without", "commands_per_page")
        report.checks += [
            Check(f"{what} / neither: pages/s", f"{pps:.2f}x", ">= 0.97x", pps >= 0.97),
            Check(f"{what} / neither: CPU per page (crawl + Redis)", f"{cpu:.2f}x",
                  "<= 1.03x", cpu <= 1.03),
            Check(f"{what}: Redis commands per page added", f"{commands:+.2f}", "(info)",
                  None),
        ]
    micro = per_answer_us()
    share = micro / 1000 / med("without", "cpu_ms_per_page")
    report.checks.append(Check("the report middleware per answer (timeit), share of the "
                               "crawl's CPU per page", f"{micro:.1f} us = {share:.1%}",
                               "<= 3%", share <= 0.03))
    report.raw = {"runs": runs, "per_answer_us": micro}
    finish(report, args, started)
    return report


if __name__ == "__main__":
    main()
