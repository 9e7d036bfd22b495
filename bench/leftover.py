"""What reading "what is left" costs, against ``scrapy frontier status``.

A worker reads what is left in the frontier (``crawler/frontier/leftover.py``,
``lua/leftover.lua``) when it closes (for the summary) and, while the
frontier idles with URLs queued and none leased, every
``FRONTIER_WATCHDOG_INTERVAL`` (the watchdog, and whether only held work is
left). Both scan the host queues' keys and ask one script per partition
and batch of 200 hosts. The baseline is what an operator already runs on the
same frontier: ``scrapy frontier status`` (``FrontierStatus.read``, which
scans the same keys for the oldest queued URL and the capacity).

Hosts with 2 URLs each are admitted on a private redis-server (Unix socket,
the crawl's default partitions), then each read is timed ``--runs`` times,
alternating, medians reported with their ratio:

    python -m bench.leftover [--quick] [--runs N]
"""

from __future__ import annotations

import asyncio
import time

import redis
from redis.asyncio import Redis

from bench.common import Check, Report, Table, finish, median, parse_args, private_redis, spread
from crawler.frontier.keys import Keys
from crawler.frontier.leftover import LeftoverReader
from crawler.frontier.status import FrontierStatus
from crawler.frontier.store import Frontier
from crawler.frontier.values import Admission, Limits
from crawler.urls import url_fingerprint

SIZES = (10_000, 100_000)
QUICK_SIZES = (10_000,)


async def _fill(client: Redis, keys: Keys, hosts: int) -> None:
    await client.flushall()  # a private server (bench.common.private_redis), never a shared one
    frontier = Frontier(client, keys, Limits(delay_ms=0))
    chunk: list[Admission] = []
    for k in range(2):
        for i in range(hosts):
            canon = f"http://h{i}.bench.test/p/{k}"
            chunk.append(Admission(canon, f"http://h{i}.bench.test:80",
                                   url_fingerprint(canon), f'{{"u":"{canon}"}}'))
            if len(chunk) == 5000:
                await frontier.admit(chunk)
                chunk = []
    if chunk:
        await frontier.admit(chunk)


async def _leftover_s(reader: LeftoverReader) -> float:
    t = time.perf_counter()
    left = await reader.read(repair=True, grace_ms=10_000)
    assert left.hosts and not left.lost(), "the admitted hosts are all ready"
    return time.perf_counter() - t


def _status_s(status: FrontierStatus) -> float:
    t = time.perf_counter()
    status.read(oldest=True)
    return time.perf_counter() - t


def measure(url: str, hosts: int, runs: int) -> tuple[list[float], list[float]]:
    keys = Keys("bench:leftover", partitions=16, seen_buckets=4096)
    loop = asyncio.new_event_loop()
    client = Redis.from_url(url)
    try:
        loop.run_until_complete(_fill(client, keys, hosts))
        reader = LeftoverReader(client, keys)
        status = FrontierStatus(redis.Redis.from_url(url), keys, limits=Limits(delay_ms=0))
        ours, theirs = [], []
        for run in range(runs):  # alternating, so that drift hits both
            if run % 2:
                theirs.append(_status_s(status))
                ours.append(loop.run_until_complete(_leftover_s(reader)))
            else:
                ours.append(loop.run_until_complete(_leftover_s(reader)))
                theirs.append(_status_s(status))
        return ours, theirs
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv, default_runs=5)
    started = time.monotonic()
    report = Report("leftover", "python -m bench.leftover", args.runs, args.quick)
    rows = []
    with private_redis() as url:
        for hosts in QUICK_SIZES if args.quick else SIZES:
            ours, theirs = measure(url, hosts, args.runs)
            ratio = median(ours) / median(theirs)
            rows.append([f"{hosts:,}", f"{median(ours) * 1000:.0f} ms ({spread(ours)} s)",
                         f"{median(theirs) * 1000:.0f} ms ({spread(theirs)} s)",
                         f"{ratio:.2f}x"])
            report.checks.append(Check(f"{hosts:,} hosts: leftover read / frontier status",
                                       f"{ratio:.2f}x", "<= 1.0x", ratio <= 1.0))
    report.tables.append(Table("What is left, read by a worker, against scrapy frontier status",
                               ["hosts", "leftover read", "frontier status", "ratio"], rows))
    report.notes.append(
        "The closing worker gives the read LEFTOVER_READ_S (10 s, about 500,000 hosts at "
        "this pace), then falls back to the counts; the watchdog reads at most a tenth of "
        "the time (GAP_PER_READ), and only while nothing is leased anywhere.")
    finish(report, args, started)


if __name__ == "__main__":
    main()
