"""The crawls of a spider, each a frontier namespace: listing them and deleting one.

Back ``scrapy frontier crawls`` and ``delete``. A crawl is found by its layout
key, which every worker stores when it opens the frontier; its idle time is
the last heartbeat of any of its workers (``ns:seen``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import redis

from crawler.frontier.keys import Keys, layout_namespace, layouts_pattern
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
