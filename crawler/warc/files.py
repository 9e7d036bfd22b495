"""Rotating ``.warc.gz`` files, a CDXJ index beside each, and recovery after a kill.

Naming (IIPC/Heritrix convention, one name per file and worker)::

    PREFIX-YYYYMMDDhhmmssfff-SERIAL-WORKER.warc.gz       complete WARC
    PREFIX-YYYYMMDDhhmmssfff-SERIAL-WORKER.warc.gz.open  WARC being written (or left by a kill)
    PREFIX-YYYYMMDDhhmmssfff-SERIAL-WORKER.cdxj          its index, under one name throughout

Whether a WARC (and so its index) is complete is told by the WARC's name
alone: the index is never renamed, its lines always name the complete WARC,
and :func:`crawler.warc.cdxj.lookup` maps them to whichever name exists. At
close the index is rewritten sorted (as pywb wants it), then the WARC renamed.

A writer holds an exclusive ``flock`` on its ``.open`` file from creation to
rename, so :func:`recover` can tell a live writer's file (lock held: refused)
from a dead one's (lock free: cut back to its last complete record, indexed
again and renamed).

Each record is one gzip member, compressed by ISA-L (``isal``: standard
gzip, which warcio, pywb and every WARC reader read, several times faster
than zlib at a ratio as good as zlib's default). The records of one exchange are serialised in
memory and reach the file in one ``write`` (no user-space buffer), so a
``kill -9`` loses at most the exchange being written, and the index line is
written only after its record.

Storage that fails (a full disk, EIO, a filesystem gone read-only, the
directory removed) never leaves a file invalid or its index untruthful. The
record and its index line go out by ``os.write``, without user-space
buffers, and a write that fails is cut back off both files (``ftruncate``):
an exchange is in the WARC *and* its index, or in neither. A file whose state
cannot be vouched for any more (a cut back or an ``fsync`` failed, its rename
failed) is *abandoned*: its lock released and its ``.open`` name kept, for
:func:`recover` to cut back to its last complete record and index again. The
next exchange starts a new file (and its directory again, if removed).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import os
import re
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Self

from isal import igzip
from warcio.archiveiterator import ArchiveIterator
from warcio.limitreader import LimitReader
from warcio.warcwriter import WARCWriter

from crawler.warc.cdxj import OPEN_SUFFIX, CdxjEntry, entry_for_record, surt_key
from crawler.warc.records import (
    RevisitOf,
    exchange_records,
    new_record_id,
    payload_digest,
    warcinfo_record,
)
from crawler.warc.wire import exchange_bytes

if TYPE_CHECKING:
    from types import TracebackType

    from warcio.recordloader import ArcWarcRecord

    from crawler.warc.exchange import Exchange

WARC_SUFFIX = ".warc.gz"
INDEX_SUFFIX = ".cdxj"
_UNSAFE = re.compile(r"[^A-Za-z0-9.-]")
#: ISA-L's level 1 (of 0-3): on page text it compresses as well as zlib's 9
#: at a tenth of the CPU; higher levels cost more and gain nothing on HTML.
GZIP_LEVEL = 1


class RecoverError(Exception):
    """:func:`recover` refused a file (the file is left as it was)."""


class WarcLockedError(RecoverError):
    """The ``.open`` WARC is locked: a live writer still writes it."""


class NotRecoverableError(RecoverError, ValueError):
    """Not a ``.warc.gz.open`` file, or one without a single complete record."""


@dataclass(frozen=True, slots=True)
class Written:
    """Where one exchange's response (or revisit) record went."""

    path: Path  # the complete file's name; ``path + ".open"`` until the file is closed
    offset: int  # of the record's gzip member
    length: int  # of the record's gzip member
    digest: str  # its WARC-Payload-Digest
    date_iso: str  # its WARC-Date

    @property
    def name(self) -> str:
        """The WARC file's name, as CDXJ lines give it."""
        return self.path.name


@dataclass(frozen=True, slots=True)
class Recovered:
    """What :func:`recover` did to a dead writer's file."""

    path: Path  # the complete file it now is (unless removed)
    records: int  # complete records kept (warcinfo included)
    cut_bytes: int  # bytes cut from the end (a partial record)
    removed: bool = False  # it was empty (abandoned before its first record): deleted


def warc_name(prefix: str, when: dt.datetime, serial: int, worker: str) -> str:
    """``PREFIX-YYYYMMDDhhmmssfff-SERIAL-WORKER.warc.gz`` (Heritrix's convention).

    ``when`` is taken as UTC when naive; ``worker`` keeps only ``[A-Za-z0-9.-]``
    (``vm:5510`` -> ``vm-5510``) so the name stays one safe path component.
    """
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC)
    stamp = when.strftime("%Y%m%d%H%M%S") + f"{when.microsecond // 1000:03d}"
    return f"{prefix}-{stamp}-{serial:05d}-{_UNSAFE.sub('-', worker)}{WARC_SUFFIX}"


def complete_path(path: Path) -> Path:
    """The complete WARC's path for ``path`` (``.open`` removed)."""
    return path.with_name(path.name.removesuffix(OPEN_SUFFIX))


def index_path(path: Path) -> Path:
    """The CDXJ index beside the WARC ``path`` (open or complete)."""
    name = path.name.removesuffix(OPEN_SUFFIX).removesuffix(WARC_SUFFIX)
    return path.with_name(name + INDEX_SUFFIX)


class WarcFiles:
    """WARC files in ``directory``, rotated past ``max_size`` bytes, each indexed in CDXJ.

    Thread-confined, nothing here is locked: once built, it is used by one
    thread only (the crawl's writer thread), which does every ``write`` and
    ``close``. Several instances, in one process or many, may share a
    directory when their ``worker`` names differ (a name taken anyway is
    skipped for the next serial).
    """

    def __init__(self, directory: Path, prefix: str, worker: str, max_size: int,
                 info: dict[str, str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.prefix = prefix
        self.worker = worker
        self.max_size = max_size
        self.info = dict(info)
        self._serial = 0
        self._current: _OpenWarc | None = None
        self._paths: list[Path] = []
        self._abandoned: list[Path] = []
        self._buffer = BytesIO()
        self._writer = WARCWriter(self._buffer, gzip=False, warc_version="1.1")

    @property
    def paths(self) -> list[Path]:
        """The files completed so far, oldest first."""
        return list(self._paths)

    @property
    def current(self) -> Path | None:
        """The ``.open`` file being written, if any."""
        return self._current.path if self._current else None

    @property
    def abandoned(self) -> list[Path]:
        """The ``.open`` files given up after a storage failure, left for :func:`recover`."""
        return list(self._abandoned)

    def write(self, exchange: Exchange, revisit_of: RevisitOf | None = None,
              digest: str | None = None) -> Written:
        """Archive ``exchange``: its response (or revisit) record, then its request.

        ``revisit_of=(refers_to_uri, refers_to_date_iso)`` makes a revisit of
        that earlier capture, with payload digest ``digest`` (by default the
        body's; "" for a 304 whose capture is not known: none). For a
        response, a ``digest`` given must be the body's (the writer thread
        computes it once, for the digest index and the record alike).
        The response comes first (as warcio and Heritrix write them): a kill
        between the two leaves a usable response, not a dangling request.

        All or nothing: the records and their index line are written, or an
        :class:`OSError` is raised (``ENOSPC``, ``EIO``, ``EROFS``...) and
        the exchange is in neither file, both left as they were (or the file
        is abandoned to :func:`recover` when even that cannot be vouched for;
        see :attr:`abandoned`). Once there is room again the next call
        writes, in the same file. One exception to "as they were": an
        :class:`OSError` from completing the file this exchange filled
        (rotation: its ``fsync`` or rename failed) leaves the exchange in
        that ``.open`` file, for :func:`recover`; fetched again, the page may
        then be archived twice, never lost.
        """
        if revisit_of is not None:
            return self._write_records(exchange, revisit_of, digest)
        digest = digest or payload_digest(exchange.body)
        wire = exchange_bytes(exchange, digest, new_record_id(), new_record_id())
        if wire is None:  # a header that is not Latin-1 text: warcio percent-encodes it
            return self._write_records(exchange, None, digest)
        members, length = _compress(wire.response, wire.request)
        current = self._current or self._open()
        offset = current.size
        self._append(current, members, CdxjEntry(
            surt=surt_key(exchange.url), timestamp=wire.timestamp, url=exchange.url,
            status=exchange.status, mime=wire.mime, digest=digest, length=length,
            offset=offset, filename=current.final.name))
        return self._written(current, offset, length, digest, wire.date)

    def _write_records(self, exchange: Exchange, revisit_of: RevisitOf | None,
                       digest: str | None) -> Written:
        """:meth:`write` through warcio's record objects (revisits, unusual headers)."""
        answer, request = exchange_records(self._writer, exchange, revisit_of, digest)
        recorded = answer.rec_headers.get_header("WARC-Payload-Digest")
        members, answer_length = self._serialise(answer, request)
        current = self._current or self._open()
        offset = current.size
        entry = entry_for_record(answer, offset, answer_length, current.final.name)
        assert entry is not None  # a response or revisit
        self._append(current, members, entry)
        return self._written(current, offset, answer_length, recorded,
                             answer.rec_headers.get_header("WARC-Date"))

    def _append(self, current: _OpenWarc, members: bytes, entry: CdxjEntry) -> None:
        """Append an exchange's gzip members to ``current``, and its index line: both
        or neither (a file left damaged by the failure is abandoned)."""
        try:
            current.append(members, (entry.line() + "\n").encode("utf-8"))
        except OSError:
            if current.damaged:
                self._abandon(current)
            raise

    def _written(self, current: _OpenWarc, offset: int, length: int, digest: str,
                 date: str) -> Written:
        """Where the record went; the file is completed once it is full."""
        written = Written(current.final, offset, length, digest, date)
        if current.size >= self.max_size:
            self._finish()
        return written

    def sync(self) -> None:
        """Make what was written to the current file and its index durable (``fsync``).

        Between two syncs, what was written is in the page cache only: a
        crash of the machine (not of the process) may lose it. Nothing to do
        without a file open. If an ``fsync`` fails, what the file holds on
        disk is not known any more (the kernel may have dropped the pages it
        could not write): the file is abandoned, left ``.open`` for
        :func:`recover`, and the :class:`OSError` raised; what was written
        to it since the last sync that succeeded may be lost. The next
        :meth:`write` starts a new file.
        """
        current = self._current
        if current is None:
            return
        try:
            current.sync()
        except OSError:
            self._abandon(current)
            raise

    def check_linked(self) -> None:
        """Raise :class:`FileNotFoundError` if the current file was removed (one ``fstat``).

        A file unlinked while open (its directory removed with ``rm -rf``,
        say) still takes every write, into nothing: its records are gone
        with its name. Then the file is abandoned (closed, forgotten) and
        the error names it; the next :meth:`write` opens a new file, making
        the directory again. Returns quietly when no file is open.
        """
        current = self._current
        if current is None:
            return
        try:
            linked = current.linked()
        except OSError:  # the descriptor itself failed: nothing more can go into it
            self._abandon(current)
            raise
        if not linked:
            self._abandon(current, left=False)
            raise FileNotFoundError(
                errno.ENOENT, "WARC file removed while written; its records are lost",
                str(current.path))

    def close(self) -> list[Path]:
        """Complete the current file (if any); all files completed, oldest first.

        Raises the :class:`OSError` of a file that could not be completed
        (its ``fsync`` or rename failed) after doing what can be done: the
        descriptors are closed, the lock released and the ``.open`` file
        left for :func:`recover` (listed in :attr:`abandoned`). The instance
        is closed all the same.
        """
        if self._current is not None:
            self._finish()
        return self.paths

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _serialise(self, *records: ArcWarcRecord) -> tuple[bytes, int]:
        """The records as gzip members, and the length of the first one."""
        serialised = []
        for record in records:
            self._buffer.seek(0)
            self._buffer.truncate()
            self._writer.write_record(record)
            serialised.append(self._buffer.getvalue())
        return _compress(*serialised)

    def _open(self) -> _OpenWarc:
        """Create the next file under a name nobody has, locked, starting with warcinfo.

        The directory is made again first: removed while crawling, it comes
        back with the next file. A file that cannot be started (no room for
        its warcinfo, say) is removed with its index, and the error raised.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        while True:
            name = warc_name(self.prefix, dt.datetime.now(dt.UTC), self._serial, self.worker)
            self._serial += 1
            current = _OpenWarc.create(self.directory / name)
            if current is not None:
                break
        data, _ = self._serialise(warcinfo_record(self._writer, name, self.info))
        try:
            current.append(data)
        except OSError:
            current.discard()
            raise
        self._current = current
        return current

    def _finish(self) -> None:
        """Complete the current file; one that cannot be is abandoned, and the error raised."""
        current, self._current = self._current, None
        assert current is not None
        try:
            self._paths.append(current.finish())
        except OSError:
            if current.path.exists():
                self._abandoned.append(current.path)
            raise

    def _abandon(self, current: _OpenWarc, left: bool = True) -> None:
        """Give ``current`` up: closed (its lock released), forgotten, and listed
        in :attr:`abandoned` when ``left`` (its ``.open`` file is there for :func:`recover`)."""
        if current is self._current:
            self._current = None
        current.close()
        if left:
            self._abandoned.append(current.path)


def _compress(*records: bytes) -> tuple[bytes, int]:
    """Each serialised record as its own gzip member, and the first member's length."""
    members = [igzip.compress(record, compresslevel=GZIP_LEVEL) for record in records]
    return b"".join(members), len(members[0])


class _OpenWarc:
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
        #: its index) is not known, and only :func:`recover` may touch it now.
        self.damaged = False
        self._closed = False

    @classmethod
    def create(cls, final: Path) -> _OpenWarc | None:
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
            _write_all(self.fd, data)
            _write_all(self.index_fd, line)
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
        ``.open`` file left as it is (unlocked) for :func:`recover`: after a
        failed ``fsync`` its content on disk is not known, and
        :func:`recover` keeps every complete record and indexes them again.
        An index that cannot be sorted is no failure (see :func:`_sort_index`).
        """
        try:
            self.sync()
            _sort_index(self.index_path)
            _rename_new(self.path, self.final)
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


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` (a short write is followed by the rest, or its error)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _remove(path: Path, fd: int) -> None:
    """Remove the file just created at ``path`` and close ``fd`` (its lock goes with it).

    Removed before it is unlocked, so no recoverer finds it; if it cannot be
    removed, it holds no complete record, which :func:`recover` removes (empty)
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
            _replace_index(path, ordered)


def _replace_index(path: Path, lines: list[str]) -> None:
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


def _rename_new(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target``, never over an existing file."""
    if target.exists():
        raise FileExistsError(f"{target} exists; {source} left as is")
    os.rename(source, target)


def recover(path: Path) -> Recovered:
    """Complete the ``.warc.gz.open`` file of a writer that died.

    Refused (:class:`WarcLockedError`) while a writer holds its lock. Keeps
    every record up to the first that is incomplete (a gzip member cut short,
    or a record shorter than its Content-Length), cuts the rest, writes the
    index again from the records kept and renames the file to ``.warc.gz``.
    A complete ``.warc.gz`` is never touched (:class:`NotRecoverableError`);
    nor is a file with no complete record at all (the same: not our WARC, or
    damaged from the start), except an empty one, which a writer abandoned:
    it is removed (``Recovered.removed``). Every refusal is a
    :class:`RecoverError`.
    """
    path = Path(path)
    if not path.name.endswith(WARC_SUFFIX + OPEN_SUFFIX):
        raise NotRecoverableError(f"{path} is not an open WARC (*{WARC_SUFFIX}{OPEN_SUFFIX})")
    final = complete_path(path)
    with path.open("r+b") as stream:
        try:
            fcntl.flock(stream.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WarcLockedError(f"{path} is locked by a live writer") from None
        size = os.fstat(stream.fileno()).st_size
        if size == 0:
            path.unlink()
            index_path(final).unlink(missing_ok=True)
            return Recovered(final, 0, 0, removed=True)
        end, records, entries = _complete_records(stream, final.name)
        if records == 0:
            raise NotRecoverableError(f"{path} has no complete WARC record; left as is")
        stream.truncate(end)
        stream.flush()
        os.fsync(stream.fileno())
        _replace_index(index_path(final), sorted(entry.line() + "\n" for entry in entries))
        _rename_new(path, final)
    return Recovered(final, records, size - end)


def _complete_records(stream: BinaryIO, filename: str) -> tuple[int, int, list[CdxjEntry]]:
    """End offset and count of the leading complete records, and their index entries."""
    iterator = ArchiveIterator(stream)
    end = records = 0
    entries: list[CdxjEntry] = []
    # Past the last good record anything may be found (a cut gzip member, cut
    # headers): whatever fails to parse there is the damage to cut, not an error.
    with contextlib.suppress(Exception):
        for record in iterator:
            complete = _drained(record)
            iterator.read_to_end()
            if not (complete and _member_ended(iterator)):
                break
            offset, length = iterator.get_record_offset(), iterator.get_record_length()
            entry = entry_for_record(record, offset, length, filename)
            if entry is not None:
                entries.append(entry)
            end, records = offset + length, records + 1
    return end, records, entries


def _drained(record: ArcWarcRecord) -> bool:
    """Read the record's rest; whether it held all its Content-Length."""
    stream = record.raw_stream
    while stream.read(65536):
        pass
    return isinstance(stream, LimitReader) and stream.limit == 0


def _member_ended(iterator: ArchiveIterator) -> bool:
    """Whether the gzip member just read ended with its trailer (CRC and size checked)."""
    decompressor = iterator.reader.decompressor if iterator.reader else None
    return decompressor is not None and bool(decompressor.eof)
