"""A real Prometheus server for tests, on a free loopback port, and its query API.

The binary is the Debian package's (``.ci/run`` installs it); tests that need
it skip when it is missing. The configuration is written as JSON, which YAML
reads as it is: no quoting of paths to get wrong.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PROMETHEUS = shutil.which("prometheus")
MISSING = "prometheus (Debian package prometheus) is not installed; .ci/run installs it"
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, no proxy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def prometheus(folder: Path, config: dict[str, Any]) -> Iterator[int]:
    """Run Prometheus with ``config`` until the block ends; yields its port once ready."""
    assert PROMETHEUS is not None, MISSING
    port = free_port()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "prometheus.yml"
    path.write_text(json.dumps(config, indent=1))
    with (folder / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={path}", f"--web.listen-address=127.0.0.1:{port}",
             f"--storage.tsdb.path={folder / 'tsdb'}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                OPENER.open(f"http://127.0.0.1:{port}/-/ready", timeout=1)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((folder / "prometheus.log").read_text()[-2000:]
                                       ) from None
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def api(port: int, path: str, **params: str) -> Any:
    """The ``data`` of a successful answer of Prometheus' HTTP API (``/api/v1/<path>``)."""
    url = f"http://127.0.0.1:{port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    answer = json.loads(OPENER.open(url, timeout=5).read())
    assert answer["status"] == "success", answer
    return answer["data"]


def query(port: int, expr: str) -> list[dict[str, Any]]:
    """An instant query's result vector."""
    return api(port, "query", query=expr)["result"]
