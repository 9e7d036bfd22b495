"""Starting and stopping: a crawl that cannot start says why in one line, exits
with 1 and leaves nothing behind (no stats dump, no empty feed, no archive
folder); a crawl stopped with Ctrl-C ends within seconds, hung downloads or
not, and gives back what was in flight."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.crawl_runner import REALWEB_DEFAULTS, REPO, proxy_env, realweb_settings, start_crawl
from tests.realweb import Host, RealWebProcess, Web, links_to, page

pytestmark = pytest.mark.crawl


def _at_terminal(command: list[str], timeout: float = 60) -> tuple[int, str, float]:
    """Run ``command`` with a terminal for its standard input and output, as a
    person at a shell runs it: its exit code, what it wrote, how long it took."""
    primary, secondary = pty.openpty()
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=REPO, env=proxy_env(None), stdin=secondary,
                            stdout=secondary, stderr=secondary, close_fds=True)
    os.close(secondary)
    out = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        out += chunk
    code = proc.wait(timeout=timeout)
    os.close(primary)
    return code, out.decode(errors="replace"), time.monotonic() - started


def test_a_refused_redis_at_a_terminal_is_one_line_within_seconds(tmp_path: Path) -> None:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://docs.test/\n")
    feed, warc, job = tmp_path / "items.jsonl", tmp_path / "warc", tmp_path / "job"
    code, out, took = _at_terminal([
        sys.executable, "-m", "scrapy", "crawl", "broad", "-a", f"seeds={seeds}",
        "-s", "REDIS_URL=redis://127.0.0.1:1", "-s", f"WARC_DIR={warc}",
        "-s", f"JOBDIR={job}", "-s", f"REPORT_DIR={tmp_path / 'reports'}",
        "-o", str(feed)])
    assert code == 1, out[-3000:]
    assert took < 15, took  # about 4 s of tries (FRONTIER_CONNECT_WAIT is 60)
    errors = [line for line in out.splitlines() if "] ERROR: " in line]
    assert len(errors) == 1, out[-3000:]
    assert "cannot reach Redis at redis://127.0.0.1:1" in errors[0]
    assert "REDIS_URL" in errors[0]
    assert "Dumping Scrapy stats" not in out and "Traceback" not in out
    assert out.rstrip().splitlines()[-1].endswith(errors[0].split("] ERROR: ")[1])
    assert not feed.exists() and not warc.exists() and not (tmp_path / "reports").exists()


def test_a_warc_dir_that_is_a_file_is_one_line_and_nothing_is_made(tmp_path: Path) -> None:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://docs.test/\n")
    (tmp_path / "warc").write_text("not a folder")
    feed, job, reports = tmp_path / "items.jsonl", tmp_path / "job", tmp_path / "reports"
    done = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "broad", "-a", f"seeds={seeds}",
         "-s", f"WARC_DIR={tmp_path / 'warc'}", "-s", f"JOBDIR={job}",
         "-s", f"REPORT_DIR={reports}", "-o", str(feed)],
        cwd=REPO, env=proxy_env(None), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if "] ERROR: " in line]
    assert errors == [line for line in errors if "WARC_DIR" in line] and len(errors) == 1
    assert f"WARC_DIR {tmp_path / 'warc'} is a file, not a folder" in errors[0]
    assert done.stderr.rstrip().splitlines()[-1] == errors[0]  # the last word
    assert "Dumping Scrapy stats" not in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seeds.txt", "warc"]


def test_the_first_ctrl_c_ends_a_crawl_with_hung_downloads_within_seconds(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    # Every page but the first hangs for two minutes: Ctrl-C must not wait for them.
    paths = [f"/slow{i}" for i in range(4)]
    web = realweb(Web([Host("hung.test", pages={
        "/": links_to(*paths), **{p: page("late", delay=120) for p in paths}})]))
    settings = {**realweb_settings(web.nameserver), **REALWEB_DEFAULTS, "DOWNLOAD_DELAY": 0,
                "CONCURRENT_REQUESTS_PER_DOMAIN": 4, "DOWNLOAD_TIMEOUT": 180}
    proc = start_crawl(None, [web.url("hung.test")], tmp_path, settings)
    try:
        deadline = time.monotonic() + 60
        while b"/" not in web.ledger().targets("hung.test"):  # (the ledger: answers sent)
            assert time.monotonic() < deadline and proc.poll() is None, "no first page"
            time.sleep(0.2)
        time.sleep(2)  # the hung pages' requests are under way
        stopped = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        took = time.monotonic() - stopped
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = (tmp_path / "crawl.log").read_text()
    assert took < 5, (took, log[-3000:])
    assert "Crawl summary (shutdown" in log, log[-3000:]
    # what was in flight went back to its queue, to be fetched by the next run
    status = subprocess.run(
        [sys.executable, "-m", "scrapy", "frontier", "status", "--json",
         "-s", f"JOBDIR={tmp_path / 'job'}"],
        cwd=REPO, env=proxy_env(None), capture_output=True, text=True, timeout=60)
    counts = json.loads(status.stdout)["counts"]
    assert (counts["queued"], counts["leased"], counts["dead"]) == (len(paths), 0, 0), counts
