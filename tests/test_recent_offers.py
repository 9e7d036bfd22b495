"""A worker's memory of the URLs it offered lately (crawler/scheduling/recent.py):
the generations as units, then a real crawl with and without it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from crawler.frontier.keys import Count, Keys
from crawler.scheduling.recent import RecentOffers
from tests.crawl_runner import run_crawl
from tests.simweb import SimWebProcess

# ---------------------------------------------------------------- units


def test_an_offered_url_is_known_until_two_generations_pass() -> None:
    recent = RecentOffers(3)
    recent.offered("http://a.test/1")
    assert recent.known("http://a.test/1")
    assert not recent.known("http://a.test/2")
    for n in range(2, 5):  # fills the first generation: 1, 2 and 3 move to the old one
        recent.offered(f"http://a.test/{n}")
    assert recent.known("http://a.test/1")  # ...and 1, asked for, comes back to the new
    for n in range(5, 8):
        recent.offered(f"http://a.test/{n}")
    assert recent.known("http://a.test/1")
    assert not recent.known("http://a.test/2")  # two generations without a look: gone
    assert len(recent) <= 2 * 3


def test_forgotten_urls_and_a_size_of_zero() -> None:
    recent = RecentOffers(100)
    recent.offered("http://a.test/1")
    recent.offered("http://a.test/2")
    recent.forget(["http://a.test/1"])
    assert not recent.known("http://a.test/1") and recent.known("http://a.test/2")
    off = RecentOffers(0)
    off.offered("http://a.test/1")
    assert not off.known("http://a.test/1") and len(off) == 0


# ---------------------------------------------------------------- in a crawl


@pytest.fixture(scope="module")
def sim() -> Iterator[SimWebProcess]:
    with SimWebProcess(seed=31, n_hosts=12, mix="clean") as process:
        yield process


def _redis_duplicates(client: redis.Redis, namespace: str, partitions: int) -> int:
    keys = Keys(namespace, partitions, 64)
    return sum(int(client.hget(keys.counts(p), Count.DUP) or 0) for p in range(partitions))


@pytest.mark.crawl
def test_links_known_to_the_worker_skip_redis_and_nothing_is_lost(
    sim: SimWebProcess, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis_url)
    runs = {}
    for size in (65536, 0):
        sim.reset()
        namespace = f"{redis_prefix}recent{size}"
        result = run_crawl(sim.proxy_url, sim.web.seed_urls(), tmp_path / str(size), {
            "REDIS_URL": redis_url, "FRONTIER_NAMESPACE": namespace,
            "FRONTIER_PARTITIONS": 2, "FRONTIER_SEEN_BUCKETS": 64,
            "DOWNLOAD_DELAY": 0.05, "ROBOTSTXT_OBEY": False, "DEPTH_LIMIT": 0,
            "FRONTIER_RECENT_OFFERS": size,
        }, timeout=120)
        assert result.returncode == 0, result.log[-3000:]
        fetched = Counter(sim.web.page_identity(e["host"], e["path"])
                          for e in sim.ledger().entries)
        runs[size] = (result, fetched, _redis_duplicates(client, namespace, 2))
    client.close()

    (kept, kept_fetched, kept_redis_dups), (plain, plain_fetched, plain_redis_dups) = \
        runs[65536], runs[0]
    # The same pages, each fetched once, with or without the worker's memory.
    assert kept_fetched == plain_fetched and set(kept_fetched.values()) == {1}
    for stat in ("frontier/offered", "frontier/admitted", "frontier/duplicates"):
        assert kept.stat(stat) == plain.stat(stat), stat
    # Most duplicates never reached Redis; the rest were found there.
    local = int(kept.stat("frontier/duplicates/local") or 0)
    assert local > 0.5 * int(kept.stat("frontier/duplicates"))
    assert kept_redis_dups + local == int(kept.stat("frontier/duplicates"))
    assert plain.stat("frontier/duplicates/local") is None
    assert plain_redis_dups == int(plain.stat("frontier/duplicates"))
