"""How a worker tells an outage of Redis from a refusal, and a failover's
aftershocks from a new outage (crawler/scheduling/health.py)."""

from __future__ import annotations

import logging

import pytest
from redis.exceptions import AuthenticationError, NoPermissionError
from redis.exceptions import ConnectionError as RedisConnectionError
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from crawler.scheduling.health import SETTLE_SECONDS, RedisHealth


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _health() -> tuple[RedisHealth, _Clock, list[bool], list[str]]:
    clock, backs, refusals = _Clock(), [], []
    health = RedisHealth(MemoryStatsCollector(get_crawler()), lambda: refusals.append("x"),
                         backs.append, clock)
    return health, clock, backs, refusals


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage().split(" (")[0].split(" after")[0] for r in caplog.records
            if r.levelno >= logging.WARNING]


def test_a_failover_and_its_aftershocks_are_one_outage(caplog: pytest.LogCaptureFixture
                                                       ) -> None:
    health, clock, backs, _ = _health()
    down = RedisConnectionError("Connection closed by server.")
    with caplog.at_level(logging.WARNING):
        health.trouble(down)
        health.trouble(down)
        clock.now += 1.5
        health.ok()  # another node answered
        clock.now += 0.5
        health.trouble(down)  # the failed master's slots are not served yet
        clock.now += 1
        health.ok()  # its replica serves them
        health.ok()
    assert _warnings(caplog) == ["Frontier: Redis unreachable", "Frontier: Redis is back"]
    assert "after 1.5 s" in caplog.records[1].getMessage()
    assert backs == [False, True]  # the replay runs at every return, says so once
    assert health.stats.get_value("frontier/redis_errors") == 3

    caplog.clear()
    clock.now += SETTLE_SECONDS + 1  # long after: a new outage
    with caplog.at_level(logging.WARNING):
        health.trouble(down)
        health.ok()
    assert _warnings(caplog) == ["Frontier: Redis unreachable", "Frontier: Redis is back"]
    assert backs[-1] is False


@pytest.mark.parametrize("error", [
    NoPermissionError("this user has no permissions to run the 'evalsha' command"),
    AuthenticationError("invalid username-password pair or user is disabled."),
])
def test_a_refusal_is_one_error_and_ends_the_crawl(error: Exception,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    health, _, backs, refusals = _health()
    with caplog.at_level(logging.WARNING):
        health.trouble(error)
        health.trouble(error)
        health.ok()
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1 and errors[0].levelno == logging.ERROR
    assert "Redis refused this worker" in errors[0].getMessage()
    assert refusals == ["x"] and backs == [] and health.refused
