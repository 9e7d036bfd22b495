"""Run a real-socket web in a subprocess, for tests.

Its own process keeps the web's event loop away from pytest and from the
crawler under test (a ``scrapy crawl`` of its own), and lets a test stop it
for sure: SIGTERM, then SIGKILL; and the child also stops by itself when its
standard input (held by this process) ends, so it cannot outlive a test
process that was killed.

>>> with RealWebProcess(Web([Host("a.test", pages={"/": page("hi")})])) as web:
...     crawl(settings={"DNS_NAMESERVERS": [web.nameserver]}, seeds=[web.url("a.test")])
...     assert web.ledger().count("a.test", "/") == 1
"""

from __future__ import annotations

import http.client
import json
import shutil
import ssl
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from tests.server_process import stderr_tail, stop_process, wait_ready_line

from .dns import Name, Question
from .layout import Layout, Place
from .ledger import Ledger
from .spec import Page, Web

REPO_ROOT = Path(__file__).resolve().parents[2]


class RealWebProcess:
    """``python -m tests.realweb serve`` for ``web``, as a context manager."""

    def __init__(self, web: Web, *, startup_timeout: float = 20.0) -> None:
        self.web = web
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._folder: Path | None = None
        self._dns_port: int | None = None
        self._control_port: int | None = None
        self._layout: Layout | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        """Start the web and wait (bounded) for its READY line and layout."""
        if self._proc is not None:
            return self
        self._folder = Path(tempfile.mkdtemp(prefix="realweb-"))
        spec = self._folder / "web.json"
        spec.write_text(self.web.to_json())
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop())
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.realweb", "serve", "--spec", str(spec),
             "--ca-dir", str(self._folder / "ca"), "--stdin-stop"],
            cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        try:
            self._dns_port, self._control_port = self._wait_ready()
            self._layout = Layout.from_json(json.dumps(self.control("GET", "/layout")))
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> tuple[int, int]:
        assert self._proc is not None
        line = wait_ready_line(self._proc, self.startup_timeout, "realweb", self._stderr)
        kind, *pairs = line.split()
        fields = dict(p.partition("=")[::2] for p in pairs)
        if kind != "READY" or not {"dns", "control"} <= fields.keys():
            raise RuntimeError(f"unexpected first line {line!r}{self._tail()}")
        return (int(fields["dns"].rpartition(":")[2]),
                int(fields["control"].rpartition(":")[2]))

    def _tail(self) -> str:
        """The end of the web's stderr, for error messages."""
        return stderr_tail(self._stderr, "realweb")

    def stderr_text(self) -> str:
        return self._tail()

    def stop(self, timeout: float = 5.0) -> int | None:
        """Close its stdin and SIGTERM it, SIGKILL after ``timeout``; the exit code."""
        proc, self._proc = self._proc, None
        code = None if proc is None else stop_process(proc, timeout)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
        self._layout = None
        return code

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # ------------------------------------------------------------- where things are

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("RealWebProcess not started")
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def layout(self) -> Layout:
        if self._layout is None:
            raise RuntimeError("RealWebProcess not started")
        return self._layout

    @property
    def dns_port(self) -> int:
        if self._dns_port is None or self._proc is None:
            raise RuntimeError("RealWebProcess not started")
        return self._dns_port

    @property
    def nameserver(self) -> str:
        """``127.0.0.1:PORT``: one entry of the crawler's ``DNS_NAMESERVERS``."""
        return f"127.0.0.1:{self.dns_port}"

    @property
    def ca_path(self) -> Path:
        """The test CA's certificate (PEM): what a verifying client must trust."""
        if self._folder is None:
            raise RuntimeError("RealWebProcess not started")
        return self._folder / "ca" / "ca.pem"

    def client_context(self) -> ssl.SSLContext:
        """An ``ssl`` client context trusting the test CA only, checking names."""
        return ssl.create_default_context(cafile=str(self.ca_path))

    @property
    def http_port(self) -> int:
        return self.layout.http_port

    @property
    def https_port(self) -> int:
        return self.layout.https_port

    def place(self, name: str) -> Place:
        """Host ``name``'s names, addresses and schemes."""
        return self.layout.place(name)

    def address(self, name: str) -> str:
        """Host ``name``'s IPv4 address (``::1`` for an IPv6-only host)."""
        place = self.layout.place(name)
        return place.ipv4 or str(place.ipv6)

    def url(self, host: str, path: str = "/", scheme: str = "http") -> str:
        """``scheme://host[:port]path``: the port only when it is not the default."""
        return self.layout.url(host, path, scheme)

    # ------------------------------------------------------------- control

    def control(self, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Any:
        """One control request (``http.client``: no proxy variables, no name lookup)."""
        conn = http.client.HTTPConnection("127.0.0.1", self._require_control(), timeout=timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            conn.request(method, path, body=data, headers={"Connection": "close"})
            resp = conn.getresponse()
            payload = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"realweb {method} {path} -> {resp.status}: {payload[:300]!r}")
            return json.loads(payload)
        finally:
            conn.close()

    def _require_control(self) -> int:
        if self._control_port is None or self._proc is None:
            raise RuntimeError("RealWebProcess not started")
        return self._control_port

    def ledger(self) -> Ledger:
        return Ledger(self.control("GET", "/ledger"))

    def reset(self) -> None:
        """Forget the ledger, TLS handshakes and DNS questions so far."""
        self.control("POST", "/reset")

    def dns_questions(self, name: str | None = None) -> list[Question]:
        """DNS questions asked so far (of ``name`` only, if given)."""
        asked = [Question(**q) for q in self.control("GET", "/dns")]
        return asked if name is None else [q for q in asked if q.name == name.lower()]

    def tls_handshakes(self) -> list[dict[str, Any]]:
        """Every ClientHello seen: {"at", "sni", "address", "port"}."""
        return list(self.control("GET", "/tls"))

    def set_dns(self, name: str, entry: Name) -> None:
        """Add or change the DNS record of ``name`` while the web runs."""
        self.control("POST", "/dns", {"name": name, "entry": asdict(entry)})

    def set_page(self, host: str, target: str | bytes, page: Page | None,
                 scheme: str | None = None) -> None:
        """Serve ``page`` at ``target`` on ``host`` from now on (None: remove it);
        ``scheme="http"`` sets it for plain HTTP only."""
        raw = target if isinstance(target, bytes) else target.encode("utf-8")
        self.control("POST", "/page", {"host": host, "target": raw.decode("latin-1"),
                                       "page": None if page is None else page.to_dict(),
                                       "scheme": scheme})
