"""Shared fixtures: a real Redis with a private key prefix, the simulated web."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.redis_server import redis_for_tests


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a real Redis (found or started; see tests/redis_server.py)."""
    with redis_for_tests() as url:
        yield url


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix no other test uses; its keys (and only those) go at teardown."""
    prefix = f"test:{uuid.uuid4().hex[:12]}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    # The frontier's keys put the prefix inside a hash tag: "{test:abc:f/p3}:...".
    keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()
