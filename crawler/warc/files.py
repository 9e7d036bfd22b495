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
rename, so ``recover`` can tell a live writer's file (lock held: refused)
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
``recover`` to cut back to its last complete record and index again. The
next exchange starts a new file (and its directory again, if removed).
"""

from __future__ import annotations

import datetime as dt
import errno
import re
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Self

from isal import igzip
from warcio.warcwriter import WARCWriter

from crawler.warc.cdxj import CdxjEntry, entry_for_record, surt_key
from crawler.warc.openwarc import WARC_SUFFIX, OpenWarc
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

_UNSAFE = re.compile(r"[^A-Za-z0-9.-]")
#: ISA-L's level 1 (of 0-3): on page text it compresses as well as zlib's 9
#: at a tenth of the CPU; higher levels cost more and gain nothing on HTML.
GZIP_LEVEL = 1


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


def warc_name(prefix: str, when: dt.datetime, serial: int, worker: str) -> str:
    """``PREFIX-YYYYMMDDhhmmssfff-SERIAL-WORKER.warc.gz`` (Heritrix's convention).

    ``when`` is taken as UTC when naive; ``worker`` keeps only ``[A-Za-z0-9.-]``
    (``vm:5510`` -> ``vm-5510``) so the name stays one safe path component.
    """
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC)
    stamp = when.strftime("%Y%m%d%H%M%S") + f"{when.microsecond // 1000:03d}"
    return f"{prefix}-{stamp}-{serial:05d}-{_UNSAFE.sub('-', worker)}{WARC_SUFFIX}"


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
        self._current: OpenWarc | None = None
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
        """The ``.open`` files given up after a storage failure, left for ``recover``."""
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
        is abandoned to ``recover`` when even that cannot be vouched for;
        see :attr:`abandoned`). Once there is room again the next call
        writes, in the same file. One exception to "as they were": an
        :class:`OSError` from completing the file this exchange filled
        (rotation: its ``fsync`` or rename failed) leaves the exchange in
        that ``.open`` file, for ``recover``; fetched again, the page may
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

    def _append(self, current: OpenWarc, members: bytes, entry: CdxjEntry) -> None:
        """Append an exchange's gzip members to ``current``, and its index line: both
        or neither (a file left damaged by the failure is abandoned)."""
        try:
            current.append(members, (entry.line() + "\n").encode("utf-8"))
        except OSError:
            if current.damaged:
                self._abandon(current)
            raise

    def _written(self, current: OpenWarc, offset: int, length: int, digest: str,
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
        ``recover``, and the :class:`OSError` raised; what was written
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
        left for ``recover`` (listed in :attr:`abandoned`). The instance
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

    def _open(self) -> OpenWarc:
        """Create the next file under a name nobody has, locked, starting with warcinfo.

        The directory is made again first: removed while crawling, it comes
        back with the next file. A file that cannot be started (no room for
        its warcinfo, say) is removed with its index, and the error raised.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        while True:
            name = warc_name(self.prefix, dt.datetime.now(dt.UTC), self._serial, self.worker)
            self._serial += 1
            current = OpenWarc.create(self.directory / name)
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

    def _abandon(self, current: OpenWarc, left: bool = True) -> None:
        """Give ``current`` up: closed (its lock released), forgotten, and listed
        in :attr:`abandoned` when ``left`` (its ``.open`` file is there for ``recover``)."""
        if current is self._current:
            self._current = None
        current.close()
        if left:
            self._abandoned.append(current.path)


def _compress(*records: bytes) -> tuple[bytes, int]:
    """Each serialised record as its own gzip member, and the first member's length."""
    members = [igzip.compress(record, compresslevel=GZIP_LEVEL) for record in records]
    return b"".join(members), len(members[0])
