"""A small real filesystem the test mounts: tmpfs, for full-disk and read-only cases.

Mounting needs root (CI runs as root); without it, or where the kernel
refuses the mount (a container without ``CAP_SYS_ADMIN``), the test skips
and says why. The mount is private to the test and is always unmounted,
whatever the test did to it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, check=False)


class SmallFs:
    """A mounted tmpfs of ``size`` bytes at :attr:`path`."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size

    def free(self) -> int:
        """Bytes free now (what statvfs says an unprivileged writer may use)."""
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def resize(self, size: int) -> None:
        """Grow (or shrink) the filesystem in place: room made without deleting anything."""
        done = _mount("-o", f"remount,size={size}", str(self.path))
        if done.returncode != 0:
            raise RuntimeError(f"remount failed: {done.stderr.strip()}")
        self.size = size

    def read_only(self, on: bool = True) -> None:
        """Remount read-only (``on``) or read-write."""
        done = _mount("-o", f"remount,{'ro' if on else 'rw'}", str(self.path))
        if done.returncode != 0:
            raise RuntimeError(f"remount failed: {done.stderr.strip()}")

    def fill(self, leave: int = 0, name: str = "ballast") -> Path:
        """Write a ballast file until at most ``leave`` bytes are free; its path."""
        ballast = self.path / name
        chunk = b"\0" * 65536
        with ballast.open("ab") as out:
            while self.free() > leave:
                want = min(len(chunk), self.free() - leave)
                try:
                    out.write(chunk[:max(want, 1)])
                    out.flush()
                except OSError:
                    break
        return ballast


def _skip_reason() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "mounting a tmpfs needs root (CI runs as root)"
    if shutil.which("mount") is None:
        return "no mount(8) on this machine"
    return None


@contextlib.contextmanager
def small_fs(size: int) -> Iterator[SmallFs]:
    """A tmpfs of ``size`` bytes, mounted for the block and unmounted after.

    Skips the calling test (with the reason) when it cannot be mounted.
    """
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    where = Path(tempfile.mkdtemp(prefix="smallfs-"))
    done = _mount("-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", str(where))
    if done.returncode != 0:
        where.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield SmallFs(where, size)
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)
        with contextlib.suppress(OSError):
            where.rmdir()
