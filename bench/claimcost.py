"""Cost of handing out the next URLs as the number of hosts grows.

A broad crawl has a queue per host. Scrapy's DownloaderAwarePriorityQueue
looks at every host's queue on each ``pop()`` (to find the one with the fewest
active downloads), so its cost grows with the number of hosts. The frontier
keeps the hosts that may be contacted in a sorted set by next-allowed time,
so a claim should cost O(log hosts) per URL. This measures both, in this
process, at 1k, 10k and 100k hosts:

- ``frontier``: ``crawler.frontier.store.Frontier`` on a private redis-server
  (Unix socket, default partitions and seen buckets, ``DOWNLOAD_DELAY=0`` so
  every host stays claimable), URLs admitted first, then ``claim(64)`` timed
  and the leases released as done (timed separately). The Redis-side part of
  a claim comes from ``INFO commandstats``.
- ``scrapy``: ``scrapy.pqueues.DownloaderAwarePriorityQueue`` built the way
  Scrapy's tests build it (``get_crawler`` and a mock engine whose downloader
  has ``slots``), memory FIFO queues, the same URLs pushed, 64 ``pop()``s
  timed; the popped requests count as active downloads until the batch is
  "released".
- ``scrapy-redis``: ``scrapy_redis.queue.PriorityQueue`` (one ZSET of pickled
  requests, scored by priority) on the same private redis-server, through a
  blocking client as its scheduler uses it; the same URLs pushed one by one
  (``push``, one ZADD each), 64 ``pop()``s timed (a MULTI/EXEC of ZRANGE and
  ZREMRANGEBYRANK each, and the unpickling). It never looks at hosts, so it
  should not grow with them; it also keeps none of the per-host limits the
  other two hand out by (``bench.headofline`` shows what that costs).

    python -m bench.claimcost [--quick] [--runs N]
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import namedtuple
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.asyncio import Redis
from redis.exceptions import RedisError
from scrapy import Request, Spider
from scrapy.pqueues import DownloaderAwarePriorityQueue
from scrapy.squeues import FifoMemoryQueue
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler
from scrapy_redis.queue import PriorityQueue

from bench.common import (
    Check,
    Report,
    Table,
    finish,
    median,
    parse_args,
    private_redis,
    redis_major,
    spread,
)
from crawler.frontier.keys import Keys
from crawler.frontier.store import Frontier
from crawler.frontier.values import Admission, Limits, Release
from crawler.urls import url_fingerprint

BATCH = 64
WARMUP = 10  # batches claimed before timing
SETTLE_S = 1.0
TARGET_RATIO = 1.5
TARGET_US = 1000.0


def host_name(i: int) -> str:
    return f"h{i:06d}.test"


#: Hosts per registered domain in the "all scopes on" frontier run.
HOSTS_PER_DOMAIN = 10
#: That run's limits: the default domain concurrency (FRONTIER_DOMAIN_CONCURRENCY),
#: under the ten hosts' 40 allowed in flight, so hosts wait for their domain
#: and are woken again; no domain delay (DOWNLOAD_DELAY is 0 here too: every
#: host stays claimable); the IP scope on (FRONTIER_IP_CONCURRENCY's default),
#: every site's server address known (a domain's ten hosts on one address),
#: so each claim looks at the address's parked hosts.
SCOPE_LIMITS = {"domain_concurrency": 8, "domain_delay_ms": 0, "ip_concurrency": 16}


def domain_host_name(i: int) -> str:
    return f"h{i:06d}.d{i // HOSTS_PER_DOMAIN:05d}.test"


def urls_per_host(hosts: int, needed: int) -> int:
    """Enough URLs that no host runs dry while we claim (the host count stays put)."""
    return max(2, math.ceil(1.25 * needed / hosts))


# ----------------------------------------------------------------------------- frontier


@dataclass
class Timing:
    """Seconds and URLs of one run (one pass of ``batches`` claims)."""

    claim_s: float = 0.0
    release_s: float = 0.0
    server_us: float = 0.0
    urls: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def us(self, seconds: float) -> float:
        return seconds * 1e6 / max(self.urls, 1)


async def _evalsha_usec(client: Redis) -> float:
    stats = await client.info("commandstats")
    return float(sum(v["usec"] for k, v in stats.items() if k in ("cmdstat_evalsha",
                                                                   "cmdstat_eval")))


async def frontier_size(url: str, hosts: int, per_host: int, runs: int, batches: int,
                        name: Any = host_name, addresses: bool = False,
                        **limits: int) -> tuple[list[Timing], float]:
    """Admit ``hosts`` x ``per_host`` URLs, then time ``runs`` passes of claims
    (``addresses``: each site's server address known, as a robots.txt fetch
    notes it; ten hosts to an address)."""
    client = Redis.from_url(url)
    await client.flushall()  # a private server (bench.common.private_redis), never a shared one
    keys = Keys("bench:claim", partitions=16, seen_buckets=4096)  # the crawl's defaults
    frontier = Frontier(client, keys, Limits(concurrency=4, delay_ms=0, jitter=0.5, **limits))
    admitted = 0
    t0 = time.perf_counter()
    chunk: list[Admission] = []
    for k in range(per_host):  # breadth first, like a crawl discovers them
        for i in range(hosts):
            canon = f"http://{name(i)}/p/{k}"
            chunk.append(Admission(canon, f"http://{name(i)}:80", url_fingerprint(canon),
                                   f'{{"u":"{canon}","d":1}}'))
            if len(chunk) == 2000:
                admitted += (await frontier.admit(chunk)).added
                chunk = []
    if chunk:
        admitted += (await frontier.admit(chunk)).added
    admit_us = (time.perf_counter() - t0) * 1e6 / admitted
    assert admitted == hosts * per_host, admitted
    if addresses:
        until = int(time.time() * 1000) + 86_400_000
        async with client.pipeline(transaction=False) as pipe:
            for i in range(hosts):
                host = f"http://{name(i)}:80"
                pipe.hset(keys.site(frontier.partition(host), host),
                          mapping={"ip": f"127.1.{i // 2560}.{i // 10 % 256}", "ipx": until})
            await pipe.execute()

    async def one_batch(timing: Timing | None) -> None:
        before = await _evalsha_usec(client) if timing else 0.0
        t = time.perf_counter()
        result = await frontier.claim(BATCH, "bench")
        claimed = time.perf_counter()
        after = await _evalsha_usec(client) if timing else 0.0
        t2 = time.perf_counter()
        await frontier.release(
            [Release(lease.host, lease.fingerprint, "done") for lease in result.leases], "bench")
        t3 = time.perf_counter()
        if timing is not None:
            timing.claim_s += claimed - t
            timing.release_s += t3 - t2
            timing.server_us += after - before
            timing.urls += len(result.leases)

    rehash_steps = await settle_keyspace(client)
    for _ in range(WARMUP):  # scripts loaded, connection open
        await one_batch(None)
    timings = []
    for _ in range(runs):
        timing = Timing()
        for _ in range(batches):
            await one_batch(timing)
        assert timing.urls == batches * BATCH, timing.urls
        timings.append(timing)
    for timing in timings:
        timing.extra["rehash_steps_before"] = rehash_steps
    await client.flushall()
    await client.aclose()
    return timings, admit_us


_REHASH_STEPS = """
for i = 1, tonumber(ARGV[1]) do redis.call('EXISTS', KEYS[1]) end
return 0
"""


async def settle_keyspace(client: Redis) -> int:
    """Let Redis finish rehashing its keyspace after the bulk load; returns steps driven.

    A bulk load can leave the main dictionary half-way through an expansion
    (at 100k hosts it has ~262k keys, just past a power of two). Redis
    finishes it slowly when idle (a millisecond per 100 ms), or one bucket
    per key lookup, and while it lasts every lookup is slower: the first
    claims after the load cost ~1.5-2x. A live crawl pays that once per
    doubling of its keyspace, spread over many claims; measured right after a
    load it would make the growth ratio about the timing of the load. Each
    key lookup moves one bucket, so a script of cheap lookups finishes it.
    Needs DEBUG HTSTATS (the private server enables it); otherwise it waits.
    """
    steps = 0
    for _ in range(100):
        try:
            stats = (await client.execute_command("DEBUG", "HTSTATS", "0")).decode()
        except RedisError:
            await asyncio.sleep(SETTLE_S)  # cannot see: give the cron some time
            return -1
        if "rehashing target" not in stats:
            return steps
        await client.eval(_REHASH_STEPS, 1, "bench:rehash-probe", 50_000)
        steps += 50_000
    return steps


# ----------------------------------------------------------------------------- scrapy

# As in Scrapy's own scheduler tests: the queue only reads engine.downloader.
MockEngine = namedtuple("MockEngine", ["downloader"])
MockSlot = namedtuple("MockSlot", ["active"])


class MockDownloader:
    """The part of Scrapy's downloader the priority queue reads: slots and their keys."""

    def __init__(self) -> None:
        self.slots: dict[str, Any] = {}

    def get_slot_key(self, request: Request) -> str:
        return urlparse_cached(request).hostname or ""

    def start(self, request: Request) -> None:
        key = self.get_slot_key(request)
        self.slots.setdefault(key, MockSlot(set())).active.add(request)

    def finish_all(self) -> None:
        self.slots.clear()


def scrapy_size(hosts: int, per_host: int, runs: int, batches: int) -> tuple[list[Timing], float]:
    """Push the same URLs into Scrapy's queue, then time ``runs`` passes of pops."""
    crawler = get_crawler(Spider, {"SCHEDULER_PRIORITY_QUEUE":
                                   "scrapy.pqueues.DownloaderAwarePriorityQueue"})
    downloader = MockDownloader()
    crawler.engine = MockEngine(downloader=downloader)  # type: ignore[assignment]
    queue = build_from_crawler(DownloaderAwarePriorityQueue, crawler,
                               downstream_queue_cls=FifoMemoryQueue, key="")
    t0 = time.perf_counter()
    for k in range(per_host):
        for i in range(hosts):
            queue.push(Request(f"http://{host_name(i)}/p/{k}", priority=-1))
    push_us = (time.perf_counter() - t0) * 1e6 / (hosts * per_host)

    timings = []
    for _ in range(runs):
        timing = Timing()
        for _ in range(batches):
            t = time.perf_counter()
            popped = []
            for _ in range(BATCH):
                request = queue.pop()
                assert request is not None
                downloader.start(request)  # in flight until the batch is released
                popped.append(request)
            timing.claim_s += time.perf_counter() - t
            t = time.perf_counter()
            downloader.finish_all()
            timing.release_s += time.perf_counter() - t
            timing.urls += len(popped)
        timing.extra["hosts_left"] = len(queue.pqueues)
        timings.append(timing)
    return timings, push_us


# ----------------------------------------------------------------------------- scrapy-redis

#: What a scrapy-redis pop runs in Redis (INFO commandstats names).
POP_COMMANDS = ("cmdstat_multi", "cmdstat_zrange", "cmdstat_zremrangebyrank", "cmdstat_exec")


def _pop_usec(server: redis.Redis) -> float:
    stats = server.info("commandstats")
    return float(sum(v["usec"] for k, v in stats.items() if k in POP_COMMANDS))


def scrapy_redis_size(url: str, hosts: int, per_host: int, runs: int,
                      batches: int) -> tuple[list[Timing], float]:
    """Push the same URLs into scrapy-redis's queue, then time ``runs`` passes of pops."""
    server = redis.Redis.from_url(url)  # a private server; the key is ours alone
    queue = PriorityQueue(server, Spider(name="bench"), "bench:claim:%(spider)s:requests")
    server.delete(queue.key)
    t0 = time.perf_counter()
    for k in range(per_host):  # the order the frontier admitted them in
        for i in range(hosts):
            queue.push(Request(f"http://{host_name(i)}/p/{k}", priority=-1))
    push_us = (time.perf_counter() - t0) * 1e6 / (hosts * per_host)
    assert len(queue) == hosts * per_host

    def one_batch(timing: Timing | None) -> None:
        t = time.perf_counter()
        for _ in range(BATCH):
            assert queue.pop() is not None
        if timing is not None:
            timing.claim_s += time.perf_counter() - t
            timing.urls += BATCH

    for _ in range(WARMUP):
        one_batch(None)
    timings = []
    for _ in range(runs):
        timing = Timing()
        before = _pop_usec(server)
        for _ in range(batches):
            one_batch(timing)
        timing.server_us = _pop_usec(server) - before
        timings.append(timing)
    server.delete(queue.key)
    server.close()
    return timings, push_us


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> Report:
    args = parse_args(__doc__.splitlines()[0], argv)
    started = time.monotonic()
    sizes = [1_000, 10_000, 100_000]
    frontier_batches = 30 if args.quick else 100

    def scrapy_batches(hosts: int) -> int:
        # A pop at 100k hosts takes tens of ms: bound the time, keep >= 2 batches.
        return max(2, min(frontier_batches, (150_000 if not args.quick else 60_000) // hosts))

    results: dict[int, dict[str, Any]] = {}
    # DEBUG HTSTATS tells when the keyspace rehash is over (see settle_keyspace).
    debug = ["--enable-debug-command", "local"] if redis_major(None) >= 7 else []
    with private_redis(extra=debug) as url:
        for hosts in sizes:
            needed = (args.runs * frontier_batches + WARMUP) * BATCH
            per_host = urls_per_host(hosts, needed)
            ours, admit_us = asyncio.run(
                frontier_size(url, hosts, per_host, args.runs, frontier_batches))
            domains, _ = asyncio.run(frontier_size(url, hosts, per_host, args.runs,
                                                   frontier_batches, domain_host_name,
                                                   addresses=True, **SCOPE_LIMITS))
            theirs, push_us = scrapy_size(hosts, per_host, args.runs, scrapy_batches(hosts))
            redis_q, zadd_us = scrapy_redis_size(url, hosts, per_host, args.runs,
                                                 frontier_batches)
            results[hosts] = {"ours": ours, "domains": domains, "theirs": theirs,
                              "redis": redis_q,
                              "admit_us": admit_us, "push_us": push_us, "zadd_us": zadd_us,
                              "per_host": per_host}
            print(f"{hosts:>7} hosts x {per_host}: frontier claim "
                  f"{median([t.us(t.claim_s) for t in ours]):.1f} us/URL (all scopes on "
                  f"{median([t.us(t.claim_s) for t in domains]):.1f}), scrapy pop "
                  f"{median([t.us(t.claim_s) for t in theirs]):.1f} us/URL, scrapy-redis pop "
                  f"{median([t.us(t.claim_s) for t in redis_q]):.1f} us/URL", flush=True)

    report = Report("claimcost", "python -m bench.claimcost", args.runs, args.quick)
    rows = []
    for hosts, r in results.items():
        ours, theirs, redis_q = r["ours"], r["theirs"], r["redis"]
        claim = [t.us(t.claim_s) for t in ours]
        dclaim = [t.us(t.claim_s) for t in r["domains"]]
        pop = [t.us(t.claim_s) for t in theirs]
        zpop = [t.us(t.claim_s) for t in redis_q]
        rows.append([
            f"{hosts:,}", str(r["per_host"]),
            f"{median(claim):.1f} ({spread(claim)})",
            f"{median([t.server_us / t.urls for t in ours]):.1f}",
            f"{median([t.us(t.release_s) for t in ours]):.1f}",
            f"{median(dclaim):.1f} ({spread(dclaim)})",
            f"{median(pop):.1f} ({spread(pop)})",
            f"{median(pop) / median(claim):.2f}",
            f"{median(zpop):.1f} ({spread(zpop)})",
            f"{median([t.server_us / t.urls for t in redis_q]):.1f}",
            f"{r['admit_us']:.1f} / {r['push_us']:.1f} / {r['zadd_us']:.1f}",
        ])
    report.tables.append(Table(
        f"Microseconds per URL handed out, batches of {BATCH} (median of runs, min-max)",
        ["hosts", "URLs/host", "frontier claim", "of which Redis", "frontier release",
         "frontier claim, all scopes on",
         "scrapy DAPQ pop", "scrapy / frontier", "scrapy-redis pop", "of which Redis",
         "admit / push / scrapy-redis push us per URL"], rows,
        "frontier claim = `Frontier.claim(64)` round trip incl. decoding the leases "
        "(16 partition scripts, one pipeline); 'of which Redis' = EVALSHA time inside "
        "Redis (INFO commandstats); release = `Frontier.release` of the 64 as done. "
        f"'all scopes on': the same, with the hosts {HOSTS_PER_DOMAIN} to a registered domain "
        f"and {SCOPE_LIMITS['domain_concurrency']} in flight per domain "
        "(FRONTIER_DOMAIN_CONCURRENCY), so hosts wait for their domains and are woken, and "
        f"the IP scope on ({SCOPE_LIMITS['ip_concurrency']} per address, each site's address "
        "known: the claim looks for hosts parked for it). "
        "scrapy pop = `DownloaderAwarePriorityQueue.pop()`, memory queues. scrapy-redis "
        "pop = `PriorityQueue.pop()`, one round trip per URL (its 'of which Redis': "
        "MULTI, ZRANGE, ZREMRANGEBYRANK, EXEC inside Redis); nothing to release."))
    small, big = min(results), max(results)

    def growth(side: str) -> float:
        return (median([t.us(t.claim_s) for t in results[big][side]])
                / median([t.us(t.claim_s) for t in results[small][side]]))

    ours_growth, theirs_growth, redis_growth = growth("ours"), growth("theirs"), growth("redis")
    domains_growth = growth("domains")
    worst = max(median([t.us(t.claim_s) for t in r["ours"]]) for r in results.values())
    report.tables.append(Table(
        f"Growth from {small:,} to {big:,} hosts ({big // small}x the hosts)",
        ["", "frontier claim", "frontier claim, all scopes on", "scrapy DAPQ pop",
         "scrapy-redis pop"],
        [["cost per URL, ratio", f"**{ours_growth:.2f}x**", f"**{domains_growth:.2f}x**",
          f"**{theirs_growth:.1f}x**", f"**{redis_growth:.2f}x**"]],
        "scrapy-redis's pop does not depend on hosts: its growth is that of one sorted "
        f"set from {results[small]['per_host'] * small:,} to "
        f"{results[big]['per_host'] * big:,} requests (O(log n))."))
    report.checks += [
        Check(f"frontier claim cost {big // 1000}k / {small // 1000}k hosts",
              f"{ours_growth:.2f}x", f"<= {TARGET_RATIO}x", ours_growth <= TARGET_RATIO),
        Check(f"frontier claim cost with all scopes on, {big // 1000}k / {small // 1000}k hosts",
              f"{domains_growth:.2f}x", f"<= {TARGET_RATIO}x", domains_growth <= TARGET_RATIO),
        Check("frontier claim, worst size", f"{worst:.0f} us/URL", "well under 1000 us/URL",
              worst < TARGET_US / 2),
        Check(f"scrapy DAPQ pop cost {big // 1000}k / {small // 1000}k hosts",
              f"{theirs_growth:.0f}x", "O(hosts): grows ~linearly", None),
        Check(f"scrapy-redis pop cost {big // 1000}k / {small // 1000}k hosts "
              "(worst us/URL)", f"{redis_growth:.2f}x ("
              f"{max(median([t.us(t.claim_s) for t in r['redis']]) for r in results.values()):.0f}"
              " us)", "(baseline: no per-host order at all)", None),
    ]
    report.notes.append(
        f"Each run is a pass of {frontier_batches} batches (Scrapy: fewer at large sizes, "
        "where one pop takes milliseconds) over one admitted frontier; admission is done once "
        "per size and not timed in the claim numbers, and Redis is made to finish rehashing "
        "its keyspace before the first timed claim (see `settle_keyspace`; a live crawl pays "
        "that rehash once per doubling of its keys). The frontier and "
        "both baselines' queues hold the same URLs. Scrapy's pop never leaves the process; "
        "the frontier's claim is one round trip per batch to a local Redis over a Unix "
        "socket, scrapy-redis's pop one per URL.")
    settled = {h: r["ours"][0].extra.get("rehash_steps_before", 0) for h, r in results.items()}
    report.notes.append(
        "Keyspace rehash after the load: " + ", ".join(
            f"{h:,} hosts: " + (f"in progress, finished with ~{n:,} lookups" if n > 0
                                else "none" if n == 0 else "unknown (waited 1 s)")
            for h, n in settled.items()) + ".")
    report.raw = {str(h): {"ours": [t.__dict__ for t in r["ours"]],
                           "domains": [t.__dict__ for t in r["domains"]],
                           "theirs": [t.__dict__ for t in r["theirs"]],
                           "redis": [t.__dict__ for t in r["redis"]],
                           "admit_us": r["admit_us"], "push_us": r["push_us"],
                           "zadd_us": r["zadd_us"]}
                  for h, r in results.items()}
    finish(report, args, started)
    return report


if __name__ == "__main__":
    main()
