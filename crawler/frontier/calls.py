"""One Lua script call per partition, sent as one round trip.

Every frontier operation that spans partitions (an admission batch, a claim,
releases, the leftover and site-facts reads) is a list of script calls, one
per partition. How such a list reaches Redis is a concern of its own, shared
by :mod:`crawler.frontier.store` and the modules beside it: pipelined
EVALSHA on one Redis (a script the server lost is loaded again), node by
node on a Redis Cluster, where redis-py refuses scripts in pipelines.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError

#: One script call: the script (redis-py's), its keys and its arguments.
Call = tuple[Any, list[Any], list[Any]]


async def run_per_partition(client: Redis | RedisCluster, calls: list[Call]) -> list[Any]:
    """Run one script per partition: pipelined on one Redis. On a Redis Cluster,
    where redis-py refuses scripts in pipelines (partitions live on different
    nodes), the calls to each node run one after the other and the nodes in
    parallel (redis-py's async cluster client mixes up a node's connections
    when several commands to it start at once)."""
    if not calls:
        return []
    if isinstance(client, RedisCluster):
        return await _per_node(client, calls)
    # EVALSHA by hand: a pipeline of Script calls first asks the server
    # whether it has the scripts (SCRIPT EXISTS, a round trip of its own,
    # on every call). A server that lost them (restarted, flushed) answers
    # NOSCRIPT, which ran nothing: those calls run again as Script calls,
    # which load the script. "async with": a pipeline that fails before
    # it sends (Redis down) must still give its connection back.
    async with client.pipeline(transaction=False) as pipe:
        for script, keys, args in calls:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        replies = await pipe.execute(raise_on_error=False)
    for reply in replies:
        if isinstance(reply, Exception) and not isinstance(reply, NoScriptError):
            raise reply
    return [await script(keys=keys, args=args) if isinstance(reply, NoScriptError)
            else reply for (script, keys, args), reply in zip(calls, replies, strict=True)]


async def _per_node(client: RedisCluster, calls: list[Call]) -> list[Any]:
    await client.initialize()  # the slot map (a no-op once loaded)
    by_node: dict[str, list[int]] = defaultdict(list)
    for i, (_, keys, _) in enumerate(calls):
        by_node[client.get_node_from_key(keys[0]).name].append(i)
    results: list[Any] = [None] * len(calls)

    async def run(indexes: list[int]) -> None:
        for i in indexes:
            script, keys, args = calls[i]
            results[i] = await script(keys=keys, args=args)

    await asyncio.gather(*(run(indexes) for indexes in by_node.values()))
    return results
