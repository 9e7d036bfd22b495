"""What each running worker fetched lately, for the operator's console.

A worker keeps, for the hosts it fetched from most recently, its last
:data:`RECENT` fetches (time, URL, status or error, seconds, bytes), and its
download errors by kind; every few seconds it writes what changed into one
hash of its own, ``NS:live:WORKER`` (``recent:HOST`` fields, ``errors``), in
one round trip, and deletes the hash when it closes. The console reads the
hashes of the workers alive: a host's recent fetches on its page, the errors
by kind on the crawl's.
"""

from __future__ import annotations

import json
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from crawler.frontier.keys import Keys

#: Fetches kept per host, and hosts kept (the most recently fetched from).
RECENT = 10
HOSTS_KEPT = 2000


@dataclass(slots=True)
class LiveFetches:
    """One worker's recent fetches and errors, and what it has not written yet."""

    recent: OrderedDict[str, deque[list[Any]]] = field(default_factory=OrderedDict)
    errors: Counter[str] = field(default_factory=Counter)
    changed: set[str] = field(default_factory=set)
    dropped: set[str] = field(default_factory=set)
    errors_changed: bool = False

    def fetched(self, host: str, url: str, outcome: str, seconds: float, size: int) -> None:
        """A fetch of ``url`` on ``host``: ``outcome`` its status, or ``error: KIND``."""
        kept = self.recent.get(host)
        if kept is None:
            kept = self.recent[host] = deque(maxlen=RECENT)
            if len(self.recent) > HOSTS_KEPT:
                old, _ = self.recent.popitem(last=False)
                self.changed.discard(old)
                self.dropped.add(old)
        else:
            self.recent.move_to_end(host)
        kept.append([round(time.time(), 3), url, outcome, round(seconds, 3), size])
        self.changed.add(host)
        self.dropped.discard(host)

    def error(self, kind: str) -> None:
        self.errors[kind] += 1
        self.errors_changed = True

    def pending(self) -> tuple[dict[str, str], list[str]]:
        """The fields to write and to delete since the last call (then cleared)."""
        fields = {f"recent:{host}": json.dumps(list(self.recent[host]))
                  for host in self.changed}
        if self.errors_changed:
            fields["errors"] = json.dumps(dict(self.errors))
        gone = [f"recent:{host}" for host in self.dropped]
        self.changed, self.dropped, self.errors_changed = set(), set(), False
        return fields, gone


async def write(client: Any, keys: Keys, worker: str, live: LiveFetches) -> None:
    fields, gone = live.pending()
    if not fields and not gone:
        return
    pipe = client.pipeline(transaction=False)
    if fields:
        pipe.hset(keys.live(worker), mapping=fields)
    if gone:
        pipe.hdel(keys.live(worker), *gone)
    await pipe.execute()


def recent_of(client: Any, keys: Keys, workers: Iterable[str], host: str,
              limit: int = 20) -> list[dict[str, Any]]:
    """The newest fetches of ``host`` by any of ``workers`` (a blocking client)."""
    pipe = client.pipeline(transaction=False)
    names = list(workers)
    for worker in names:
        pipe.hget(keys.live(worker), f"recent:{host}")
    out = []
    for worker, raw in zip(names, pipe.execute(), strict=True):
        for at, url, outcome, seconds, size in _list(raw):
            out.append({"time": at, "url": url, "outcome": outcome, "seconds": seconds,
                        "bytes": size, "worker": worker})
    out.sort(key=lambda f: -f["time"])
    return out[:limit]


def errors_of(client: Any, keys: Keys, workers: Iterable[str]) -> Counter[str]:
    """Download errors by kind, added up over ``workers`` (a blocking client)."""
    pipe = client.pipeline(transaction=False)
    for worker in workers:
        pipe.hget(keys.live(worker), "errors")
    total: Counter[str] = Counter()
    for raw in pipe.execute():
        try:
            total.update({str(k): int(v) for k, v in json.loads(raw or "{}").items()})
        except (ValueError, TypeError, AttributeError):
            continue
    return total


def _list(raw: bytes | None) -> list[list[Any]]:
    try:
        data = json.loads(raw or b"[]")
    except ValueError:
        return []
    return [row for row in data if isinstance(row, list) and len(row) == 5]
