"""Chaos soak: three workers on one Redis crawl a misbehaving web while a driver
kills them, stops them and restarts Redis; then the ledger, the frontier and
the WARC files are checked.

    python -m bench.soak                 # 2,000 hosts, about 5-10 min on 2 cores
    python -m bench.soak --repeat 3      # three soaks in a row, one table each
    python -m bench.soak --scenario short   # the CI variant (tests/test_soak.py)

The web (``tests.simweb``, seed 9) has every misbehaviour it knows: robots.txt
answering 5xx, 429, hanging, redirecting (chains and loops), oversized, with a
BOM or as HTML; pages answering 429 with Retry-After (seconds and dates), 503,
hanging, resetting, trickling, redirecting in loops, calendar and session-id
traps, 1-3 MiB and 50 MiB bodies, and hosts whose pages link to loopback,
private and link-local addresses. Every request stays on 127.0.0.1: workers
reach every host through the web's proxy and resolve names with a
loopback-only resolver.

The chaos (``scenario.Chaos``): a random worker is SIGKILLed every so often
and started again a few seconds later; another is sent SIGTERM and started
again once it has stopped; Redis (append-only) is stopped and started again
once. The checks (``checks.py``) then say, from the server's ledger and the
frontier: every reachable allowed page done or dead with a reason, no URL
lost, duplicate fetches within the URLs leased at the kills, no request robots
forbade or to a host whose robots.txt was unreachable, no Crawl-delay,
Retry-After or per-host concurrency violation, no request to a blocked
address, every WARC file valid.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from bench.soak import checks
from bench.soak.chaos import ChaosDriver, Event, Worker
from bench.soak.scenario import SOAK_MIX, Scenario
from crawler.frontier.admin import FrontierAdmin
from crawler.frontier.keys import Keys
from crawler.partition import part_of_url
from tests.redis_server import RedisServer, free_port
from tests.simweb import SimWebProcess

NAMESPACE = "soak"
PARTITIONS = 16


@dataclass
class SoakResult:
    """The table of one soak and what it is made of."""

    scenario: Scenario
    rows: list[checks.Row]
    events: list[Event]
    seconds: float
    requests: int

    @property
    def passed(self) -> bool:
        return all(row.ok is not False for row in self.rows)

    def table(self) -> str:
        kills = sum(e.what == "SIGKILL" for e in self.events)
        terms = sum(e.what == "SIGTERM" for e in self.events)
        redis_restarts = sum(e.what == "redis-restart" for e in self.events)
        stops = sum(e.what == "SIGSTOP" for e in self.events)
        joins = sum(e.what == "join" for e in self.events)
        extra = (f"{stops} SIGSTOP, " if stops else "") + (f"{joins} joined, " if joins else "")
        head = (f"soak {self.scenario.name}: {self.scenario.hosts} hosts, "
                f"{self.scenario.workers} workers, {self.requests} requests in "
                f"{self.seconds:.0f} s; {kills} SIGKILL, {terms} SIGTERM, {extra}"
                f"{redis_restarts} Redis restart -> {'PASS' if self.passed else 'FAIL'}")
        width = max(len(r.check) for r in self.rows)
        lines = [head, f"| {'check':{width}} | measured | target | |",
                 f"| {'-' * width} | --- | --- | --- |"]
        for r in self.rows:
            mark = "info" if r.ok is None else ("ok" if r.ok else "FAIL")
            lines.append(f"| {r.check:{width}} | {r.measured} | {r.target} | {mark} |")
        return "\n".join(lines)


def split_seeds(seeds: list[str], parts: int) -> list[list[str]]:
    """One seed list per worker, split by the frontier's hash (as ``scrapy partition``)."""
    out: list[list[str]] = [[] for _ in range(parts)]
    for url in seeds:
        out[part_of_url(url, parts)].append(url)
    return out


@contextmanager
def soak_place(workdir: Path | None, prefix: str) -> Iterator[tuple[Path, RedisServer]]:
    """A soak's folder (``workdir``, else a temporary one, removed after) and its
    redis-server (append-only, so that a restart keeps the frontier), stopped after."""
    root = Path(workdir or tempfile.mkdtemp(prefix=prefix))
    redis_dir = tempfile.mkdtemp(prefix="soak-redis-")
    server = RedisServer(free_port(), redis_dir, appendonly=True)
    server.start()
    try:
        yield root, server
    finally:
        server.stop()
        shutil.rmtree(redis_dir, ignore_errors=True)
        if workdir is None:
            shutil.rmtree(root, ignore_errors=True)


def run(scenario: Scenario, workdir: Path | None = None,
        log: Callable[[str], None] = print) -> SoakResult:
    """One soak, start to finish; its files go to ``workdir`` (a temp dir if None)."""
    with (soak_place(workdir, "soak-") as (root, server),
          SimWebProcess(seed=scenario.seed, n_hosts=scenario.hosts, mix=SOAK_MIX,
                        pinned=scenario.pins(), hang_max=60,
                        trickle_interval=scenario.trickle_interval) as sim):
        return _soak(scenario, sim, server, root, log)


def _soak(scenario: Scenario, sim: SimWebProcess, server: RedisServer, root: Path,
          log: Callable[[str], None]) -> SoakResult:
    web = sim.web
    seeds = web.seed_urls()
    warc_dir = root / "warc"
    settings = {**scenario.settings, "REDIS_URL": server.url, "FRONTIER_NAMESPACE": NAMESPACE,
                "FRONTIER_PARTITIONS": PARTITIONS, "WARC_DIR": str(warc_dir)}
    workers = [Worker(i, part, root, settings, sim.proxy_url)
               for i, part in enumerate(split_seeds(seeds, scenario.workers))]
    keys = Keys(NAMESPACE, PARTITIONS)
    driver = ChaosDriver(scenario, workers, server, keys, log)
    seconds = driver.run()
    log(f"crawl ended after {seconds:.0f} s; checking")
    started = time.monotonic()
    ledger = sim.ledger()
    (root / "ledger.json").write_text(json.dumps(ledger.entries))
    evidence = checks.Evidence(web, ledger)
    client = redis.Redis.from_url(server.url)
    try:
        admin = FrontierAdmin(client, keys)
        wanted = checks.wanted_pages(web, seeds, evidence)
        logs = {wid.name: (wid / "crawl.log").read_text()
                for wid in root.glob("w*.*") if (wid / "crawl.log").exists()}
        server_stalls = sim.stalls()
        (root / "server-stalls.json").write_text(json.dumps(server_stalls))
        rows = [
            *checks.worker_rows([x for w in workers for x in w.exits], logs),
            *checks.completeness_rows(wanted, evidence, checks.dead_letters(admin, web)),
            *checks.frontier_rows(client, keys),
            *checks.duplicate_rows(evidence, driver.events),
            *checks.robots_rows(web, evidence),
            *checks.warc_rows(warc_dir),  # first: it recovers the killed workers' files
            *checks.pacing_rows(web, evidence, delay_floor=_delay_floor(settings),
                                concurrency=int(settings.get("CONCURRENT_REQUESTS_PER_DOMAIN",
                                                             4)),
                                archived_429=checks.answers_archived(warc_dir, web, 429),
                                kills=[e.wall for e in driver.events if e.what == "SIGKILL"],
                                server_stalls=server_stalls),
            *checks.address_rows(web, evidence),
            *checks.stall_rows(server_stalls, logs),
        ]
    finally:
        client.close()
    log(f"checked in {time.monotonic() - started:.0f} s")
    return SoakResult(scenario, rows, driver.events, seconds, len(ledger))


def _delay_floor(settings: dict[str, object]) -> float:
    """The shortest gap DOWNLOAD_DELAY allows: delay x (1 - jitter)."""
    delay = float(settings.get("DOWNLOAD_DELAY", 1.0))  # type: ignore[arg-type]
    jitter = float(settings.get("DOWNLOAD_DELAY_JITTER", 0.5))  # type: ignore[arg-type]
    return delay * (1 - jitter)
