"""The chaos soak on the real-socket web, where the address gate binds.

    python -m bench.soak.realweb            # 96 sites, 4 workers, about 2 min on 2 cores
    python -m bench.soak.realweb --short    # the CI variant (tests/test_soak.py)

The simulated web's proxy carries every request of ``python -m bench.soak``,
so its crawls never meet DNS nor the IP scope. Here every name is answered by
the web's own DNS server and served on a loopback address it shares with five
other names (``tests/realweb``: shared hosting), each address's gate allowing
``FRONTIER_IP_CONCURRENCY`` requests at once; some sites ask for a
Crawl-delay. Four workers on one Redis (append-only) crawl it while the
driver (:mod:`bench.soak.chaos`) SIGKILLs workers and starts them again,
SIGSTOPs one for 20 s (its leases run out meanwhile), adds a fifth mid-crawl,
SIGTERMs one and restarts Redis.

Then, from the web's ledger (each worker sends its own User-Agent) and the
frontier: every page of every site fetched, nothing left in the frontier,
duplicate fetches within what the struck workers held, each site's requests
at least its delay (or Crawl-delay) apart and never more than its
concurrency at once, each address never more requests at once than its gate
allows, no site silent longer than a takeover takes while it had pages left,
and every worker's exit explained.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import redis

from bench.soak import NAMESPACE, PARTITIONS, SoakResult, soak_place, split_seeds
from bench.soak.chaos import ChaosDriver, Event, Worker
from bench.soak.checks import Row, frontier_rows, leased_at_strikes, worker_rows
from bench.soak.scenario import Chaos, Scenario
from crawler.frontier.admin import FrontierAdmin
from crawler.frontier.keys import Keys
from crawler.frontier.refusals import with_examples
from tests.crawl_runner import realweb_settings
from tests.realweb import Host, RealWebProcess, Web
from tests.realweb.ledger import Ledger
from tests.realweb.sites import SLACK, chain_site, site_targets
from tests.redis_server import RedisServer

#: Pages a site has ("/" and /1 ...), and the share of them that answer slowly
#: (so that requests overlap and the address gates have something to hold).
PAGES = 20
SLOW_ANSWER = 0.25
#: Every Nth site asks for this Crawl-delay (s).
CRAWL_DELAY_EVERY, CRAWL_DELAY = 8, 1.5
DELAY, JITTER, CONCURRENCY, IP_CONCURRENCY = 0.5, 0.5, 2, 3
LEASE_S, RESERVE_S = 5.0, 3.0

SETTINGS: dict[str, Any] = {
    "DOWNLOAD_DELAY": DELAY, "DOWNLOAD_DELAY_JITTER": JITTER,
    "CONCURRENT_REQUESTS_PER_DOMAIN": CONCURRENCY, "FRONTIER_IP_CONCURRENCY": IP_CONCURRENCY,
    "FRONTIER_LEASE_SECONDS": LEASE_S, "FRONTIER_RESERVE_SECONDS": RESERVE_S,
    "FRONTIER_ADAPTIVE_FACTOR": 0, "PROMETHEUS_ENABLED": False, "LOG_LEVEL": "INFO",
    "DEPTH_LIMIT": 0,
}

FULL = Scenario(
    "realweb", hosts=96, workers=4, timeout=360, settings=SETTINGS,
    chaos=Chaos(kill_every=12, first_kill=8, restart_after=3, term_at=30,
                redis_restart_at=40, redis_down_for=3, max_kills=3,
                stop_at=14, stop_for=20, join_at=24),
)
SHORT = replace(FULL, name="realweb-short", hosts=48, workers=3, timeout=240,
                chaos=Chaos(kill_every=10, first_kill=6, restart_after=2, term_at=20,
                            redis_restart_at=26, redis_down_for=2, max_kills=1,
                            stop_at=10, stop_for=20, join_at=16))


def robots_of(i: int) -> str:
    delay = f"Crawl-delay: {CRAWL_DELAY}\n" if i % CRAWL_DELAY_EVERY == 0 else ""
    return f"User-agent: *\n{delay}Allow: /\n"


def web_of_sites(hosts: int) -> Web:
    """``hosts`` sites of :data:`PAGES` pages, six names an address, every page but
    the first answering slowly."""
    slow, addresses = frozenset(range(1, PAGES)), max(1, hosts // 6)
    return Web([Host(f"s{i}.test", robots=robots_of(i), share=f"a{i % addresses}",
                     pages=chain_site(PAGES, slow=slow, delay=SLOW_ANSWER))
                for i in range(hosts)])


def realweb_tag(worker_id: str) -> dict[str, Any]:
    """A worker names itself to the real-socket web's ledger by its User-Agent."""
    return {"USER_AGENT": worker_id}


@dataclass
class Report:
    """What the checks read: the web, its ledger, the kill times and the struck leases."""

    web: RealWebProcess
    names: list[str]
    ledger: Ledger
    events: list[Event]
    #: How long Redis was down at its restart (the driver's plan).
    redis_down_for: float


def run(scenario: Scenario = FULL, workdir: Path | None = None,
        log: Callable[[str], None] = print) -> SoakResult:
    """One soak on the real-socket web, start to finish (see the module docstring)."""
    with (soak_place(workdir, "soak-realweb-") as (root, server),
          RealWebProcess(web_of_sites(scenario.hosts)) as web):
        return _soak(scenario, web, server, root, log)


def _soak(scenario: Scenario, web: RealWebProcess, server: RedisServer, root: Path,
          log: Callable[[str], None]) -> SoakResult:
    names = [f"s{i}.test" for i in range(scenario.hosts)]
    seeds = [web.url(name) for name in names]
    settings = {**scenario.settings, **realweb_settings(web.nameserver),
                "REDIS_URL": server.url, "FRONTIER_NAMESPACE": NAMESPACE,
                "FRONTIER_PARTITIONS": PARTITIONS, "WARC_DIR": str(root / "warc")}
    workers = [Worker(i, part, root, settings, None, realweb_tag)
               for i, part in enumerate(split_seeds(seeds, scenario.workers))]
    keys = Keys(NAMESPACE, PARTITIONS)
    driver = ChaosDriver(scenario, workers, server, keys, log)
    seconds = driver.run()
    log(f"crawl ended after {seconds:.0f} s; checking")
    report = Report(web, names, web.ledger(), driver.events, scenario.chaos.redis_down_for)
    logs = {wid.name: (wid / "crawl.log").read_text()
            for wid in root.glob("w*.*") if (wid / "crawl.log").exists()}
    client = redis.Redis.from_url(server.url)
    try:
        rows = [
            *worker_rows([x for w in workers for x in w.exits], logs),
            *completeness_rows(report),
            *dead_rows(FrontierAdmin(client, keys)),
            *frontier_rows(client, keys),
            *duplicate_rows(report),
            *politeness_rows(report),
            *liveness_rows(report),
        ]
    finally:
        client.close()
    return SoakResult(scenario, rows, driver.events, seconds, len(report.ledger))


def completeness_rows(r: Report) -> list[Row]:
    """Every page of every site fetched; a page that was not is named with what
    the frontier holds of its fate."""
    wanted = set(site_targets(PAGES))
    missing = {name: sorted(t.decode() for t in wanted - set(r.ledger.targets(name)))
               for name in r.names}
    missing = {name: targets for name, targets in missing.items() if targets}
    shown = [f"{name} {targets[:3]}" for name, targets in list(missing.items())[:3]]
    return [Row("sites with a page never fetched", f"{len(missing)} {shown}".strip()
                if missing else "0", "0", not missing)]


def dead_rows(admin: FrontierAdmin) -> list[Row]:
    """No page of this web may die nor be refused: each answers in time, a
    struck worker's leases come back, robots.txt allows everything and no page
    looks like a trap. Each is shown with its reason (and a few examples)."""
    dead = list(admin.iter_dead())
    shown = [f"{d.url} {d.reason}: {d.error[:80]}" for d in dead[:3]]
    refused = with_examples(admin.client, admin.keys, admin.status(oldest=False).refused)
    said = [f"{r.reason} {r.count} {list(r.examples[:2])}" for r in refused]
    return [Row("dead letters at the end", f"{len(dead)} {shown}".strip() if dead else "0",
                "0", not dead),
            Row("URLs refused (before the frontier or at their lease)",
                f"{sum(r.count for r in refused)} {said}" if refused else "0", "0",
                not refused)]


def duplicate_rows(r: Report) -> list[Row]:
    twice = sum(len(t) - len(set(t)) for t in map(r.ledger.targets, r.names))
    held, strikes = leased_at_strikes(r.events)
    return [Row("duplicate fetches (a target twice)", str(twice),
                f"<= {held} (URLs leased at the {strikes} kills/stops)", twice <= held)]


def politeness_rows(r: Report) -> list[Row]:
    short, crowded = [], []
    for i, name in enumerate(r.names):
        floor = CRAWL_DELAY if i % CRAWL_DELAY_EVERY == 0 else DELAY * (1 - JITTER)
        arrivals = sorted(q.arrival for q in r.ledger.for_host(name))
        gaps = [b - a for a, b in pairwise(arrivals)]
        if gaps and min(gaps) < floor - SLACK:
            short.append((name, round(min(gaps), 3), floor))
        if r.ledger.max_in_flight(name) > CONCURRENCY:
            crowded.append(name)
    addresses = sorted({r.web.address(name) for name in r.names})
    most = {a: r.ledger.max_in_flight_at(a) for a in addresses}
    over = {a: n for a, n in most.items() if n > IP_CONCURRENCY}
    return [
        Row("site gaps under DOWNLOAD_DELAY x (1 - jitter) or Crawl-delay",
            f"{len(short)} {short[:3]}".strip() if short else "0", "0", not short),
        Row(f"sites with more than {CONCURRENCY} requests open at once",
            f"{len(crowded)} {crowded[:3]}".strip() if crowded else "0", "0", not crowded),
        Row(f"addresses with more than {IP_CONCURRENCY} requests open at once "
            f"({len(addresses)} addresses)", f"{len(over)} {over}" if over else
            f"0 (the busiest: {max(most.values(), default=0)})", "0", not over),
    ]


def liveness_rows(r: Report) -> list[Row]:
    """No site waits longer than a takeover takes (its worker's lease and
    reservation, plus a few seconds) between two of its requests, except while
    Redis was down."""
    bound = LEASE_S + RESERVE_S + 4
    # (the event is stamped once Redis answers again; a second of slack each side)
    outages = [(e.wall - r.redis_down_for - 1, e.wall + 1)
               for e in r.events if e.what == "redis-restart"]
    worst, where = 0.0, ""
    for name in r.names:
        arrivals = sorted(q.arrival for q in r.ledger.for_host(name))
        for a, b in pairwise(arrivals):
            if any(a <= end and b >= start for start, end in outages):
                continue  # (the restart's own wait; it is in the crawl's summary)
            if b - a > worst:
                worst, where = b - a, name
    return [Row("longest silence of a site with pages left (s)",
                f"{worst:.1f} ({where})" if where else "0", f"<= {bound:.0f}", worst <= bound)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak.realweb",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--short", action="store_true", help="the CI variant")
    parser.add_argument("--keep", type=Path, default=None, help="keep logs under this folder")
    args = parser.parse_args(argv)
    started = time.monotonic()
    result = run(SHORT if args.short else FULL, args.keep)
    print("\n" + result.table() + f"\n({time.monotonic() - started:.0f} s)\n", flush=True)
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
