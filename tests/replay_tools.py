"""pywb, the replay tool the archive tests replay with, in a virtual environment of its own.

pywb 2.10 pins ``redis<3`` (its optional Redis index), and the crawler needs
redis 8: the two cannot share one environment. So the tests install pywb
once, on first use, into ``$BROADCRAWL_TOOLS`` (default
``~/.cache/broadcrawl-tools``), from the same package index as everything
else, and run its commands from there. A machine that cannot install it
fails the test with the reason; it never skips.
"""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PYWB_VERSION = "2.10.0"


def tools_dir() -> Path:
    return Path(os.environ.get("BROADCRAWL_TOOLS") or Path.home() / ".cache" / "broadcrawl-tools")


def pywb_bin() -> Path:
    """The ``bin`` folder of an environment with pywb (installed on first use)."""
    home = tools_dir() / f"pywb-{PYWB_VERSION}"
    ready = home / "ready"
    home.parent.mkdir(parents=True, exist_ok=True)
    with (home.parent / f"pywb-{PYWB_VERSION}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one installer at a time (parallel test runs)
        if not ready.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(home)], check=True)
            done = subprocess.run([str(home / "bin" / "pip"), "install", "-q",
                                   f"pywb=={PYWB_VERSION}"],
                                  capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                raise RuntimeError(f"could not install pywb {PYWB_VERSION} into {home}:\n"
                                   f"{done.stderr[-2000:]}")
            ready.write_text(PYWB_VERSION)
    return home / "bin"


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy


def get(url: str) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of a GET on the machine (any status, no proxy)."""
    try:
        with _DIRECT.open(url, timeout=30) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as answer:
        return answer.code, dict(answer.headers), answer.read()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_collection(root: Path, name: str, warcs: list[Path]) -> None:
    """``wb-manager init`` a collection under ``root`` and add (and index) ``warcs``."""
    bin_dir = pywb_bin()
    root.mkdir(parents=True, exist_ok=True)
    for args in (["init", name], ["add", name, *map(str, warcs)]):
        subprocess.run([str(bin_dir / "wb-manager"), *args], cwd=root, check=True,
                       capture_output=True, timeout=120)


@contextmanager
def wayback(root: Path) -> Iterator[str]:
    """pywb's ``wayback`` server on 127.0.0.1 for the collections under ``root``;
    yields its base URL."""
    port = free_port()
    log = (root / "wayback.log").open("w")
    proc = subprocess.Popen([str(pywb_bin() / "wayback"), "-p", str(port), "-b", "127.0.0.1"],
                            cwd=root, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with _DIRECT.open(base + "/", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("pywb's wayback did not start: "
                                       + (root / "wayback.log").read_text()[-2000:]) from None
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
