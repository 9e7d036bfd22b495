"""WARC files on disk: records, CDXJ indexes, rotation and recovery, checked with warcio itself."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import random
import subprocess
import sys
import zlib
from pathlib import Path

import brotli
import pytest
from backports import zstd
from warcio.archiveiterator import ArchiveIterator
from warcio.cli import main as warcio_main

from crawler.warc.cdxj import CdxjEntry, lookup, read_record, surt_key
from crawler.warc.exchange import TRUNCATED_LENGTH
from crawler.warc.files import WarcFiles, Written, warc_name
from crawler.warc.openwarc import index_path
from crawler.warc.records import payload_digest
from crawler.warc.recovery import Recovered, WarcLockedError, recover
from tests.warc_samples import HTML, INFO, RECEIVED, exchange, warcio_check

GZIPPED = gzip.compress(b"<html>" + b"compressible " * 200 + b"</html>", mtime=0)


def records(path: Path) -> list:
    """Every record of ``path`` with its payload read (so digests are checked)."""
    found = []
    with path.open("rb") as stream:
        for record in ArchiveIterator(stream, check_digests=True):
            record.payload = record.content_stream().read()
            found.append(record)
    return found


@pytest.fixture
def archive(tmp_path: Path) -> tuple[Path, dict[str, Written], list[Path]]:
    """One closed WARC holding a page, a gzip page, a truncated page, a revisit, a 404."""
    files = WarcFiles(tmp_path, "TEST", "vm:5510", 10_000_000, INFO)
    written = {
        "page": files.write(exchange("http://www.example.com/a?z=1&a=2", ip_address="192.0.2.7")),
        "gzip": files.write(exchange(
            "https://example.com/gz", GZIPPED, headers=[
                ("Content-Type", "text/html"), ("Content-Encoding", "gzip"),
                ("Content-Disposition", "attachment; filename=\xe9t\xe9.html")])),
        "truncated": files.write(exchange(
            "http://example.com/big", b"x" * 1000, truncated=TRUNCATED_LENGTH)),
        "missing": files.write(exchange("http://example.com/nope", b"", status=404,
                                        reason="Not Found", headers=[])),
    }
    first = written["page"]
    written["revisit"] = files.write(
        exchange("http://example.com/copy", received_at=RECEIVED + 60),
        revisit_of=("http://www.example.com/a?z=1&a=2", first.date_iso),
        digest=payload_digest(HTML))
    return tmp_path, written, files.close()


def test_warcio_check_passes_and_every_digest_is_verified(archive) -> None:
    _, _, paths = archive
    assert len(paths) == 1
    assert warcio_check(*paths) == 0
    checked = [r for r in records(paths[0]) if r.rec_type in ("response", "request")]
    assert len(checked) == 9
    for record in checked:
        assert record.rec_headers.get_header("WARC-Block-Digest")
        assert record.rec_headers.get_header("WARC-Payload-Digest")
        assert record.digest_checker.passed is True, record.digest_checker.problems


def test_warcio_check_fails_on_a_damaged_record(archive) -> None:
    """The check above can fail: one changed payload byte is caught."""
    _, written, paths = archive
    damaged = paths[0].with_name("damaged.warc.gz")
    data = bytearray(paths[0].read_bytes())
    at = written["page"].offset
    member = gzip.decompress(data[at:at + written["page"].length]).replace(b"hello", b"jello")
    data[at:at + written["page"].length] = gzip.compress(member)
    damaged.write_bytes(bytes(data))
    assert warcio_check(damaged) == 1


def test_warcio_index_lists_one_response_per_exchange(archive, capsys) -> None:
    _, _, paths = archive
    capsys.readouterr()
    warcio_main(["index", "-f", "warc-type,warc-target-uri,http:status", str(paths[0])])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["warc-type"] == "warcinfo"
    responses = [(r["warc-target-uri"], r["http:status"]) for r in lines
                 if r["warc-type"] == "response"]
    assert responses == [("http://www.example.com/a?z=1&a=2", "200"),
                         ("https://example.com/gz", "200"),
                         ("http://example.com/big", "200"),
                         ("http://example.com/nope", "404")]
    assert [r["warc-type"] for r in lines].count("revisit") == 1
    assert [r["warc-type"] for r in lines].count("request") == 5


def test_records_carry_what_was_exchanged(archive) -> None:
    _, _, paths = archive
    by_uri = {(r.rec_type, r.rec_headers["WARC-Target-URI"]): r for r in records(paths[0])}
    warcinfo = records(paths[0])[0]
    assert warcinfo.rec_type == "warcinfo"
    assert warcinfo.rec_headers["WARC-Filename"] == paths[0].name
    assert b"isPartOf: test\r\n" in warcinfo.payload

    page = by_uri["response", "http://www.example.com/a?z=1&a=2"]
    assert page.rec_headers["WARC-Date"] == "2024-01-02T03:04:05.123456Z"
    assert page.rec_headers["WARC-IP-Address"] == "192.0.2.7"
    assert page.rec_headers["WARC-Truncated"] is None
    assert page.http_headers.protocol == "HTTP/1.1"
    assert page.http_headers.statusline == "200 OK"
    assert page.payload == HTML

    gz = by_uri["response", "https://example.com/gz"]
    assert gz.payload.startswith(b"<html>compressible")  # content_stream() decodes gzip
    # The Latin-1 header goes back as its octet, not percent-encoded.
    assert gz.http_headers["Content-Disposition"] == "attachment; filename=\xe9t\xe9.html"

    assert by_uri["response", "http://example.com/big"].rec_headers["WARC-Truncated"] == "length"
    assert by_uri["response", "http://example.com/nope"].http_headers.statusline == "404 Not Found"

    request = by_uri["request", "http://www.example.com/a?z=1&a=2"]
    assert request.http_headers.protocol == "GET"
    assert request.http_headers.statusline == "/a?z=1&a=2 HTTP/1.1"
    assert request.http_headers["Host"] == "www.example.com"

    revisit = by_uri["revisit", "http://example.com/copy"]
    assert revisit.rec_headers["WARC-Profile"] == (
        "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest")
    assert revisit.rec_headers["WARC-Refers-To-Target-URI"] == "http://www.example.com/a?z=1&a=2"
    assert revisit.rec_headers["WARC-Refers-To-Date"] == "2024-01-02T03:04:05.123456Z"
    assert revisit.rec_headers["WARC-Payload-Digest"] == payload_digest(HTML)
    assert revisit.rec_headers["WARC-Block-Digest"]
    assert revisit.rec_headers["WARC-Truncated"] is None
    assert revisit.http_headers.statusline == "200 OK"
    assert revisit.payload == b""


def test_requests_are_linked_to_their_responses(archive) -> None:
    _, _, paths = archive
    found = records(paths[0])
    answers = {r.rec_headers["WARC-Record-ID"]: r for r in found
               if r.rec_type in ("response", "revisit")}
    requests = [r for r in found if r.rec_type == "request"]
    assert len(requests) == len(answers) == 5
    for request in requests:
        answer = answers[request.rec_headers["WARC-Concurrent-To"]]
        assert answer.rec_headers["WARC-Target-URI"] == request.rec_headers["WARC-Target-URI"]
        assert answer.rec_headers["WARC-Date"] == request.rec_headers["WARC-Date"]
    assert len({r.rec_headers["WARC-Concurrent-To"] for r in requests}) == 5


def test_every_index_line_reads_back(archive) -> None:
    directory, written, paths = archive
    lines = index_path(paths[0]).read_text().splitlines()
    assert len(lines) == 5
    assert lines == sorted(lines)  # sorted at close, as pywb wants
    for line in lines:
        entry = CdxjEntry.parse(line)
        assert entry.line() == line
        assert entry.filename == paths[0].name
        stored = read_record(directory / entry.filename, entry.offset)
        assert stored.url == entry.url
        assert stored.digest == entry.digest
        assert stored.status == entry.status
        assert stored.rec_type == ("revisit" if entry.revisit else "response")
    by_url = {CdxjEntry.parse(line).url: CdxjEntry.parse(line) for line in lines}
    for what in written.values():
        entry = by_url[read_record(what.path, what.offset).url]
        assert (entry.offset, entry.length, entry.digest) == (what.offset, what.length,
                                                               what.digest)
    gz = read_record(paths[0], written["gzip"].offset)
    assert gz.payload == GZIPPED  # stored as received, Content-Encoding not undone
    assert gz.digest == payload_digest(GZIPPED) == written["gzip"].digest
    assert ("Content-Encoding", "gzip") in gz.headers
    page = by_url["http://www.example.com/a?z=1&a=2"]
    assert (page.surt, page.timestamp, page.mime, page.status) == (
        "com,example)/a?a=2&z=1", "20240102030405", "text/html", 200)
    revisit = by_url["http://example.com/copy"]
    assert revisit.revisit and revisit.mime == "warc/revisit"
    assert revisit.digest == page.digest == payload_digest(HTML)
    assert read_record(paths[0], revisit.offset).payload == b""


def test_lookup_finds_captures_newest_first(tmp_path: Path) -> None:
    files = WarcFiles(tmp_path, "TEST", "w1", 10_000_000, INFO)
    older = files.write(exchange("http://example.com/p", b"one"))
    newer = files.write(exchange("http://www.EXAMPLE.com/p", b"two", received_at=RECEIVED + 5))
    files.write(exchange("http://example.com/other"))
    open_name = files.current.name
    found = lookup(tmp_path, "https://example.com/p")
    assert [(e.offset, e.filename) for e in found] == [(newer.offset, open_name),
                                                       (older.offset, open_name)]
    assert read_record(tmp_path / found[0].filename, found[0].offset).payload == b"two"
    (closed,) = files.close()
    found = lookup(tmp_path, "http://example.com/p")
    assert [e.filename for e in found] == [closed.name, closed.name]
    assert read_record(tmp_path / found[1].filename, found[1].offset).payload == b"one"
    assert lookup(tmp_path, "http://example.com/missing") == []


def test_a_response_digest_given_is_written_once_and_checks(tmp_path: Path) -> None:
    files = WarcFiles(tmp_path, "TEST", "w1", 10_000_000, INFO)
    page = exchange("http://example.com/", b"<html>page</html>")
    written = files.write(page, digest=payload_digest(page.body))
    assert written.digest == payload_digest(b"<html>page</html>")
    (closed,) = files.close()
    with closed.open("rb") as stream:  # warcio's own check of both digests
        digests = [rec.rec_headers.get_header("WARC-Payload-Digest")
                   for rec in ArchiveIterator(stream, check_digests="raise")
                   if rec.content_stream().read() is not None and rec.rec_type == "response"]
    assert digests == [written.digest]


def test_open_file_is_locked_and_named_open_until_closed(tmp_path: Path) -> None:
    files = WarcFiles(tmp_path / "new", "TEST", "w1", 10_000_000, INFO)
    assert files.current is None and list((tmp_path / "new").iterdir()) == []  # lazily
    written = files.write(exchange("http://example.com/"))
    current = files.current
    assert current is not None and current.name.endswith(".warc.gz.open")
    assert written.path.name + ".open" == current.name and not written.path.exists()
    assert written.name == written.path.name
    size = current.stat().st_size
    with pytest.raises(WarcLockedError, match="locked by a live writer"):
        recover(current)
    assert current.stat().st_size == size
    assert files.close() == [written.path]
    assert written.path.exists() and not current.exists()
    assert warcio_check(written.path) == 0


def test_rotation_gives_complete_files_each_starting_with_warcinfo(tmp_path: Path) -> None:
    noise = random.Random(7)
    files = WarcFiles(tmp_path, "TEST", "w1", 3000, INFO)
    urls = [f"http://h{i}.test/page" for i in range(7)]
    for url in urls:
        files.write(exchange(url, noise.randbytes(1500)))  # incompressible
    paths = files.close()
    assert len(paths) >= 3
    assert sorted(tmp_path.glob("*.open")) == []
    assert [int(p.name.split("-")[2]) for p in paths] == list(range(len(paths)))
    assert warcio_check(*paths) == 0
    seen = []
    for path in paths:
        found = records(path)
        assert found[0].rec_type == "warcinfo"
        assert found[0].rec_headers["WARC-Filename"] == path.name
        assert [r.rec_type for r in found].count("warcinfo") == 1
        seen += [r.rec_headers["WARC-Target-URI"] for r in found if r.rec_type == "response"]
        assert len(index_path(path).read_text().splitlines()) == len(found) // 2
    assert seen == urls
    assert all(len(lookup(tmp_path, url)) == 1 for url in urls)


def test_two_workers_share_a_folder_without_collisions(tmp_path: Path) -> None:
    one = WarcFiles(tmp_path, "TEST", "vm:1", 2000, INFO)
    two = WarcFiles(tmp_path, "TEST", "vm:2", 2000, INFO)
    noise = random.Random(3)
    for i in range(4):
        one.write(exchange(f"http://a.test/{i}", noise.randbytes(1200)))
        two.write(exchange(f"http://b.test/{i}", noise.randbytes(1200)))
    paths_one, paths_two = one.close(), two.close()
    assert not set(paths_one) & set(paths_two)
    assert all(p.name.endswith("-vm-1.warc.gz") for p in paths_one)
    assert all(p.name.endswith("-vm-2.warc.gz") for p in paths_two)
    for paths, host in ((paths_one, "a.test"), (paths_two, "b.test")):
        uris = [r.rec_headers["WARC-Target-URI"] for p in paths for r in records(p)
                if r.rec_type == "response"]
        assert uris == [f"http://{host}/{i}" for i in range(4)]
    assert warcio_check(*paths_one, *paths_two) == 0
    assert len(list(tmp_path.glob("*.cdxj"))) == len(paths_one) + len(paths_two)


#: How much of the last response a killed writer got onto the disk.
KEEP = {"middle": lambda n: n // 2, "all-but-trailer": lambda n: n - 4,
        "one-byte": lambda n: 1, "nothing": lambda n: 0, "all": lambda n: n}


def killed_copy(tmp_path: Path, keep: str) -> tuple[Path, list[Written]]:
    """A live writer's file, copied up to ``KEEP[keep]`` of its last response: a kill."""
    files = WarcFiles(tmp_path / "live", "TEST", "w1", 10_000_000, INFO)
    written = [files.write(exchange(f"http://example.com/{i}", b"body %d " % i * 50))
               for i in range(3)]
    assert files.current is not None
    data = files.current.read_bytes()
    dead = tmp_path / "dead" / files.current.name.replace("TEST", "DEAD")
    dead.parent.mkdir()
    dead.write_bytes(data[:written[-1].offset + KEEP[keep](written[-1].length)])
    files.close()
    return dead, written


@pytest.mark.parametrize("keep", ["middle", "all-but-trailer", "one-byte", "nothing"])
def test_recover_cuts_a_killed_writers_partial_record(tmp_path: Path, keep: str) -> None:
    dead, written = killed_copy(tmp_path, keep)
    size = dead.stat().st_size
    result = recover(dead)
    final = dead.with_name(dead.name.removesuffix(".open"))
    assert result == Recovered(final, 1 + 2 * 2, size - written[-1].offset)
    assert final.exists() and not dead.exists()
    assert final.stat().st_size == written[-1].offset
    assert warcio_check(final) == 0
    entries = [CdxjEntry.parse(line) for line in index_path(final).read_text().splitlines()]
    assert sorted(e.url for e in entries) == ["http://example.com/0", "http://example.com/1"]
    for entry, what in zip(sorted(entries, key=lambda e: e.offset), written, strict=False):
        assert entry.filename == final.name
        assert (entry.offset, entry.length, entry.digest) == (what.offset, what.length,
                                                              what.digest)
        assert read_record(final, entry.offset).payload == b"body %d " % int(entry.url[-1]) * 50
    with pytest.raises(ValueError, match="not an open WARC"):
        recover(final)  # a complete file is never touched


def test_recover_at_every_cut_point_of_the_last_exchange(tmp_path: Path) -> None:
    """Wherever the kill lands in the last response or request, what is complete is kept."""
    _, written = killed_copy(tmp_path, "all")
    data = (tmp_path / "live" / written[-1].name).read_bytes()
    response_end = written[-1].offset + written[-1].length
    for cut in range(written[-1].offset, len(data) + 1, 5):
        copy = tmp_path / "dead" / f"CUT-{cut}.warc.gz.open"
        copy.write_bytes(data[:cut])
        result = recover(copy)
        kept = (len(data) if cut == len(data) else response_end if cut >= response_end
                else written[-1].offset)
        assert (result.records, result.cut_bytes) == (
            5 + (cut >= response_end) + (cut == len(data)), cut - kept), cut
        assert result.path.stat().st_size == kept
        with result.path.open("rb") as stream:
            assert len(list(ArchiveIterator(stream, check_digests="raise"))) == result.records


def test_recover_keeps_a_file_cut_at_a_record_boundary(tmp_path: Path) -> None:
    dead, _ = killed_copy(tmp_path, "all")  # the response written, its request not
    result = recover(dead)
    assert (result.records, result.cut_bytes) == (1 + 2 * 2 + 1, 0)
    assert warcio_check(result.path) == 0
    assert len(index_path(result.path).read_text().splitlines()) == 3


def test_recover_removes_an_empty_abandoned_file(tmp_path: Path) -> None:
    empty = tmp_path / "TEST-20240102030405123-00000-w1.warc.gz.open"
    empty.write_bytes(b"")
    final = tmp_path / "TEST-20240102030405123-00000-w1.warc.gz"
    assert recover(empty) == Recovered(final, 0, 0, removed=True)
    assert list(tmp_path.iterdir()) == []


def test_recover_leaves_a_file_that_is_no_warc(tmp_path: Path) -> None:
    other = tmp_path / "TEST-20240102030405123-00000-w1.warc.gz.open"
    other.write_bytes(b"not a WARC at all\r\n" * 10)
    with pytest.raises(ValueError, match="no complete WARC record"):
        recover(other)
    assert other.read_bytes() == b"not a WARC at all\r\n" * 10


def test_warc_name_follows_the_iipc_convention() -> None:
    when = dt.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)
    assert warc_name("TEST", when, 7, "vm:5510") == "TEST-20240102030405678-00007-vm-5510.warc.gz"
    local = when.astimezone(dt.timezone(dt.timedelta(hours=2)))
    assert warc_name("P", local, 12345, "a b/c_d.e") == (
        "P-20240102030405678-12345-a-b-c-d.e.warc.gz")


@pytest.mark.parametrize(("url", "key"), [
    ("http://www.Example.com/A/b?z=1&a=2", "com,example)/a/b?a=2&z=1"),
    ("https://h00001.test:8080/", "test,h00001:8080)/"),
    ("https://example.com:443", "com,example)/"),
    ("http://user:pw@www2.example.co.uk/x#frag", "uk,co,example)/x"),
    ("http://192.0.2.7:81/p?", "7,2,0,192:81)/p"),  # (pywb's, by the surt library)
    ("http://[::1]:8080/a/", "::1:8080)/a"),
    ("http://example.com/g%2B%2B-12/", "com,example)/g++-12"),
    ("http://EXAMPLE.com/g++-12", "com,example)/g++-12"),
])
def test_surt_key(url: str, key: str) -> None:
    assert surt_key(url) == key


# ---------------------------------------------------------------- scrapy warc get

ROOT = Path(__file__).resolve().parents[1]
PAGE = b"<html>" + b"decoded " * 300 + b"</html>"


def _chunked(body: bytes, size: int = 700) -> bytes:
    parts = [body[i:i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def _warc_get(directory: Path, *argv: str) -> subprocess.CompletedProcess[bytes]:
    """``scrapy warc get ...`` as an operator runs it, from the project's folder."""
    env = {k: v for k, v in os.environ.items() if k not in {"SCRAPY_SETTINGS_MODULE",
                                                             "SCRAPY_PROJECT"}}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "warc", "get", *argv, "-s", f"WARC_DIR={directory}"],
        cwd=ROOT, env=env, capture_output=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def encoded_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Captures of one page under every coding Scrapy undoes, and some it cannot."""
    directory = tmp_path_factory.mktemp("encoded")
    files = WarcFiles(directory, "TEST", "vm:5510", 10_000_000, INFO)
    bodies = {
        "gzip": gzip.compress(PAGE), "deflate": zlib.compress(PAGE),
        "br": brotli.compress(PAGE), "zstd": zstd.compress(PAGE),
        "gzip, br": brotli.compress(gzip.compress(PAGE)),  # applied in that order
        "compress": b"\x1f\x9d not undone by anyone",
    }
    for coding, body in bodies.items():
        files.write(exchange(f"http://example.com/{coding.replace(', ', '-')}", body, headers=[
            ("Content-Type", "text/html"), ("Content-Encoding", coding)]))
    # A record from another writer that kept the chunked framing (this one de-chunks).
    files.write(exchange("http://example.com/chunked", _chunked(gzip.compress(PAGE)), headers=[
        ("Content-Type", "text/html"), ("Transfer-Encoding", "chunked"),
        ("Content-Encoding", "gzip")]))
    # (A gzip body cut short is no error: Scrapy hands the spider what it holds.)
    zipped = gzip.compress(PAGE)
    files.write(exchange("http://example.com/damaged", zipped[:10] + b"\xff" * 20 + zipped[30:],
                         headers=[("Content-Encoding", "gzip")]))
    files.write(exchange("http://example.com/missing", b"", status=404, reason="Not Found",
                         headers=[("Server", "test")]))
    files.close()
    return directory


@pytest.mark.parametrize("path", ["gzip", "deflate", "br", "zstd", "gzip-br", "chunked"])
def test_get_decoded_gives_the_body_the_spider_saw(encoded_archive: Path, path: str) -> None:
    url = f"http://example.com/{path}"
    raw = _warc_get(encoded_archive, url)
    assert raw.returncode == 0, raw.stderr[-2000:]
    assert raw.stdout != PAGE  # as stored: still encoded
    got = _warc_get(encoded_archive, url, "--decoded")
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout == PAGE and got.stderr == b""


def test_get_decoded_refuses_what_it_cannot_undo(encoded_archive: Path) -> None:
    got = _warc_get(encoded_archive, "http://example.com/compress", "--decoded")
    assert got.returncode == 1 and got.stdout == b""
    assert (b"http://example.com/compress: cannot undo Content-Encoding 'compress'"
            in got.stderr)
    got = _warc_get(encoded_archive, "http://example.com/damaged", "--decoded")
    assert got.returncode == 1 and got.stdout == b""
    assert got.stderr.startswith(b"http://example.com/damaged: cannot undo Content-Encoding "
                                 b"'gzip': ")
    assert b"Traceback" not in got.stderr


def test_get_decoded_stays_within_download_maxsize(encoded_archive: Path) -> None:
    got = _warc_get(encoded_archive, "http://example.com/gzip", "--decoded",
                    "-s", "DOWNLOAD_MAXSIZE=1000", "-s", "DOWNLOAD_WARNSIZE=0")
    assert got.returncode == 1 and got.stdout == b""
    assert b"exceeded DOWNLOAD_MAXSIZE (1000 B) during decompression" in got.stderr


def test_get_headers_prints_the_status_line_as_recorded(encoded_archive: Path) -> None:
    got = _warc_get(encoded_archive, "http://example.com/missing", "--headers")
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout == b"HTTP/1.1 404 Not Found\r\nServer: test\r\n\r\n"
    assert read_record(*_only_capture(encoded_archive, "http://example.com/missing")
                       ).status_line == "HTTP/1.1 404 Not Found"


def _only_capture(directory: Path, url: str) -> tuple[Path, int]:
    (entry,) = lookup(directory, url)
    return directory / entry.filename, entry.offset
