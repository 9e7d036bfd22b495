"""Redis CPU per URL of the frontier's scripts: admit, then claim and release.

A diagnosis, not a comparison with another crawler (so not in ``run_all``):
how much of a Redis server's CPU a URL's way through the frontier costs,
measured with the server alone on core 0 and this process on core 1, so
that nothing else on the machine lands in the server's time. Each run admits
6,000 URLs of 300 hosts (20 a call, as a page's links come), then claims 16
at a time and releases what it claimed until the frontier is empty; the
server's CPU (INFO cpu) is read around each phase. The domain scope is on
(2 a domain, 3 hosts a domain), as it is by default.

``--against PATH`` runs the same measurement, interleaved run by run, with
the scripts of another checkout (``git worktree add PATH REV``), and prints
the ratios: a change to the Lua scripts is priced side by side, in one run.

    python -m bench.scriptcpu [--runs N] [--against PATH]

What this taught (2026-12-04): a script's cost is its commands, about a
microsecond each from Lua; reading a record whole (HGETALL into a Lua table)
to save a few HGETs costs more than it saves.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import redis

from bench.common import embedded_redis_binary, private_redis
from crawler.frontier.embedded import MEMORY_FLAGS

URLS, HOSTS, BATCH, CLAIM = 6000, 300, 20, 16
SERVER_CORE, CLIENT_CORE = 0, 1
#: What the embedded frontier's server runs with (crawler/frontier/embedded.py).
EMBEDDED_FLAGS = ("--appendonly", "yes", "--appendfsync", "everysec", *MEMORY_FLAGS)


def server_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def one_run(url: str, namespace: str) -> dict[str, float]:
    """One pass of every URL through the frontier: server CPU per URL, by phase."""
    from crawler.frontier.values import Release
    from tests.frontier_harness import Harness, admission

    admin = redis.Redis.from_url(url)
    h = Harness(url, namespace, concurrency=4, delay_ms=0, domain_concurrency=2)
    try:
        f = h.frontier
        urls = [admission(f"http://w{i % HOSTS}.d{i % HOSTS // 3}.test/p{i}") for i in range(URLS)]
        c0 = server_cpu(admin)
        for k in range(0, len(urls), BATCH):
            h.run(f.admit(urls[k:k + BATCH]))
        c1 = server_cpu(admin)
        done = 0
        while leases := h.run(f.claim(CLAIM, "w")).leases:
            h.run(f.release([Release(lease.host, lease.fingerprint, "done")
                             for lease in leases], "w"))
            done += len(leases)
        c2 = server_cpu(admin)
    finally:
        h.close()
    if done != URLS:
        raise SystemExit(f"{done} of {URLS} URLs went through the frontier")
    return {"admit_us": (c1 - c0) * 1e6 / URLS, "claim_release_us": (c2 - c1) * 1e6 / URLS}


def run_side(checkout: Path, url: str, namespace: str) -> dict[str, float]:
    """:func:`one_run` with ``checkout``'s code and scripts, in a child process."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run(
        [sys.executable, "-m", "bench.scriptcpu", "--one", url, namespace],
        cwd=checkout, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--against", type=Path, metavar="PATH",
                        help="another checkout whose scripts to compare with")
    parser.add_argument("--server", choices=("plain", "embedded"), default="embedded",
                        help="the server's flags: the embedded frontier's (append-only "
                             "file, every second) or none")
    parser.add_argument("--one", nargs=2, metavar=("URL", "NAMESPACE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        os.sched_setaffinity(0, {CLIENT_CORE})
        print(json.dumps(one_run(*args.one)))
        return
    here = Path(__file__).resolve().parent.parent
    sides = {"this": here, **({"against": args.against.resolve()} if args.against else {})}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    flags = EMBEDDED_FLAGS if args.server == "embedded" else ()
    with private_redis(embedded_redis_binary(), flags) as url:
        pid = int(redis.Redis.from_url(url).info("server")["process_id"])
        os.sched_setaffinity(pid, {SERVER_CORE})
        for run in range(args.runs):
            order = list(sides) if run % 2 == 0 else list(reversed(sides))
            for name in order:
                results[name].append(run_side(sides[name], url, f"cpu{run}{name}"))
                print(f"run {run + 1}/{args.runs} {name:8s} {results[name][-1]}", flush=True)
    print(f"\nRedis CPU per URL, medians of {args.runs} (us)")
    medians = {name: {k: statistics.median(r[k] for r in runs) for k in runs[0]}
               for name, runs in results.items()}
    for name, m in medians.items():
        print(f"  {name:8s} admit {m['admit_us']:6.1f}   "
              f"claim + release {m['claim_release_us']:6.1f}")
    if args.against:
        this, other = medians["this"], medians["against"]
        print(f"  this / against: admit {this['admit_us'] / other['admit_us']:.2f}x, "
              f"claim + release {this['claim_release_us'] / other['claim_release_us']:.2f}x")


if __name__ == "__main__":
    main()
