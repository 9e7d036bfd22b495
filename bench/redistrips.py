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

    python -m bench.redistrips [--hosts N] [--delay SECONDS] [--no-monitor]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import redis

from bench import vanilla
from bench.common import private_redis
from crawler.frontier.store import script_source
from tests.crawl_runner import run_crawl

LUA = Path(__file__).resolve().parent.parent / "crawler" / "frontier" / "lua"


def script_names() -> dict[str, str]:
    """The first 8 hex digits of each script's SHA-1, to its name."""
    names = {}
    for path in LUA.glob("*.lua"):
        names[hashlib.sha1(script_source(path.stem).encode()).hexdigest()[:8]] = path.stem
    return names


class Watch:
    """MONITOR in a thread: top-level commands, and commands inside each script."""

    def __init__(self, url: str) -> None:
        self.top: Counter[str] = Counter()
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--no-monitor", action="store_true",
                        help="only the server's time per command (MONITOR slows every command)")
    parser.add_argument("--delay", type=float, default=vanilla.COMMON["DOWNLOAD_DELAY"],
                        help="DOWNLOAD_DELAY (bench.throughput's web: 0.05)")
    args = parser.parse_args()
    os.sched_setaffinity(0, {vanilla.CRAWL_CORE})
    names = script_names()
    spec = {**vanilla.WEBS["small"], "n_hosts": args.hosts}
    with private_redis() as url, vanilla.pinned_web(spec) as sim:
        watch = Watch(url)
        if not args.no_monitor:
            watch.start()
        else:  # every command's time, by script: the slow log at a threshold of 0
            admin = redis.Redis.from_url(url)
            admin.config_set("slowlog-log-slower-than", 0)
            admin.config_set("slowlog-max-len", 1_000_000)
        workdir = Path(tempfile.mkdtemp(prefix="bench-redistrips-"))
        result = run_crawl(sim.proxy_url, sim.web.seed_urls(), workdir,
                           {**vanilla.COMMON, "DOWNLOAD_DELAY": args.delay, "REDIS_URL": url,
                            "JOBDIR": str(workdir / "job")},
                           timeout=900)
        watch.stop()
        pages = len(sim.ledger().entries)
        stats = redis.Redis.from_url(url).info("commandstats")
        slow = redis.Redis.from_url(url).slowlog_get(-1) if args.no_monitor else []
    if result.returncode != 0:
        raise SystemExit(f"the crawl failed:\n{result.log[-3000:]}")

    def named(key: str) -> str:
        head, _, sha = key.partition(" ")
        return f"{head} {names.get(sha, sha)}" if sha else key

    print(f"{pages} pages served\n\nround trips per page (top-level commands)")
    for key, n in watch.top.most_common(20):
        print(f"{n / pages:8.2f}  {named(key)}")
    print("\ncommands run inside scripts, per page")
    for sha, n in watch.inside.most_common(12):
        print(f"{n / pages:8.2f}  {names.get(sha, sha)}")
    print("\nthe commands of the three busiest scripts, per page")
    for sha, _ in watch.inside.most_common(3):
        mine = [(name, n) for (script, name), n in watch.inside_by_name.items() if script == sha]
        line = ", ".join(f"{name} {n / pages:.2f}" for name, n in sorted(mine, key=lambda x: -x[1]))
        print(f"  {names.get(sha, sha)}: {line}")
    print("\nRedis time per page, by command (us; EVALSHA includes its scripts' commands)")
    times = sorted(((v["usec"] / pages, k.removeprefix("cmdstat_")) for k, v in stats.items()),
                   reverse=True)
    for usec, name in times[:12]:
        print(f"{usec:8.1f}  {name}")
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
