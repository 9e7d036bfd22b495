"""WARC files when storage fails: a full disk, a read-only filesystem, the directory removed.

Each case runs on a real small filesystem (:func:`tests.tmpfs.small_fs`), and
checks the files the way a reader would: ``warcio check`` (the CLI), every
gzip member complete up to the end of the file, and every CDXJ line reading
back the record it names, no more lines and no fewer. Only what no tmpfs can
be made to do (an ``fsync`` or an ``ftruncate`` that fails) is injected, at
the ``os`` call.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import re
import shutil
import subprocess
import sys
import zlib
from io import BytesIO
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler.warc.cdxj import CdxjEntry
from crawler.warc.exchange import Exchange
from crawler.warc.files import WarcFiles
from crawler.warc.openwarc import index_path
from crawler.warc.recovery import recover
from tests.tmpfs import small_fs
from tests.warc_samples import INFO, exchange

#: tmpfs allocates whole pages: what a file takes grows 4 KiB at a time.
PAGE = 4096
MIB = 1 << 20
WARCIO = Path(sys.executable).with_name("warcio")


def noise(size: int, seed: int = 1) -> bytes:
    """Incompressible bytes: the record's size on disk is the body's, near enough."""
    return random.Random(seed).randbytes(size)


def url(i: int) -> str:
    return f"http://example.com/{i:04d}"


def page(i: int, size: int = 2000) -> Exchange:
    """Page ``i`` (at :func:`url` ``(i)``), of ``size`` incompressible bytes."""
    return exchange(url(i), noise(size, i))


# ---------------------------------------------------------------- checks


def members(path: Path) -> list[tuple[int, int, bytes]]:
    """``(offset, length, record bytes)`` of each gzip member; fails unless they are
    all complete and end exactly at the end of the file (no torn tail, no garbage)."""
    data = path.read_bytes()
    found, at = [], 0
    while at < len(data):
        member = zlib.decompressobj(wbits=31)
        record = member.decompress(data[at:])
        assert member.eof, f"{path.name}: the gzip member at {at} is cut short"
        length = len(data) - at - len(member.unused_data)
        found.append((at, length, record))
        at += length
    return found


def warcio_cli_check(path: Path) -> None:
    """``warcio check -v``: exit status 0 and every digest checked and passed.

    (warcio 1.8 passes a file whose last record is cut short, with "digest
    present but not checked": that counts as a failure here.)
    """
    done = subprocess.run([str(WARCIO), "check", "-v", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not checked" not in done.stdout and "exception" not in done.stdout, done.stdout
    assert done.stdout.count("digest pass") >= 1


def valid_warc(path: Path) -> list[tuple[int, int, str, str | None]]:
    """Check ``path`` as a reader would; its records as ``(offset, length, type, URL)``."""
    warcio_cli_check(path)
    found = []
    for offset, length, raw in members(path):
        (record,) = _records(raw)
        found.append((offset, length, record.rec_type,
                      record.rec_headers.get_header("WARC-Target-URI")))
    assert found and found[0][2] == "warcinfo"
    assert [kind for _, _, kind, _ in found].count("warcinfo") == 1
    return found


def _records(raw: bytes) -> list:
    """The records of an uncompressed WARC block, digests checked (raises on a mismatch)."""
    found = []
    for record in ArchiveIterator(BytesIO(raw), check_digests="raise"):
        record.content_stream().read()
        found.append(record)
    return found


def truthful_index(warc: Path) -> list[str]:
    """Check that the index of ``warc`` lists each of its responses once, each line
    reading back its record, and nothing else; the URLs, in index order."""
    records = valid_warc(warc)
    text = index_path(warc).read_text(encoding="utf-8")
    assert text == "" or text.endswith("\n"), "a half index line"
    entries = [CdxjEntry.parse(line) for line in text.splitlines()]
    data = warc.read_bytes()
    for entry in entries:
        assert entry.filename == warc.name.removesuffix(".open")
        member = zlib.decompressobj(wbits=31)
        raw = member.decompress(data[entry.offset:entry.offset + entry.length])
        assert member.eof and not member.unused_data, f"{entry.url}: not one whole member"
        (record,) = _records(raw)
        assert record.rec_type in ("response", "revisit")
        assert record.rec_headers.get_header("WARC-Target-URI") == entry.url
        assert record.rec_headers.get_header("WARC-Payload-Digest") == entry.digest
    assert sorted((e.offset, e.length, e.url) for e in entries) == [
        (offset, length, url) for offset, length, kind, url in records
        if kind in ("response", "revisit")]
    return [entry.url for entry in entries]


def snapshot(warc: Path) -> tuple[bytes, bytes]:
    return warc.read_bytes(), index_path(warc).read_bytes()


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def unlocked(path: Path) -> bool:
    """Whether nobody holds the writer's lock on ``path`` (recover could take it)."""
    with path.open("rb") as stream:
        try:
            fcntl.flock(stream.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


# ---------------------------------------------------------------- (a) a full disk


def test_a_full_disk_in_the_middle_of_a_record_leaves_both_files_as_they_were() -> None:
    with small_fs(MIB) as fs:
        files = WarcFiles(fs.path / "warc", "TEST", "w1", 10 * MIB, INFO)
        for i in range(3):
            files.write(page(i))
        warc = files.current
        assert warc is not None
        before = snapshot(warc)
        ballast = fs.fill(leave=PAGE)
        assert 0 < fs.free() < 50_000  # room for part of the record below, not all of it
        with pytest.raises(OSError) as failed:
            files.write(page(3, size=50_000))
        assert failed.value.errno == errno.ENOSPC
        assert snapshot(warc) == before  # no torn member, no index line
        assert files.current == warc
        assert truthful_index(warc) == [url(0), url(1), url(2)]

        ballast.unlink()  # room again: the next write goes on in the same file
        files.write(page(4, size=50_000))
        assert files.current == warc
        (done,) = files.close()
        assert done == warc.with_name(warc.name.removesuffix(".open"))
        assert truthful_index(done) == [url(0), url(1), url(2), url(4)]
        assert listing(fs.path / "warc") == [index_path(done).name, done.name]


def test_a_file_that_cannot_be_started_leaves_nothing_behind() -> None:
    with small_fs(MIB) as fs:
        files = WarcFiles(fs.path / "warc", "TEST", "w1", 10 * MIB, INFO)
        ballast = fs.fill(leave=0)  # the file can be created, its warcinfo not written
        for _ in range(2):
            with pytest.raises(OSError) as failed:
                files.write(page(0))
            assert failed.value.errno == errno.ENOSPC
            assert files.current is None
            assert listing(fs.path / "warc") == []  # no empty .open, no .cdxj
        ballast.unlink()
        files.write(page(1))
        (done,) = files.close()
        assert truthful_index(done) == [url(1)]
        assert listing(fs.path / "warc") == [index_path(done).name, done.name]


# ---------------------------------------------------------------- (b) the index line fails


def test_an_index_line_that_does_not_fit_takes_its_record_back_off() -> None:
    """The record fits in the WARC's last page, the index line needs a new page: none left.

    tmpfs gives a file whole pages, so with no page free a write still fits
    in the room left in a file's last page. Records are written until the
    index's last page has less room than a line while the WARC's has more
    than a record (padding bodies steer the WARC's end), then the disk is
    filled: the record is written, its index line is not.
    """
    with small_fs(MIB) as fs:
        files = WarcFiles(fs.path, "TEST", "w1", 10 * MIB, INFO)
        target = exchange(url(9999))  # a small record, as long as one like it
        files.write(exchange(url(9997)))
        warc = files.current
        assert warc is not None
        start = warc.stat().st_size
        files.write(exchange(url(9998)))
        record = warc.stat().st_size - start
        start, pad = warc.stat().st_size, 1000
        files.write(exchange(url(0), noise(pad)))
        overhead = warc.stat().st_size - start - pad  # a padding record's, beside its body
        for i in range(1, 200):
            line = index_path(warc).read_text().splitlines(keepends=True)[-1]
            index_room = -index_path(warc).stat().st_size % PAGE
            warc_room = -warc.stat().st_size % PAGE
            if index_room < len(line) and warc_room >= record + 100:
                break
            # place the WARC's end some 300 bytes more than a record before a page's end
            pad = (-(record + 300) - warc.stat().st_size - overhead) % PAGE
            files.write(exchange(url(i), noise(pad if pad >= 200 else pad + PAGE, i)))
        else:
            pytest.fail("could not line up the pages")
        written = truthful_index(warc)
        before = snapshot(warc)
        fs.fill(leave=0)
        assert fs.free() == 0
        with pytest.raises(OSError) as failed:
            files.write(target)
        assert failed.value.errno == errno.ENOSPC
        assert snapshot(warc) == before  # the record that had fitted was cut back off
        assert truthful_index(warc) == written

        fs.resize(2 * MIB)  # room made without deleting anything
        again = files.write(target)
        assert (files.current, again.offset) == (warc, len(before[0]))
        (done,) = files.close()
        assert truthful_index(done) == sorted([*written, url(9999)])  # sorted at close


# ---------------------------------------------------------------- (c) read-only


def test_a_read_only_filesystem_refuses_the_write_and_nothing_is_left() -> None:
    with small_fs(MIB) as fs:
        directory = fs.path / "warc"
        files = WarcFiles(directory, "TEST", "w1", 1, INFO)  # each file completed at once
        (first,) = [files.write(page(0)).path]
        assert files.paths == [first] and files.current is None
        before = {name: (directory / name).read_bytes() for name in listing(directory)}
        fs.read_only(True)  # (refused while a file is open for writing: none is)
        try:
            with pytest.raises(OSError) as failed:
                files.write(page(1))
            assert failed.value.errno == errno.EROFS
        finally:
            fs.read_only(False)
        assert files.current is None
        assert {name: (directory / name).read_bytes() for name in listing(directory)} == before
        second = files.write(page(2)).path
        assert files.close() == [first, second]
        assert truthful_index(first) == [url(0)]
        assert truthful_index(second) == [url(2)]
        assert len(listing(directory)) == 4


# ---------------------------------------------------------------- (d) the directory removed


def test_a_removed_directory_is_told_and_made_again(tmp_path: Path) -> None:
    directory = tmp_path / "crawl" / "warc"
    files = WarcFiles(directory, "TEST", "w1", 10 * MIB, INFO)
    files.check_linked()  # no file open: nothing to say
    first = files.write(page(0))
    files.check_linked()  # still there
    gone = files.current
    assert gone is not None
    shutil.rmtree(tmp_path / "crawl")  # rm -rf WARC_DIR while crawling
    with pytest.raises(FileNotFoundError, match=re.escape(str(gone))):
        files.check_linked()
    assert files.current is None and files.abandoned == []
    assert not _open_descriptors(gone)  # abandoned: closed, not kept writing into nothing
    files.check_linked()

    second = files.write(page(1))
    assert directory.is_dir() and second.path.parent == directory
    assert second.path != first.path
    files.check_linked()
    (done,) = files.close()
    assert done == second.path
    assert truthful_index(done) == [url(1)]


def _open_descriptors(path: Path) -> list[str]:
    """This process's descriptors still open on ``path`` (removed or not)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.removesuffix(" (deleted)") == str(path):
            found.append(fd)
    return found


# ---------------------------------------------------------------- (e) finishing on a full disk


def test_a_full_disk_while_sorting_the_index_still_completes_the_warc() -> None:
    with small_fs(MIB) as fs:
        files = WarcFiles(fs.path, "TEST", "w1", 10 * MIB, INFO)
        for i in (5, 3, 9, 1):  # out of order: the index would be rewritten sorted
            files.write(page(i))
        warc = files.current
        assert warc is not None
        ballast = fs.fill(leave=0)  # no page for the sorted copy
        (done,) = files.close()
        assert not warc.exists() and done.exists()
        assert listing(fs.path) == sorted([ballast.name, done.name, index_path(done).name])
        lines = truthful_index(done)
        assert lines == [url(5), url(3), url(9), url(1)]  # unsorted, every line right


def test_an_index_sorted_when_there_is_room() -> None:
    """The case above with room: the same steps sort the index (so the check above can fail)."""
    with small_fs(MIB) as fs:
        files = WarcFiles(fs.path, "TEST", "w1", 10 * MIB, INFO)
        for i in (5, 3, 9, 1):
            files.write(page(i))
        (done,) = files.close()
        assert truthful_index(done) == [url(1), url(3), url(5), url(9)]


def test_a_failed_rename_leaves_the_open_file_for_recover(tmp_path: Path) -> None:
    files = WarcFiles(tmp_path, "TEST", "w1", 10 * MIB, INFO)
    written = [files.write(page(i)) for i in range(3)]
    left = files.current
    assert left is not None
    blocker = written[0].path
    blocker.write_bytes(b"someone else's")  # the complete name, taken
    with pytest.raises(FileExistsError):
        files.close()
    assert files.current is None and files.paths == [] and files.abandoned == [left]
    assert unlocked(left)
    assert truthful_index(left) == [url(0), url(1), url(2)]
    blocker.unlink()
    result = recover(left)
    assert result.records == 1 + 2 * 3 and result.path == blocker
    assert truthful_index(result.path) == [url(0), url(1), url(2)]


# ---------------------------------------------------------------- (f) sync


def test_sync_fsyncs_the_file_and_its_index(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``fsync`` does cannot be seen from a running system: its calls are."""
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    files = WarcFiles(tmp_path, "TEST", "w1", 10 * MIB, INFO)
    files.sync()  # nothing open: nothing to sync
    assert synced == []
    files.write(page(0))
    warc = files.current
    assert warc is not None
    files.sync()
    assert sorted(synced) == sorted([warc.stat().st_ino, index_path(warc).stat().st_ino])
    files.write(page(1))
    assert files.current == warc  # the file goes on after a sync
    (done,) = files.close()
    assert truthful_index(done) == [url(0), url(1)]


def test_a_failed_sync_abandons_the_file_to_recover(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """No tmpfs fails an fsync: EIO is injected at ``os.fsync``."""
    files = WarcFiles(tmp_path, "TEST", "w1", 10 * MIB, INFO)
    files.write(page(0))
    left = files.current
    assert left is not None

    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError) as failed:
        files.sync()
    assert failed.value.errno == errno.EIO
    assert files.current is None and files.abandoned == [left]
    assert unlocked(left) and not _open_descriptors(left)
    monkeypatch.undo()
    second = files.write(page(1))
    assert second.path.name + ".open" != left.name
    assert files.close() == [second.path]
    assert truthful_index(second.path) == [url(1)]
    assert truthful_index(recover(left).path) == [url(0)]


def test_a_cut_back_that_fails_abandons_the_file_to_recover(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk, then ``ftruncate`` failing too (EIO injected): the file's tail is
    not known, so it is given up, and :func:`recover` cuts it back."""
    with small_fs(MIB) as fs:
        files = WarcFiles(fs.path, "TEST", "w1", 10 * MIB, INFO)
        for i in range(2):
            files.write(page(i))
        left = files.current
        assert left is not None
        ballast = fs.fill(leave=PAGE)

        def ftruncate(fd: int, length: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "ftruncate", ftruncate)
        with pytest.raises(OSError) as failed:
            files.write(page(2, size=50_000))
        monkeypatch.undo()
        assert failed.value.errno == errno.ENOSPC
        assert any("abandoned" in note for note in failed.value.__notes__)
        assert files.current is None and files.abandoned == [left]
        assert unlocked(left)
        ballast.unlink()
        result = recover(left)
        assert result.cut_bytes > 0  # the torn record
        assert truthful_index(result.path) == [url(0), url(1)]
        files.write(page(3))
        (done,) = files.close()
        assert truthful_index(done) == [url(3)]
