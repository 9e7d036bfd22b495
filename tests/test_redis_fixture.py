"""The test Redis: real, isolated by prefix, and startable where none runs."""

from __future__ import annotations

import redis

from tests.redis_server import answers, started_redis


def test_fixture_redis_is_real_and_prefixed(redis_url: str, redis_prefix: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.set(f"{redis_prefix}k", "v")
    assert client.get(f"{redis_prefix}k") == b"v"
    assert client.info("server")["redis_version"]


def test_can_start_a_private_redis_server() -> None:
    with started_redis() as server:
        assert server.url.startswith("redis://127.0.0.1:")
        assert redis.Redis.from_url(server.url).ping()
    assert not answers(server.url)
