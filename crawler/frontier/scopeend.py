"""Queued URLs that a change of the crawl's scope put out of it end as dead letters.

``scrapy frontier scope`` narrows the scope for every worker: new links are
decided by the new rules at once, and what is queued already is read here,
host queue by host queue, and each URL the new scope does not take becomes a
dead letter with reason ``out-of-scope`` (``lua/scope_end.lua``): nothing
disappears, and ``scrapy frontier requeue --reason out-of-scope`` brings them
back. A URL fetched as a hop off scope keeps its hops (``scope_hops``). Runs
on the operator's side, never on a worker's reactor, in bounded batches.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import redis

from crawler.deadletter import DeadReason
from crawler.frontier.keys import Keys
from crawler.frontier.records import record_url
from crawler.frontier.scriptargs import scope_end_args
from crawler.frontier.store import script_source

#: Queue entries read, and moved, per call.
BATCH = 1000

#: Decides a queued URL: (URL, its hops off scope) -> whether it stays.
Keep = Callable[[str, int], bool]


def end_out_of_scope(client: redis.Redis, keys: Keys, keep: Keep, why: str) -> int:
    """End every queued URL ``keep`` refuses; how many ended. ``why`` is the
    dead letters' error (the change that put them out)."""
    script = client.register_script(script_source("scope_end"))
    reason = DeadReason.now("out-of-scope", why).json()
    ended = 0
    for key in client.scan_iter(match=keys.queues_pattern(), count=BATCH):
        part, raw_host = Keys.queue_of(key)
        host = raw_host.decode()
        ended += _end_queue(client, script, keys, part, host, keep, reason)
    return ended


def _end_queue(client: redis.Redis, script: Any, keys: Keys, part: int, host: str,
               keep: Keep, reason: str) -> int:
    """One host's queue, read by score (claims popping its head meanwhile move
    no entry), past the entries kept at the last score read (requeued URLs
    share one score)."""
    key = keys.queue(part, host)
    low, skip, ended = "-inf", 0, 0
    while True:
        page = client.zrange(key, low, "+inf", byscore=True, offset=skip, num=BATCH,
                             withscores=True)
        if not page:
            return ended
        out = {entry for entry, _ in page if not _keeps(keep, entry, host)}
        if out:
            ended += int(script(keys=[keys.counts(part)],
                                args=[keys.prefix(part), scope_end_args(host, reason), *out]))
        last = page[-1][1]
        kept = sum(1 for entry, score in page if score == last and entry not in out)
        if low == repr(last):
            skip += kept
        else:
            low, skip = repr(last), kept


def _keeps(keep: Keep, entry: bytes, host: str) -> bool:
    """Whether a queue entry stays; one that cannot be read stays (the worker
    that claims it says why it is bad)."""
    try:
        data = json.loads(entry[16:])
        hops = data.get("m", {}).get("scope_hops", 0) if isinstance(data, dict) else 0
        return keep(record_url(data, host), int(hops or 0))
    except (ValueError, TypeError, AttributeError):
        return True
