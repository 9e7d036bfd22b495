"""Run the simulated web in a subprocess, for tests.

A separate process keeps the server's event loop away from the crawler's
(Twisted) reactor and from pytest, and lets tests kill it cleanly.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from tests.server_process import stderr_tail, stop_process, wait_ready_line

from .ledger import Ledger
from .model import Web

REPO_ROOT = Path(__file__).resolve().parents[2]


class SimWebProcess:
    """``python -m tests.simweb serve`` as a context manager.

    >>> with SimWebProcess(seed=3, n_hosts=200, mix="clean") as sim:
    ...     crawl(proxy=sim.proxy_url, seeds=sim.web.seed_urls(20))
    ...     ledger = sim.ledger()
    """

    def __init__(
        self,
        seed: int = 1,
        n_hosts: int = 100,
        mix: str | Mapping[str, float] = "default",
        *,
        pinned: Mapping[int, str] | None = None,
        hang_max: float = 300.0,
        trickle_interval: float = 0.5,
        startup_timeout: float = 15.0,
        validators: bool = False,
        epoch: int = 0,
        change_rate: float = 0.1,
        validator_share: float = 0.8,
        page_bytes: int = 0,
        page_links: int = 0,
    ) -> None:
        self.seed = seed
        self.n_hosts = n_hosts
        self.mix = mix
        self.hang_max = hang_max
        self.trickle_interval = trickle_interval
        self.startup_timeout = startup_timeout
        self.pinned = dict(pinned or {})
        self.web = Web(seed=seed, n_hosts=n_hosts, mix=mix, pinned=self.pinned,
                       validators=validators, epoch=epoch, change_rate=change_rate,
                       validator_share=validator_share, page_bytes=page_bytes,
                       page_links=page_links)
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._port: int | None = None

    # ------------------------------------------------------------ lifecycle

    def command(self) -> list[str]:
        mix = self.mix if isinstance(self.mix, str) else json.dumps(dict(self.mix))
        return [
            sys.executable,
            "-m",
            "tests.simweb",
            "serve",
            "--port",
            "0",
            "--seed",
            str(self.seed),
            "--hosts",
            str(self.n_hosts),
            "--mix",
            mix,
            "--hang-max",
            str(self.hang_max),
            "--trickle-interval",
            str(self.trickle_interval),
            *[f"--pin={i}={mode}" for i, mode in self.pinned.items()],
            *(["--validators"] if self.web.validators else []),
            "--epoch", str(self.web.epoch), "--change-rate", str(self.web.change_rate),
            "--validator-share", str(self.web.validator_share),
            "--page-bytes", str(self.web.page_bytes),
            "--page-links", str(self.web.page_links),
        ]

    def start(self) -> Self:
        """Start the server and wait (bounded) for its ``READY`` line."""
        if self._proc is not None:
            return self
        # Lives as long as the process (closed in stop()), so no ``with``.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self._proc = subprocess.Popen(
            self.command(),
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        try:
            self._port = self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> int:
        assert self._proc is not None
        line = wait_ready_line(self._proc, self.startup_timeout, "simweb", self._stderr)
        kind, _, address = line.partition(" ")
        if kind != "READY":
            raise RuntimeError(f"unexpected first line {line!r}{self._tail()}")
        return int(address.rpartition(":")[2])

    def _tail(self) -> str:
        """Last lines of the server's stderr, for error messages."""
        return stderr_tail(self._stderr, "simweb")

    def stderr_text(self) -> str:
        return self._tail()

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

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------- accessors

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("SimWebProcess not started")
        return self._port

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("SimWebProcess not started")
        return self._proc.pid

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def control(self, path: str, timeout: float = 30.0) -> Any:
        """GET a control endpoint straight from 127.0.0.1 (``http.client``
        ignores proxy environment variables, unlike ``urllib``)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", path, headers={"Connection": "close"})
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"simweb {path} -> {resp.status}: {body[:200]!r}")
            return json.loads(body)
        finally:
            conn.close()

    def ledger(self) -> Ledger:
        return Ledger(self.control("/_ledger"))

    def stalls(self) -> list[tuple[float, float]]:
        """When the server's event loop ran late (``server.LoopWatch``)."""
        return [(start, end) for start, end in self.control("/_stalls")]

    def reset(self) -> None:
        """Clear the ledger and every page's first-request state."""
        self.control("/_reset")

    def health(self) -> dict[str, Any]:
        return dict(self.control("/_health"))
