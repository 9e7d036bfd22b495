"""What the test webs' server subprocesses share: the READY line, stderr, stopping.

Both webs (tests/simweb, tests/realweb) run as ``python -m tests.X serve ...``
children that print one ``READY ...`` line on stdout when they listen, write
diagnostics to stderr, and must never outlive the test that started them.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from typing import IO


def wait_ready_line(proc: subprocess.Popen[bytes], timeout: float, name: str,
                    stderr: IO[bytes] | None) -> str:
    """The child's first stdout line, once it is there (bounded by ``timeout``).

    Fails with the end of the child's stderr when it exits first or is late.
    """
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    buffer = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{name} not ready after {timeout}s{stderr_tail(stderr, name)}")
            if not sel.select(remaining):
                continue
            data = os.read(proc.stdout.fileno(), 4096)
            if not data:
                proc.wait(5)
                raise RuntimeError(f"{name} exited ({proc.returncode}) before READY"
                                   f"{stderr_tail(stderr, name)}")
            buffer += data
    return buffer.split(b"\n", 1)[0].decode().strip()


def stderr_tail(stderr: IO[bytes] | None, name: str) -> str:
    """The last 3000 characters of the child's stderr, for error messages."""
    if stderr is None:
        return ""
    stderr.seek(0)
    text = stderr.read().decode(errors="replace")[-3000:]
    return f"\n--- {name} stderr ---\n{text}" if text else ""


def stop_process(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """Close its stdin, SIGTERM it, SIGKILL it after ``timeout``: its exit code."""
    if proc.stdin is not None:
        proc.stdin.close()
    if proc.poll() is None:
        proc.terminate()
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
    return code
