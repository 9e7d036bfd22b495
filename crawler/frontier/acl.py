"""Least-privilege Redis ACL users for a shared frontier.

A fleet's Redis is reachable from every worker machine; whoever holds a
worker's password should be able to crawl, not ``FLUSHALL``, read ``CONFIG``,
run ``KEYS`` on a busy server, load a module, or touch another spider's
keys. Redis 6+ ACLs (``ACL SETUSER``, an ``aclfile``) express that: key
patterns plus an allow-list of commands.

Two users cover what runs against a frontier:

- a **worker** (``scrapy crawl``, and operators who change the frontier:
  ``scrapy frontier requeue|drop-host|revisit-now|host --delay|delete``):
  every command the crawler sends, directly or from its Lua scripts, on the
  spider's keys (every crawl id) and its seed list;
- a **reader** (``scrapy frontier status|hosts|dead|crawls|host NAME``): the
  read-only subset, on the same keys.

The command lists are the crawler's own: ``tests/test_redis_acl.py`` checks
that every ``redis.call`` of every script is in :data:`WORKER_COMMANDS` and
crawls against a real server whose only users are these two.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Final

from crawler.frontier.keys import glob_escape, seeds_taken_key

#: What every client sends on connecting (AUTH is always allowed).
CONNECTION: Final = ("hello", "ping", "select")

#: What a reader sends: no command that writes.
READ_COMMANDS: Final = (
    "get", "exists", "time", "scan",
    "hexists", "hget", "hgetall", "hkeys", "hlen", "hmget", "hscan", "hvals",
    "lrange", "llen", "smembers", "scard", "sscan",
    "zcard", "zcount", "zrange", "zrangebyscore", "zrevrangebyscore", "zscore", "zmscore",
)

#: What a worker sends besides the reads: its writes, and its scripts
#: (EVALSHA, and SCRIPT LOAD when Redis does not know a script yet).
WRITE_COMMANDS: Final = (
    "evalsha", "script|load",
    "set", "unlink", "del", "pexpire", "persist", "rename",
    "hset", "hsetnx", "hdel", "hincrby",
    "lpush", "rpush", "lpop", "ltrim",
    "sadd",
    "zadd", "zrem", "zpopmin", "zremrangebyscore", "zunionstore",
)

#: A worker's wakes (the crawl's wake channel, ``Keys.wake_channel``): its
#: scripts publish, it listens.
PUBSUB_COMMANDS: Final = ("publish", "subscribe", "unsubscribe")

WORKER_COMMANDS: Final = READ_COMMANDS + WRITE_COMMANDS + PUBSUB_COMMANDS

#: What a Redis Cluster client asks any node: the slot map and the commands'
#: key positions.
CLUSTER_COMMANDS: Final = ("cluster|slots", "cluster|shards", "cluster|nodes", "cluster|info",
                           "command", "command|info", "command|docs", "readonly")

ROLES: Final = {"worker": WORKER_COMMANDS, "reader": READ_COMMANDS}


def key_patterns(namespace: str, start_urls_key: str | None) -> list[str]:
    """The keys of a spider's frontier (``FRONTIER_NAMESPACE`` for the spider,
    every crawl id under it) and of its seed list, as ACL key patterns."""
    base = glob_escape(namespace)
    patterns = [f"{base}:*", f"{{{base}/*", f"{{{base}:*"]
    if start_urls_key:
        patterns += [glob_escape(start_urls_key), glob_escape(seeds_taken_key(start_urls_key))]
    return patterns


def password_rule(password: str | None) -> str:
    """``#SHA256`` of ``password`` (Redis stores and compares only the hash),
    else a placeholder the operator replaces with ``>the-password``."""
    if password is None:
        return ">CHANGE-ME"
    return "#" + hashlib.sha256(password.encode()).hexdigest()


def acl_line(user: str, role: str, patterns: Iterable[str], password: str | None = None,
             cluster: bool = False) -> str:
    """One ``aclfile`` line (the same words follow ``ACL SETUSER``) for ``user``
    as ``role`` (``worker`` or ``reader``)."""
    commands = (*CONNECTION, *ROLES[role], *(CLUSTER_COMMANDS if cluster else ()))
    patterns = list(patterns)
    # The wake channels, NS:wake for every crawl id: the keys' first pattern.
    channels = [f"&{patterns[0]}"] if role == "worker" and patterns else []
    return " ".join([
        "user", user, "on", password_rule(password), "resetkeys", "resetchannels",
        *(f"~{p}" for p in patterns), *channels, "-@all", *(f"+{c}" for c in commands),
    ])
