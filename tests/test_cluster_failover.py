"""Losing a Redis master in the middle of a crawl (a real Cluster: three masters,
one replica each, on loopback).

Replication is asynchronous, and the test makes that bite: the replica of the
master about to die is cut off its master and frozen (SIGSTOP) while the
crawl goes on, so the master acknowledges writes its replica never gets; then the master is killed
(SIGKILL) and the replica, thawed, takes over without them. The crawl must go
on without a restart and fetch every page all the same (the worker admits
again what it sent in the last FRONTIER_REPLAY_SECONDS,
crawler/scheduling/replay.py), refetch no more than the lost window
allows, and say so once.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.crawl_runner import finish_crawl, start_crawl
from tests.simweb import SimWebProcess

SERVER = shutil.which("redis-server")
CLI = shutil.which("redis-cli")
pytestmark = [pytest.mark.crawl,
              pytest.mark.skipif(SERVER is None or CLI is None,
                                 reason="redis-server and redis-cli are needed for a cluster")]

#: How long the replica is frozen while its master acknowledges writes: the
#: writes of this window are lost at the failover.
FROZEN_S = 1.5


@dataclass
class Node:
    port: int
    proc: subprocess.Popen[bytes]

    def replication(self) -> dict[str, object]:
        info = self.ask("INFO", "replication")
        assert isinstance(info, dict)
        return info

    def ask(self, *command: str) -> object:
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)
        try:
            return client.execute_command(*command)
        finally:
            client.close()


def _wait(check: object, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if check():  # type: ignore[operator]
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the cluster did not get there in time")
        time.sleep(0.1)


def _free_ports(n: int) -> list[int]:
    import socket

    found: list[int] = []
    for port in random.sample(range(20000, 30000), 3000):
        ok = True
        for p in (port, port + 10000):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
        if ok:
            found.append(port)
            if len(found) == n:
                return found
    raise RuntimeError("no free ports for a cluster")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[Node]]:
    """Six nodes: three masters with one replica each; a failover takes ~2 s."""
    nodes = []
    for port in _free_ports(6):
        folder = tmp_path / str(port)
        folder.mkdir()
        proc = subprocess.Popen(
            [SERVER, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
             "--cluster-replica-validity-factor", "0", "--save", "", "--appendonly", "no",
             "--dir", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        nodes.append(Node(port, proc))
    try:
        for node in nodes:
            _wait(lambda n=node: n.ask("PING"))
        subprocess.run([CLI, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in nodes),
                        "--cluster-replicas", "1", "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        for node in nodes:
            _wait(lambda n=node: b"cluster_state:ok" in n.ask("CLUSTER", "INFO"))
        for node in nodes:  # every replica has synced with its master
            _wait(lambda n=node: n.replication()["role"] == "master"
                  or n.replication().get("master_link_status") == "up")
        yield nodes
    finally:
        for node in nodes:
            if node.proc.poll() is None:
                node.proc.send_signal(signal.SIGCONT)
                node.proc.kill()
            node.proc.wait(10)


def _master_and_replica(nodes: list[Node]) -> tuple[Node, Node]:
    """The master of slot 0's shard, and its replica."""
    by_port = {n.port: n for n in nodes}
    for line in nodes[0].ask("CLUSTER", "NODES").decode().splitlines():  # type: ignore[union-attr]
        fields = line.split()
        if "master" in fields[2] and any(r.startswith("0-") for r in fields[8:]):
            master_id, master = fields[0], by_port[int(fields[1].split(":")[1].split("@")[0])]
            break
    for line in nodes[0].ask("CLUSTER", "NODES").decode().splitlines():  # type: ignore[union-attr]
        fields = line.split()
        if fields[3] == master_id:
            return master, by_port[int(fields[1].split(":")[1].split("@")[0])]
    raise RuntimeError("no replica")


def test_a_crawl_loses_a_master_and_no_url(cluster: list[Node], tmp_path: Path) -> None:
    master, replica = _master_and_replica(cluster)
    url = f"redis://127.0.0.1:{cluster[0].port}/0"
    with SimWebProcess(seed=29, n_hosts=16, mix={"robots:allow-all": 1.0,
                                                "page:normal": 1.0}) as web:
        started = time.monotonic()
        proc = start_crawl(web.proxy_url, web.web.seed_urls(), tmp_path / "w", {
            "REDIS_URL": url, "REDIS_CLUSTER": True, "FRONTIER_NAMESPACE": "failover",
            "FRONTIER_PARTITIONS": 12, "FRONTIER_SEEN_BUCKETS": 64, "DOWNLOAD_DELAY": 0.6,
            "DEPTH_LIMIT": 0, "PROMETHEUS_ENABLED": False,
            "ROBOTSTXT_OBEY": False, "FRONTIER_LEASE_SECONDS": 10,
        })
        _wait(lambda: len(web.ledger().entries) >= 20, 60)
        # Cut the replica off its master and freeze it before it dials again
        # (it would within a second): from here the master's writes are its own.
        replica.ask("CLIENT", "KILL", "TYPE", "master")
        replica.proc.send_signal(signal.SIGSTOP)
        frozen_at = time.time()
        time.sleep(FROZEN_S)
        os.kill(master.proc.pid, signal.SIGKILL)
        killed_at = time.time()
        time.sleep(0.5)
        replica.proc.send_signal(signal.SIGCONT)
        _wait(lambda: replica.replication()["role"] == "master", 30)
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
    in_window = sum(1 for e in ledger.entries if frozen_at <= e["arrival"] <= killed_at)
    twice = sum(n - 1 for n in fetched.values() if n > 1)
    assert twice <= in_window + 64, (twice, in_window)
    # The worker said so once: Redis away, back, and the admissions sent again.
    assert result.log.count("Frontier: Redis unreachable") == 1, result.log[-3000:]
    assert result.log.count("Frontier: Redis is back") == 1
    assert result.log.count("Frontier: admitting again") == 1
    assert int(result.stat("frontier/replayed") or 0) > 0
