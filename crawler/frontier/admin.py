"""Operators' actions on a frontier: status, dead letters, requeue, drop a host.

These back ``scrapy frontier`` (:mod:`crawler.commands.frontier`). They use
the synchronous Redis client: the command runs outside Scrapy's reactor and
each action is a handful of round trips, so asyncio would only add ceremony.

Changes go through Lua scripts (``lua/requeue.lua``, ``lua/drop_host.lua``)
in bounded batches of one partition: each batch is atomic, so the counts
always agree with the queues even while workers crawl, and no batch holds
Redis (and with it every worker) for long.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis

from crawler.frontier.connection import sync_client
from crawler.frontier.embedded import EmbeddedRedis
from crawler.frontier.keys import Keys, older_layout, partition_of
from crawler.frontier.records import record_url
from crawler.frontier.store import STATES, script_source
from crawler.urls import host_key

#: Counters shown besides the states, in this order.
EXTRA_COUNTS = ("dup", "refused", "blocked", "expired", "hosts")
#: A worker whose last heartbeat is older than this is shown as gone. Workers
#: beat every FRONTIER_LEASE_SECONDS / 3 (20 s by default): three missed beats.
ALIVE_SECONDS = 60.0
#: URLs moved by one script call: small enough that Redis never stalls.
BATCH = 500
DROPPED = "dropped"


class AdminError(Exception):
    """A problem the operator can act on: printed as one line, exit code 1."""


class RedisUnreachable(AdminError):
    """Redis did not answer; the message names the URL without its password."""

    def __init__(self, url: str, error: BaseException, secret: str | None = None) -> None:
        message = " ".join(str(error).split()) or type(error).__name__
        if secret:
            message = message.replace(secret, "***")
        super().__init__(f"cannot reach Redis at {safe_url(url)}: {message}")


def safe_url(url: str) -> str:
    """``url`` for display: any password (userinfo or ``?password=``) masked.

    A userinfo without ``:`` is masked whole, as some write the password there.
    """
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, hostport = netloc.rsplit("@", 1)
        user, sep, _ = userinfo.partition(":")
        netloc = f"{user}:***@{hostport}" if sep and user else f"***@{hostport}"
    query = urlencode([(k, "***" if k.lower() == "password" else v)
                       for k, v in parse_qsl(parts.query, keep_blank_values=True)], safe="*/")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def url_password(url: str) -> str | None:
    """The password in a Redis URL, to scrub it from error messages."""
    parts = urlsplit(url)
    for key, value in parse_qsl(parts.query):
        if key.lower() == "password" and value:
            return value
    return parts.password or parts.username or None


def parse_host(text: str) -> str:
    """The host key (``scheme://host:port``) of what an operator typed."""
    url = text if "://" in text else f"http://{text}/"
    key = host_key(url)
    if key is None:
        raise AdminError(f"not a host: {text!r} (use example.com or https://example.com:8443)")
    return key


@dataclass(slots=True)
class Connection:
    """A client on the frontier's Redis, and how to describe it to the operator."""

    client: redis.Redis
    url: str  # safe to print
    embedded: Path | None = None  # the folder, when it is the embedded server
    started: bool = False  # this command started the embedded server


@contextmanager
def connect(
    redis_url: str | None,
    embedded_dir: Path | None,
    params: dict[str, Any] | None = None,
    notice: Callable[[str], None] = print,
    cluster: bool = False,
) -> Iterator[Connection]:
    """A pinged client on ``redis_url`` (a Redis Cluster with ``cluster``), else on
    the embedded Redis of a folder.

    An embedded server that is not running is started for the duration and
    stopped afterwards, but only if this call started it, and only if no
    other process uses it by then (a crawl that started during ``--watch``
    adopted it; stopping it would pull Redis from under that crawl).
    """
    options: dict[str, Any] = {"socket_connect_timeout": 5, "socket_timeout": 30}
    options.update(params or {})
    if redis_url:
        client = sync_client(redis_url, {}, cluster, **options)
        try:
            client.ping()
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            client.close()
            raise RedisUnreachable(redis_url, exc, url_password(redis_url)) from None
        try:
            yield Connection(client, safe_url(redis_url))
        finally:
            client.close()
        return

    assert embedded_dir is not None
    if not embedded_dir.is_dir():
        raise AdminError(
            f"no frontier in {embedded_dir}: no crawl ran there (set JOBDIR or --spider "
            "to the crawl's, or --redis-url for a shared frontier)")
    server = EmbeddedRedis(embedded_dir)
    try:
        server.start()
    except (OSError, RuntimeError, ImportError, subprocess.SubprocessError) as exc:
        raise AdminError(f"could not start the embedded Redis in {embedded_dir}: "
                         + " ".join(str(exc).split())) from None
    client = redis.Redis.from_url(server.url, **options)
    try:
        try:
            client.ping()
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            raise RedisUnreachable(server.url, exc) from None
        yield Connection(client, server.url, embedded_dir, server.started)
    finally:
        client.close()
        if not server.leave(shut_down=server.started) and server.started:
            notice(f"leaving the embedded Redis in {embedded_dir} running: "
                   "a crawl uses it")


def frontier_keys(
    client: redis.Redis, namespace: str, partitions: int, seen_buckets: int = 4096
) -> tuple[Keys, bool]:
    """The frontier's keys, with the layout its crawls stored if there is one.

    Workers store ``<namespace>:layout`` when they open a frontier; it wins
    over the settings, so a wrong FRONTIER_PARTITIONS here cannot hide half
    the frontier. Returns the keys and whether a layout was found.
    """
    raw = client.get(f"{namespace}:layout")
    if raw:
        try:
            layout = json.loads(raw)
            return Keys(namespace, int(layout["partitions"]),
                        int(layout.get("seen_buckets", seen_buckets))), True
        except (ValueError, KeyError, TypeError):
            pass
    return Keys(namespace, partitions, seen_buckets), False


def refuse_older_layout(client: redis.Redis, namespace: str) -> None:
    """Raise :class:`AdminError` if the frontier was written by an older version.

    For the actions that find a host by its partition or write host records
    (drop-host, requeue): they would look in the wrong partition or mix two
    layouts. Reading counts and dead letters, and deleting, still work.
    """
    raw = client.get(f"{namespace}:layout")
    older = older_layout(raw.decode(errors="replace")) if raw else None
    if older is not None:
        raise AdminError(f"frontier {namespace}: {older}")


# ---------------------------------------------------------------------- results


@dataclass(slots=True)
class Worker:
    """A worker's last heartbeat (``<namespace>:workers``)."""

    id: str
    state: str  # "alive", "gone" or "?" (unreadable heartbeat)
    seen_ago: float | None
    held: int | None
    pid: int | None
    host: str | None


#: What the hosts of ``Status.hosts`` are doing, as ``scrapy frontier status`` names them.
HOST_STATES: dict[str, str] = {
    "ready_now": "queued URLs, may be claimed now",
    "paced": "queued URLs, next allowed later (delay, Crawl-delay, backoff, robots.txt)",
    "busy": "queued URLs, but its site has its concurrency in flight",
    "draining": "nothing queued; URLs in flight or waiting to be retried",
    "finished": "nothing queued, in flight or to retry",
}


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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class DeadLetter:
    """One dead URL and why it died."""

    fingerprint: bytes
    host: str
    url: str
    reason: str
    error: str
    time: int | None
    record: str

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.url, "host": self.host, "reason": self.reason, "error": self.error,
                "time": self.time, "fingerprint": self.fingerprint.hex()}


@dataclass(slots=True)
class DropResult:
    """What ``drop_host`` did to a host."""

    host: str
    queued: int = 0  # queued URLs now dead
    delayed: int = 0  # delayed (retrying) URLs now dead
    in_flight: int = 0  # leased URLs left to their workers


def parse_dead(fingerprint: bytes, value: bytes) -> DeadLetter:
    """Decode a ``PP:dead`` value: host, reason JSON, entry (fingerprint + record).

    The entry starts with raw fingerprint bytes, which may contain newlines,
    so only the first two separators count.
    """
    parts = value.split(b"\n", 2)
    if len(parts) < 3:
        return DeadLetter(fingerprint, "", "", "?", "unreadable dead letter", None, "")
    host, reason_raw, entry = parts
    record = entry[16:].decode("utf-8", "replace")
    try:
        url = record_url(json.loads(record), host.decode())
    except (ValueError, AttributeError):
        url = ""
    text = reason_raw.decode("utf-8", "replace")
    try:
        reason = json.loads(text)
    except ValueError:
        reason = None
    if isinstance(reason, dict):
        t = reason.get("t")
        return DeadLetter(fingerprint, host.decode(), url, str(reason.get("reason", "?")),
                          str(reason.get("error", "")), t if isinstance(t, int) else None,
                          record)
    return DeadLetter(fingerprint, host.decode(), url, text, "", None, record)


def _priority(record: str) -> int:
    try:
        return int(json.loads(record).get("p", 0))
    except (ValueError, AttributeError, TypeError):
        return 0


# ---------------------------------------------------------------------- actions


class FrontierAdmin:
    """Admin operations on the frontier of one namespace."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        *,
        concurrency: int = 4,
        delay_ms: int = 1000,
        alive_seconds: float = ALIVE_SECONDS,
        layout_found: bool = True,
    ) -> None:
        self.client = client
        self.keys = keys
        self.concurrency = concurrency  # for a requeued URL whose host hash is gone
        self.delay_ms = delay_ms
        self.alive_seconds = alive_seconds
        self.layout_found = layout_found
        self._requeue = client.register_script(script_source("requeue"))
        self._drop = client.register_script(script_source("drop_host"))

    def partition(self, host: str) -> int:
        return partition_of(host, self.keys.partitions)

    def _partitions(self, host: str | None) -> range | list[int]:
        """Only the host's partition holds its URLs: scan just that one."""
        return [self.partition(host)] if host else range(self.keys.partitions)

    # --- status

    def status(self, oldest: bool = True) -> Status:
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
        pipe.hgetall(self.keys.workers())
        replies = pipe.execute()
        counts: dict[str, int] = dict.fromkeys((*STATES, *EXTRA_COUNTS), 0)
        ready_now = paced = 0
        for i in range(self.keys.partitions):
            for key, value in replies[3 * i].items():
                name = key.decode()
                if name != "seq":
                    counts[name] = counts.get(name, 0) + int(value)
            ready_now += int(replies[3 * i + 1])
            paced += int(replies[3 * i + 2])
        total = counts["hosts"]
        hosts = {"total": total, "ready_now": ready_now, "paced": paced,
                 "other": max(0, total - ready_now - paced)}
        age = None
        if oldest:
            queues = self._scan_queues() if counts["queued"] else QueueScan()
            age = self._age_of(queues.heads, sec)
            queued_hosts = len(queues.hosts)
            draining = len(self._hosts_in_flight() - queues.hosts) if (
                counts["leased"] or counts["delayed"]) else 0
            # Counts are read a moment apart: clamp, never show a negative state.
            hosts["busy"] = max(0, queued_hosts - ready_now - paced)
            hosts["draining"] = min(draining, max(0, total - queued_hosts))
            hosts["finished"] = max(0, total - queued_hosts - hosts["draining"])
        return Status(self.keys.namespace, self.keys.partitions, self.layout_found, counts,
                      hosts, self._workers(replies[-1]), age)

    def oldest_queued_age(self, now_s: int) -> float | None:
        """How long the oldest head of a host queue has waited, in seconds.

        Queue scores are sequence numbers (priority aside), and admit.lua
        leaves a time mark per partition at most every 10 s, so a head's age
        is read from the last mark at or before its number. Finding the
        heads scans the host queues' keys: about a second for 100k hosts,
        fine for an operator's command, never done by workers.
        """
        return self._age_of(self._scan_queues().heads, now_s)

    def _age_of(self, heads: dict[int, int], now_s: int) -> float | None:
        if not heads:
            return None
        pipe = self.client.pipeline(transaction=False)
        for part, seq in heads.items():
            pipe.zrevrangebyscore(f"{self.keys.prefix(part)}:e", seq, "-inf", start=0, num=1)
        marks = [int(m[0]) for m in pipe.execute() if m]
        return float(max(0, now_s - min(marks))) if marks else None

    def _scan_queues(self) -> QueueScan:
        """The hosts with queued URLs, and each partition's oldest queue head."""
        found = QueueScan()
        batch: list[bytes] = []
        for key in self.client.scan_iter(match=self._queue_pattern(), count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                self._queue_heads(batch, found)
                batch = []
        if batch:
            self._queue_heads(batch, found)
        return found

    def _hosts_in_flight(self) -> set[bytes]:
        """Hosts with URLs leased to workers or delayed for a retry (either hash
        holds the host on its first line): they may queue URLs again."""
        hosts: set[bytes] = set()
        for part in range(self.keys.partitions):
            for key in (f"{self.keys.prefix(part)}:ld", f"{self.keys.prefix(part)}:dd"):
                for _, value in self.client.hscan_iter(key, count=BATCH):
                    hosts.add(value.split(b"\n", 1)[0])
        return hosts

    def _queue_pattern(self) -> str:
        return f"{{{_glob_escape(self.keys.namespace)}/p*}}:q:*"

    def _queue_heads(self, keys: list[bytes], found: QueueScan) -> None:
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.zrange(key, 0, 0, withscores=True)
        heads = found.heads
        for key, head in zip(keys, pipe.execute(), strict=True):
            if not head:
                continue
            tag, _, host = key.partition(b"}:q:")
            found.hosts.add(host)
            seq = int(head[0][1]) % 4294967296  # score = -priority * 2**32 + seq
            part = int(tag.rsplit(b"/p", 1)[1])
            if seq and (part not in heads or seq < heads[part]):
                heads[part] = seq

    def _workers(self, raw: dict[bytes, bytes]) -> list[Worker]:
        now = time.time()
        workers = []
        for key, value in raw.items():
            wid = key.decode("utf-8", "replace")
            try:
                beat = json.loads(value)
                seen_ago = max(0.0, now - float(beat["seen"]))
            except (ValueError, KeyError, TypeError):
                workers.append(Worker(wid, "?", None, None, None, None))
                continue
            state = "alive" if seen_ago < self.alive_seconds else "gone"
            workers.append(Worker(wid, state, round(seen_ago, 1), _int(beat.get("held")),
                                  _int(beat.get("pid")), beat.get("host")))
        order = {"alive": 0, "gone": 1}
        workers.sort(key=lambda w: (order.get(w.state, 2), w.seen_ago or 0.0, w.id))
        return workers

    # --- dead letters

    def iter_dead(self, reason: str | None = None, host: str | None = None
                  ) -> Iterator[DeadLetter]:
        """Dead letters matching ``reason`` and ``host`` (a host key), streamed."""
        for part in self._partitions(host):
            yield from self._iter_part(part, reason, host)

    def _iter_part(self, part: int, reason: str | None, host: str | None
                   ) -> Iterator[DeadLetter]:
        for fp, value in self.client.hscan_iter(self.keys.dead(part), count=BATCH):
            letter = parse_dead(fp, value)
            if (reason is None or letter.reason == reason) and (
                    host is None or letter.host == host):
                yield letter

    def dead(self, reason: str | None = None, host: str | None = None, limit: int = 0
             ) -> list[DeadLetter]:
        """Up to ``limit`` matching dead letters (0: all)."""
        out = []
        for letter in self.iter_dead(reason, host):
            out.append(letter)
            if limit and len(out) >= limit:
                break
        return out

    def requeue(self, reason: str | None = None, host: str | None = None,
                front: bool = False) -> int:
        """Move matching dead letters back to their hosts' queues; how many moved.

        By default a URL goes back in admission order with its record's
        priority (behind what is queued now, as if newly found); ``front``
        puts it ahead of every queued URL of priority 0 or less. Scanning a
        hash while the script deletes from it is safe: HSCAN still returns
        every field that was there all along, and the script skips a
        fingerprint that is no longer dead.
        """
        moved = 0
        for part in self._partitions(host):
            batch: list[bytes | int] = []
            for letter in self._iter_part(part, reason, host):
                batch += [letter.fingerprint, _priority(letter.record)]
                if len(batch) >= 2 * BATCH:
                    moved += self._requeue_batch(part, batch, front)
                    batch = []
            if batch:
                moved += self._requeue_batch(part, batch, front)
        if host:  # a dropped host with nothing dead left is unblocked all the same
            self.client.hdel(self.keys.host(self.partition(host), host), "b", "pr")
        return moved

    def _requeue_batch(self, part: int, batch: list[bytes | int], front: bool) -> int:
        args = [self.keys.prefix(part), int(front), self.concurrency, self.delay_ms, *batch]
        moved, _ = self._requeue(keys=[self.keys.counts(part)], args=args)
        return int(moved)

    # --- dropping a host

    def known_host(self, host: str) -> bool:
        return bool(self.client.exists(self.keys.host(self.partition(host), host)))

    def drop_host(self, host: str) -> DropResult:
        """Make a host's queued and delayed URLs dead letters (reason "dropped").

        URLs in flight finish with their workers. The host stays blocked:
        links to it found later are refused (counted as ``blocked``) until
        ``requeue`` brings any of its dead letters back.
        """
        if not self.known_host(host):
            raise AdminError(f"host {host} is not in the frontier {self.keys.namespace}")
        part = self.partition(host)
        prefix = self.keys.prefix(part)
        dd = f"{prefix}:dd"
        tag = host.encode() + b"\n"
        delayed = [fp for fp, value in self.client.hscan_iter(dd, count=BATCH)
                   if value.startswith(tag)]
        reason = json.dumps({"reason": DROPPED, "t": round(time.time())})
        result = DropResult(host)
        while True:
            extra, delayed = delayed[:BATCH], delayed[BATCH:]
            queued, moved_delayed, left = self._drop(
                keys=[self.keys.counts(part)], args=[prefix, host, reason, BATCH, 1, *extra])
            result.queued += int(queued)
            result.delayed += int(moved_delayed)
            if (not queued or not left) and not delayed:
                break
        in_flight = self.client.hget(self.keys.site(part, host), "i")
        result.in_flight = int(in_flight or 0)
        return result


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------- crawls


@dataclass(slots=True)
class CrawlInfo:
    """One crawl (namespace) of a spider, as ``scrapy frontier crawls`` lists it."""

    namespace: str
    crawl_id: str  # "" for the spider's default namespace
    partitions: int
    idle_s: float | None  # since a worker last beat; None if none ever did
    alive_workers: int


def list_crawls(client: redis.Redis, base: str) -> list[CrawlInfo]:
    """Every crawl whose namespace is ``base`` or ``base:ID`` (found by their layout keys)."""
    pattern = _glob_escape(base) + "*:layout"
    now = time.time()
    crawls = []
    for raw in client.scan_iter(match=pattern, count=1000):
        namespace = raw.decode()[: -len(":layout")]
        crawl_id = namespace[len(base) + 1:] if namespace != base else ""
        if namespace != base and not namespace.startswith(base + ":"):
            continue
        try:
            partitions = int(json.loads(client.get(raw) or b"{}").get("partitions", 0))
        except (ValueError, AttributeError):
            partitions = 0
        seen = client.get(f"{namespace}:seen")
        beats = client.hgetall(f"{namespace}:workers")
        alive = sum(1 for value in beats.values() if now - _beat_time(value) < ALIVE_SECONDS)
        crawls.append(CrawlInfo(namespace, crawl_id, partitions,
                                now - int(seen) if seen else None, alive))
    return sorted(crawls, key=lambda c: (c.idle_s is None, c.idle_s or 0.0))


def delete_crawl(client: redis.Redis, keys: Keys) -> int:
    """Remove every key of the crawl ``keys`` names; returns how many were removed.

    Partition keys are found by their hash tag (``{NS/pP}``), one partition at a
    time, and unlinked in batches; the global keys by name. Keys of another
    crawl id (``NS:ID``) never match: their tags differ.
    """
    removed = 0
    for part in range(keys.partitions):
        pattern = "{" + _glob_escape(f"{keys.namespace}/p{part}") + "}*"
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= BATCH:
                removed += client.unlink(*batch)
                batch = []
        if batch:
            removed += client.unlink(*batch)
    for key in keys.globals():
        removed += client.unlink(key)
    return removed


def _beat_time(value: bytes) -> float:
    try:
        return float(json.loads(value).get("seen", 0))
    except (ValueError, AttributeError, TypeError):
        return 0.0


def _glob_escape(text: str) -> str:
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)
