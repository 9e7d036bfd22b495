"""Completing the ``.open`` WARC file of a writer that died (``scrapy warc recover``).

A dead writer's file holds every record it wrote whole, then perhaps a
record cut short by the kill (or by a disk that filled). :func:`recover` keeps
the records up to the first incomplete one, cuts the rest, writes the index
again from the records kept and gives the file its complete name. A file a
live writer still holds is refused: its ``flock`` is taken
(:class:`crawler.warc.files.WarcFiles` holds it from creation to rename).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from warcio.archiveiterator import ArchiveIterator
from warcio.limitreader import LimitReader

from crawler.warc.cdxj import OPEN_SUFFIX, CdxjEntry, entry_for_record
from crawler.warc.openwarc import (
    WARC_SUFFIX,
    complete_path,
    index_path,
    rename_new,
    replace_index,
)

if TYPE_CHECKING:
    from warcio.recordloader import ArcWarcRecord


class RecoverError(Exception):
    """:func:`recover` refused a file (the file is left as it was)."""


class WarcLockedError(RecoverError):
    """The ``.open`` WARC is locked: a live writer still writes it."""


class NotRecoverableError(RecoverError, ValueError):
    """Not a ``.warc.gz.open`` file, or one without a single complete record."""


@dataclass(frozen=True, slots=True)
class Recovered:
    """What :func:`recover` did to a dead writer's file."""

    path: Path  # the complete file it now is (unless removed)
    records: int  # complete records kept (warcinfo included)
    cut_bytes: int  # bytes cut from the end (a partial record)
    removed: bool = False  # it was empty (abandoned before its first record): deleted


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
        replace_index(index_path(final), sorted(entry.line() + "\n" for entry in entries))
        rename_new(path, final)
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
