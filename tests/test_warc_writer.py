"""The archive's writer thread: backpressure on a slow disk, revisits, failures."""

from __future__ import annotations

import errno
import time
from pathlib import Path

import pytest_twisted
import redis
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler
from warcio.archiveiterator import ArchiveIterator

from crawler.warc.digests import DigestIndex
from crawler.warc.exchange import Exchange
from crawler.warc.files import WarcFiles, Written
from crawler.warc.records import payload_digest
from crawler.warc.writer import ArchiveWriter
from tests.warc_samples import INFO, exchange, warcio_check


class SlowDisk(WarcFiles):
    """Real WARC files on a disk that takes ``delay`` seconds per write."""

    def __init__(self, *args: object, delay: float, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.delay = delay

    def write(self, *args: object, **kwargs: object) -> Written:
        time.sleep(self.delay)
        return super().write(*args, **kwargs)  # type: ignore[arg-type]


def _stats() -> MemoryStatsCollector:
    return MemoryStatsCollector(get_crawler())


@pytest_twisted.ensureDeferred
async def test_a_slow_disk_makes_producers_wait_instead_of_memory_growing(tmp_path: Path) -> None:
    body = b"x" * 100_000
    bound = 350_000
    stats = _stats()
    files = SlowDisk(tmp_path, "t", "w0", 10**9, INFO, delay=0.02)
    writer = ArchiveWriter(files, DigestIndex(), bound, stats, revisits=False)
    writer.start()
    peak = 0
    results = []
    started = time.monotonic()
    for i in range(30):
        results.append(await writer.put(exchange(f"http://a.test/{i}", body + str(i).encode())))
        peak = max(peak, writer.queued_bytes)
    waited = time.monotonic() - started
    outcomes = [await r for r in results]
    paths = writer.close(timeout=30)
    assert peak <= bound
    assert stats.get_value("warc/backpressure_waits") > 0
    assert waited >= 0.02 * (30 - bound // 100_000 - 1)  # the producer went at the disk's pace
    assert all(isinstance(o, Written) for o in outcomes)
    assert [o.offset for o in outcomes] == sorted(o.offset for o in outcomes)
    assert warcio_check(*paths) == 0
    with paths[0].open("rb") as f:
        assert sum(1 for r in ArchiveIterator(f) if r.rec_type == "response") == 30
    assert stats.get_value("warc/lag_max_seconds") > 0
    # the thread's own CPU, not its time: the disk's 0.6 s of sleeps are not in it
    assert 0 < stats.get_value("warc/writer_cpu_seconds") < 0.02 * 30


class FullDisk(WarcFiles):
    """Real WARC files on a disk that is full while writing ``full_for``."""

    def __init__(self, *args: object, full_for: str, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.full_for = full_for

    def write(self, exchange: Exchange, *args: object, **kwargs: object) -> Written:
        if exchange.url == self.full_for:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(exchange, *args, **kwargs)  # type: ignore[arg-type]


@pytest_twisted.ensureDeferred
async def test_a_failed_write_is_an_outcome_and_the_writer_goes_on(tmp_path: Path) -> None:
    stats = _stats()
    files = FullDisk(tmp_path, "t", "w0", 10**9, INFO, full_for="http://a.test/bad")
    writer = ArchiveWriter(files, DigestIndex(), 10**6, stats)
    writer.start()
    first = await (await writer.put(exchange("http://a.test/bad")))
    second = await (await writer.put(exchange("http://a.test/good")))
    paths = writer.close(timeout=10)
    assert isinstance(first, OSError) and isinstance(second, Written)
    assert stats.get_value("warc/errors") == 1
    assert warcio_check(*paths) == 0


def test_digest_index_is_shared_through_redis(redis_url: str, redis_prefix: str) -> None:
    """Two writers (workers) on one Redis: the first capture wins, the other gets it back."""
    key = f"{{{redis_prefix}/warc}}:digests"
    a = DigestIndex(redis.Redis.from_url(redis_url), key)
    b = DigestIndex(redis.Redis.from_url(redis_url), key)
    try:
        assert a.first_capture("sha1:X", "http://a.test/", "2026-01-01T00:00:00Z") is None
        assert b.first_capture("sha1:X", "http://b.test/", "2026-01-02T00:00:00Z") == (
            "http://a.test/", "2026-01-01T00:00:00Z", "sha1:X")
        assert b.first_capture("sha1:Y", "http://b.test/", "2026-01-02T00:00:00Z") is None
    finally:
        a.close()
        b.close()


def test_one_batch_with_a_payload_twice_records_the_first_capture(redis_url: str,
                                                                  redis_prefix: str) -> None:
    """The writer asks for a batch at once: a payload twice in it is archived in
    full once, the second a revisit of the first; a look-up in the same batch
    finds it too."""
    index = DigestIndex(redis.Redis.from_url(redis_url), f"{{{redis_prefix}/warc}}:digests")
    try:
        first = ("http://a.test/1", "2026-01-01T00:00:00Z", "sha1:P")
        assert index.first_captures([("sha1:P", *first[:2]),
                                     ("sha1:P", "http://a.test/2", "2026-01-01T00:00:01Z"),
                                     ("sha1:P", "", "2026-01-01T00:00:02Z"),
                                     ("sha1:R", "", "2026-01-01T00:00:02Z")]) == [
            None, first, first, None]
    finally:
        index.close()


def test_a_look_up_finds_a_capture_but_never_records_one(redis_url: str, redis_prefix: str
                                                         ) -> None:
    """A 304 holds no payload: it is looked up by the digest kept for its URL,
    and must never become the capture others refer to."""
    index = DigestIndex(redis.Redis.from_url(redis_url), f"{{{redis_prefix}/warc}}:digests")
    try:
        assert index.first_capture("sha1:N", "", "2026-01-01T00:00:00Z") is None
        assert index.first_capture("sha1:N", "http://a.test/", "2026-01-02T00:00:00Z") is None
        assert index.first_capture("sha1:N", "", "2026-01-03T00:00:00Z") == (
            "http://a.test/", "2026-01-02T00:00:00Z", "sha1:N")
        # another payload sharing the short digest is never taken for this one
        one, twin = "sha1:" + "Q" * 12 + "A" * 20, "sha1:" + "Q" * 12 + "B" * 20
        assert index.first_capture(one, "http://b.test/", "2026-01-04T00:00:00Z") is None
        assert index.first_capture(twin, "http://c.test/", "2026-01-05T00:00:00Z") is None
        assert index.first_capture(one, "http://d.test/", "2026-01-06T00:00:00Z") == (
            "http://b.test/", "2026-01-04T00:00:00Z", one)
    finally:
        index.close()


def test_the_digest_index_is_bounded_and_keeps_what_comes_back(redis_url: str,
                                                                redis_prefix: str) -> None:
    key = f"{{{redis_prefix}/warc}}:digests"
    client = redis.Redis.from_url(redis_url)
    index = DigestIndex(redis.Redis.from_url(redis_url), key, max_entries=10)
    try:
        date = "2026-01-01T00:00:00Z"
        for i in range(5):
            index.first_capture(f"sha1:{i}", f"http://a.test/{i}", date)
        # half the bound reached: those five are the old generation now
        assert client.hlen(key) == 0 and client.hlen(key + ":old") == 5
        assert index.first_capture("sha1:0", "http://b.test/", date)[:2] == (
            "http://a.test/0", date)
        for i in range(5, 9):
            index.first_capture(f"sha1:{i}", f"http://a.test/{i}", date)
        # "0" came back, so it moved on with the young; 1..4 were forgotten
        assert client.hlen(key) + client.hlen(key + ":old") <= 10
        assert index.first_capture("sha1:0", "http://c.test/", date)[:2] == (
            "http://a.test/0", date)
        assert index.first_capture("sha1:1", "http://c.test/", date) is None
    finally:
        index.close()
        client.close()


@pytest_twisted.ensureDeferred
async def test_a_304_is_a_server_not_modified_revisit_of_the_capture(tmp_path: Path) -> None:
    stats = _stats()
    writer = ArchiveWriter(WarcFiles(tmp_path, "t", "w0", 10**9, INFO), DigestIndex(), 10**6,
                           stats)
    writer.start()
    first = exchange("http://a.test/", b"<p>page</p>", received_at=1_790_000_000.0)
    digest = payload_digest(first.body)
    not_modified = exchange("http://a.test/", b"", status=304, reason="Not Modified",
                            headers=[("ETag", '"e1"')], received_at=1_790_000_100.0,
                            not_modified_of=digest)
    unknown = exchange("http://a.test/other", b"", status=304, reason="Not Modified",
                       headers=[], received_at=1_790_000_200.0, not_modified_of="sha1:AAAA")
    for ex in (first, not_modified, unknown):
        assert isinstance(await (await writer.put(ex)), Written)
    paths = writer.close(timeout=10)
    assert warcio_check(*paths) == 0
    with paths[0].open("rb") as f:
        records = [r for r in ArchiveIterator(f) if r.rec_type in ("response", "revisit")]
    assert [r.rec_type for r in records] == ["response", "revisit", "revisit"]
    revisit, lost = records[1].rec_headers, records[2].rec_headers
    assert revisit.get_header("WARC-Profile").endswith("/revisit/server-not-modified")
    assert revisit.get_header("WARC-Payload-Digest") == digest
    assert revisit.get_header("WARC-Refers-To-Target-URI") == "http://a.test/"
    assert revisit.get_header("WARC-Refers-To-Date") == records[0].rec_headers.get_header(
        "WARC-Date")
    assert records[1].http_headers.get_statuscode() == "304"
    # a capture the index no longer knows: the revisit names the URL, no date
    assert lost.get_header("WARC-Refers-To-Target-URI") == "http://a.test/other"
    assert lost.get_header("WARC-Refers-To-Date") is None
    assert lost.get_header("WARC-Payload-Digest") is None
    assert stats.get_value("warc/revisits/not_modified") == 2
