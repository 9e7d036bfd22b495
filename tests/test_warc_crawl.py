"""WARC output of real crawls, checked against what the server sent (the ledger)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from warcio.archiveiterator import ArchiveIterator

from crawler.frontier.embedded import EmbeddedRedis
from crawler.warc.cdxj import CdxjEntry, read_record
from tests.crawl_runner import (
    REPO,
    CrawlResult,
    crawl_command,
    finish_crawl,
    proxy_env,
    start_crawl,
)
from tests.simweb import SimWebProcess
from tests.simweb.ledger import Ledger

pytestmark = pytest.mark.crawl

MIX = {"robots:rules": 0.5, "robots:missing": 0.2, "robots:html": 0.1, "robots:allow-all": 0.2,
       "page:normal": 0.55, "page:nonhtml": 0.15, "page:redirects": 0.1,
       "page:rate-limited-seconds": 0.1, "page:unavailable": 0.1}


@dataclass
class Record:
    file: str
    type: str
    url: str
    status: int
    digest: str
    refers_to: str | None
    length: int
    truncated: str | None


@dataclass
class Crawl:
    results: list[CrawlResult]
    ledger: Ledger
    warc_dir: Path
    web: SimWebProcess


def warc_records(warc_dir: Path) -> list[Record]:
    """Every response and revisit record of the crawl's complete files."""
    records = []
    for path in sorted(warc_dir.glob("*.warc.gz")):
        with path.open("rb") as f:
            for rec in ArchiveIterator(f):
                if rec.rec_type not in ("response", "revisit"):
                    continue
                h = rec.rec_headers
                payload = rec.raw_stream.read() if rec.rec_type == "response" else b""
                records.append(Record(
                    path.name, rec.rec_type, h.get_header("WARC-Target-URI"),
                    int(rec.http_headers.get_statuscode()), h.get_header("WARC-Payload-Digest"),
                    h.get_header("WARC-Refers-To-Target-URI"), len(payload),
                    h.get_header("WARC-Truncated")))
    return records


def served(ledger: Ledger) -> Counter[tuple[str, int]]:
    """(URL, status) of every request the server answered in full."""
    return Counter((f"http://{e['host']}{e['path']}", e["status"]) for e in ledger
                   if e["done"] is not None and e["status"])


@pytest.fixture(scope="module")
def crawl(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawl]:
    """Two workers on one Redis frontier write into one WARC folder, rotating at 40 kB."""
    tmp = tmp_path_factory.mktemp("warc")
    namespace = f"test:warc:{time.time_ns()}"
    warc_dir = tmp / "warc"
    settings = {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": namespace,
                "FRONTIER_PARTITIONS": 4, "FRONTIER_SEEN_BUCKETS": 64, "DOWNLOAD_DELAY": 0.05,
                "DEPTH_LIMIT": 2, "ADMISSION_MAX_PAGES_PER_HOST": 8, "RETRY_BACKOFF_BASE": 0.2,
                "WARC_DIR": str(warc_dir), "WARC_MAX_SIZE": 40_000,
                "WARC_OPERATOR": "ops@example.org"}
    with SimWebProcess(seed=21, n_hosts=24, mix=MIX, pinned={0: "robots:oversized"}) as web:
        started = time.monotonic()
        procs = [start_crawl(web.proxy_url, web.web.seed_urls()[i::2], tmp / f"w{i}",
                             {**settings, "FRONTIER_WORKER_ID": f"w{i}"}) for i in range(2)]
        results = [finish_crawl(p, tmp / f"w{i}", started) for i, p in enumerate(procs)]
        yield Crawl(results, web.ledger(), warc_dir, web)
    client = redis.Redis.from_url(redis_url)
    stale = list(client.scan_iter(match=f"*{namespace}*", count=1000))
    if stale:
        client.delete(*stale)
    client.close()


def test_files_are_complete_valid_and_named_per_worker(crawl: Crawl) -> None:
    for result in crawl.results:
        assert result.returncode == 0, result.log[-3000:]
    files = sorted(crawl.warc_dir.glob("*.warc.gz"))
    assert not list(crawl.warc_dir.glob("*.open")), "a file was left open"
    workers = Counter(name.name.rsplit("-", 1)[1].split(".")[0] for name in files)
    assert set(workers) == {"w0", "w1"} and min(workers.values()) >= 2  # rotated
    assert len({f.name for f in files}) == len(files)
    check = subprocess.run([sys.executable, "-m", "warcio.cli", "check", "-v",
                            *map(str, files)], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]
    for f in files:  # each file starts with its warcinfo, naming the operator
        with f.open("rb") as stream:
            first = next(iter(ArchiveIterator(stream)))
            assert first.rec_type == "warcinfo"
            assert b"operator: ops@example.org" in first.content_stream().read()


def test_every_answer_the_server_sent_is_archived_once(crawl: Crawl) -> None:
    """Pages, redirects, 404s, 429s and 503s that were retried, robots.txt: one
    response (or revisit) record per request the server answered, byte for byte."""
    records = warc_records(crawl.warc_dir)
    archived = Counter((r.url, r.status) for r in records)
    assert archived == served(crawl.ledger)
    statuses = {status for _, status in archived}
    assert {200, 301, 404, 429, 503} <= statuses, statuses
    assert any(url.endswith("/robots.txt") for url, _ in archived)
    sizes = {(f"http://{e['host']}{e['path']}", e["bytes"]) for e in crawl.ledger
             if e["done"] is not None and e["status"]}
    for r in records:
        if r.type == "response" and not r.truncated:
            assert (r.url, r.length) in sizes, r
    # The oversized robots.txt was cut at ROBOTS_MAX_BYTES, and says so.
    [cut] = [r for r in records if r.truncated]
    assert cut.url == f"http://{crawl.web.web.hosts[0].name}/robots.txt"
    assert (cut.truncated, cut.status) == ("length", 200) and cut.length >= 512_000


def test_identical_payloads_are_revisits_across_workers(crawl: Crawl) -> None:
    records = warc_records(crawl.warc_dir)
    revisits = [r for r in records if r.type == "revisit"]
    assert len(revisits) >= 3
    originals = {r.digest: r for r in records if r.type == "response" and 200 <= r.status < 300
                 and r.length}
    # The digest index is shared: no payload is stored twice, whichever worker saw it.
    stored = Counter(r.digest for r in records if r.type == "response" and 200 <= r.status < 300
                     and r.length)
    assert max(stored.values()) == 1
    for r in revisits:
        assert originals[r.digest].url == r.refers_to != r.url
    counted = sum(int(res.stat("warc/revisits") or 0) for res in crawl.results)
    assert counted == len(revisits)


def test_cdxj_index_points_at_each_record(crawl: Crawl) -> None:
    records = warc_records(crawl.warc_dir)
    lines = [line for f in sorted(crawl.warc_dir.glob("*.cdxj"))
             for line in f.read_text().splitlines()]
    assert len(lines) == len(records)
    for line in lines:
        entry = CdxjEntry.parse(line)
        got = read_record(crawl.warc_dir / entry.filename, entry.offset)
        assert (got.url, got.digest) == (entry.url, entry.digest), line


def test_items_point_at_their_records_and_warc_get_returns_the_exact_body(crawl: Crawl) -> None:
    items = [i for r in crawl.results for i in r.items if i["status"] == 200]
    assert items
    for item in items[:40]:
        got = read_record(crawl.warc_dir / item["warc_file"], item["warc_offset"])
        assert got.url == item["final_url"]
    proxy = urllib.request.ProxyHandler({"http": crawl.web.proxy_url})
    opener = urllib.request.build_opener(proxy)
    env = proxy_env(crawl.web.proxy_url)
    for item in items[:5]:
        url = item["final_url"]
        with opener.open(url, timeout=10) as answer:
            body = answer.read()
        out = subprocess.run([sys.executable, "-m", "scrapy", "warc", "get", url,
                              "-s", f"WARC_DIR={crawl.warc_dir}"],
                             cwd=REPO, env=env, capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout == body, url


def test_killed_worker_leaves_a_recoverable_file(tmp_path: Path) -> None:
    """kill -9 mid-crawl: every complete record of the ``.open`` file reads back,
    and ``scrapy warc recover`` makes it a valid ``.warc.gz`` with its index."""
    warc_dir = tmp_path / "warc"
    with SimWebProcess(seed=5, n_hosts=60, mix={"robots:allow-all": 1.0,
                                                "page:normal": 1.0}) as web:
        proc = start_crawl(web.proxy_url, web.web.seed_urls(), tmp_path / "w",
                           {"DOWNLOAD_DELAY": 0.01, "WARC_DIR": str(warc_dir),
                            "WARC_MAX_SIZE": 10**9})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            opened = list(warc_dir.glob("*.warc.gz.open"))
            if opened and opened[0].stat().st_size > 200_000:
                break
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # The embedded Redis outlives a killed worker on purpose (the next
        # crawl resumes with it); this test will not resume, so stop it.
        EmbeddedRedis(tmp_path / "w" / "job" / "frontier").stop()
    [left] = warc_dir.glob("*.warc.gz.open")
    with left.open("rb") as f:  # complete records read back as they are
        before = sum(1 for r in ArchiveIterator(f) if r.rec_type == "response")
    assert before > 10
    env = proxy_env(web.proxy_url)
    out = subprocess.run([sys.executable, "-m", "scrapy", "warc", "recover",
                          "-s", f"WARC_DIR={warc_dir}"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert not list(warc_dir.glob("*.open"))
    [done] = warc_dir.glob("*.warc.gz")
    check = subprocess.run([sys.executable, "-m", "warcio.cli", "check", str(done)],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout[-2000:]
    records = warc_records(warc_dir)
    assert len(records) >= before
    lines = [json.loads(line.split(" ", 2)[2]) for f in warc_dir.glob("*.cdxj")
             for line in f.read_text().splitlines()]
    assert len(lines) == len(records)


def test_archive_is_kept_out_of_jobdir_and_survives_starting_afresh(tmp_path: Path) -> None:
    """A crawl with a JOBDIR and no WARC_DIR archives into ``output/warc`` of the
    folder it runs in, nothing of it in JOBDIR; deleting JOBDIR (the documented way
    to start afresh) and crawling again leaves the first crawl's files as they were."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "scrapy.cfg").write_text("[settings]\ndefault = crawler.settings\n")
    jobdir = project / "job"
    archive = project / "output" / "warc"
    with SimWebProcess(seed=3, n_hosts=4, mix={"robots:allow-all": 1.0,
                                               "page:normal": 1.0}) as web:
        seeds = project / "seeds.txt"
        seeds.write_text("".join(f"{u}\n" for u in web.web.seed_urls()))

        def crawl(run: int) -> str:
            # crawl_command, not start_crawl: that one names a WARC_DIR, and
            # this test is about the default.
            command = crawl_command(seeds, project / f"items-{run}.jsonl", {
                "JOBDIR": str(jobdir), "DEPTH_LIMIT": 1, "DOWNLOAD_DELAY": 0.01})
            assert not any("WARC_DIR" in arg for arg in command)
            done = subprocess.run(command, cwd=project, env=proxy_env(web.proxy_url),
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr[-3000:]
            return done.stderr

        log = crawl(1)
        first = {p: p.read_bytes() for p in archive.glob("*")}
        assert any(p.name.endswith(".warc.gz") for p in first), sorted(project.rglob("*"))
        assert any(p.name.endswith(".cdxj") for p in first)
        assert f"WARC: writing to {archive}" in log
        assert not [p for p in jobdir.rglob("*") if ".warc" in p.name or ".cdxj" in p.name]
        served_first = len(web.ledger().entries)
        assert served_first > 4

        shutil.rmtree(jobdir)  # README: delete that folder to start afresh
        assert {p: p.read_bytes() for p in archive.glob("*")} == first
        crawl(2)
        # Afresh: the pages were fetched again (the frontier had forgotten them) ...
        assert len(web.ledger().entries) >= 2 * served_first
    # ... into new files next to the first crawl's, which are as they were.
    after = {p: p.read_bytes() for p in archive.glob("*")}
    assert {p: after.get(p) for p in first} == first
    assert len([p for p in after if p.name.endswith(".warc.gz")]) > len(
        [p for p in first if p.name.endswith(".warc.gz")])
