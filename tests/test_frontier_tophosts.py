"""``scrapy frontier hosts --top N --by queued|errors|latency|dead``: the busiest hosts.

Against a real Redis under a private namespace: a frontier whose hosts
queue, fail, answer slowly and die differently, ranked by each measure, as
:class:`crawler.frontier.tophosts.TopHosts` and the command show them.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from crawler.deadletter import DeadReason
from crawler.frontier.tophosts import TopHosts
from crawler.frontier.values import Release
from tests.frontier_harness import Harness, admission, frontier_command


def _frontier(h: Harness) -> None:
    """q.test: 6 queued; slow.test: answers in 3 s; bad.test: fails four times in
    a row, two of its URLs die and two wait for a retry; fast.test: answers in 0.1 s."""
    f = h.frontier
    urls = [f"http://q.test/{i}" for i in range(6)]
    urls += [f"http://{name}/{i}" for name in ("slow.test", "bad.test", "fast.test")
             for i in range(4)]
    h.run(f.admit([admission(u) for u in urls]))
    leases = h.run(f.claim(100, "w")).leases
    releases = []
    failures = 0
    for lease in leases:
        if lease.host == "http://slow.test:80":
            releases.append(Release(lease.host, lease.fingerprint, "done", fetch_ms=3000))
        elif lease.host == "http://fast.test:80":
            releases.append(Release(lease.host, lease.fingerprint, "done", fetch_ms=100))
        elif lease.host == "http://bad.test:80":
            failures += 1
            op, arg = ("dead", DeadReason.now("download-error", "boom").json()) \
                if failures <= 2 else ("retry", "60000")
            releases.append(Release(lease.host, lease.fingerprint, op, arg, health="fail"))
        else:
            releases.append(Release(lease.host, lease.fingerprint, "return"))
    h.run(f.release(releases, "w"))


@pytest.fixture
def hosts(make_harness: Callable[..., Harness], redis_url: str) -> tuple[Harness, TopHosts]:
    h = make_harness("top", concurrency=8, delay_ms=0)
    _frontier(h)
    return h, TopHosts(redis.Redis.from_url(redis_url), h.keys)


def test_each_ranking(hosts: tuple[Harness, TopHosts]) -> None:
    _, top = hosts
    # Only q.test has URLs queued (bad.test's are dead or waiting to be retried).
    assert [(r.host, r.queued) for r in top.top("queued", 2)] == [("http://q.test:80", 6)]
    latency = top.top("latency", 10)
    assert [r.host for r in latency] == ["slow.test", "fast.test"]
    assert [r.latency_ms for r in latency] == [3000, 100]
    (errors,) = top.top("errors", 10)
    assert (errors.host, errors.failures, errors.dead) == ("bad.test", 4, 2)
    (dead,) = top.top("dead", 10)
    assert (dead.host, dead.dead, dead.failures) == ("http://bad.test:80", 2, 4)
    with pytest.raises(ValueError, match="--by takes one of"):
        top.top("size", 3)


def test_the_command(hosts: tuple[Harness, TopHosts], redis_url: str,
                     monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    h, _ = hosts
    opts = {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": h.keys.namespace,
            "FRONTIER_PARTITIONS": h.keys.partitions}
    code, out, err = frontier_command(monkeypatch, capsys, "hosts", "--by", "latency", **opts)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["site", "queued", "in", "flight", "latency", "ms", "failures",
                                "in", "a", "row", "breaker", "openings", "dead"]
    assert lines[1].split()[0] == "slow.test" and "3,000" in lines[1]
    code, out, err = frontier_command(monkeypatch, capsys, "hosts", "--top", "1", "--json",
                                      **opts)
    assert code == 0 and len(out.splitlines()) == 1 and '"host": "http://q.test:80"' in out
    code, out, err = frontier_command(monkeypatch, capsys, "hosts", "--top", "0", **opts)
    assert code == 2 and "--top must be 1 or more" in out + err
