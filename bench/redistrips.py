"""Where a crawl's Redis work goes: round trips and script commands per page.

A diagnosis, not a comparison (so not in ``run_all``): one crawl of the small
simulated web (``bench.vanilla``'s settings, 100 hosts) on a private
redis-server, watched with MONITOR. Each top-level command is counted by
name (EVALSHA by the script it runs, named by the SHA-1 of the project's Lua
sources); each command a script runs is counted under that script (MONITOR
lists them right after the EVALSHA that ran them: Redis runs one at a time).
Per page served, robots.txt included; then the server's own time per page by
command (INFO commandstats: execution only, not reading requests or writing
answers).

``--web shared`` crawls the real-socket web instead (``tests/realweb``:
names answered by its own DNS server, servers on their own loopback
addresses), ``--hosts`` names sharing ``--addresses`` addresses, ten pages
each, robots.txt allowing all: the address gate (the IP scope), its DNS
jobs and joins run, which the simulated web's proxy skips.

    python -m bench.redistrips [--web small|shared] [--hosts N] [--addresses N]
                               [--delay SECONDS] [--no-monitor] [--dump FILE]
                               [--set NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from bench import vanilla
from bench.common import private_redis
from crawler.frontier.store import script_source
from tests.crawl_runner import realweb_settings, run_crawl
from tests.realweb import Host, Page, RealWebProcess, Web, links_to

LUA = Path(__file__).resolve().parent.parent / "crawler" / "frontier" / "lua"
#: A web to crawl: its proxy (None: reached directly), seeds, pages served, settings.
WebUnderTest = tuple[str | None, list[str], Callable[[], int], dict[str, Any]]


def script_names() -> dict[str, str]:
    """The first 8 hex digits of each script's SHA-1, to its name."""
    names = {}
    for path in LUA.glob("*.lua"):
        names[hashlib.sha1(script_source(path.stem).encode()).hexdigest()[:8]] = path.stem
    return names


class Watch:
    """MONITOR in a thread: top-level commands, and commands inside each script."""

    def __init__(self, url: str, dump: Path | None = None) -> None:
        self.top: Counter[str] = Counter()
        self._dump = dump.open("w") if dump is not None else None
        self.inside: Counter[str] = Counter()
        self.inside_by_name: Counter[tuple[str, str]] = Counter()
        self._script = "?"
        self._client = redis.Redis.from_url(url)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._stop = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        try:
            with self._client.monitor() as monitor:
                for event in monitor.listen():
                    if self._stop.is_set():
                        return
                    self._count(event)
        except redis.ConnectionError:
            return  # the server went away with the bench

    def _count(self, event: dict[str, Any]) -> None:
        if self._dump is not None:
            self._dump.write(f"{event.get('client_type')} {event['command'][:300]}\n")
        words = event["command"].split()
        if not words:
            return
        name = words[0].upper()
        if event.get("client_type") == "lua":
            self.inside[self._script] += 1
            self.inside_by_name[self._script, name] += 1
        elif name == "EVALSHA" and len(words) > 1:
            self._script = words[1][:8]
            self.top[f"EVALSHA {self._script}"] += 1
        else:
            self.top[name] += 1


@contextmanager
def web_of_kind(args: argparse.Namespace) -> Iterator[WebUnderTest]:
    """The web to crawl: (proxy URL or None, seeds, pages served so far, crawl settings)."""
    if args.web == "small":
        spec = {**vanilla.WEBS["small"], "n_hosts": args.hosts}
        with vanilla.pinned_web(spec) as sim:
            yield sim.proxy_url, sim.web.seed_urls(), lambda: len(sim.ledger().entries), {}
        return
    hosts = [Host(f"n{i:03d}.s{i % args.addresses}.test", share=f"ip{i % args.addresses}",
                  pages=ten_pages()) for i in range(args.hosts)]
    with RealWebProcess(Web(hosts)) as web:
        os.sched_setaffinity(web.pid, {vanilla.WEB_CORE})
        yield (None, [web.url(host.name) for host in hosts], lambda: len(web.ledger()),
               {**realweb_settings(web.nameserver), "ADDRESS_GUARD_ALLOW": "127.0.0.0/8",
                "PROMETHEUS_ENABLED": False})


def ten_pages() -> dict[str | bytes, Page]:
    """``/`` linking to ``/1`` ... ``/9``, each linking back to ``/``."""
    pages: dict[str | bytes, Page] = {"/": links_to(*(f"/{k}" for k in range(1, 10)))}
    pages.update({f"/{k}": links_to("/") for k in range(1, 10)})
    return pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--web", choices=("small", "shared"), default="small",
                        help="the simulated web (default), or the real-socket web where "
                        "names share addresses")
    parser.add_argument("--addresses", type=int, default=10,
                        help="--web shared: how many addresses the names share")
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--dump", type=Path, metavar="FILE",
                        help="write every command MONITOR saw to FILE (script commands "
                        "marked lua)")
    parser.add_argument("--no-monitor", action="store_true",
                        help="only the server's time per command (MONITOR slows every command)")
    parser.add_argument("--delay", type=float, default=vanilla.COMMON["DOWNLOAD_DELAY"],
                        help="DOWNLOAD_DELAY (bench.throughput's web: 0.05)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a crawl setting (repeatable), e.g. FRONTIER_RESERVE_SECONDS=10")
    args = parser.parse_args()
    os.sched_setaffinity(0, {vanilla.CRAWL_CORE})
    names = script_names()
    settings = {**vanilla.COMMON, "DOWNLOAD_DELAY": args.delay,
                **dict(item.split("=", 1) for item in args.set)}
    with private_redis() as url, web_of_kind(args) as (proxy, seeds, served, extra):
        watch = Watch(url, args.dump)
        if not args.no_monitor:
            watch.start()
        else:  # every command's time, by script: the slow log at a threshold of 0
            admin = redis.Redis.from_url(url)
            admin.config_set("slowlog-log-slower-than", 0)
            admin.config_set("slowlog-max-len", 1_000_000)
        workdir = Path(tempfile.mkdtemp(prefix="bench-redistrips-"))
        result = run_crawl(proxy, seeds, workdir,
                           {**settings, **extra, "REDIS_URL": url,
                            "JOBDIR": str(workdir / "job")},
                           timeout=900)
        watch.stop()
        pages = served()
        stats = redis.Redis.from_url(url).info("commandstats")
        slow = redis.Redis.from_url(url).slowlog_get(-1) if args.no_monitor else []
    if result.returncode != 0:
        raise SystemExit(f"the crawl failed:\n{result.log[-3000:]}")

    def named(key: str) -> str:
        head, _, sha = key.partition(" ")
        return f"{head} {names.get(sha, sha)}" if sha else key

    top, inside = sum(watch.top.values()) / pages, sum(watch.inside.values()) / pages
    print(f"{pages} pages served: {top:.1f} round trips and {top + inside:.1f} Redis commands "
          f"a page ({inside:.1f} of them inside scripts)")
    print("\nround trips per page (top-level commands)")
    for key, n in watch.top.most_common(20):
        print(f"{n / pages:8.2f}  {named(key)}")
    print("\ncommands run inside scripts, per page")
    for sha, n in watch.inside.most_common(12):
        print(f"{n / pages:8.2f}  {names.get(sha, sha)}")
    print("\nthe commands of the six busiest scripts, per page")
    for sha, _ in watch.inside.most_common(6):
        mine = [(name, n) for (script, name), n in watch.inside_by_name.items() if script == sha]
        line = ", ".join(f"{name} {n / pages:.2f}" for name, n in sorted(mine, key=lambda x: -x[1]))
        print(f"  {names.get(sha, sha)}: {line}")
    print("\nRedis time per page, by command (us; EVALSHA includes its scripts' commands)")
    times = sorted(((v["usec"] / pages, k.removeprefix("cmdstat_")) for k, v in stats.items()),
                   reverse=True)
    for usec, name in times[:12]:
        print(f"{usec:8.1f}  {name}")
    print("\nthe crawl's own counts of claims, leases and of the start gate")
    for name, value in re.findall(r"'(frontier/(?:claims|leases|pacing)/[\w/]+)': (\d+)",
                                  result.log):
        print(f"{int(value) / pages:8.2f}  {name}")
    if slow:
        by_script: Counter[str] = Counter()
        calls: Counter[str] = Counter()
        for entry in slow:
            words = entry["command"].split()
            key = named(f"EVALSHA {words[1].decode()[:8]}") if words[0].upper() == b"EVALSHA" \
                else words[0].decode().upper()
            by_script[key] += entry["duration"]
            calls[key] += 1
        print("\nRedis time per page, by script (us; the slow log), and per call")
        for key, usec in by_script.most_common(12):
            print(f"{usec / pages:8.1f}  {key}  ({usec / calls[key]:.1f} per call)")


if __name__ == "__main__":
    main()
