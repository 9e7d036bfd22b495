"""A frontier that distrusts what it reads: records planted in a shared Redis
by someone who can write to it.

Queue entries that are not what a worker writes become dead letters with
reason ``bad-record`` and never a request; site records with nonsense pacing
fields stop no claim. Checked on what the simulated web's proxy received.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.asyncio import Redis

from crawler.frontier.keys import Keys, partition_of, site_of
from crawler.frontier.store import Frontier
from crawler.frontier.values import Admission, Limits
from crawler.urls import canonical_url, host_key, url_fingerprint
from tests.crawl_runner import REPO, proxy_env, run_crawl
from tests.simweb import SimWebProcess

pytestmark = pytest.mark.crawl

PARTITIONS, BUCKETS = 4, 256
#: Planted records, by what is wrong with them.
HOSTILE = {
    "local-file": '{"u":"file:///etc/passwd"}',
    "other-host": '{"u":"http://evil.test/steal"}',
    "proxy-meta": '{"u":"/planted-proxy","m":{"proxy":"http://127.0.0.1:9"}}',
    "not-json": "<script>",
    "not-a-callback": '{"u":"/planted-close","cb":"close"}',
    "huge-depth": '{"u":"/planted-depth","d":1e300}',
}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimWebProcess]:
    with SimWebProcess(seed=47, n_hosts=3, mix="clean") as process:
        yield process


def _plant(redis_url: str, namespace: str, host: str, nonsense_site: str) -> None:
    """Admit the hostile records into ``host``'s queue with the frontier's own
    script (what anyone with write access can do), and spoil the pacing
    fields of ``nonsense_site``'s record."""
    async def admit() -> None:
        client = Redis.from_url(redis_url)
        frontier = Frontier(client, Keys(namespace, PARTITIONS, BUCKETS), Limits())
        items = []
        for name, record in HOSTILE.items():
            canon = canonical_url(f"{host}/planted-{name}")
            assert canon is not None
            items.append(Admission(canon, host, url_fingerprint(canon), record))
        result = await frontier.admit(items)
        assert result.added == len(HOSTILE)
        await client.aclose()

    asyncio.run(admit())
    keys = Keys(namespace, PARTITIONS, BUCKETS)
    site = site_of(nonsense_site)
    client = redis.Redis.from_url(redis_url)
    client.hset(f"{keys.prefix(partition_of(nonsense_site, PARTITIONS))}:g:{site}", mapping={
        "c": "lots", "dl": "soon", "fl": "nan", "t": "-inf", "s": "later", "ad": "x"})
    client.close()


def test_planted_records_are_dead_letters_and_never_requests(
    sim: SimWebProcess, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    namespace = redis_prefix + "distrust"
    seeds = sim.web.seed_urls()
    hosts = [host_key(url) for url in seeds]
    assert all(hosts)
    _plant(redis_url, namespace, str(hosts[0]), str(hosts[1]))
    result = run_crawl(sim.proxy_url, seeds, tmp_path, {
        "REDIS_URL": redis_url, "FRONTIER_NAMESPACE": namespace,
        "FRONTIER_PARTITIONS": PARTITIONS, "FRONTIER_SEEN_BUCKETS": BUCKETS,
        "DOWNLOAD_DELAY": 0.05, "DEPTH_LIMIT": 1, "PROMETHEUS_ENABLED": False,
        "CLOSESPIDER_TIMEOUT": 60,
    }, timeout=90)
    assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
    assert "'finish_reason': 'finished'" in result.log
    assert int(result.stat("frontier/bad_records")) == len(HOSTILE)
    # None became a request: the proxy saw no planted path and no other host...
    entries = sim.ledger().entries
    assert not [e for e in entries if "planted" in e["path"]]
    assert {e["host"] for e in entries} <= {url.split("/")[2] for url in seeds}
    assert not [item for item in result.items if not item["url"].startswith("http")]
    # ...every seed's site was crawled, the spoiled one too...
    assert {url.split("/")[2] for url in seeds} <= {e["host"] for e in entries}
    # ...and each is a dead letter an operator can list and requeue.
    done = subprocess.run(
        [sys.executable, "-m", "scrapy", "frontier", "dead", "--reason", "bad-record",
         "--json", "--redis-url", redis_url, "-s", f"FRONTIER_NAMESPACE={namespace}",
         "-s", f"FRONTIER_PARTITIONS={PARTITIONS}", "-s", f"FRONTIER_SEEN_BUCKETS={BUCKETS}"],
        cwd=REPO, env=proxy_env(None), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    dead = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(dead) == len(HOSTILE), dead
    assert all(d["host"] == hosts[0] for d in dead)
    errors = " ".join(d["error"] for d in dead)
    for expected in ("not an http(s) URL", "not a URL of its queue's host", "'m': keys not in",
                     "not JSON", "'close' is not a method", "'d': float"):
        assert expected in errors, (expected, errors)
