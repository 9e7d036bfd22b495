"""Clients on the frontier's Redis: one server, or a Redis Cluster (``REDIS_CLUSTER``).

Every component that talks to the frontier gets its client here, so that a
crawl pointed at a Cluster (``REDIS_URL`` naming any node, ``REDIS_CLUSTER =
True``) uses cluster clients everywhere: the scheduler's (async), and the
WARC digest index's, the metrics reader's and ``scrapy frontier``'s (sync).
The frontier's keys are laid out for it (:mod:`crawler.frontier.keys`: each
partition is one hash slot).

:func:`connect` is how a command outside a crawl (``scrapy frontier``, tests,
the soak) reaches a frontier: a URL, else a job folder's embedded Redis,
started for the duration if need be. Its errors say what to do in one line,
without the password.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster

from crawler.frontier.embedded import EmbeddedRedis
from crawler.redaction import one_line, safe_url, url_password

#: What a command's client waits for: a dead Redis is reported in seconds,
#: a slow scan over a large frontier is not cut short.
COMMAND_TIMEOUTS: dict[str, Any] = {"socket_connect_timeout": 5, "socket_timeout": 30}
_DOWN = (redis.ConnectionError, redis.TimeoutError, OSError)


class ConnectError(Exception):
    """The frontier's Redis cannot be used: there is none, it did not start, or it
    does not answer. The message is one line an operator can act on."""


class RedisUnreachable(ConnectError):
    """Redis did not answer; the message names the URL without its password."""

    def __init__(self, url: str, error: BaseException | str, secret: str | None = None
                 ) -> None:
        super().__init__(f"cannot reach Redis at {safe_url(url)}: {one_line(error, secret)}")


#: The environment variable a worker takes its Redis URL from when neither
#: ``REDIS_URL`` nor ``REDIS_URL_FILE`` is set.
URL_VARIABLE = "BROADCRAWL_REDIS_URL"


def configured_url(settings: Any, environ: Mapping[str, str] = os.environ) -> str | None:
    """The frontier's Redis URL: the ``REDIS_URL`` setting, else the URL in the
    file ``REDIS_URL_FILE`` names (its first word), else
    ``$BROADCRAWL_REDIS_URL``; None for the crawl's embedded Redis.

    A setting given with ``-s`` shows in every ``ps`` listing, in scrapyd's
    job arguments and in shell histories, password and all; a file only its
    owner reads, or a service's environment, shows in none of them. A file
    that cannot be read is a :class:`ConnectError` naming the file, never
    its content.
    """
    url = settings.get("REDIS_URL")
    if url:
        return str(url)
    path = settings.get("REDIS_URL_FILE")
    if path:
        try:
            lines = Path(path).read_text().split()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not text"
            raise ConnectError(f"REDIS_URL_FILE {path}: cannot read it ({reason})") from None
        if not lines:
            raise ConnectError(f"REDIS_URL_FILE {path} is empty: put the Redis URL in it")
        return lines[0]
    return environ.get(URL_VARIABLE) or None


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
        # No retries inside redis-py: a node that fails reaches the scheduler's
        # own retry (RedisHealth), which knows that a failover may have lost
        # writes and admits the last ones again (scheduling/replay.py).
        options = {"max_connections": 32, "cluster_error_retry_attempts": 0, **params}
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
    options = {**COMMAND_TIMEOUTS, **(params or {})}
    if redis_url:
        with _url_connection(redis_url, options, cluster) as conn:
            yield conn
    else:
        assert embedded_dir is not None
        with _embedded_connection(embedded_dir, options, notice) as conn:
            yield conn


@contextmanager
def _url_connection(url: str, options: dict[str, Any], cluster: bool
                    ) -> Iterator[Connection]:
    client = sync_client(url, {}, cluster, **options)
    try:
        try:
            client.ping()
        except _DOWN as exc:
            raise RedisUnreachable(url, exc, url_password(url)) from None
        yield Connection(client, safe_url(url))
    finally:
        client.close()


@contextmanager
def _embedded_connection(folder: Path, options: dict[str, Any],
                         notice: Callable[[str], None]) -> Iterator[Connection]:
    if not folder.is_dir():
        raise ConnectError(
            f"no frontier in {folder}: no crawl ran there (set JOBDIR or --spider "
            "to the crawl's, or --redis-url for a shared frontier)")
    server = EmbeddedRedis(folder)
    try:
        server.start()
    except (OSError, RuntimeError, ImportError, subprocess.SubprocessError) as exc:
        raise ConnectError(f"could not start the embedded Redis in {folder}: "
                           + one_line(exc)) from None
    client = redis.Redis.from_url(server.url, **options)
    try:
        try:
            client.ping()
        except _DOWN as exc:
            raise RedisUnreachable(server.url, exc) from None
        yield Connection(client, server.url, folder, server.started)
    finally:
        client.close()
        if not server.leave(shut_down=server.started) and server.started:
            notice(f"leaving the embedded Redis in {folder} running: a crawl uses it")
