"""Real crawls whose archive is on a small real filesystem (a tmpfs the test mounts).

What the server answered (its ledger) against what the archive holds, read
back with warcio: a page is done only once its records are written, the disk
guard pauses a worker before (or when) the disk is full and resumes it when
there is room, and every file passes ``warcio check``.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from warcio.archiveiterator import ArchiveIterator

from crawler.frontier.workers import Heartbeat
from tests.crawl_runner import CrawlResult, finish_crawl, start_crawl
from tests.simweb import SimWebProcess
from tests.simweb.ledger import Ledger
from tests.tmpfs import SmallFs, small_fs

pytestmark = pytest.mark.crawl

MIX = {"robots:allow-all": 1.0, "page:normal": 1.0}
SETTINGS = {"DOWNLOAD_DELAY": 0.02, "DEPTH_LIMIT": 3, "ADMISSION_MAX_PAGES_PER_HOST": 20,
            "CONCURRENT_REQUESTS": 16, "LOG_LEVEL": "INFO", "STORAGE_CHECK_INTERVAL": 0.5,
            "LOGSTATS_INTERVAL": 1,
            "WARC_REVISITS": False, "PROMETHEUS_ENABLED": False}


def answered_pages(ledger: Ledger) -> set[str]:
    """Every URL the server answered with a 200, in full (robots.txt included)."""
    return {f"http://{e['host']}{e['path']}" for e in ledger
            if e["done"] is not None and e["status"] == 200}


def archived(warc_dir: Path) -> set[str]:
    """The URL of every response or revisit record in the complete WARC files."""
    urls = set()
    for path in sorted(warc_dir.glob("*.warc.gz")):
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type in ("response", "revisit"):
                    urls.add(record.rec_headers.get_header("WARC-Target-URI"))
    return urls


def warcio_check(warc_dir: Path) -> None:
    files = sorted(warc_dir.glob("*.warc.gz"))
    assert files and not list(warc_dir.glob("*.open")), sorted(warc_dir.iterdir())
    check = subprocess.run([sys.executable, "-m", "warcio.cli", "check", *map(str, files)],
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]


def wait_for_line(log: Path, pattern: str, proc: subprocess.Popen[str],
                  timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text() if log.exists() else ""
        found = re.search(pattern, text)
        if found:
            return found.group(0)
        assert proc.poll() is None, text[-3000:]
        time.sleep(0.2)
    raise AssertionError(f"no {pattern!r} in {log}:\n{log.read_text()[-3000:]}")


def lines(result: CrawlResult, pattern: str) -> list[str]:
    return [line for line in result.log.splitlines() if re.search(pattern, line)]


def crawl_on(fs: SmallFs, web: SimWebProcess, workdir: Path, settings: dict[str, object],
             seeds: bool = True) -> subprocess.Popen[str]:
    return start_crawl(web.proxy_url, web.web.seed_urls() if seeds else None, workdir,
                       {**SETTINGS, "WARC_DIR": str(fs.path / "warc"), **settings})


def test_the_guard_pauses_before_the_disk_is_full_and_resumes_when_there_is_room(
        tmp_path: Path) -> None:
    """WARC_MIN_FREE on a 1 MiB filesystem: the worker pauses once, says where and
    how much is free, shows paused in the status, and resumes by itself when the
    filesystem grows; every page answered 200 is archived."""
    with small_fs(1 << 20) as fs, SimWebProcess(seed=3, n_hosts=60, mix=MIX) as web:
        started = time.monotonic()
        proc = crawl_on(fs, web, tmp_path, {"WARC_MIN_FREE": "512KiB"})
        log = tmp_path / "crawl.log"
        wait_for_line(log, r"Storage: WARC_DIR .* free, below WARC_MIN_FREE \(512 KiB\)", proc)
        status = subprocess.run([sys.executable, "-m", "scrapy", "frontier", "status",
                                 "-s", f"JOBDIR={tmp_path / 'job'}"],
                                capture_output=True, text=True, timeout=60,
                                cwd=Path(__file__).parent.parent)
        assert "paused" in status.stdout and "WARC_MIN_FREE" in status.stdout, status
        time.sleep(2)
        requests_while_paused = len(web.ledger())
        time.sleep(3)  # paused: nothing new is started
        assert len(web.ledger()) <= requests_while_paused + 16
        fs.resize(64 << 20)
        result = finish_crawl(proc, tmp_path, started, timeout=240)
        assert result.returncode == 0, result.log[-3000:]
        assert answered_pages(web.ledger()) <= archived(fs.path / "warc")
        warcio_check(fs.path / "warc")
    assert len(lines(result, r"Storage: WARC_DIR")) == 1, result.log[-3000:]
    assert len(lines(result, r"Storage: room again")) == 1, result.log[-3000:]
    assert lines(result, r"Progress: .*; this worker is PAUSED \(WARC_DIR .*WARC_MIN_FREE")
    assert result.stat("storage/pauses") == "1"


def test_a_full_disk_loses_no_page_and_a_resume_finishes_the_archive(tmp_path: Path) -> None:
    """No guard (WARC_MIN_FREE 0) on a 256 KiB filesystem: records fail with ENOSPC,
    their pages are not counted done, the worker pauses on the failure (one
    line), is stopped, and a resume with the same JOBDIR on a grown filesystem
    archives every page the server ever answered with a 200."""
    with small_fs(256 << 10) as fs, SimWebProcess(seed=4, n_hosts=60, mix=MIX) as web:
        started = time.monotonic()
        proc = crawl_on(fs, web, tmp_path / "a", {"WARC_MIN_FREE": 0,
                                                  "JOBDIR": str(tmp_path / "job")})
        log = tmp_path / "a" / "crawl.log"
        wait_for_line(log, r"WARC: cannot write to .*No space left on device", proc)
        wait_for_line(log, r"Storage: WARC_DIR .*cannot write", proc)
        proc.send_signal(signal.SIGINT)
        first = finish_crawl(proc, tmp_path / "a", started, timeout=120)
        assert first.returncode == 0, first.log[-3000:]
        assert int(first.stat("frontier/leases/unarchived") or 0) > 0
        before = answered_pages(web.ledger())
        fs.resize(64 << 20)
        again = crawl_on(fs, web, tmp_path / "b", {"WARC_MIN_FREE": 0,
                                                   "JOBDIR": str(tmp_path / "job")},
                         seeds=False)
        second = finish_crawl(again, tmp_path / "b", time.monotonic(), timeout=240)
        assert second.returncode == 0, second.log[-3000:]
        have = archived(fs.path / "warc")
        assert before <= have, sorted(before - have)[:10]
        assert answered_pages(web.ledger()) <= have
        warcio_check(fs.path / "warc")
    # One line for the condition, not one a page; the summary says what it cost.
    # (A record that fits in the room a given-up file freed ends the condition
    # for a moment: then one line when writing goes on and one when it stops
    # again, never one a page.)
    failing = lines(first, r"WARC: cannot write to")
    going_on = lines(first, r"WARC: writing to .* again")
    assert len(failing) == len(going_on) + 1 <= 3, first.log[-3000:]
    assert int(first.stat("warc/errors") or 0) > len(failing), first.log[-3000:]
    assert not lines(first, r"could not archive")
    [summary] = lines(first, r"^  storage: paused 1 time\(s\)")
    assert "record(s) not written" in summary


def test_a_read_only_warc_dir_stops_the_crawl_before_its_first_request(
        tmp_path: Path) -> None:
    with small_fs(1 << 20) as fs, SimWebProcess(seed=5, n_hosts=3, mix=MIX) as web:
        (fs.path / "warc").mkdir()
        fs.read_only()
        started = time.monotonic()
        proc = crawl_on(fs, web, tmp_path, {})
        result = finish_crawl(proc, tmp_path, started, timeout=120)
        assert len(web.ledger()) == 0  # not one request
    assert result.returncode == 1
    errors = [line for line in result.log.splitlines() if " ERROR" in line or "ERROR:" in line]
    assert len(errors) == 1 and "Read-only file system" in errors[0], errors
    assert "Traceback" not in result.log


def test_a_worker_short_of_room_pauses_and_the_others_crawl_its_share(
        tmp_path: Path, redis_url: str) -> None:
    """Two workers on one shared frontier, w0's WARC_DIR on a disk below
    WARC_MIN_FREE from the start: w0 claims nothing (status says paused, and
    why), w1 crawls everything, and both end when the frontier is empty."""
    namespace = f"test:storage:{time.time_ns()}"
    shared = {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": namespace,
              "FRONTIER_PARTITIONS": 4, "FRONTIER_SEEN_BUCKETS": 64}
    client = redis.Redis.from_url(redis_url)
    try:
        with small_fs(1 << 20) as fs, SimWebProcess(seed=6, n_hosts=20, mix=MIX) as web:
            started = time.monotonic()
            seeds = web.web.seed_urls()
            short = start_crawl(web.proxy_url, seeds[::2], tmp_path / "w0",
                                {**SETTINGS, **shared, "FRONTIER_WORKER_ID": "w0",
                                 "WARC_DIR": str(fs.path / "warc"), "WARC_MIN_FREE": "2MiB"})
            wait_for_line(tmp_path / "w0" / "crawl.log", r"Storage: WARC_DIR", short)
            roomy = start_crawl(web.proxy_url, seeds[1::2], tmp_path / "w1",
                                {**SETTINGS, **shared, "FRONTIER_WORKER_ID": "w1"})
            beat = None
            # (w0 paused before its frontier opened: its first heartbeat, once
            # open, says so; on a loaded machine that open takes seconds)
            for _ in range(150):
                beat = Heartbeat.parse(client.hget(f"{namespace}:workers", "w0"))
                if beat is not None and beat.paused:
                    break
                time.sleep(0.2)
            assert beat is not None and beat.paused and "WARC_MIN_FREE" in beat.paused
            results = [finish_crawl(p, tmp_path / w, started, timeout=240)
                       for p, w in ((short, "w0"), (roomy, "w1"))]
            assert [r.returncode for r in results] == [0, 0], results[0].log[-3000:]
            assert not list((fs.path / "warc").glob("*.warc.gz")) or archived(
                fs.path / "warc") == set()
            assert answered_pages(web.ledger()) <= archived(tmp_path / "w1" / "warc")
        assert results[0].stat("frontier/leases/claimed") in (None, "0")
        assert int(results[1].stat("frontier/leases/done") or 0) >= 100
    finally:
        stale = list(client.scan_iter(match=f"*{namespace}*", count=1000))
        if stale:
            client.delete(*stale)
        client.close()
