"""Run the trap web in a subprocess, for tests: the counterpart of ``SimWebProcess``.

A separate process keeps the server's event loop away from the crawler's
(Twisted) reactor and from pytest, and lets tests stop it cleanly. Starting,
waiting for ``READY`` and stopping are ``tests/server_process.py``'s; the ledger
is the simulated web's (``tests.simweb.ledger.Ledger``).
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from tests.server_process import stderr_tail, stop_process, wait_ready_line
from tests.simweb.ledger import Ledger

from .model import TrapWeb

REPO_ROOT = Path(__file__).resolve().parents[2]
NAME = "trapweb"


class TrapWebProcess:
    """``python -m tests.trapweb serve`` as a context manager.

    >>> with TrapWebProcess(seed=3, per_kind=2) as trap:
    ...     crawl(proxy=trap.proxy_url, seeds=trap.web.seed_urls())
    ...     ledger = trap.ledger()
    """

    def __init__(self, seed: int = 1, per_kind: int = 2, *, today: dt.date | None = None,
                 startup_timeout: float = 15.0) -> None:
        """``today`` (default: UTC today, fixed now) goes to the server too, so
        the calendar trap of ``self.web`` and of the server start on one day."""
        self.web = TrapWeb(seed=seed, per_kind=per_kind, today=today)
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._port: int | None = None

    def command(self) -> list[str]:
        return [sys.executable, "-m", "tests.trapweb", "serve", "--port", "0",
                "--seed", str(self.web.seed), "--per-kind", str(self.web.per_kind),
                "--today", self.web.today.isoformat()]

    def start(self) -> Self:
        """Start the server and wait (bounded) for its ``READY`` line."""
        if self._proc is not None:
            return self
        # Lives as long as the process (closed in stop()), so no ``with``.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self._proc = subprocess.Popen(self.command(), cwd=REPO_ROOT, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=self._stderr)
        try:
            self._port = self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> int:
        assert self._proc is not None
        line = wait_ready_line(self._proc, self.startup_timeout, NAME, self._stderr)
        kind, _, address = line.partition(" ")
        if kind != "READY":
            raise RuntimeError(f"unexpected first line {line!r}{self.stderr_text()}")
        return int(address.rpartition(":")[2])

    def stderr_text(self) -> str:
        """The end of the server's stderr, for error messages."""
        return stderr_tail(self._stderr, NAME)

    def stop(self, timeout: float = 5.0) -> int | None:
        """Terminate (SIGTERM), then kill after ``timeout``; return the exit code."""
        proc, self._proc = self._proc, None
        code = None if proc is None else stop_process(proc, timeout)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        return code

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._port is None or self._proc is None:
            raise RuntimeError("TrapWebProcess not started")
        return self._port

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def control(self, path: str, timeout: float = 30.0) -> Any:
        """GET a control endpoint (``/_ledger``, ``/_reset``, ``/_health``) straight
        from 127.0.0.1: ``http.client`` ignores proxy environment variables."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", path, headers={"Connection": "close"})
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{NAME} {path} -> {resp.status}: {body[:200]!r}")
            return json.loads(body)
        finally:
            conn.close()

    def ledger(self) -> Ledger:
        """Every request the server saw, as sent (query strings included)."""
        return Ledger(self.control("/_ledger"))

    def reset(self) -> None:
        """Forget the ledger."""
        self.control("/_reset")

    def health(self) -> dict[str, Any]:
        return dict(self.control("/_health"))
