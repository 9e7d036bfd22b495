"""What a frontier holds right now: counts, hosts by state, workers, the oldest URL.

Read by ``scrapy frontier status`` (through :class:`crawler.frontier.admin.FrontierAdmin`)
and, every few seconds, by the metrics' reporter: one pipelined round trip over
the partitions' count hashes and ready sets, plus a scan of the host queues
only when asked (``oldest``). Synchronous: both run outside the reactor.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from crawler.frontier.account import Account
from crawler.frontier.capacity import Capacity, CapacityReader
from crawler.frontier.crawls import CrawlRecord
from crawler.frontier.keys import STATES, Count, Keys, add_counts
from crawler.frontier.refusals import by_reason
from crawler.frontier.schema import COUNTS, by_label
from crawler.frontier.values import Limits
from crawler.frontier.workers import DEFAULT_LEASE_SECONDS, Heartbeat

#: Counters shown besides the states, in this order.
EXTRA_COUNTS = (Count.DUP, Count.REFUSED, Count.BLOCKED, Count.EXPIRED, Count.HOSTS)
#: Fields read from one hash at a time.
BATCH = 500

#: What the hosts of ``Status.hosts`` are doing, as ``scrapy frontier status`` names them.
HOST_STATES: dict[str, str] = {
    "ready_now": "queued URLs, may be claimed now",
    "paced": "queued URLs, next allowed later (delay, Crawl-delay, backoff, robots.txt)",
    "busy": ("queued URLs, but its site or registered domain has its concurrency in flight, "
             "or an operator paused it"),
    "draining": "nothing queued; URLs in flight or waiting to be retried",
    "parked": ("nothing queued: parked (a name that does not resolve, a robots.txt that stayed "
               "unreachable, a breaker that kept opening, an address the guard refuses); "
               "its URLs wait as dead letters of that reason"),
    "finished": "nothing queued, in flight or to retry, and not parked",
}


@dataclass(slots=True)
class Worker:
    """A worker's last heartbeat (``<namespace>:workers``), as status shows it."""

    id: str
    state: str  # "alive", "gone" or "?" (unreadable heartbeat)
    seen_ago: float | None
    held: int | None
    pid: int | None
    host: str | None
    rate: float | None = None  # answers a second it received lately
    paused: str | None = None  # why it claims nothing now (None: it claims)


@dataclass(slots=True)
class QueueScan:
    """What a scan of the host queues found."""

    hosts: set[bytes] = field(default_factory=set)  # host keys with queued URLs
    heads: dict[int, int] = field(default_factory=dict)  # partition -> oldest head's seq


@dataclass(slots=True)
class Status:
    """A snapshot of a frontier, cheap enough to refresh every second."""

    namespace: str
    partitions: int
    layout_found: bool
    counts: dict[str, int]
    hosts: dict[str, int]
    workers: list[Worker] = field(default_factory=list)
    #: Seconds the oldest queue head has waited since admission (+-10 s);
    #: None when nothing is queued or no time mark covers it.
    oldest_queued_s: float | None = None
    #: The politeness-bound ceiling and the time to drain (read with the
    #: queue scan, when the reader knows the crawl's limits).
    capacity: Capacity | None = None
    #: Seconds until the next done URL is due for its revisit (None: none is).
    next_revisit_s: float | None = None
    #: URLs refused, by reason (the stats' ``frontier/refused/<reason>``,
    #: every worker's): before the frontier, and by its scripts.
    refused: dict[str, int] = field(default_factory=dict)
    #: When the crawl began, its runs and how it was started (None: not recorded).
    crawl: CrawlRecord | None = None

    @property
    def account(self) -> Account:
        """The crawl's account (what every view of it counts)."""
        return Account.of(self.counts, self.refused)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "account": self.account.as_dict()}


def workers_of(raw: dict[bytes, bytes], now: float, lease_seconds: float) -> list[Worker]:
    """The workers of a ``ns:workers`` hash, alive first, then gone, then unreadable."""
    workers = []
    for key, value in raw.items():
        wid = key.decode("utf-8", "replace")
        beat = Heartbeat.parse(value)
        if beat is None:
            workers.append(Worker(wid, "?", None, None, None, None))
            continue
        state = "alive" if beat.alive(now, lease_seconds) else "gone"
        workers.append(Worker(wid, state, round(beat.age(now), 1), beat.held, beat.pid,
                              beat.host, beat.rate, beat.paused))
    order = {"alive": 0, "gone": 1}
    workers.sort(key=lambda w: (order.get(w.state, 2), w.seen_ago or 0.0, w.id))
    return workers


class FrontierStatus:
    """Reads the status of the frontier of one namespace.

    ``lease_seconds`` judges the heartbeats of workers that do not state their
    lease (:meth:`crawler.frontier.workers.Heartbeat.alive`).
    """

    def __init__(self, client: redis.Redis, keys: Keys, *,
                 lease_seconds: float = DEFAULT_LEASE_SECONDS, layout_found: bool = True,
                 limits: Limits | None = None) -> None:
        self.client = client
        self.keys = keys
        self.lease_seconds = lease_seconds
        self.layout_found = layout_found
        self.capacity = CapacityReader(client, keys, limits) if limits is not None else None

    def read(self, oldest: bool = True) -> Status:
        """Counts, hosts by state, workers and (``oldest``) the oldest queued URL's age.

        ``hosts`` always has ``total``, ``ready_now``, ``paced`` (both read from
        the ready sets) and ``other``, the hosts that cannot be claimed for no
        reason of time: the remainder, cheap enough for the metrics' refresh.
        With ``oldest``, which scans the host queues anyway, ``other`` is split
        into what the hosts are doing (:data:`HOST_STATES`), so that a finished
        crawl does not show its hosts as busy.
        """
        sec, usec = self.client.time()
        now_ms = sec * 1000 + usec // 1000
        pipe = self.client.pipeline(transaction=False)
        for part in range(self.keys.partitions):
            ready = self.keys.ready(part)
            pipe.hgetall(self.keys.counts(part))
            pipe.zcount(ready, "-inf", now_ms)
            pipe.zcount(ready, f"({now_ms}", "+inf")
            pipe.zrange(self.keys.revisits_due(part), 0, 0, withscores=True)
        pipe.hgetall(self.keys.workers())
        pipe.hgetall(self.keys.refused())
        pipe.hgetall(self.keys.crawl())
        *replies, crawl = pipe.execute()
        counts: dict[str, int] = dict.fromkeys((*STATES, *EXTRA_COUNTS), 0)
        for reply in replies[0:-2:4]:
            add_counts(counts, reply)
        ready_now, paced = sum(replies[1:-2:4]), sum(replies[2:-2:4])
        due = [first[0][1] for first in replies[3:-2:4] if first]
        total = counts[Count.HOSTS]
        hosts = {"total": total, "ready_now": ready_now, "paced": paced,
                 "other": max(0, total - ready_now - paced)}
        workers = workers_of(replies[-2], time.time(), self.lease_seconds)
        status = Status(self.keys.namespace, self.keys.partitions, self.layout_found, counts,
                        hosts, workers, refused=by_reason(replies[-1], counts),
                        crawl=CrawlRecord.parse(crawl))
        if due:
            status.next_revisit_s = max(0.0, (min(due) - now_ms) / 1000)
        if oldest:
            queues = self._scan_queues() if counts[Count.QUEUED] else QueueScan()
            status.oldest_queued_s = self._split_hosts(hosts, counts, sec, queues)
            status.capacity = self._capacity(queues, counts, workers, now_ms)
        return status

    def scanned(self, status: Status) -> tuple[float | None, Capacity | None]:
        """The oldest queued URL's age and the capacity, from one scan of the
        queues, for a status read without it (the metrics' reporter)."""
        sec, usec = self.client.time()
        queues = self._scan_queues() if status.counts.get(Count.QUEUED) else QueueScan()
        return (self._age_of(queues.heads, sec),
                self._capacity(queues, status.counts, status.workers,
                               sec * 1000 + usec // 1000))

    def _capacity(self, queues: QueueScan, counts: dict[str, int], workers: list[Worker],
                  now_ms: int) -> Capacity | None:
        if self.capacity is None:
            return None
        alive = [w.rate for w in workers if w.state == "alive"]
        return self.capacity.read(queues.hosts, counts.get(Count.QUEUED, 0), now_ms, alive)

    def _split_hosts(self, hosts: dict[str, int], counts: dict[str, int], now_s: int,
                     queues: QueueScan) -> float | None:
        """Add busy, draining and finished to ``hosts``; the oldest queued URL's age."""
        queued_hosts = len(queues.hosts)
        in_flight = counts[Count.LEASED] or counts[Count.DELAYED]
        draining = len(self._hosts_in_flight() - queues.hosts) if in_flight else 0
        total = hosts["total"]
        # Counts are read a moment apart: clamp, never show a negative state.
        hosts["busy"] = max(0, queued_hosts - hosts["ready_now"] - hosts["paced"])
        hosts["draining"] = min(draining, max(0, total - queued_hosts))
        idle = max(0, total - queued_hosts - hosts["draining"])
        hosts["parked"] = min(idle, sum(by_label(counts, COUNTS.parked_by).values()))
        hosts["finished"] = idle - hosts["parked"]
        return self._age_of(queues.heads, now_s)

    def _age_of(self, heads: dict[int, int], now_s: int) -> float | None:
        """How long the oldest head of a host queue has waited, in seconds.

        Queue scores are sequence numbers (priority aside), and admit.lua
        leaves a time mark per partition at most every 10 s, so a head's age
        is read from the last mark at or before its number. Finding the heads
        scans the host queues' keys (:meth:`_scan_queues`): about a second for
        100k hosts, fine for an operator's command, never done by workers.
        """
        if not heads:
            return None
        pipe = self.client.pipeline(transaction=False)
        for part, seq in heads.items():
            pipe.zrevrangebyscore(self.keys.marks(part), seq, "-inf", start=0, num=1)
        marks = [int(m[0]) for m in pipe.execute() if m]
        return float(max(0, now_s - min(marks))) if marks else None

    def _scan_queues(self) -> QueueScan:
        """The hosts with queued URLs, and each partition's oldest queue head."""
        found = QueueScan()
        batch: list[bytes] = []
        for key in self.client.scan_iter(match=self.keys.queues_pattern(), count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                self._queue_heads(batch, found)
                batch = []
        if batch:
            self._queue_heads(batch, found)
        return found

    def _hosts_in_flight(self) -> set[bytes]:
        """Hosts with URLs leased to workers or delayed for a retry (a lease's
        member, and each of these hashes' values, holds the host on its first
        line): they may queue URLs again."""
        hosts: set[bytes] = set()
        for part in range(self.keys.partitions):
            for member, _ in self.client.zscan_iter(self.keys.leased(part), count=BATCH):
                if len(member) > 16:  # (an older build's: the fingerprint, details in ld)
                    hosts.add(member.split(b"\n", 1)[0])
            for key in (self.keys.lease_details(part), self.keys.delayed_details(part)):
                for _, value in self.client.hscan_iter(key, count=BATCH):
                    hosts.add(value.split(b"\n", 1)[0])
        return hosts

    def _queue_heads(self, keys: list[bytes], found: QueueScan) -> None:
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.zrange(key, 0, 0, withscores=True)
        heads = found.heads
        for key, head in zip(keys, pipe.execute(), strict=True):
            if not head:
                continue
            part, host = self.keys.queue_of(key)
            found.hosts.add(host)
            seq = int(head[0][1]) % 4294967296  # score = -priority * 2**32 + seq
            if seq and (part not in heads or seq < heads[part]):
                heads[part] = seq
