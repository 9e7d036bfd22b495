"""A shared Redis's URL and password off the command line (REDIS_URL_FILE,
$BROADCRAWL_REDIS_URL), and out of everything a crawl writes.

The shared Redis here is one as a fleet runs it (tests/redis_tls.py): TLS
only, client certificates, the crawler's least-privilege ACL users, the
``default`` user off; the worker's URL is ``rediss://`` with its CA and
certificate, so the crawl also shows that every component (scheduler, seed
feed, WARC digest index, metrics) works over TLS within the worker's ACL.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from scrapy.settings import Settings

from crawler.frontier.connection import URL_VARIABLE, ConnectError, configured_url
from tests.crawl_runner import REPO, finish_crawl, proxy_env, run_crawl, start_crawl
from tests.redis_server import started_redis
from tests.redis_tls import TlsRedis, crawler_users, tls_redis
from tests.simweb import SimWebProcess

PASSWORD = "s3cr3t-Pw-7f1c9e"  # the worker's
READER_PASSWORD = "r3ad-Pw-0a4d2b"
NAMESPACE = "secrets"
SEED_LIST = "broad:start_urls"

# ---------------------------------------------------------------- where the URL comes from


def test_the_setting_then_the_file_then_the_environment(tmp_path: Path) -> None:
    url_file = tmp_path / "redis-url"
    url_file.write_text("redis://:from-file@127.0.0.1:6379/0\n")
    env = {URL_VARIABLE: "redis://:from-env@127.0.0.1:6379/0"}
    both = Settings({"REDIS_URL": "redis://set:6379/0", "REDIS_URL_FILE": str(url_file)})
    assert configured_url(both, env) == "redis://set:6379/0"
    assert configured_url(Settings({"REDIS_URL_FILE": str(url_file)}), env) \
        == "redis://:from-file@127.0.0.1:6379/0"
    assert configured_url(Settings(), env) == "redis://:from-env@127.0.0.1:6379/0"
    assert configured_url(Settings(), {}) is None  # the embedded Redis
    assert configured_url(Settings({"REDIS_URL": ""}), {URL_VARIABLE: ""}) is None


def test_a_url_file_that_cannot_be_used_is_named_not_shown(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    with pytest.raises(ConnectError, match=f"REDIS_URL_FILE {missing}: cannot read it"):
        configured_url(Settings({"REDIS_URL_FILE": str(missing)}), {})
    empty = tmp_path / "empty"
    empty.write_text(" \n")
    with pytest.raises(ConnectError, match="is empty"):
        configured_url(Settings({"REDIS_URL_FILE": str(empty)}), {})
    binary = tmp_path / "binary"
    binary.write_bytes(b"redis://:" + PASSWORD.encode() + b"\xff@h/0")
    with pytest.raises(ConnectError) as raised:
        configured_url(Settings({"REDIS_URL_FILE": str(binary)}), {})
    assert PASSWORD not in str(raised.value)


# ---------------------------------------------------------------- in a crawl


@pytest.fixture(scope="module")
def private_redis() -> Iterator[TlsRedis]:
    passwords = {"worker": PASSWORD, "reader": READER_PASSWORD}
    with tls_redis(crawler_users(NAMESPACE, SEED_LIST, passwords), passwords) as server:
        yield server


@pytest.fixture(scope="module")
def sim() -> Iterator[SimWebProcess]:
    with SimWebProcess(seed=41, n_hosts=6, mix="clean") as process:
        yield process


def _everything_written(folder: Path) -> Iterator[tuple[Path, bytes]]:
    """Every file under ``folder``, gzip members (WARC files) decompressed."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        yield path, data


def _scrapes_while_running(proc: subprocess.Popen[str], sd_dir: Path) -> list[str]:
    """Every answer of the worker's metrics endpoint (found in its file_sd file)
    until it exits, a scrape every 0.3 s."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    scrapes: list[str] = []
    while proc.poll() is None:
        for path in sd_dir.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, IndexError, KeyError):
                target = json.loads(path.read_text())[0]["targets"][0]
                scrapes.append(opener.open(f"http://{target}/metrics", timeout=5).read().decode())
        time.sleep(0.3)
    return scrapes


@pytest.mark.crawl
def test_a_crawl_takes_its_redis_from_the_environment_and_writes_no_password(
    sim: SimWebProcess, private_redis: TlsRedis, tmp_path: Path
) -> None:
    sim.reset()
    sd_dir = tmp_path / "sd"
    sd_dir.mkdir()
    seeds = sim.web.seed_urls()
    admin = private_redis.admin()
    admin.rpush(SEED_LIST, *seeds[2:])  # the rest come through the seed feed
    started = time.monotonic()
    proc = start_crawl(sim.proxy_url, seeds[:2], tmp_path / "crawl", {
        "FRONTIER_NAMESPACE": NAMESPACE, "DOWNLOAD_DELAY": 0.05, "DEPTH_LIMIT": 1,
        "LOG_LEVEL": "DEBUG", "PROMETHEUS_PORT": "0", "PROMETHEUS_FILE_SD_DIR": str(sd_dir),
        "PROMETHEUS_FRONTIER_INTERVAL": 0.5,
    }, env={URL_VARIABLE: private_redis.url("worker")})
    scrapes = _scrapes_while_running(proc, sd_dir)
    result = finish_crawl(proc, tmp_path / "crawl", started, timeout=120)
    assert result.returncode == 0, result.log[-3000:]
    # Nothing it asked was refused or failed: the ACL holds what a worker sends.
    assert result.stat("frontier/redis_errors") is None, result.log[-3000:]
    assert "Traceback" not in result.log and "permission" not in result.log
    assert admin.acl_log() == []
    # The frontier was the shared server, not an embedded one...
    assert admin.keys("{secrets/p*}:*"), "nothing of the crawl in the shared Redis"
    assert admin.exists("{secrets/warc}:digests")  # the WARC writer's index, over TLS too
    assert admin.llen(SEED_LIST) == 0
    admin.close()
    assert not (tmp_path / "crawl" / "job" / "frontier").exists()
    # ...and the crawl fetched the web, every seed, fed or given.
    fetched = {(e["host"], e["path"]) for e in sim.ledger().entries}
    assert {(u.split("/")[2], "/") for u in seeds} <= fetched
    assert len(fetched) > len(seeds)
    # Nothing it wrote or served carries the password: log (DEBUG, with the
    # stats dump), items, WARC records (warcinfo included) and their index, the
    # job folder, every metrics scrape.
    written = dict(_everything_written(tmp_path / "crawl"))
    assert any(path.suffix == ".gz" for path in written), sorted(written)
    assert "'frontier/offered'" in result.log  # the stats dump is in the log
    assert any("crawler_frontier_urls" in text for text in scrapes), len(scrapes)
    leaks = [str(path) for path, data in written.items() if PASSWORD.encode() in data]
    assert leaks == [] and not any(PASSWORD in text for text in scrapes)


def test_frontier_status_reads_the_url_from_a_file(
    private_redis: TlsRedis, tmp_path: Path
) -> None:
    """As the read-only operator: its ACL holds what status sends."""
    url_file = tmp_path / "redis-url"
    url_file.write_text(private_redis.url("reader") + "\n")
    url_file.chmod(0o600)
    command = [sys.executable, "-m", "scrapy", "frontier", "status", "--spider", "broad",
               "-s", f"REDIS_URL_FILE={url_file}", "-s", f"FRONTIER_NAMESPACE={NAMESPACE}"]
    assert READER_PASSWORD not in " ".join(command)
    done = subprocess.run(command, cwd=REPO, env=proxy_env(None), capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert READER_PASSWORD not in done.stdout + done.stderr
    assert "rediss://reader:***@127.0.0.1:" in done.stdout  # it names the server it read

    url_file.write_text(private_redis.url("reader", "wrong-password") + "\n")
    done = subprocess.run(command, cwd=REPO, env=proxy_env(None), capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # one line, no traceback
    assert "wrong-password" not in done.stderr


def test_no_test_crawl_inherits_the_runners_frontier_url() -> None:
    os.environ[URL_VARIABLE] = "redis://:leaked@127.0.0.1:1/0"
    try:
        assert URL_VARIABLE not in proxy_env(None)
    finally:
        del os.environ[URL_VARIABLE]


# ---------------------------------------------------------------- a Redis a worker cannot use


def _failed_crawl(sim: SimWebProcess, tmp_path: Path, url: str | None,
                  **settings: object) -> tuple[int, str, float]:
    result = run_crawl(sim.proxy_url, sim.web.seed_urls()[:1], tmp_path, {
        "FRONTIER_NAMESPACE": "secrets-fail", "PROMETHEUS_ENABLED": False, **settings,
    }, timeout=90, env={URL_VARIABLE: url} if url else None)
    return result.returncode, result.log, result.seconds


def _error_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if "] ERROR: " in line]


@pytest.mark.crawl
def test_a_refused_password_is_one_line_at_once_and_exit_1(
    sim: SimWebProcess, private_redis: TlsRedis, tmp_path: Path
) -> None:
    wrong = private_redis.url("worker", "not-the-Pw-3b8a")
    code, log, seconds = _failed_crawl(sim, tmp_path, wrong, FRONTIER_CONNECT_WAIT=60)
    assert code == 1
    assert "Traceback" not in log, log[-3000:]
    errors = _error_lines(log)
    assert len(errors) == 1, errors
    assert "refused this worker's credentials" in errors[0]
    assert "REDIS_URL, REDIS_URL_FILE or $BROADCRAWL_REDIS_URL" in errors[0]
    assert "not-the-Pw-3b8a" not in log and f"127.0.0.1:{private_redis.port}" in errors[0]
    assert seconds < 45  # not FRONTIER_CONNECT_WAIT's 60 s: a password does not come back
    assert "'finish_reason': 'frontier_unavailable'" in log


@pytest.mark.crawl
def test_an_unreachable_redis_and_an_unreadable_url_file_are_one_line_and_exit_1(
    sim: SimWebProcess, tmp_path: Path
) -> None:
    with started_redis(password=PASSWORD) as gone:
        url = gone.url
    code, log, _ = _failed_crawl(sim, tmp_path / "down", url, FRONTIER_CONNECT_WAIT=1)
    assert code == 1 and "Traceback" not in log, log[-3000:]
    errors = _error_lines(log)
    assert len(errors) == 1 and "did not answer for 1 s" in errors[0], errors
    assert PASSWORD not in log

    missing = tmp_path / "no-such-file"
    code, log, _ = _failed_crawl(sim, tmp_path / "file", None, REDIS_URL_FILE=str(missing))
    assert code == 1 and "Traceback" not in log, log[-3000:]
    errors = _error_lines(log)
    assert len(errors) == 1 and f"REDIS_URL_FILE {missing}: cannot read it" in errors[0], errors
