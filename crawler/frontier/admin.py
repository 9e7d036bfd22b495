"""Operators' actions on a frontier: status, dead letters, requeue, drop a host.

These back ``scrapy frontier`` (:mod:`crawler.commands.frontier`). They use
the synchronous Redis client: the command runs outside Scrapy's reactor and
each action is a handful of round trips, so asyncio would only add ceremony.
Reaching the Redis is :func:`crawler.frontier.connection.connect`'s job, the
status's :mod:`crawler.frontier.status`'s, and listing and deleting crawls
:mod:`crawler.frontier.crawls`'s.

Changes go through Lua scripts (``lua/requeue.lua``, ``lua/drop_host.lua``)
in bounded batches of one partition: each batch is atomic, so the counts
always agree with the queues even while workers crawl, and no batch holds
Redis (and with it every worker) for long.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis

from crawler.deadletter import DeadReason
from crawler.frontier.keys import Keys, older_layout, partition_of, site_of
from crawler.frontier.records import record_url
from crawler.frontier.schema import HOST, SITE
from crawler.frontier.scriptargs import drop_host_args, requeue_args, revisit_now_args
from crawler.frontier.status import FrontierStatus, Status
from crawler.frontier.store import script_source
from crawler.frontier.values import Limits
from crawler.frontier.workers import DEFAULT_LEASE_SECONDS
from crawler.urls import host_key

#: URLs moved by one script call: small enough that Redis never stalls.
BATCH = 500
#: The dead-letter reason of the URLs of a dropped host.
DROPPED = "dropped"


class AdminError(Exception):
    """A problem the operator can act on: printed as one line, exit code 1."""


def parse_host(text: str) -> str:
    """The host key (``scheme://host:port``) of what an operator typed."""
    url = text if "://" in text else f"http://{text}/"
    key = host_key(url)
    if key is None:
        raise AdminError(f"not a host: {text!r} (use example.com or https://example.com:8443)")
    return key


@dataclass(frozen=True, slots=True)
class HostMatch:
    """The hosts an operator's ``--host`` names (``dead``, ``requeue``, ``revisit-now``).

    A bare name (``github.com``) is the site: every scheme and port of the name
    (``http://github.com:80``, ``https://github.com:443``, ``http://github.com:8080``).
    That is what an operator means by it, and what the crawler parks together
    (a name that does not resolve, a breaker that kept opening): matching only
    ``http://github.com:80`` left the https dead letters dead. A name with a port
    (``github.com:8080``) is every scheme on that port; a URL or host key
    (``https://github.com:443``, ``https://github.com/``) is that one authority.
    Every authority of a name lives in one partition (:func:`partition_of`).
    """

    site: str
    #: One authority (``scheme://name:port``); None: the site's, on ``port`` if given.
    host: str | None = None
    port: int | None = None

    @classmethod
    def exact(cls, host: str) -> HostMatch:
        """Only the host key ``host``."""
        return cls(site_of(host), host=host)

    def matches(self, host: str) -> bool:
        """Whether the host key ``host`` is one of the named hosts."""
        if self.host is not None:
            return host == self.host
        return site_of(host) == self.site and (
            self.port is None or host.rpartition(":")[2] == str(self.port))

    def __str__(self) -> str:
        if self.host is not None:
            return self.host
        if self.port is not None:
            return f"{self.site}:{self.port}, every scheme"
        return f"{self.site}, every scheme and port"


def parse_host_match(text: str) -> HostMatch:
    """What an operator's ``--host`` names (see :class:`HostMatch`)."""
    key = parse_host(text)
    if "://" in text:
        return HostMatch.exact(key)
    try:
        port = urlsplit(f"http://{text.strip()}/").port
    except ValueError:  # parse_host took it, so this does not happen; be safe
        port = None
    return HostMatch(site_of(key), port=port)


def frontier_keys(
    client: redis.Redis, namespace: str, partitions: int, seen_buckets: int = 4096
) -> tuple[Keys, bool]:
    """The frontier's keys, with the layout its crawls stored if there is one.

    Workers store the layout (:meth:`Keys.layout`) when they open a frontier;
    it wins over the settings, so a wrong FRONTIER_PARTITIONS here cannot hide
    half the frontier. Returns the keys and whether a layout was found.
    """
    configured = Keys(namespace, partitions, seen_buckets)
    raw = client.get(configured.layout())
    if raw:
        try:
            layout = json.loads(raw)
            return Keys(namespace, int(layout["partitions"]),
                        int(layout.get("seen_buckets", seen_buckets))), True
        except (ValueError, KeyError, TypeError):
            pass
    return configured, False


def refuse_older_layout(client: redis.Redis, keys: Keys) -> None:
    """Raise :class:`AdminError` if the frontier was written by an older version.

    For the actions that find a host by its partition or write host records
    (drop-host, requeue): they would look in the wrong partition or mix two
    layouts. Reading counts and dead letters, and deleting, still work.
    """
    raw = client.get(keys.layout())
    older = older_layout(raw.decode(errors="replace")) if raw else None
    if older is not None:
        raise AdminError(f"frontier {keys.namespace}: {older}")


# ---------------------------------------------------------------------- dead letters


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
    host = parts[0].decode("utf-8", "replace")
    record = parts[2][16:].decode("utf-8", "replace")
    try:
        url = record_url(json.loads(record), host)
    except (ValueError, AttributeError):
        url = ""
    why = DeadReason.parse(parts[1].decode("utf-8", "replace"))
    return DeadLetter(fingerprint, host, url, why.reason, why.error, why.time, record)


def _priority(record: str) -> int:
    try:
        return int(json.loads(record).get("p", 0))
    except (ValueError, AttributeError, TypeError):
        return 0


# ---------------------------------------------------------------------- actions


class FrontierAdmin:
    """Admin operations on the frontier of one namespace.

    ``lease_seconds`` (FRONTIER_LEASE_SECONDS) judges the heartbeats of workers
    that do not state their own lease.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        *,
        concurrency: int = 4,
        delay_ms: int = 1000,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        layout_found: bool = True,
        limits: Limits | None = None,
    ) -> None:
        self.client = client
        self.keys = keys
        self.concurrency = concurrency  # for a requeued URL whose host hash is gone
        self.delay_ms = delay_ms
        self.reader = FrontierStatus(client, keys, lease_seconds=lease_seconds,
                                     layout_found=layout_found, limits=limits)
        self._requeue = client.register_script(script_source("requeue"))
        self._drop = client.register_script(script_source("drop_host"))
        self._revisit_now = client.register_script(script_source("revisit_now"))

    def partition(self, host: str) -> int:
        return partition_of(host, self.keys.partitions)

    @property
    def layout_found(self) -> bool:
        """Whether a worker ever opened this crawl (it stores the layout then)."""
        return self.reader.layout_found

    def _partitions(self, host: HostMatch | None) -> range | list[int]:
        """Only the host's partition holds its URLs (all its schemes and ports
        too): scan just that one."""
        return [self.partition(host.site)] if host is not None else range(self.keys.partitions)

    def authorities(self, host: HostMatch) -> list[str]:
        """The host keys the frontier knows that ``host`` names (its site's set)."""
        if host.host is not None:
            return [host.host]
        members = self.client.smembers(self.keys.site_hosts(self.partition(host.site),
                                                            host.site))
        return sorted(m.decode() for m in members if host.matches(m.decode()))

    def status(self, oldest: bool = True) -> Status:
        """The frontier's status (:meth:`FrontierStatus.read`)."""
        return self.reader.read(oldest)

    # --- dead letters

    def iter_dead(self, reason: str | None = None, host: str | HostMatch | None = None
                  ) -> Iterator[DeadLetter]:
        """Dead letters matching ``reason`` and ``host`` (a host key: that one
        authority; a :class:`HostMatch`: the hosts it names), streamed."""
        match = _match(host)
        for part in self._partitions(match):
            yield from self._iter_part(part, reason, match)

    def _iter_part(self, part: int, reason: str | None, host: HostMatch | None
                   ) -> Iterator[DeadLetter]:
        for fp, value in self.client.hscan_iter(self.keys.dead(part), count=BATCH):
            letter = parse_dead(fp, value)
            if (reason is None or letter.reason == reason) and (
                    host is None or host.matches(letter.host)):
                yield letter

    def dead(self, reason: str | None = None, host: str | HostMatch | None = None,
             limit: int = 0) -> list[DeadLetter]:
        """Up to ``limit`` matching dead letters (0: all)."""
        out = []
        for letter in self.iter_dead(reason, host):
            out.append(letter)
            if limit and len(out) >= limit:
                break
        return out

    def requeue(self, reason: str | None = None, host: str | HostMatch | None = None,
                front: bool = False) -> int:
        """Move matching dead letters back to their hosts' queues; how many moved.

        By default a URL goes back in admission order with its record's
        priority (behind what is queued now, as if newly found); ``front``
        puts it ahead of every queued URL of priority 0 or less. Scanning a
        hash while the script deletes from it is safe: HSCAN still returns
        every field that was there all along, and the script skips a
        fingerprint that is no longer dead.
        """
        match = _match(host)
        moved = 0
        for part in self._partitions(match):
            batch: list[bytes | int] = []
            for letter in self._iter_part(part, reason, match):
                batch += [letter.fingerprint, _priority(letter.record)]
                if len(batch) >= 2 * BATCH:
                    moved += self._requeue_batch(part, batch, front)
                    batch = []
            if batch:
                moved += self._requeue_batch(part, batch, front)
        if match is not None:  # a dropped host with nothing dead left is unblocked all the same
            part = self.partition(match.site)
            for one in self.authorities(match):
                self.client.hdel(self.keys.host(part, one), HOST.blocked,
                                 HOST.parked_reason)
        return moved

    def _requeue_batch(self, part: int, batch: list[bytes | int], front: bool) -> int:
        args = [self.keys.prefix(part), requeue_args(front, self.concurrency, self.delay_ms),
                *batch]
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
        tag = host.encode() + b"\n"
        delayed = [fp for fp, value in self.client.hscan_iter(
            self.keys.delayed_details(part), count=BATCH) if value.startswith(tag)]
        args = drop_host_args(host, DeadReason.now(DROPPED).json(), BATCH, "1")  # "1": blocked
        result = DropResult(host)
        while True:
            extra, delayed = delayed[:BATCH], delayed[BATCH:]
            queued, moved_delayed, left = self._drop(
                keys=[self.keys.counts(part)], args=[prefix, args, *extra])
            result.queued += int(queued)
            result.delayed += int(moved_delayed)
            if (not queued or not left) and not delayed:
                break
        in_flight = self.client.hget(self.keys.site(part, host), SITE.in_flight)
        result.in_flight = int(in_flight or 0)
        return result

    # --- revisits

    def revisit_now(self, host: str | HostMatch | None = None) -> tuple[int, int]:
        """Make the done URLs of ``host`` (every host if None) due for their
        revisit now; returns (hosts, URLs). Workers fetch them at their next
        claims, politely as ever; an operator's "crawl it again"."""
        match = _match(host)
        hosts = urls = 0
        if match is not None:
            part = self.partition(match.site)
            for one in self.authorities(match):
                moved, due, _ = self._revisit_now(
                    keys=[self.keys.counts(part)],
                    args=[self.keys.prefix(part), revisit_now_args(one, BATCH)])
                hosts, urls = hosts + int(moved), urls + int(due)
            return hosts, urls
        for part in self._partitions(None):
            while True:
                moved, due, left = self._revisit_now(
                    keys=[self.keys.counts(part)],
                    args=[self.keys.prefix(part), revisit_now_args(None, BATCH)])
                hosts, urls = hosts + int(moved), urls + int(due)
                if not int(left):
                    break
        return hosts, urls


def _match(host: str | HostMatch | None) -> HostMatch | None:
    """A host key is that one authority (what the admin's callers in code pass)."""
    return HostMatch.exact(host) if isinstance(host, str) else host
