"""The watch of an embedded Redis: it shuts the server down once no process uses it.

A process that uses a folder's embedded server holds ``redis.users.lock``
shared and, leaving, shuts the server down if it was the last
(:meth:`crawler.frontier.embedded.EmbeddedRedis.leave`). A process killed
with SIGKILL never leaves, but the kernel drops its lock: this watch, started
with the server (``python -m crawler.frontier.embeddedwatch FOLDER``, in a
session of its own), sees every second whether the lock can be taken
exclusively, under ``redis.start.lock`` as ``leave`` does (so that no process
is adopting the server meanwhile), and if so sends the server SIGTERM: Redis
then writes its append-only file and exits, and the next crawl of the folder
starts it again on the same files. The watch ends with the server. Only the
standard library is imported here: it costs a few MB for as long as the
server runs.
"""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import time
from pathlib import Path


def server_pid(directory: Path) -> int | None:
    """The running server's process id (its pid file), None if it is not running."""
    try:
        pid = int((directory / "redis.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def stop_if_unused(directory: Path, pid: int, exit_wait_s: float = 30.0) -> bool:
    """Stop the server if no process holds the users lock; whether it did.

    All of it under the start lock, the exit awaited too: a process that
    comes to adopt the server meanwhile waits, then finds none and starts one.
    """
    start = os.open(directory / "redis.start.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(start, fcntl.LOCK_EX)
        users = os.open(directory / "redis.users.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(users)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + exit_wait_s
        while server_pid(directory) == pid and time.monotonic() < deadline:
            time.sleep(0.05)
        return True
    finally:
        os.close(start)


def watch(directory: Path, interval_s: float = 1.0) -> None:
    """Until the server is gone: stop it once nobody uses it."""
    while (pid := server_pid(directory)) is not None:
        if stop_if_unused(directory, pid):
            return
        time.sleep(interval_s)


if __name__ == "__main__":
    watch(Path(sys.argv[1]))
