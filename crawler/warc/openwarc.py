"""One ``.open`` WARC file and its CDXJ index, written straight to the OS.

:class:`OpenWarc` is the file :class:`crawler.warc.files.WarcFiles` is
writing: created under a name nobody has, locked with ``flock`` from creation
to rename (so :mod:`crawler.warc.recovery` can tell a live writer's file from
a dead one's), appended to with ``os.write`` (a record and its index line
both, or neither: a failed write is cut back off both files), and finished
by a sync, a sorted index and the rename to its complete name.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from crawler.warc.cdxj import OPEN_SUFFIX

WARC_SUFFIX = ".warc.gz"
INDEX_SUFFIX = ".cdxj"


def complete_path(path: Path) -> Path:
    """The complete WARC's path for ``path`` (``.open`` removed)."""
    return path.with_name(path.name.removesuffix(OPEN_SUFFIX))


def index_path(path: Path) -> Path:
    """The CDXJ index beside the WARC ``path`` (open or complete)."""
    name = path.name.removesuffix(OPEN_SUFFIX).removesuffix(WARC_SUFFIX)
    return path.with_name(name + INDEX_SUFFIX)


class OpenWarc:
    """One ``.open`` WARC file, locked, with its index; bytes go straight to the OS.

    Both are written with ``os.write`` on descriptors (no user-space buffer
    that a failed flush would leave holding half a line for the next one),
    and :attr:`size` and :attr:`index_size` are where each ends: what a
    failed write is cut back to.
    """

    def __init__(self, final: Path, fd: int, index_fd: int) -> None:
        self.final = final
        self.path = final.with_name(final.name + OPEN_SUFFIX)
        self.fd = fd
        self.size = 0
        self.index_path = index_path(final)
        self.index_fd = index_fd
        self.index_size = 0
        #: A failed write could not be cut back: the tail of the file (or of
        #: its index) is not known, and only ``recover`` may touch it now.
        self.damaged = False
        self._closed = False

    @classmethod
    def create(cls, final: Path) -> OpenWarc | None:
        """The new file and its (empty) index, or ``None`` if the name is taken
        (try the next serial). Nothing is left behind when it raises.

        A recoverer may lock the empty file before we do; it then removes it.
        """
        if final.exists():
            return None
        path = final.with_name(final.name + OPEN_SUFFIX)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        if os.fstat(fd).st_nlink == 0:  # a recoverer locked it first, and has removed it
            os.close(fd)
            return None
        try:
            index_fd = os.open(index_path(final), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError:
            _remove(path, fd)
            raise
        return cls(final, fd, index_fd)

    def append(self, data: bytes, line: bytes = b"") -> int:
        """Write ``data`` at the end of the file, then ``line`` at the end of its index;
        the offset of ``data``.

        Both or neither: whatever part of either was written when a write
        fails is cut back off both files, and the error raised. If even the
        cut back fails, the file is marked :attr:`damaged` (the error says so).
        """
        offset, index_size = self.size, self.index_size
        try:
            write_all(self.fd, data)
            write_all(self.index_fd, line)
        except OSError as exc:
            self._cut_back(offset, index_size, exc)
            raise
        self.size += len(data)
        self.index_size += len(line)
        return offset

    def _cut_back(self, size: int, index_size: int, failure: OSError) -> None:
        """Both files back to ``size`` and ``index_size`` bytes (after ``failure``)."""
        try:
            for fd, length in ((self.fd, size), (self.index_fd, index_size)):
                os.ftruncate(fd, length)
                os.lseek(fd, length, os.SEEK_SET)
        except OSError as exc:
            self.damaged = True
            failure.add_note(f"cutting {self.path} back failed too ({exc}): "
                             "the file is abandoned, for recover()")

    def linked(self) -> bool:
        """Whether the file still has a name (``st_nlink``): not removed."""
        return os.fstat(self.fd).st_nlink > 0

    def sync(self) -> None:
        """``fsync`` the file and its index."""
        os.fsync(self.fd)
        os.fsync(self.index_fd)

    def discard(self) -> None:
        """Remove the file and its index (a file that could not be started), unlock."""
        with contextlib.suppress(OSError):  # left, it is empty: it names nothing
            self.index_path.unlink(missing_ok=True)
        _remove(self.path, self.fd)
        self._closed = True
        with contextlib.suppress(OSError):
            os.close(self.index_fd)

    def finish(self) -> Path:
        """Sync, sort the index, rename to the complete name, unlock; that name.

        If the ``fsync`` or the rename fails, the error is raised and the
        ``.open`` file left as it is (unlocked) for ``recover``: after a
        failed ``fsync`` its content on disk is not known, and
        ``recover`` keeps every complete record and indexes them again.
        An index that cannot be sorted is no failure (see :func:`_sort_index`).
        """
        try:
            self.sync()
            _sort_index(self.index_path)
            rename_new(self.path, self.final)
        finally:
            self.close()
        return self.final

    def close(self) -> None:
        """Close both descriptors (releasing the lock); once.

        An error from ``close`` itself is not raised: Linux frees the
        descriptor anyway, and a write that did not reach the disk is
        reported by ``fsync``, which comes before (or the file is abandoned).
        """
        if self._closed:
            return
        self._closed = True
        for fd in (self.index_fd, self.fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write all of ``data`` (a short write is followed by the rest, or its error)."""
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view):]


def _remove(path: Path, fd: int) -> None:
    """Remove the file just created at ``path`` and close ``fd`` (its lock goes with it).

    Removed before it is unlocked, so no recoverer finds it; if it cannot be
    removed, it holds no complete record, which ``recover`` removes (empty)
    or refuses.
    """
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        os.close(fd)


def _sort_index(path: Path) -> None:
    """Rewrite the index in sorted order (pywb binary-searches it), atomically.

    It is kept as written when it cannot be (no room for the sorted copy,
    say): every line of it is still right, :func:`crawler.warc.cdxj.lookup`
    reads every line, and ``LC_ALL=C sort`` can sort it later for pywb. A
    failure here must not keep the WARC from being completed.
    """
    with contextlib.suppress(OSError):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        ordered = sorted(lines)
        if ordered != lines:
            replace_index(path, ordered)


def replace_index(path: Path, lines: list[str]) -> None:
    """Replace ``path`` by ``lines`` through a synced ``.tmp`` copy, removed if that fails."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("w", encoding="utf-8") as out:
            out.writelines(lines)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def rename_new(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target``, never over an existing file."""
    if target.exists():
        raise FileExistsError(f"{target} exists; {source} left as is")
    os.rename(source, target)
