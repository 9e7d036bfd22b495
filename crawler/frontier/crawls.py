"""The crawls of a spider, each a frontier namespace: their runs, listing them, deleting one.

Each time a worker opens a crawl it counts a run in the crawl's record
(:data:`crawler.frontier.schema.CRAWL`), the first stamping when the crawl
began, so that a worker that finds a crawl under way says so
(:func:`continuing_line`) instead of silently adding to it.

Back ``scrapy frontier crawls`` and ``delete``. A crawl is found by its layout
key, which every worker stores when it opens the frontier; its idle time is
the last heartbeat of any of its workers (``ns:seen``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis

from crawler.frontier import crawlconfig
from crawler.frontier.keys import Keys, layout_namespace, layouts_pattern
from crawler.frontier.schema import COUNTS, CRAWL, STATES, refused_at_lease
from crawler.frontier.workers import DEFAULT_LEASE_SECONDS, is_alive

#: Keys unlinked by one command.
BATCH = 500


@dataclass(slots=True)
class CrawlInfo:
    """One crawl (namespace) of a spider, as ``scrapy frontier crawls`` lists it."""

    namespace: str
    crawl_id: str  # "" for the spider's default namespace
    partitions: int
    idle_s: float | None  # since a worker last beat; None if none ever did
    alive_workers: int


@dataclass(frozen=True, slots=True)
class CrawlRecord:
    """The crawl's record as status shows it: when it began, its runs, how it was started."""

    started_ms: int | None
    runs: int
    config: dict[str, Any] | None

    @classmethod
    def parse(cls, raw: Mapping[bytes, bytes]) -> CrawlRecord | None:
        """From the record's hash (None: a crawl begun before records were kept)."""
        if not raw:
            return None
        started = raw.get(CRAWL.started.encode())
        runs = raw.get(CRAWL.runs.encode())
        return cls(int(started) if started else None, int(runs or 0),
                   crawlconfig.decode(raw.get(CRAWL.config.encode())))

    def describe(self) -> str:
        """``started 2026-01-01 10:00:00 UTC, 3 runs; SCOPE=any, ...``."""
        config = crawlconfig.described(self.config) if self.config else ""
        return f"started {began(self.started_ms)}, {self.runs} runs" + (
            f"; {config}" if config else "")


def began(started_ms: int | None) -> str:
    """When a crawl began (Unix ms) as ``2026-01-01 10:00:00 UTC``."""
    if started_ms is None:
        return "before its start was recorded"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started_ms / 1000))


def crawl_label(crawl_id: str | None, spider: str) -> str:
    """How the log names a crawl: its id, else the spider's default crawl."""
    return crawl_id or f"of spider {spider}"


def holds_urls(counts: Mapping[str, int]) -> bool:
    """Whether a frontier's counts show any URL admitted (in any state)."""
    return any(counts.get(state) for state in STATES) or bool(refused_at_lease(counts))


@dataclass(frozen=True, slots=True)
class CrawlRun:
    """A worker's run of a crawl: when the crawl began, and its how-manieth run this is."""

    started_ms: int | None  # None: begun before its record was kept
    runs: int


async def note_run(client: Any, keys: Keys, counts: Mapping[str, int]) -> CrawlRun:
    """Count a worker's start of the crawl; the first start stamps when it began.

    ``counts``: the frontier's; one that holds URLs without a record began
    before records were kept, and is not stamped now.
    """
    key = keys.crawl()
    async with client.pipeline(transaction=False) as pipe:  # (in order; no MULTI in the ACL)
        if not holds_urls(counts):
            pipe.hsetnx(key, CRAWL.started, round(time.time() * 1000))
        pipe.hincrby(key, CRAWL.runs, 1)
        pipe.hget(key, CRAWL.started)
        *_, runs, started = await pipe.execute()
    return CrawlRun(int(started) if started else None, int(runs))


def continuing_line(name: str, run: CrawlRun, counts: Mapping[str, int]) -> str | None:
    """``Continuing crawl NAME (started ..., N runs): D done, Q queued, ...`` for a
    worker that opens a crawl an earlier run (or another worker) began, else None."""
    if run.runs <= 1 and not holds_urls(counts):
        return None
    refused = sum(refused_at_lease(counts).values())
    moving = [f"{counts.get(COUNTS.leased, 0)} leased"] if counts.get(COUNTS.leased) else []
    if counts.get(COUNTS.delayed):
        moving.append(f"{counts[COUNTS.delayed]} delayed for a retry")
    return (f"Continuing crawl {name} (started {began(run.started_ms)}, {run.runs} runs): "
            f"{counts.get(COUNTS.done, 0)} done, {counts.get(COUNTS.queued, 0)} queued"
            + "".join(f", {part}" for part in moving)
            + f", {counts.get(COUNTS.dead, 0)} dead letters, {refused} refused; "
            "seeds it has seen before are skipped")


def nothing_left_line(name: str, counts: Mapping[str, int], *, delete: str,
                      requeue: str) -> str:
    """The WARNING of a run that continued a crawl with nothing left to do: every
    URL it holds had ended (``counts``: the frontier's at the stop), and the seeds
    given again were seen before. ``delete`` and ``requeue``: the commands
    that start it afresh and bring its dead letters back."""
    dead = counts.get(COUNTS.dead, 0)
    refused = sum(refused_at_lease(counts).values())
    again = f"; to fetch its {dead} dead letter(s) again: {requeue}" if dead else ""
    return (f"Nothing was left to do in crawl {name}: earlier runs ended every URL it holds "
            f"({counts.get(COUNTS.done, 0)} done, {dead} dead letters, {refused} refused) and "
            "the seeds given were seen before, so nothing was fetched. To crawl again from the "
            f"start, give a new crawl id (-a crawl_id=NEW) or delete this crawl ({delete})"
            + again)


def list_crawls(client: redis.Redis, base: str,
                lease_seconds: float = DEFAULT_LEASE_SECONDS) -> list[CrawlInfo]:
    """Every crawl whose namespace is ``base`` or ``base:ID``, the idlest last.

    ``lease_seconds`` judges heartbeats that do not state their worker's lease.
    """
    now = time.time()
    crawls = []
    for raw in client.scan_iter(match=layouts_pattern(base), count=1000):
        namespace = layout_namespace(raw.decode())
        if namespace != base and not namespace.startswith(base + ":"):
            continue
        crawl_id = namespace[len(base) + 1:] if namespace != base else ""
        keys = Keys(namespace, _partitions(client.get(raw)))
        seen = client.get(keys.seen_at())
        beats = client.hvals(keys.workers())
        alive = sum(1 for beat in beats if is_alive(beat, now, lease_seconds))
        crawls.append(CrawlInfo(namespace, crawl_id, keys.partitions,
                                now - int(seen) if seen else None, alive))
    return sorted(crawls, key=lambda c: (c.idle_s is None, c.idle_s or 0.0))


def _partitions(layout: bytes | None) -> int:
    """The partitions a stored layout names (0 if it is unreadable)."""
    try:
        return int(json.loads(layout or b"{}").get("partitions", 0))
    except (ValueError, AttributeError, TypeError):
        return 0


def delete_crawl(client: redis.Redis, keys: Keys) -> int:
    """Remove every key of the crawl ``keys`` names; returns how many were removed.

    Partition keys are found by their hash tag (``{NS/pP}``), one partition at a
    time, then the server addresses' gates (``{NS/ip/ADDR}``) and the lists of
    refused URLs (``NS:refused:REASON``), and unlinked in
    batches; the global keys by name. Keys of another crawl id (``NS:ID``)
    never match: their tags differ.
    """
    patterns = [keys.partition_pattern(part) for part in range(keys.partitions)]
    removed = sum(_unlink_matching(client, pattern) for pattern in [
        *patterns, keys.ips_pattern(), keys.refused_examples_pattern(), keys.live_pattern()])
    for key in keys.globals():
        removed += client.unlink(key)
    return removed


def _unlink_matching(client: redis.Redis, pattern: str) -> int:
    removed = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= BATCH:
            removed += client.unlink(*batch)
            batch = []
    if batch:
        removed += client.unlink(*batch)
    return removed
