"""The Redis seed list: batches are taken atomically and never lost."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import redis
from redis.asyncio import Redis

from crawler.frontier.keys import seeds_taken_key
from crawler.frontier.seedfeed import SeedFeed


def _run(redis_url: str, body: Any) -> Any:
    async def main() -> Any:
        client = Redis.from_url(redis_url)
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


def test_batches_are_noted_until_acknowledged(redis_url: str, redis_prefix: str) -> None:
    key = redis_prefix + "start_urls"
    sync = redis.Redis.from_url(redis_url)
    sync.rpush(key, "http://a.test/", "http://b.test/\nhttp://c.test/", "http://d.test/")

    async def body(client: Redis) -> None:
        feed = SeedFeed(client, key, "w1", batch_size=2)
        first = await feed.take()
        # an item may hold several lines
        assert first == [b"http://a.test/", b"http://b.test/", b"http://c.test/"]
        assert json.loads(sync.hget(seeds_taken_key(key), "w1")) == [
            "http://a.test/", "http://b.test/\nhttp://c.test/"]
        # not acknowledged (say the worker restarted): the same batch again
        assert await SeedFeed(client, key, "w1", batch_size=2).take() == first
        await feed.ack()
        assert await feed.take() == [b"http://d.test/"]
        await feed.ack()
        assert await feed.take() == []
        assert not sync.exists(seeds_taken_key(key)) and not sync.exists(key)

    _run(redis_url, body)


def test_a_gone_workers_batch_goes_back_to_the_head(redis_url: str, redis_prefix: str) -> None:
    key, workers = redis_prefix + "start_urls", redis_prefix + "workers"
    sync = redis.Redis.from_url(redis_url)
    sync.rpush(key, *[f"http://h{i}.test/" for i in range(5)])
    now = time.time()
    sync.hset(workers, mapping={"alive": json.dumps({"seen": now}),
                                "gone": json.dumps({"seen": now - 600})})

    async def body(client: Redis) -> None:
        gone = SeedFeed(client, key, "gone", batch_size=2)
        alive = SeedFeed(client, key, "alive", batch_size=2)
        assert await gone.take() == [b"http://h0.test/", b"http://h1.test/"]
        assert await alive.take() == [b"http://h2.test/", b"http://h3.test/"]
        # only the batch of the gone worker (silent for ten leases) moves
        other = SeedFeed(client, key, "other", batch_size=10)
        assert await other.adopt_orphans(workers, lease_seconds=60) == 2
        assert sync.lrange(key, 0, -1) == [b"http://h0.test/", b"http://h1.test/",
                                           b"http://h4.test/"]
        assert sync.hkeys(seeds_taken_key(key)) == [b"alive"]
        # a clean stop gives the batch back too
        assert await alive.give_back() == 2
        assert sync.llen(key) == 5 and not sync.exists(seeds_taken_key(key))

    _run(redis_url, body)
