"""``scrapy partition``: seeds split by the frontier's host hash, on real files.

The command runs as operators run it, in a subprocess, on files written here:
what it leaves on disk and prints is what is checked. The pure core
(:func:`crawler.partition.split_lines`) is also exercised directly, where a
subprocess would add nothing.
"""

from __future__ import annotations

import io
import os
import random
import re
import resource
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from crawler.frontier.keys import partition_of
from crawler.partition import (
    PartFiles,
    PartitionError,
    UnreadableInput,
    part_name,
    split_lines,
    spread,
)
from crawler.seeds import SeedError
from crawler.urls import canonical_url, host_key

ROOT = Path(__file__).resolve().parents[1]
PARTS = 5

#: Where some hosts must go, for good. If this fails the hash or the host key
#: changed: every frontier and every seed split made so far would disagree
#: with the new code, so the change needs a migration (or a layout that old
#: frontiers are refused by, as the domain layout is), not just a new pin.
#: Since politeness is per registered domain too, a part is chosen by the
#: domain: every scheme, port and subdomain of example.com share one.
PINNED = {
    # host key (scheme://host:port) -> part with N=8, part with N=3
    "http://example.com:80": (6, 0),
    "https://example.com:443": (6, 0),
    "http://example.com:8080": (6, 0),
    "http://img.example.com:80": (6, 0),
    "https://www.wikipedia.org:443": (3, 0),
    "http://a.test:80": (7, 0),
    "http://c.test:80": (6, 0),
}


# ------------------------------------------------------------------ helpers


def _scrapy(cwd: Path, *argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m scrapy partition ...`` in ``cwd`` (so error messages show short names)."""
    env = dict(os.environ)
    env["SCRAPY_SETTINGS_MODULE"] = "crawler.settings"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "partition", *argv], cwd=cwd, env=env,
        input=stdin, capture_output=True, timeout=120, check=False)
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(),
                                       proc.stderr.decode())


def _seed_file() -> tuple[list[bytes], dict[int, str]]:
    """A few hundred seeds over 40 hosts, with aliases, noise and bad lines.

    Returns the raw lines and, by line number, the reason of each bad line.
    """
    lines: list[bytes] = [b"\xef\xbb\xbf# seeds exported from a spreadsheet\r\n", b"\n"]
    bad: dict[int, str] = {}
    junk = [(b"not a url\n", "more than one field on the line"),
            (b"example.com/no-scheme\n", "no http:// or https:// scheme"),
            (b"ftp://files.test/x\n", "not an http(s) URL"),
            (b"\xff\xfe\n", "not valid UTF-8")]
    for i in range(400):
        host = f"h{i % 40}.test"
        # Aliases of one host key: case, default port, trailing dot, fragment.
        form = [f"http://{host}/p/{i}", f"HTTP://{host.upper()}:80/p/{i}",
                f"http://{host}./p/{i}#top", f"https://{host}/s/{i}"][(i // 40) % 4]
        lines.append(form.encode() + (b"\r\n" if i % 3 else b"\n"))
        if i % 50 == 25:
            text, reason = junk[(i // 50) % len(junk)]
            lines.append(text)
            bad[len(lines)] = reason
    return lines, bad


def _valid_urls(lines: list[bytes]) -> list[str]:
    """Canonical URLs of the lines that are seeds, by the project's own rules."""
    urls = []
    for raw in lines:
        text = raw.decode("utf-8", "replace").removeprefix("\ufeff").strip()
        canon = canonical_url(text) if text and not text.startswith("#") else None
        if canon is not None and " " not in text:
            urls.append(canon)
    return urls


def _assignment(directory: Path) -> dict[str, list[str]]:
    """URL -> the files it appears in."""
    found: dict[str, list[str]] = {}
    for path in sorted(directory.glob("part-*.txt")):
        for line in path.read_text().splitlines():
            found.setdefault(line, []).append(path.name)
    return found


def _host_files(directory: Path) -> dict[str, set[str]]:
    """Host key -> the files its seeds are in."""
    hosts: dict[str, set[str]] = {}
    for url, files in _assignment(directory).items():
        key = host_key(url)
        assert key is not None
        hosts.setdefault(key, set()).update(files)
    return hosts


def _summary_numbers(stdout: str) -> dict[str, int]:
    match = re.search(r"([\d,]+) lines read, ([\d,]+) seeds written, ([\d,]+) malformed, "
                      r"([\d,]+) distinct hosts", stdout)
    assert match, stdout
    keys = ("lines", "seeds", "malformed", "hosts")
    return {k: int(v.replace(",", "")) for k, v in zip(keys, match.groups(), strict=True)}


@dataclass(frozen=True)
class Split:
    """One run of the command on :func:`_seed_file`."""

    folder: Path
    lines: list[bytes]
    bad: dict[int, str]
    proc: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> Split:
    """The seed file split once by the command (several tests look at the result)."""
    folder = tmp_path_factory.mktemp("split")
    lines, bad = _seed_file()
    (folder / "seeds.txt").write_bytes(b"".join(lines))
    proc = _scrapy(folder, "seeds.txt", "-n", str(PARTS), "-o", "out")
    return Split(folder, lines, bad, proc)


# ------------------------------------------------------------ the command


def test_every_seed_lands_once_in_its_hosts_frontier_partition(split: Split) -> None:
    folder, lines, proc = split.folder, split.lines, split.proc
    assert proc.returncode == 0, proc.stderr
    names = [part_name(i, PARTS) for i in range(PARTS)]
    assert sorted(p.name for p in (folder / "out").iterdir()) == names
    found = _assignment(folder / "out")
    expected = _valid_urls(lines)
    assert len(expected) == 400 and len(set(expected)) == 400
    assert sorted(found) == sorted(expected)
    assert all(len(files) == 1 for files in found.values())
    hosts = _host_files(folder / "out")
    assert len(hosts) == 80  # 40 hosts, over http and https
    for key, files in hosts.items():
        assert files == {part_name(partition_of(key, PARTS), PARTS)}, key


def test_malformed_lines_are_reported_with_line_numbers_and_left_out(split: Split) -> None:
    bad, proc = split.bad, split.proc
    reported = [line for line in proc.stderr.splitlines() if line.startswith("seeds.txt:")]
    assert [int(line.split(":")[1]) for line in reported] == sorted(bad)
    for line in reported:
        number = int(line.split(":")[1])
        assert line.startswith(f"seeds.txt:{number}: {bad[number]}: '"), line
    assert "Traceback" not in proc.stderr


def test_summary_counts_and_balance(split: Split) -> None:
    lines, bad, proc = split.lines, split.bad, split.proc
    assert _summary_numbers(proc.stdout) == {
        "lines": len(lines), "seeds": 400, "malformed": len(bad), "hosts": 80}
    hosts = re.search(r"hosts per file: min (\d+), max (\d+), mean ([\d.]+), "
                      r"spread ([\d.]+) \(max/mean\)", proc.stdout)
    seeds = re.search(r"seeds per file: min (\d+), max (\d+), mean ([\d.]+), "
                      r"spread ([\d.]+) \(max/mean\)", proc.stdout)
    assert hosts and seeds, proc.stdout
    assert float(hosts[3]) == 80 / PARTS and float(seeds[3]) == 400 / PARTS
    assert float(hosts[4]) == pytest.approx(int(hosts[2]) / (80 / PARTS), abs=0.01)
    assert f"{PARTS} file(s) in out: part-00000.txt .. part-00004.txt" in proc.stdout


def test_same_split_twice_and_from_shuffled_lines(split: Split, tmp_path: Path) -> None:
    folder, lines = split.folder, split.lines
    first = {url: files[0] for url, files in _assignment(folder / "out").items()}
    shuffled = lines[2:]
    random.Random(11).shuffle(shuffled)
    (tmp_path / "shuffled.txt").write_bytes(b"".join(shuffled))
    (tmp_path / "seeds.txt").write_bytes(b"".join(lines))
    for name in ("seeds.txt", "shuffled.txt"):
        proc = _scrapy(tmp_path, name, "-n", str(PARTS), "-o", f"out-{name}")
        assert proc.returncode == 0, proc.stderr
        again = {url: files[0] for url, files in _assignment(tmp_path / f"out-{name}").items()}
        assert again == first
    for part in range(PARTS):  # same input, same bytes: order within a file is input order
        name = part_name(part, PARTS)
        assert ((tmp_path / "out-seeds.txt" / name).read_bytes()
                == (folder / "out" / name).read_bytes())


def test_pinned_hosts_keep_their_files(tmp_path: Path) -> None:
    seeds = "".join(f"{key}/x\n" for key in PINNED)
    (tmp_path / "seeds.txt").write_text(seeds)
    for n, index in ((8, 0), (3, 1)):
        proc = _scrapy(tmp_path, "seeds.txt", "-n", str(n), "-o", f"out{n}")
        assert proc.returncode == 0, proc.stderr
        hosts = _host_files(tmp_path / f"out{n}")
        assert hosts == {key: {part_name(want[index], n)} for key, want in PINNED.items()}


def test_stdin_and_add_scheme_setting(tmp_path: Path) -> None:
    stdin = b"http://a.test/1\nexample.com/2\nhttp://c.test/3\n"
    proc = _scrapy(tmp_path, "-", "-n", "8", "-o", "out", stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["<stdin>:2: no http:// or https:// scheme: 'example.com/2'"]
    assert (tmp_path / "out" / "part-00007.txt").read_text() == "http://a.test/1\n"
    assert (tmp_path / "out" / "part-00006.txt").read_text() == "http://c.test/3\n"
    proc = _scrapy(tmp_path, "-", "-n", "8", "-o", "out2", "-s", "BROAD_SEEDS_ADD_SCHEME=1",
                   stdin=stdin)
    assert proc.returncode == 0 and proc.stderr == ""
    assert _summary_numbers(proc.stdout)["seeds"] == 3
    assert "http://example.com/2" in _assignment(tmp_path / "out2")


def test_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    (tmp_path / "seeds.txt").write_text("http://a.test/\nhttp://b.test/\n")
    assert _scrapy(tmp_path, "seeds.txt", "-n", "4", "-o", "out").returncode == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    proc = _scrapy(tmp_path, "seeds.txt", "-n", "2", "-o", "out")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip() == ("out already holds 4 part file(s) (part-00000.txt ...); "
                                   "use --force to replace them")
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    proc = _scrapy(tmp_path, "seeds.txt", "-n", "2", "-o", "out", "--force")
    assert proc.returncode == 0, proc.stderr
    assert "removed 2 part file(s) of an earlier split" in proc.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "part-00000.txt", "part-00001.txt"]
    assert sorted(_assignment(tmp_path / "out")) == ["http://a.test/", "http://b.test/"]


def test_nothing_valid_or_unreadable_is_one_line_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "junk.txt").write_text("# only\nnonsense here\n")
    proc = _scrapy(tmp_path, "junk.txt", "-n", "2", "-o", "out")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "junk.txt:2: more than one field on the line: 'nonsense here'",
        "junk.txt: no valid seed in 2 line(s) (1 malformed); nothing written"]
    assert not (tmp_path / "out").exists()
    for missing, reason in (("nope.txt", "No such file or directory"), (".", "Is a directory")):
        proc = _scrapy(tmp_path, missing, "-n", "2", "-o", "out")
        assert (proc.returncode, proc.stderr) == (1, f"cannot read {missing}: {reason}\n")
    assert not (tmp_path / "out").exists()


def test_usage_errors(tmp_path: Path) -> None:
    for argv in (("seeds.txt", "-o", "out"), ("seeds.txt", "-n", "0", "-o", "out"),
                 ("seeds.txt", "-n", "2"), ("-n", "2", "-o", "out")):
        proc = _scrapy(tmp_path, *argv)
        assert proc.returncode == 2, argv
        assert "Traceback" not in proc.stderr


def test_streams_200k_lines_in_flat_memory(tmp_path: Path) -> None:
    """Peak RSS of the 200k-line split is that of a 2k-line one, far below loading it."""
    def lines(count: int) -> list[bytes]:
        return [f"http://h{i % 997}.test/{i}\n".encode() for i in range(count)]

    big = lines(200_000)
    (tmp_path / "big.txt").write_bytes(b"".join(big))
    (tmp_path / "small.txt").write_bytes(b"".join(lines(2_000)))
    # What holding the input costs, before any parsing: the lines as bytes in a list.
    loading = sum(sys.getsizeof(line) for line in big) + sys.getsizeof(big)
    peak = {name: _peak_rss_kib(tmp_path, name) for name in ("small.txt", "big.txt")}
    growth = (peak["big.txt"] - peak["small.txt"]) * 1024
    assert growth < loading / 8, (peak, loading)
    found = _assignment(tmp_path / "out-big.txt")
    assert len(found) == 200_000 and all(len(files) == 1 for files in found.values())


def _peak_rss_kib(cwd: Path, name: str) -> int:
    """Peak RSS of one ``scrapy partition`` run, measured by a parent of its own.

    RUSAGE_CHILDREN of the test process would hold the largest child of the
    whole session; a fresh wrapper process has exactly one child.
    """
    wrapper = ("import resource, subprocess, sys\n"
               "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
               "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    env = dict(os.environ, SCRAPY_SETTINGS_MODULE="crawler.settings")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", wrapper, sys.executable, "-m", "scrapy", "partition", name,
         "-n", "8", "-o", f"out-{name}"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=True)
    code, kib = out.stdout.split()
    assert code == "0", out.stderr
    return int(kib)  # Linux reports ru_maxrss in KiB


# --------------------------------------------------------- the pure core


def test_split_lines_routes_by_host_and_counts() -> None:
    lines, bad = _seed_file()
    written: list[tuple[int, str]] = []
    errors: list[SeedError] = []
    report = split_lines(io.BytesIO(b"".join(lines)), source="s.txt", partitions=PARTS,
                         write=lambda part, url: written.append((part, url)),
                         on_error=errors.append)
    assert [url for _, url in written] == _valid_urls(lines)
    assert all(part == partition_of(host_key(url) or "", PARTS) for part, url in written)
    assert [(e.line, e.reason) for e in errors] == sorted(bad.items())
    assert (report.lines, report.seeds, report.malformed, report.hosts) == (
        len(lines), 400, len(bad), 80)
    assert report.seeds_per_part == [
        sum(1 for part, _ in written if part == p) for p in range(PARTS)]


def test_part_names_fit_n() -> None:
    assert part_name(0, 1) == "part-00000.txt"
    assert part_name(7, 8) == "part-00007.txt"
    assert part_name(99_999, 100_000) == "part-99999.txt"
    assert part_name(3, 100_001) == "part-000003.txt"
    assert sorted(part_name(i, 200_000) for i in range(0, 200_000, 999)) == [
        part_name(i, 200_000) for i in range(0, 200_000, 999)]


def test_spread() -> None:
    assert str(spread([10, 20, 30])) == "min 10, max 30, mean 20.0, spread 1.50 (max/mean)"
    assert spread([0, 0]).ratio == 1.0


def test_a_read_error_mid_way_leaves_the_directory_as_it_was(tmp_path: Path) -> None:
    def failing() -> Iterator[bytes]:
        yield b"http://a.test/\n"
        raise OSError(5, "Input/output error")

    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    message = re.escape("cannot read s.txt after line 1: Input/output error")
    with pytest.raises(UnreadableInput, match=message), PartFiles(out, 3) as parts:
        split_lines(failing(), source="s.txt", partitions=3, write=parts.write, on_error=print)
        parts.commit()
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    with pytest.raises(PartitionError), PartFiles(tmp_path / "new", 2):
        raise PartitionError("boom")
    assert not (tmp_path / "new").exists()


def test_too_many_parts_for_the_open_file_limit(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _: (256, 512))
    with pytest.raises(PartitionError, match=r"1,000 parts need 1,032 open files; the limit "
                                             r"is 512 \(ulimit -n\)"):
        PartFiles(tmp_path / "out", 1000).open()
    assert not (tmp_path / "out").exists()


def test_a_malformed_seed_is_reported_as_malformed(tmp_path: Path) -> None:
    (tmp_path / "seeds.txt").write_bytes(b"http://a.test/1\nhttp://[::1/\nftp://files.test/x\n")
    proc = _scrapy(tmp_path, "seeds.txt", "-n", "2", "-o", "out")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "seeds.txt:2: malformed URL (Invalid IPv6 URL): 'http://[::1/'",
        "seeds.txt:3: not an http(s) URL: 'ftp://files.test/x'"]
