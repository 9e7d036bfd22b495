"""The busiest hosts at a glance: ``scrapy frontier hosts --top N --by WHAT``.

A fleet's operator asks which hosts hold the queue, fail, answer slowly or
fill the dead letters, without knowing their names first. Each ranking reads
what the frontier already keeps:

- ``queued``: the host queues' lengths (``PP:q:HOST``);
- ``errors``: each site's failures in a row and breaker openings (``cf``,
  ``bo``);
- ``latency``: each site's mean answer time (``lt``, kept by the release);
- ``dead``: the dead letters, counted per host.

Each scans one kind of key over every partition (a second or so per 100k
hosts), on the operator's side, never in a worker.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import redis

from crawler.frontier.keys import Keys, partition_of
from crawler.frontier.schema import HOST, SITE

#: What ``--by`` takes.
RANKINGS = ("queued", "errors", "latency", "dead")
_BATCH = 1000


@dataclass(slots=True)
class HostRow:
    """One host (an authority, or a site for ``errors`` and ``latency``)."""

    host: str
    queued: int = 0
    in_flight: int = 0  # its site's
    latency_ms: int | None = None  # its site's mean answer time
    failures: int = 0  # its site's failures in a row
    openings: int = 0  # its site's breaker openings
    dead: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class HostRecord:
    """What a host's record says of it: URLs queued, its block flag and why."""

    queued: int
    blocked: str  # "" (none), "1" dropped by an operator, "p" parked
    parked_reason: str  # JSON (crawler/deadletter.py), when parked


class TopHosts:
    """Rank the hosts of one frontier."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def top(self, by: str, n: int) -> list[HostRow]:
        """The ``n`` hosts first by ``by`` (one of :data:`RANKINGS`), the details filled."""
        if by not in RANKINGS:
            raise ValueError(f"--by takes one of {', '.join(RANKINGS)}, not {by!r}")
        if by == "queued":
            scores = self.queued_by_host()
        elif by == "dead":
            scores = self._dead()
        else:
            scores = self._sites(SITE.latency if by == "latency" else SITE.failures)
        best = heapq.nlargest(n, scores.items(), key=lambda kv: (kv[1], kv[0]))
        return self.details([host for host, score in best if score > 0])

    def queued_by_host(self) -> dict[str, int]:
        """Every host key with a queue, and how many URLs it holds."""
        keys = list(self.client.scan_iter(match=self.keys.queues_pattern(), count=_BATCH))
        out: dict[str, int] = {}
        for chunk in _chunks(keys):
            pipe = self.client.pipeline(transaction=False)
            for key in chunk:
                pipe.zcard(key)
            for key, size in zip(chunk, pipe.execute(), strict=True):
                out[self.keys.queue_of(key)[1].decode()] = int(size)
        return out

    def every_host(self) -> dict[str, HostRecord]:
        """Every host of every site, with its queue length and whether (and why)
        it was parked or dropped: the hosts with nothing queued too."""
        sites = [self.keys.site_of_key(key) for key in
                 self.client.scan_iter(match=self.keys.sites_pattern(), count=_BATCH)]
        hosts: list[str] = []
        for chunk in _chunks(sites):
            pipe = self.client.pipeline(transaction=False)
            for site in chunk:
                pipe.smembers(self.keys.site_hosts(partition_of(site, self.keys.partitions), site))
            hosts += [m.decode() for members in pipe.execute() for m in members]
        out: dict[str, HostRecord] = {}
        for chunk in _chunks(hosts):
            pipe = self.client.pipeline(transaction=False)
            for host in chunk:
                pipe.hmget(self.keys.host(partition_of(host, self.keys.partitions), host),
                           (HOST.queued, HOST.blocked, HOST.parked_reason))
            for host, (n, blocked, why) in zip(chunk, pipe.execute(), strict=True):
                out[host] = HostRecord(int(n or 0), (blocked or b"").decode(),
                                       (why or b"").decode("utf-8", "replace"))
        return out

    def _dead(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for part in range(self.keys.partitions):
            for _, value in self.client.hscan_iter(self.keys.dead(part), count=_BATCH):
                counts[value.split(b"\n", 1)[0].decode()] += 1
        return counts

    def _sites(self, field: str) -> dict[str, int]:
        """Every site's ``field`` (sites are ranked by it: errors, latency)."""
        keys = list(self.client.scan_iter(match=self.keys.sites_pattern(), count=_BATCH))
        out: dict[str, int] = {}
        for chunk in _chunks(keys):
            pipe = self.client.pipeline(transaction=False)
            for key in chunk:
                pipe.hget(key, field)
            for key, value in zip(chunk, pipe.execute(), strict=True):
                if value is not None:
                    out[self.keys.site_of_key(key)] = int(float(value))
        return out

    def details(self, names: list[str]) -> list[HostRow]:
        """The rows of host keys, or of sites (then their hosts' queues and dead
        letters are added up)."""
        dead = self._dead() if names else Counter()
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            part = partition_of(name, self.keys.partitions)
            pipe.smembers(self.keys.site_hosts(part, name))
            pipe.hmget(self.keys.site(part, name),
                       (SITE.in_flight, SITE.latency, SITE.failures, SITE.openings))
        replies = pipe.execute()
        hosts = [[name] if "://" in name else sorted(h.decode() for h in replies[2 * i])
                 for i, name in enumerate(names)]
        pipe = self.client.pipeline(transaction=False)
        for name, members in zip(names, hosts, strict=True):
            part = partition_of(name, self.keys.partitions)
            for host in members:
                pipe.zcard(self.keys.queue(part, host))
        sizes = iter(pipe.execute())
        rows = []
        for i, (name, members) in enumerate(zip(names, hosts, strict=True)):
            in_flight, lt, cf, bo = replies[2 * i + 1]
            rows.append(HostRow(name, sum(int(next(sizes)) for _ in members),
                                int(in_flight or 0), int(float(lt)) if lt is not None else None,
                                int(cf or 0), int(bo or 0), sum(dead.get(h, 0) for h in members)))
        return rows


def _chunks(keys: list[Any]) -> Iterator[list[Any]]:
    for i in range(0, len(keys), _BATCH):
        yield keys[i:i + _BATCH]
