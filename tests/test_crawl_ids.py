"""Crawl ids: one namespace per crawl, listed and deleted with ``scrapy frontier``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from redis.asyncio import Redis

from crawler.frontier import refusals
from crawler.frontier.keys import Keys, crawl_namespace, layout_json
from crawler.frontier.store import Frontier
from crawler.frontier.values import Limits
from tests.crawl_runner import REPO, run_crawl
from tests.frontier_harness import admission
from tests.simweb import SimWebProcess


@pytest.mark.parametrize(("crawl_id", "expected"), [
    (None, "frontier:broad"), ("", "frontier:broad"), ("2026-12", "frontier:broad:2026-12"),
    ("monthly.v2_a", "frontier:broad:monthly.v2_a"),
])
def test_a_crawl_id_extends_the_namespace(crawl_id: str | None, expected: str) -> None:
    assert crawl_namespace("frontier:%(spider)s", "broad", crawl_id) == expected


@pytest.mark.parametrize("crawl_id", ["a b", "x*", "-lead", "a" * 65, "é"])
def test_a_bad_crawl_id_is_refused_by_name(crawl_id: str) -> None:
    with pytest.raises(ValueError, match="crawl_id"):
        crawl_namespace("frontier:%(spider)s", "broad", crawl_id)


def _fill(url: str, namespace: str, hosts: int, layout: str | None = None) -> None:
    """A small frontier under ``namespace``, with its layout and a last heartbeat."""
    async def go() -> None:
        client = Redis.from_url(url)
        keys = Keys(namespace, partitions=4, seen_buckets=64)
        await client.set(f"{namespace}:layout", layout or layout_json(4, 64))
        await client.set(keys.seen_at(), int(time.time()) - 3 * 86400)
        await Frontier(client, keys, Limits()).admit(
            [admission(f"http://h{i}.test/p{j}") for i in range(hosts) for j in range(2)])
        await refusals.note(client, keys, {"trap-calendar": 1},
                            {"trap-calendar": ["http://h0.test/cal/2090/01"]})
        await client.aclose()
    asyncio.run(go())


def _frontier(env_url: str, base: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "frontier", *argv, "-s", f"REDIS_URL={env_url}",
         "-s", f"FRONTIER_NAMESPACE={base}"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False)


def test_crawls_are_listed_and_one_is_deleted_alone(redis_url: str, redis_prefix: str) -> None:
    base = f"{redis_prefix}f:%(spider)s"
    default, monthly = f"{redis_prefix}f:broad", f"{redis_prefix}f:broad:2026-11"
    _fill(redis_url, default, 3)
    _fill(redis_url, monthly, 4)
    listed = _frontier(redis_url, base, "crawls", "--json")
    assert listed.returncode == 0, listed.stderr
    crawls = {c["crawl_id"]: c for c in map(json.loads, listed.stdout.splitlines())}
    assert set(crawls) == {"", "2026-11"}
    assert crawls["2026-11"]["namespace"] == monthly
    assert 3 * 86400 - 60 < crawls["2026-11"]["idle_s"] < 3 * 86400 + 60

    client = redis.Redis.from_url(redis_url)
    before = {k for k in client.scan_iter(match=f"*{redis_prefix}*", count=1000)}
    dry = _frontier(redis_url, base, "delete", "--crawl-id", "2026-11")
    assert dry.returncode == 0 and "add --yes" in dry.stdout
    assert {k for k in client.scan_iter(match=f"*{redis_prefix}*", count=1000)} == before

    done = _frontier(redis_url, base, "delete", "--crawl-id", "2026-11", "--yes")
    assert done.returncode == 0, done.stderr
    left = {k.decode() for k in client.scan_iter(match=f"*{redis_prefix}*", count=1000)}
    assert not [k for k in left if "2026-11" in k]
    assert {k for k in before if b"2026-11" not in k} == {k.encode() for k in left}
    client.close()


def test_a_crawl_with_live_workers_is_not_deleted_without_force(
    redis_url: str, redis_prefix: str
) -> None:
    base = f"{redis_prefix}f:%(spider)s"
    namespace = f"{redis_prefix}f:broad:live"
    _fill(redis_url, namespace, 2)
    client = redis.Redis.from_url(redis_url)
    client.hset(f"{namespace}:workers", "box:1", json.dumps({"seen": time.time()}))
    refused = _frontier(redis_url, base, "delete", "--crawl-id", "live", "--yes")
    assert refused.returncode == 1 and "alive" in refused.stderr
    assert client.exists(f"{namespace}:layout")
    old = _frontier(redis_url, base, "delete", "--idle-days", "2", "--yes", "--force")
    assert old.returncode == 0, old.stderr
    assert not client.exists(f"{namespace}:layout")
    client.close()


@pytest.mark.crawl
def test_the_same_crawl_id_continues_and_a_new_one_starts_afresh(tmp_path: Path) -> None:
    """Run 1 (id a) crawls the web; run 2 (id a again, same JOBDIR) has nothing left
    to fetch; run 3 (id b) fetches every page again."""
    mix = {"robots:allow-all": 1.0, "page:normal": 1.0}
    settings = {"JOBDIR": str(tmp_path / "job"), "DEPTH_LIMIT": 1, "DOWNLOAD_DELAY": 0.05}
    with SimWebProcess(seed=9, n_hosts=4, mix=mix) as web:
        seeds = web.web.seed_urls()
        counts = []
        for run, crawl_id in enumerate(("a", "a", "b")):
            result = run_crawl(web.proxy_url, seeds, tmp_path / f"r{run}",
                               {**settings, "FRONTIER_CRAWL_ID": crawl_id})
            assert result.returncode == 0, result.log[-3000:]
            assert f"Frontier frontier:broad:{crawl_id} on" in result.log
            counts.append(len(web.ledger().entries))
    first, second, third = counts[0], counts[1] - counts[0], counts[2] - counts[1]
    assert first > 8
    assert second == 0  # everything was seen under id "a"
    assert third >= first - 4  # a fresh crawl (robots.txt may come from the shared cache)


#: What versions before the host-name politeness layout stored.
OLDER_LAYOUT = json.dumps({"partitions": 4, "seen_buckets": 64})


@pytest.mark.crawl
def test_a_frontier_of_the_older_layout_is_refused_not_mixed(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A frontier written when hosts were paced per scheme://host:port is neither
    crawled nor changed by this version (its hosts live in other partitions);
    it can still be listed and deleted."""
    base = f"{redis_prefix}f:%(spider)s"
    namespace = f"{redis_prefix}f:broad:old"
    _fill(redis_url, namespace, 2, layout=OLDER_LAYOUT)
    client = redis.Redis.from_url(redis_url)
    before = {k: client.type(k) for k in client.scan_iter(match=f"*{namespace}*", count=1000)}

    result = run_crawl(None, None, tmp_path / "crawl",
                       {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": base,
                        "FRONTIER_CRAWL_ID": "old", "FRONTIER_PARTITIONS": 4,
                        "FRONTIER_SEEN_BUCKETS": 64, "FRONTIER_CONNECT_WAIT": 5}, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.log, result.log[-3000:]
    errors = [line for line in result.log.splitlines() if "] ERROR: " in line]
    assert len(errors) == 1 and "written by an older broadcrawl" in errors[0], errors
    assert "crawl_id" in errors[0]
    requeue = _frontier(redis_url, base, "requeue", "--crawl-id", "old", "--yes")
    assert requeue.returncode == 1 and "written by an older broadcrawl" in requeue.stderr
    after = {k: client.type(k) for k in client.scan_iter(match=f"*{namespace}*", count=1000)}
    assert after == before  # nothing written into it

    listed = _frontier(redis_url, base, "crawls", "--json")
    assert listed.returncode == 0 and namespace in listed.stdout
    done = _frontier(redis_url, base, "delete", "--crawl-id", "old", "--yes")
    assert done.returncode == 0, done.stderr
    assert not client.exists(f"{namespace}:layout")
    client.close()
