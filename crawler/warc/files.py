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
"""

from __future__ import annotations

import contextlib
import datetime as dt
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
        """
        if revisit_of is not None:
            return self._write_records(exchange, revisit_of, digest)
        digest = digest or payload_digest(exchange.body)
        wire = exchange_bytes(exchange, digest, new_record_id(), new_record_id())
        if wire is None:  # a header that is not Latin-1 text: warcio percent-encodes it
            return self._write_records(exchange, None, digest)
        current, offset, length = self._append(_compress(wire.response, wire.request))
        current.index(CdxjEntry(
            surt=surt_key(exchange.url), timestamp=wire.timestamp, url=exchange.url,
            status=exchange.status, mime=wire.mime, digest=digest, length=length,
            offset=offset, filename=current.final.name))
        return self._written(current, offset, length, digest, wire.date)

    def _write_records(self, exchange: Exchange, revisit_of: RevisitOf | None,
                       digest: str | None) -> Written:
        """:meth:`write` through warcio's record objects (revisits, unusual headers)."""
        answer, request = exchange_records(self._writer, exchange, revisit_of, digest)
        recorded = answer.rec_headers.get_header("WARC-Payload-Digest")
        current, offset, answer_length = self._append(self._serialise(answer, request))
        entry = entry_for_record(answer, offset, answer_length, current.final.name)
        assert entry is not None  # a response or revisit
        current.index(entry)
        return self._written(current, offset, answer_length, recorded,
                             answer.rec_headers.get_header("WARC-Date"))

    def _append(self, data: tuple[bytes, int]) -> tuple[_OpenWarc, int, int]:
        """Append an exchange's gzip members (and the first one's length) to the
        current file: the file, the members' offset and the first one's length."""
        members, first_length = data
        current = self._current or self._open()
        return current, current.append(members), first_length

    def _written(self, current: _OpenWarc, offset: int, length: int, digest: str,
                 date: str) -> Written:
        """Where the record went; the file is completed once it is full."""
        written = Written(current.final, offset, length, digest, date)
        if current.size >= self.max_size:
            self._finish()
        return written

    def close(self) -> list[Path]:
        """Complete the current file (if any); all files completed, oldest first."""
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
        """Create the next file under a name nobody has, locked, starting with warcinfo."""
        while True:
            name = warc_name(self.prefix, dt.datetime.now(dt.UTC), self._serial, self.worker)
            self._serial += 1
            current = _OpenWarc.create(self.directory / name)
            if current is not None:
                break
        data, _ = self._serialise(warcinfo_record(self._writer, name, self.info))
        current.append(data)
        self._current = current
        return current

    def _finish(self) -> None:
        current, self._current = self._current, None
        assert current is not None
        self._paths.append(current.finish())


def _compress(*records: bytes) -> tuple[bytes, int]:
    """Each serialised record as its own gzip member, and the first member's length."""
    members = [igzip.compress(record, compresslevel=GZIP_LEVEL) for record in records]
    return b"".join(members), len(members[0])


class _OpenWarc:
    """One ``.open`` WARC file, locked, with its index; bytes go straight to the OS."""

    def __init__(self, final: Path, fd: int) -> None:
        self.final = final
        self.path = final.with_name(final.name + OPEN_SUFFIX)
        self.fd = fd
        self.size = 0
        self.index_path = index_path(final)
        self._index = self.index_path.open("w", encoding="utf-8")

    @classmethod
    def create(cls, final: Path) -> _OpenWarc | None:
        """The new file, or ``None`` if the name is taken (try the next serial).

        A recoverer may lock the empty file before we do; it then removes it.
        """
        if final.exists():
            return None
        try:
            fd = os.open(final.with_name(final.name + OPEN_SUFFIX),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
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
        return cls(final, fd)

    def append(self, data: bytes) -> int:
        """Write ``data`` at the end; its offset. A failed write is cut back off."""
        offset = self.size
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except OSError:
            os.ftruncate(self.fd, offset)
            os.lseek(self.fd, offset, os.SEEK_SET)
            raise
        self.size += len(data)
        return offset

    def index(self, entry: CdxjEntry) -> None:
        self._index.write(entry.line() + "\n")
        self._index.flush()

    def finish(self) -> Path:
        """Sync, sort the index, rename to the complete name, unlock; that name."""
        self._index.close()
        try:
            os.fsync(self.fd)
            _sort_index(self.index_path)
            _rename_new(self.path, self.final)
        finally:
            os.close(self.fd)
        return self.final


def _sort_index(path: Path) -> None:
    """Rewrite the index in sorted order (pywb binary-searches it), atomically."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    _replace_index(path, sorted(lines))


def _replace_index(path: Path, lines: list[str]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        out.writelines(lines)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


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
