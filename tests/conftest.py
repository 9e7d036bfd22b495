"""Shared fixtures: a real Redis with a private key prefix, the simulated and real webs."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import TYPE_CHECKING

import pytest
import redis

from tests.redis_server import redis_for_tests

if TYPE_CHECKING:
    from tests.frontier_harness import Harness
    from tests.realweb import RealWebProcess, Web


#: Test files of a minute or more in all (their crawls wait on their webs'
#: delays), the longest first: collected first, they are handed out first, so
#: none is left to run alone at the end of a parallel run (``--dist loadfile``).
LONG_FILES = ("test_frontier_crawl.py", "test_realweb_politeness.py",
              "test_realweb_liveness.py", "test_soak.py", "test_retry_crawl.py",
              "test_realweb_workers.py", "test_soak_realweb.py", "test_scrapyd.py",
              "test_liveness_property.py", "test_realweb_revisit.py", "test_e2e_crawl.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long files first (in :data:`LONG_FILES`' order), the rest as collected."""
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(autouse=True)
def stop_leftover_crawls() -> Iterator[None]:
    """A crawl a failed test left running is killed with that test."""
    from tests.crawl_runner import stop_leftover_crawls

    yield
    stop_leftover_crawls()


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


@pytest.fixture
def make_harness(redis_url: str, redis_prefix: str) -> Iterator[Callable[..., Harness]]:
    """Builds frontier harnesses under the test's prefix; closes each at teardown.

    ``make_harness("x", concurrency=4, ...)`` is ``Harness(redis_url,
    redis_prefix + "x", concurrency=4, ...)``. The keys go with redis_prefix.
    ``clock=True``: its scripts run on a clock the test moves (``h.clock``,
    tests/frontier_harness.py), not on the server's.
    """
    from tests.frontier_harness import Harness

    with ExitStack() as made:

        def make(suffix: str, *, clock: bool = False, **limits: int | float) -> Harness:
            h = Harness(redis_url, redis_prefix + suffix, clock=clock, **limits)
            made.callback(h.close)
            return h

        yield make


@pytest.fixture
def realweb() -> Iterator[Callable[..., RealWebProcess]]:
    """Starts real-socket webs (tests/realweb) for one test; each stops at teardown.

    ``web = realweb(Web([Host("a.test", ...)]))`` is a started
    ``RealWebProcess``; teardown stops it even when the test failed, so no
    server process outlives the test.
    """
    from tests.realweb import RealWebProcess

    with ExitStack() as started:

        def start(spec: Web, **options: float) -> RealWebProcess:
            return started.enter_context(RealWebProcess(spec, **options))

        yield start
