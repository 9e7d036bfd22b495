"""A Redis Cluster with replicas on loopback, and a failover that loses writes.

Three masters with one replica each (six ``redis-server`` processes, plain
TCP), ``cluster-node-timeout`` one second, so a replica takes over about two
seconds after its master dies. :func:`lose_master` makes asynchronous
replication bite: the replica is cut off its master and frozen, the master
goes on acknowledging writes for a while, then it is killed and the replica,
thawed, takes over without them. Used by tests/test_cluster_failover.py and
bench/failover.py.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

SERVER = shutil.which("redis-server")
CLI = shutil.which("redis-cli")


@dataclass
class Node:
    port: int
    proc: subprocess.Popen[bytes]

    def ask(self, *command: str) -> object:
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)
        try:
            return client.execute_command(*command)
        finally:
            client.close()

    def replication(self) -> dict[str, object]:
        info = self.ask("INFO", "replication")
        assert isinstance(info, dict)
        return info


@dataclass
class Failover:
    """What :func:`lose_master` did, in wall-clock seconds (the ledger's clock)."""

    cut_at: float
    killed_at: float
    promoted_at: float


def wait_for(check: Callable[[], object], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the cluster did not get there in time")
        time.sleep(0.1)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_ports(n: int) -> list[int]:
    """Ports p that are free, with their cluster bus ports p + 10000 free too."""
    found: list[int] = []
    for port in random.sample(range(20000, 30000), 3000):
        if _bindable(port) and _bindable(port + 10000):
            found.append(port)
            if len(found) == n:
                return found
    raise RuntimeError("no free ports for a cluster")


@contextmanager
def replicated_cluster(folder: Path | None = None) -> Iterator[list[Node]]:
    """Six nodes: three masters with one replica each, every replica in sync."""
    assert SERVER is not None and CLI is not None, "redis-server and redis-cli are needed"
    root = Path(folder or tempfile.mkdtemp(prefix="crawler-cluster-"))
    nodes = []
    for port in free_ports(6):
        (root / str(port)).mkdir(parents=True)
        proc = subprocess.Popen(
            [SERVER, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
             "--cluster-replica-validity-factor", "0", "--save", "", "--appendonly", "no",
             "--dir", str(root / str(port))], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        nodes.append(Node(port, proc))
    try:
        for node in nodes:
            wait_for(lambda n=node: n.ask("PING"))
        subprocess.run([CLI, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in nodes),
                        "--cluster-replicas", "1", "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        for node in nodes:
            wait_for(lambda n=node: b"cluster_state:ok" in n.ask("CLUSTER", "INFO"))
        for node in nodes:
            wait_for(lambda n=node: n.replication()["role"] == "master"
                     or n.replication().get("master_link_status") == "up")
        yield nodes
    finally:
        for node in nodes:
            if node.proc.poll() is None:
                node.proc.send_signal(signal.SIGCONT)
                node.proc.kill()
            node.proc.wait(10)
        if folder is None:
            shutil.rmtree(root, ignore_errors=True)


def url_of(nodes: list[Node]) -> str:
    return f"redis://127.0.0.1:{nodes[0].port}/0"


def _port(address: str) -> int:
    return int(address.split(":")[1].split("@")[0])


def master_and_replica(nodes: list[Node]) -> tuple[Node, Node]:
    """The master that serves slot 0, and its replica."""
    by_port = {n.port: n for n in nodes}
    lines = [line.split() for line in
             nodes[0].ask("CLUSTER", "NODES").decode().splitlines()]  # type: ignore[union-attr]
    master = next(f for f in lines
                  if "master" in f[2] and any(r.startswith("0-") for r in f[8:]))
    replica = next(f for f in lines if f[3] == master[0])
    return by_port[_port(master[1])], by_port[_port(replica[1])]


def lose_master(nodes: list[Node], unreplicated_s: float) -> Failover:
    """Kill the master of slot 0 after ``unreplicated_s`` seconds of writes its
    replica never got; return once the replica serves in its place."""
    master, replica = master_and_replica(nodes)
    # Cut the replica off its master and freeze it before it dials again (it
    # would within a second): from here the master's writes are its own.
    replica.ask("CLIENT", "KILL", "TYPE", "master")
    replica.proc.send_signal(signal.SIGSTOP)
    cut_at = time.time()
    time.sleep(unreplicated_s)
    os.kill(master.proc.pid, signal.SIGKILL)
    killed_at = time.time()
    time.sleep(0.5)
    replica.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: replica.replication()["role"] == "master")
    return Failover(cut_at, killed_at, time.time())
