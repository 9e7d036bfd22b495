"""Clients on the frontier's Redis: one server, or a Redis Cluster (``REDIS_CLUSTER``).

Every component that talks to the frontier gets its client here, so that a
crawl pointed at a Cluster (``REDIS_URL`` naming any node, ``REDIS_CLUSTER =
True``) uses cluster clients everywhere: the scheduler's (async), and the
WARC digest index's, the metrics reader's and ``scrapy frontier``'s (sync).
The frontier's keys are laid out for it (:mod:`crawler.frontier.keys`: each
partition is one hash slot).
"""

from __future__ import annotations

from typing import Any

import redis
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster


def async_client(url: str, params: dict[str, Any], cluster: bool = False
                 ) -> Redis | RedisCluster:
    """The scheduler's client.

    On one server, a pool that *waits* for a free connection: every request
    in flight may talk to Redis (start gate, robots rules) on top of claims,
    flushes and robots jobs; redis-py's default pool fails with "Too many
    connections" past 100 instead of waiting. A bounded, blocking pool also
    keeps a fleet of workers from exhausting a shared Redis's ``maxclients``.
    ``REDIS_PARAMS`` can change both numbers. On a Cluster, redis-py keeps a
    pool per node (``max_connections`` each).
    """
    if cluster:
        options = {"max_connections": 32, **params}
        options.pop("timeout", None)
        return RedisCluster.from_url(url, **options)
    options = {"max_connections": 32, "timeout": 30, **params}
    return Redis.from_pool(BlockingConnectionPool.from_url(url, **options))


def sync_client(url: str, params: dict[str, Any], cluster: bool = False,
                **overrides: Any) -> redis.Redis | redis.RedisCluster:
    """A blocking client for threads and commands (metrics, WARC digests, admin)."""
    options = {**params, **overrides}
    options.pop("timeout", None)  # a pool option of the scheduler's, not a client's
    if cluster:
        return redis.RedisCluster.from_url(url, **options)
    return redis.Redis.from_url(url, **options)
