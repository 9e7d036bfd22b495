"""The frontier on a real Redis Cluster (three masters started for the test, on loopback).

The cluster is set up as a fleet's would be: TLS only (clients and the
cluster bus), the ``default`` user off, and the crawler's ACL users
(crawler/frontier/acl.py, with the Cluster commands): every test here runs
as the worker, and ``scrapy frontier status`` as the read-only reader.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from redis.asyncio.cluster import RedisCluster

from crawler.frontier.acl import acl_line, key_patterns
from crawler.frontier.ipgates import DnsNote, IpGates
from crawler.frontier.keys import Keys
from crawler.frontier.store import Frontier
from crawler.frontier.values import Limits, Release
from tests.crawl_runner import REPO, finish_crawl, proxy_env, start_crawl
from tests.frontier_harness import admission
from tests.realweb.tls import TestCA
from tests.redis_cluster import CLI, SERVER, free_ports, wait_for
from tests.simweb import SimWebProcess

pytestmark = pytest.mark.skipif(SERVER is None or CLI is None,
                                reason="redis-server and redis-cli are needed for a cluster")


@dataclass(frozen=True, slots=True)
class TlsCluster:
    ports: list[int]
    ca: Path
    passwords: dict[str, str]

    def url(self, user: str) -> str:
        """``rediss://`` for ``user`` on the first node, trusting the test CA."""
        return (f"rediss://{user}:{self.passwords[user]}@127.0.0.1:{self.ports[0]}/0"
                f"?ssl_ca_certs={self.ca}")

    def ask(self, port: int, *command: str) -> object:
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, ssl=True,
                             ssl_ca_certs=str(self.ca), username="admin",
                             password=self.passwords["admin"])
        try:
            return client.execute_command(*command)
        finally:
            client.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsCluster]:
    """A fresh three-master cluster (no replicas), TLS only, with ACL users."""
    root = tmp_path_factory.mktemp("cluster")
    ca = TestCA(root / "ca")
    cert, key = ca.issue(["localhost"], ["127.0.0.1"], client=True)  # the bus dials too
    passwords = {"admin": "admin-Pw-c1", "worker": "worker-Pw-c2", "reader": "reader-Pw-c3"}
    (root / "users.acl").write_text("\n".join([
        "user default off", f"user admin on >{passwords['admin']} ~* &* +@all",
        *(acl_line(role, role, key_patterns("test", "broad:start_urls"), passwords[role],
                   cluster=True)
          for role in ("worker", "reader"))]) + "\n")
    tls = ["--tls-cert-file", str(cert), "--tls-key-file", str(key),
           "--tls-ca-cert-file", str(ca.cert_path), "--tls-auth-clients", "no",
           "--tls-cluster", "yes", "--aclfile", str(root / "users.acl")]
    ports = free_ports(3)
    running = TlsCluster(ports, ca.cert_path, passwords)
    procs = []
    for port in ports:
        folder = root / str(port)
        folder.mkdir()
        procs.append(subprocess.Popen(
            [SERVER, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
             "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--save", "", "--appendonly", "no", "--dir", str(folder), *tls],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        for port in ports:
            wait_for(lambda p=port: running.ask(p, "PING"))
        subprocess.run([CLI, "--tls", "--cacert", str(ca.cert_path), "--user", "admin",
                        "--pass", passwords["admin"], "--no-auth-warning",
                        "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
                        "--cluster-replicas", "0", "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        for port in ports:  # every node must know the whole slot map, not just the first
            wait_for(lambda p=port: b"cluster_state:ok" in running.ask(p, "CLUSTER", "INFO")
                  and len(running.ask(p, "CLUSTER", "NODES").splitlines()) == 3)
        yield running
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)


@pytest.fixture(scope="module")
def cluster_url(cluster: TlsCluster) -> str:
    """The worker's URL."""
    return cluster.url("worker")


def test_each_partition_lives_in_one_slot_and_the_store_works_across_nodes(
    cluster_url: str
) -> None:
    keys = Keys(f"test:cluster:{time.time_ns()}", partitions=8, seen_buckets=64)

    async def scenario() -> tuple[int, int, dict[str, int]]:
        client = RedisCluster.from_url(cluster_url)
        try:
            # Twelve names in four registered domains, two in flight per domain:
            # the domain gates (keys of their own) live in their partitions' slots.
            frontier = Frontier(client, keys, Limits(delay_ms=0, domain_concurrency=2,
                                                     domain_delay_ms=100))
            admitted = await frontier.admit([admission(f"http://h{i}.d{i % 4}.test/p{j}")
                                             for i in range(12) for j in range(3)])
            claimed = await frontier.claim(12, "w1")
            lease = claimed.leases[0]
            assert lease.turns[1] > 0  # the claim took the domain's start turn
            turn = await frontier.start_turn(lease.host, (0, *lease.turns))  # site and domain
            assert turn.wait_ms == 0 and turn.domain_turn > 0
            released = await frontier.release(
                [Release(lease.host, lease.fingerprint, "done") for lease in claimed.leases],
                "w1")
            return admitted.added, released.released, await frontier.counts()
        finally:
            await client.aclose()

    added, released, counts = asyncio.run(scenario())
    assert (added, released) == (36, 4)  # each script ran once: nothing counted as a dup
    # one per domain: the domain delay (100 ms) spaces its claims
    assert (counts["queued"], counts["done"], counts["leased"]) == (32, 4, 0)
    sync = redis.RedisCluster.from_url(cluster_url)
    try:
        slots: dict[int, set[int]] = {}
        nodes = set()
        for part in range(keys.partitions):
            found = list(sync.scan_iter(match=f"{{{keys.namespace}/p{part}}}*", count=1000))
            slots[part] = {sync.keyslot(k) for k in found}
            nodes.add(sync.get_node_from_key(keys.counts(part)).port)
        assert all(len(s) == 1 for s in slots.values() if s), slots
        assert len(nodes) >= 2  # the partitions really are spread over the nodes
        for key in sync.scan_iter(match=f"*{keys.namespace}*", count=1000):
            sync.delete(key)
    finally:
        sync.close()


def test_an_address_shared_by_names_of_many_partitions_is_gated_in_its_own_slot(
    cluster_url: str
) -> None:
    """Twelve names of twelve domains (partitions on every node) on one server
    address, one request in flight allowed there: their DNS jobs join the
    address (its slot), one may go and eleven wait parked (each note in its
    own partition); the end of the first request wakes the first that
    waited, in its partition, on whatever node: each step touched one slot."""
    keys = Keys(f"test:cluster-ip:{time.time_ns()}", partitions=8, seen_buckets=64)
    address = "127.0.9.9"

    async def scenario() -> tuple[list[str], list[str], str, set[int]]:
        client = RedisCluster.from_url(cluster_url)
        try:
            limits = Limits(delay_ms=0, ip_concurrency=1)
            frontier = Frontier(client, keys, limits)
            gates = IpGates(client, keys, limits, frontier.due)
            await frontier.admit([admission(f"http://n{i}.test/") for i in range(12)])
            hosts = (await frontier.claim(50, "w1")).dns_jobs
            assert len(hosts) == 12
            go = (await gates.join(address, [(frontier.partition(x), x) for x in hosts])).go
            for host, ok in zip(hosts, go, strict=True):
                await gates.note(frontier.partition(host),
                                 [DnsNote(host, address, 600_000, ok, 600_000)])
            (first,) = (await frontier.claim(50, "w1")).leases
            turn = await gates.take(address, first.token, frontier.partition(first.host),
                                    first.host)
            assert turn.wait_ms == 0
            assert (await frontier.claim(50, "w1")).leases == []  # the others are parked
            wakes = await gates.end(address, [first.token])
            assert await gates.wake(address, wakes) == []
            again = (await frontier.claim(50, "w1")).leases
            waiting = [x for x, ok in zip(hosts, go, strict=True) if not ok]
            nodes = {client.get_node_from_key(keys.counts(frontier.partition(x))).port
                     for x in waiting}
            return ([x for x, ok in zip(hosts, go, strict=True) if ok],
                    [x.host for x in again], waiting[0], nodes)
        finally:
            await client.aclose()

    passed, again, first_waiting, nodes = asyncio.run(scenario())
    assert len(passed) == 1
    assert again == [first_waiting]  # the first host that waited, woken in its partition
    assert len(nodes) >= 2  # the parked hosts were spread over the nodes
    sync = redis.RedisCluster.from_url(cluster_url)
    try:
        ip_keys = list(sync.scan_iter(match=keys.ips_pattern(), count=1000))
        assert ip_keys and len({sync.keyslot(k) for k in ip_keys}) == 1
        for key in sync.scan_iter(match=f"*{keys.namespace}*", count=1000):
            sync.delete(key)
    finally:
        sync.close()


@pytest.mark.crawl
def test_two_workers_crawl_on_a_cluster_and_status_reads_it(
    cluster: TlsCluster, cluster_url: str, tmp_path: Path
) -> None:
    namespace = f"test:cluster-crawl:{time.time_ns()}"
    settings = {"REDIS_URL": cluster_url, "REDIS_CLUSTER": True, "FRONTIER_NAMESPACE": namespace,
                "FRONTIER_PARTITIONS": 8, "FRONTIER_SEEN_BUCKETS": 64, "DOWNLOAD_DELAY": 0.1,
                "DEPTH_LIMIT": 2, "ADMISSION_MAX_PAGES_PER_HOST": 6}
    with SimWebProcess(seed=12, n_hosts=12, mix={"robots:allow-all": 1.0,
                                                "page:normal": 1.0}) as web:
        started = time.monotonic()
        procs = [start_crawl(web.proxy_url, web.web.seed_urls()[i::2], tmp_path / f"w{i}",
                             {**settings, "FRONTIER_WORKER_ID": f"w{i}"}) for i in range(2)]
        results = [finish_crawl(p, tmp_path / f"w{i}", started) for i, p in enumerate(procs)]
        ledger = web.ledger()
        status = subprocess.run(
            [sys.executable, "-m", "scrapy", "frontier", "status", "--json",
             "-s", f"REDIS_URL={cluster.url('reader')}", "-s", "REDIS_CLUSTER=True",
             "-s", f"FRONTIER_NAMESPACE={namespace}"],
            cwd=REPO, env=proxy_env(web.proxy_url), capture_output=True, text=True, timeout=60)
    for result in results:
        assert result.returncode == 0, result.log[-3000:]
        assert "Traceback" not in result.log
        assert result.stat("frontier/redis_errors") is None, result.log[-3000:]
    # nothing the workers or the reader sent was refused, on any node
    refused = [cluster.ask(port, "ACL", "LOG") for port in cluster.ports]
    assert refused == [[], [], []], refused
    pages = ledger.pages(web.web)
    assert pages and max(pages.values()) == 1  # every page once, across both workers
    assert all(int(r.stat("frontier/leases/claimed") or 0) > 0 for r in results)
    assert status.returncode == 0, status.stderr[-2000:]
    counts = json.loads(status.stdout)["counts"]
    assert counts["done"] == len(pages) and counts["queued"] == 0
    client = redis.RedisCluster.from_url(cluster_url)
    for key in client.scan_iter(match=f"*{namespace}*", count=1000):
        client.delete(key)
    client.close()
