"""Nothing fetched is lost when storage fails: the parts, one at a time.

The minimum free space as the operator writes it; a lease that waits for the
archive's acknowledgement (and turns into a retry when the record could not
be written); the writer's one line per condition on a real full filesystem;
the pause as a worker's heartbeat and ``scrapy frontier status`` show it.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest
import pytest_twisted
from scrapy import Request
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler
from twisted.internet.defer import Deferred

from crawler.commands.frontier_output import format_status
from crawler.diskspace import MinFree, human, parse_min_free
from crawler.extensions.storage import feed_folder
from crawler.frontier.status import Status, workers_of
from crawler.frontier.values import Lease, Limits, Release
from crawler.frontier.workers import Heartbeat
from crawler.lease import TICKET_META, Ticket
from crawler.scheduling.leases import UNARCHIVED_RETRY_MS, LeaseTable
from crawler.warc.digests import DigestIndex
from crawler.warc.files import WarcFiles, Written
from crawler.warc.writer import ArchiveWriter
from tests.tmpfs import small_fs
from tests.warc_samples import INFO, exchange, warcio_check


@pytest.mark.parametrize(("value", "expected"), [
    (0, MinFree(0)), ("0", MinFree(0)), (1 << 30, MinFree(1 << 30)),
    ("1GiB", MinFree(1 << 30)), ("512 MiB", MinFree(512 << 20)), ("2GB", MinFree(2 * 10**9)),
    ("1.5g", MinFree(int(1.5 * (1 << 30)))), ("5%", MinFree(percent=5.0)),
    ("0.5%", MinFree(percent=0.5)),
])
def test_min_free_is_bytes_with_units_or_a_share_of_the_disk(value: object,
                                                              expected: MinFree) -> None:
    assert parse_min_free(value) == expected


@pytest.mark.parametrize("value", ["lots", "5 parsecs", "-1", "150%", "%", -5])
def test_a_min_free_that_means_nothing_says_what_would(value: object) -> None:
    with pytest.raises(ValueError, match="WARC_MIN_FREE"):
        parse_min_free(value)


def test_a_share_is_of_the_filesystem_it_is_on() -> None:
    assert MinFree(percent=5).of(1000 * 1024) == 51200
    assert MinFree(4096).of(10**12) == 4096
    assert str(MinFree(percent=5)) == "5%" and str(MinFree(1 << 30)) == "1.0 GiB"
    assert human(480 * 1024) == "480 KiB"


@pytest.mark.parametrize(("uri", "folder"), [
    ("output/items.jsonl", Path("output")),
    ("file:///data/feeds/%(name)s/%(time)s.jsonl", Path("/data/feeds")),
    ("items.jsonl", Path()),
    ("s3://bucket/items.jsonl", None),
])
def test_a_feed_is_guarded_where_its_file_goes(uri: str, folder: Path | None) -> None:
    assert feed_folder(uri) == folder


# ----------------------------------------------------------------- the lease waits


def _table() -> tuple[LeaseTable, list[Release], MemoryStatsCollector]:
    stats = MemoryStatsCollector(get_crawler())
    table = LeaseTable(stats, Limits(), lambda request, lease: "")
    sent: list[Release] = []
    return table, sent, stats


def _claimed(table: LeaseTable, n: int) -> tuple[Request, Ticket, Lease]:
    lease = Lease("http://a.test:80", bytes([n]) * 16, "{}")
    table.add(lease, f"http://a.test/{n}")
    ticket = Ticket(lease.token)
    return Request(f"http://a.test/{n}", meta={TICKET_META: ticket}), ticket, lease


def test_a_page_is_done_only_once_its_record_is_written() -> None:
    table, sent, _ = _table()
    request, ticket, lease = _claimed(table, 1)
    record: Deferred[object] = Deferred()
    ticket.archiving(record)
    ticket.done(health="ok")
    table.finished(request, sent.append)
    assert sent == []  # the engine is done with it; the archive is not
    assert table.leases() == [lease] and len(table) == 1  # still renewed, still pending
    record.callback(Written(Path("x.warc.gz"), 0, 10, "sha1:X", "2026-12-04T00:00:00Z"))
    assert [(r.op, r.health) for r in sent] == [("done", "ok")]
    assert table.leases() == [] and len(table) == 0


def test_a_page_whose_record_failed_is_fetched_again_not_done() -> None:
    table, sent, stats = _table()
    request, ticket, lease = _claimed(table, 2)
    first, second = Deferred(), Deferred()  # a redirect hop, then the page
    ticket.archiving(first)
    ticket.archiving(second)
    ticket.done(health="ok")
    table.finished(request, sent.append)
    first.callback(Written(Path("x.warc.gz"), 0, 10, "sha1:X", "2026-12-04T00:00:00Z"))
    assert sent == []
    second.callback(OSError(28, "No space left on device"))
    [release] = sent
    # A neutral retry: the host's health untouched, the stored record (its
    # retry count) kept, due again soon.
    assert (release.op, release.arg, release.health, release.record) == (
        "retry", str(UNARCHIVED_RETRY_MS), "", "")
    assert release.fingerprint == lease.fingerprint
    assert stats.get_value("frontier/leases/unarchived") == 1
    assert stats.get_value("frontier/leases/done") is None


def test_a_dead_letter_whose_record_failed_is_fetched_again_too() -> None:
    from crawler.deadletter import DeadReason

    table, sent, _ = _table()
    request, ticket, _ = _claimed(table, 3)
    record: Deferred[object] = Deferred()
    ticket.archiving(record)
    ticket.dead(DeadReason.now("http-status", "404"))
    table.finished(request, sent.append)
    record.callback(OSError(5, "Input/output error"))
    assert [r.op for r in sent] == ["retry"]


def test_a_closing_worker_gives_back_a_lease_that_waits_for_the_archive() -> None:
    table, sent, _ = _table()
    request, ticket, lease = _claimed(table, 4)
    record: Deferred[object] = Deferred()
    ticket.archiving(record)
    table.finished(request, sent.append)
    returned = table.return_all()
    assert [(r.op, r.fingerprint) for r in returned] == [("return", lease.fingerprint)]
    record.callback(Written(Path("x.warc.gz"), 0, 10, "sha1:X", "2026-12-04T00:00:00Z"))
    assert sent == []  # given back already: never released twice


def test_claimed_requests_not_started_go_back_when_the_worker_pauses() -> None:
    table, _, stats = _table()
    _, ticket, lease = _claimed(table, 5)
    returned = table.give_back([ticket.token, "not-a-token"])
    assert [(r.op, r.fingerprint) for r in returned] == [("return", lease.fingerprint)]
    assert len(table) == 0 and stats.get_value("frontier/leases/returned") == 1


# ------------------------------------------------------------ the writer's lines


@pytest_twisted.ensureDeferred
async def test_a_full_disk_is_one_line_then_one_when_writing_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    stats = MemoryStatsCollector(get_crawler())
    with small_fs(512 << 10) as fs:
        files = WarcFiles(fs.path / "warc", "t", "w0", 10**9, INFO)
        writer = ArchiveWriter(files, DigestIndex(), 10**7, stats, revisits=False)
        writer.start()
        with caplog.at_level(logging.WARNING, logger="crawler.warc.writer"):
            # Bodies that do not compress: each record needs pages of its own.
            first = await (await writer.put(exchange("http://a.test/0", os.urandom(20_000))))
            ballast = fs.fill(leave=0)
            failed = [await (await writer.put(exchange(f"http://a.test/{i}", os.urandom(20_000))))
                      for i in range(1, 6)]
            ballast.unlink()
            again = await (await writer.put(exchange("http://a.test/6", os.urandom(20_000))))
            paths = writer.close(timeout=10)
        assert isinstance(first, Written) and isinstance(again, Written)
        assert all(isinstance(o, OSError) and o.errno == 28 for o in failed)
        assert writer.failures == 5 and stats.get_value("warc/errors") == 5
        assert warcio_check(*paths) == 0
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert "cannot write to" in messages[0] and "No space left on device" in messages[0]
    assert "again; 5 record(s) could not be written" in messages[1]


@pytest_twisted.ensureDeferred
async def test_records_written_into_a_removed_folder_are_not_acknowledged(
        tmp_path: Path) -> None:
    stats = MemoryStatsCollector(get_crawler())
    files = WarcFiles(tmp_path / "warc", "t", "w0", 10**9, INFO)
    writer = ArchiveWriter(files, DigestIndex(), 10**7, stats, revisits=False)
    writer.start()
    assert isinstance(await (await writer.put(exchange("http://a.test/0"))), Written)
    shutil.rmtree(tmp_path / "warc")  # rm -rf WARC_DIR while crawling
    lost = await (await writer.put(exchange("http://a.test/1")))
    kept = await (await writer.put(exchange("http://a.test/2")))
    paths = writer.close(timeout=10)
    assert isinstance(lost, FileNotFoundError)  # written, but into a file nobody can read
    assert isinstance(kept, Written) and (tmp_path / "warc").is_dir()
    assert warcio_check(*paths) == 0 and [p.parent for p in paths] == [tmp_path / "warc"]


# ------------------------------------------------------------------- the pause shows


def test_a_paused_worker_says_why_in_its_heartbeat_and_the_status() -> None:
    why = "WARC_DIR /data/warc: 480 KiB free, below WARC_MIN_FREE (1.0 GiB)"
    beat = Heartbeat(1000.0, held=3, pid=1, host="m1", lease=60.0, paused=why)
    assert Heartbeat.parse(beat.to_json()) == beat
    assert Heartbeat.parse(Heartbeat(1000.0).to_json()).paused is None  # type: ignore[union-attr]
    workers = workers_of({b"w1": beat.to_json().encode(),
                          b"w2": Heartbeat(1000.0, held=5).to_json().encode()}, 1001.0, 60.0)
    text = format_status(Status("ns", 4, True, {}, {"total": 0, "other": 0}, workers),
                         "redis://x")
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("  w")}
    assert "paused" in rows["w1"] and "alive" in rows["w2"]
    assert f"w1 is paused: {why}" in text


# ------------------------------------------------------------------ the disk guard


def test_the_guard_watches_the_archive_the_job_folder_and_local_feeds(
        caplog: pytest.LogCaptureFixture) -> None:
    """Three folders on two small filesystems: the one short of room is named,
    with its free space and the minimum, in one WARNING; room again resumes."""
    from crawler.extensions.storage import StorageGuard, guarded_places
    from crawler.pipelines.warc import Archive

    with small_fs(4 << 20) as archive_fs, small_fs(1 << 20) as job_fs:
        crawler = get_crawler(settings_dict={
            "WARC_DIR": str(archive_fs.path / "warc"), "JOBDIR": str(job_fs.path / "job"),
            "FEEDS": {str(archive_fs.path / "out" / "%(name)s.jsonl"): {"format": "jsonlines"}},
            "WARC_ENABLED": True, "WARC_MIN_FREE": "512KiB"})
        crawler.stats = MemoryStatsCollector(crawler)
        places = guarded_places(crawler, Archive(crawler))
        assert [(p.label, p.path) for p in places] == [
            ("WARC_DIR", archive_fs.path / "warc"), ("JOBDIR", job_fs.path / "job"),
            ("feed", archive_fs.path / "out")]
        guard = StorageGuard(crawler, parse_min_free("512KiB"), 1.0)
        guard.places = places
        with caplog.at_level(logging.INFO, logger="crawler.extensions.storage"):
            guard._judge(guard._read(probe=False))
            assert guard.why == ""  # room everywhere
            ballast = job_fs.fill(leave=256 << 10)
            guard._judge(guard._read(probe=False))
            guard._judge(guard._read(probe=False))  # still short: said once
            assert "JOBDIR" in guard.why and "WARC_DIR" not in guard.why
            ballast.unlink()
            guard._judge(guard._read(probe=False))
        assert guard.why == ""
        assert crawler.stats.get_value("storage/pauses") == 1
        assert crawler.stats.get_value("storage/paused") == 0
        assert crawler.stats.get_value("storage/free_bytes/jobdir") > 512 << 10
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"Storage: JOBDIR {job_fs.path / 'job'}: ")
    assert "below WARC_MIN_FREE (512 KiB)" in lines[0]
    assert lines[1].startswith("Storage: room again")


def test_a_failed_record_or_a_lost_row_pauses_until_a_probe_writes(tmp_path: Path) -> None:
    from crawler.extensions.storage import Place, StorageGuard
    from crawler.pipelines.warc import Archive

    crawler = get_crawler(settings_dict={"WARC_DIR": str(tmp_path / "warc")})
    crawler.stats = MemoryStatsCollector(crawler)
    guard = StorageGuard(crawler, MinFree(0), 1.0)
    guard.places = [Place("WARC_DIR", tmp_path / "warc"), Place("feed", tmp_path / "out")]

    class Failing:  # the writer's counters, as the guard reads them
        failures = 3
        failing = "[Errno 5] Input/output error"

    guard.archive = Archive(crawler)  # the WARC pipeline's, as found at spider_opened
    guard.archive.writer = Failing()  # type: ignore[assignment]
    crawler.stats.set_value("feed/rows_lost", 2)
    guard._failed = guard._new_failures(100.0)
    assert guard._failed == (f"WARC_DIR {tmp_path / 'warc'}: cannot write: [Errno 5] "
                             "Input/output error; feed: 2 row(s) could not be written")
    assert guard._new_failures(101.0) == ""  # counted once
    guard._judge(([], None))
    assert guard.why == guard._failed
    assert guard._probe() == ""  # both folders written (and the probes removed)
    assert not list((tmp_path / "warc").iterdir()) and not list((tmp_path / "out").iterdir())
    guard._judge(([], ""))
    assert guard.why == "" and crawler.stats.get_value("storage/pauses") == 1
    guard.places[1] = Place("feed", Path("/proc/no-such-folder"))  # unwritable even for root
    assert guard._probe().startswith("feed /proc/no-such-folder: cannot write: [Errno")
