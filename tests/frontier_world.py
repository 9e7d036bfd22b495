"""A frontier built by the real store, for the admin's and ``scrapy frontier``'s tests.

The state is made with the real :class:`Frontier` (admit, claim, release), so
the admin scripts are checked against what workers write.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import redis
from redis.asyncio import Redis as AsyncRedis

from crawler.frontier.admin import FrontierAdmin, frontier_keys
from crawler.frontier.keys import Keys
from crawler.frontier.store import Frontier
from crawler.frontier.values import Admission, Lease, Limits, Release
from crawler.urls import canonical_url, host_key, url_fingerprint

PARTITIONS = 4


def admission(url: str, priority: int = 0) -> Admission:
    canon = canonical_url(url)
    assert canon
    host = host_key(canon)
    assert host
    record = json.dumps({"u": canon, **({"p": priority} if priority else {})})
    return Admission(canon, host, url_fingerprint(canon), record, priority)


class World:
    """A frontier built by the real store, plus the admin on a sync client."""

    def __init__(self, url: str, namespace: str, **limits: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.aclient = AsyncRedis.from_url(url)
        self.keys = Keys(namespace, PARTITIONS, seen_buckets=64)
        self.frontier = Frontier(self.aclient, self.keys, Limits(**limits))
        self.client = redis.Redis.from_url(url)
        # as the command does: the layout stored by workers, else the settings
        keys, found = frontier_keys(self.client, namespace, PARTITIONS, seen_buckets=64)
        assert keys == self.keys
        self.admin = FrontierAdmin(self.client, keys, layout_found=found)

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def admit(self, *urls: str, priority: int = 0) -> None:
        self.run(self.frontier.admit([admission(u, priority) for u in urls]))

    def claim_all(self, worker: str = "w") -> list[Lease]:
        leases: list[Lease] = []
        while batch := self.run(self.frontier.claim(50, worker)).leases:
            leases += batch
        return leases

    def release(self, worker: str, *releases: Release) -> None:
        assert self.run(self.frontier.release(releases, worker))[:2] == (len(releases), 0)

    def structure_counts(self) -> dict[str, int]:
        """Counts taken from the queues themselves, to check the counters against."""
        queued = dead = delayed = 0
        for part in range(PARTITIONS):
            prefix = self.keys.prefix(part)
            queued += sum(self.client.zcard(k) for k in self.client.scan_iter(
                match=f"{prefix}:q:*".replace("{", "\\{").replace("}", "\\}")))
            dead += self.client.hlen(self.keys.dead(part))
            delayed += self.client.zcard(f"{prefix}:delayed")
        return {"queued": queued, "dead": dead, "delayed": delayed}

    def assert_consistent(self) -> dict[str, int]:
        counts = self.run(self.frontier.counts())
        assert {k: counts[k] for k in ("queued", "dead", "delayed")} == self.structure_counts()
        return counts

    def close(self) -> None:
        self.run(self.aclient.aclose())
        self.loop.close()
        self.client.close()


def lease_url(lease: Lease) -> str:
    return str(json.loads(lease.record)["u"])


def filled_world(url: str, namespace: str) -> World:
    """a.test: 5 URLs, b.test: 3, c.test: 2; then 3 dead, 1 done, the rest queued."""
    w = World(url, namespace, concurrency=10, delay_ms=0)
    w.admit(*[f"http://a.test/{i}" for i in range(5)], *[f"http://b.test/{i}" for i in range(3)],
            *[f"http://c.test/{i}" for i in range(2)])
    by_url = {lease_url(lease): lease for lease in w.claim_all("w1")}
    assert len(by_url) == 10

    def rel(url: str, op: str, arg: str = "") -> Release:
        lease = by_url.pop(url)
        return Release(lease.host, lease.fingerprint, op, arg)

    w.release("w1",
              rel("http://a.test/0", "dead", '{"reason":"download-error","error":"TimeoutError",'
                                             f'"t":{round(time.time())}}}'),
              rel("http://a.test/1", "dead",
                  '{"reason":"download-error","error":"DNSLookupError"}'),
              rel("http://b.test/0", "dead", '{"reason":"http-404"}'),
              rel("http://c.test/0", "done"),
              *[Release(x.host, x.fingerprint, "return") for x in by_url.values()])
    return w


def sites_world(url: str, namespace: str) -> World:
    """One dead letter on each of g.test's authorities (http, https, http on 8080), on
    another site of its domain (www.g.test) and on another name (other.test)."""
    w = World(url, namespace, concurrency=10, delay_ms=0)
    w.admit("http://g.test/0", "https://g.test/1", "http://g.test:8080/2",
            "https://www.g.test/3", "http://other.test/4")
    dead = '{"reason":"download-error","error":"TimeoutError"}'
    w.release("w1", *(Release(lease.host, lease.fingerprint, "dead", dead)
                      for lease in w.claim_all("w1")))
    return w
