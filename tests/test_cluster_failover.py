"""Losing a Redis master in the middle of a crawl (a real Cluster: three masters,
one replica each, on loopback).

Replication is asynchronous, and the test makes that bite: the replica of the
master about to die is cut off its master and frozen while the crawl goes
on, so the master acknowledges writes its replica never gets; then the
master is killed and the replica, thawed, takes over without them
(tests/redis_cluster.py). The crawl must go
on without a restart and fetch every page all the same (the worker admits
again what it sent in the last FRONTIER_REPLAY_SECONDS,
crawler/scheduling/replay.py), refetch no more than the lost window
allows, and say so once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.crawl_runner import finish_crawl, start_crawl
from tests.redis_cluster import (
    CLI,
    SERVER,
    Node,
    lose_master,
    replicated_cluster,
    url_of,
    wait_for,
)
from tests.simweb import SimWebProcess

pytestmark = [pytest.mark.crawl,
              pytest.mark.skipif(SERVER is None or CLI is None,
                                 reason="redis-server and redis-cli are needed for a cluster")]

#: How long the master acknowledges writes its replica never gets.
UNREPLICATED_S = 1.5


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[Node]]:
    with replicated_cluster(tmp_path) as nodes:
        yield nodes


def test_a_crawl_loses_a_master_and_no_url(cluster: list[Node], tmp_path: Path) -> None:
    with SimWebProcess(seed=29, n_hosts=16, mix={"robots:allow-all": 1.0,
                                                "page:normal": 1.0}) as web:
        started = time.monotonic()
        proc = start_crawl(web.proxy_url, web.web.seed_urls(), tmp_path / "w", {
            "REDIS_URL": url_of(cluster), "REDIS_CLUSTER": True,
            "FRONTIER_NAMESPACE": "failover", "FRONTIER_PARTITIONS": 12,
            "FRONTIER_SEEN_BUCKETS": 64, "DOWNLOAD_DELAY": 0.6, "DEPTH_LIMIT": 0,
            "PROMETHEUS_ENABLED": False, "ROBOTSTXT_OBEY": False, "FRONTIER_LEASE_SECONDS": 10,
        })
        wait_for(lambda: len(web.ledger().entries) >= 20, 60)
        failover = lose_master(cluster, UNREPLICATED_S)
        result = finish_crawl(proc, tmp_path / "w", started, timeout=120)
        ledger = web.ledger()
    assert result.returncode == 0, result.log[-3000:]
    assert "Traceback" not in result.log, result.log[-3000:]
    fetched = ledger.pages(web.web)
    expected = set(web.web.reachable(web.web.seed_urls(), obey_robots=False))
    # No URL lost: every page the crawl should reach was fetched...
    assert expected - set(fetched) == set()
    # ...some twice (their done was lost with the master), no more than were
    # fetched while the replica was frozen, and the workers in flight then.
    in_window = sum(1 for e in ledger.entries
                    if failover.cut_at <= e["arrival"] <= failover.killed_at)
    twice = sum(n - 1 for n in fetched.values() if n > 1)
    assert twice <= in_window + 64, (twice, in_window)
    # The worker said so once: Redis away, back, and the admissions sent again.
    assert result.log.count("Frontier: Redis unreachable") == 1, result.log[-3000:]
    assert result.log.count("Frontier: Redis is back") == 1
    assert result.log.count("Frontier: admitting again") == 1
    assert int(result.stat("frontier/replayed") or 0) > 0
