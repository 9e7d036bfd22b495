"""Least-privilege Redis users (crawler/frontier/acl.py, ``scrapy acl``) on a
real TLS-only server with the ``default`` user off.

That a worker crawls within its ACL, over TLS, is shown by the crawl of
tests/test_redis_secrets.py (its shared Redis is such a server); here: the
lists match what the code sends, and what a user may not do ends in one
line, not a traceback or a crawl that waits forever.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import crawler
from crawler.frontier.acl import READ_COMMANDS, WORKER_COMMANDS, acl_line, key_patterns
from tests.crawl_runner import REPO, proxy_env, run_crawl
from tests.redis_tls import TlsRedis, crawler_users, tls_redis
from tests.simweb import SimWebProcess

NAMESPACE = "acl"
SEED_LIST = "broad:start_urls"
PASSWORDS = {"worker": "w-Pw-e2c1", "reader": "r-Pw-93f0", "worker-noscripts": "n-Pw-44ab"}

# ---------------------------------------------------------------- the lists


def _script_commands() -> set[str]:
    """Every command a Lua script of the crawler calls (lua/*.lua and the
    scripts held in Python strings)."""
    root = Path(crawler.__file__).parent
    called = re.compile(r"redis\.p?call\(\s*['\"]([A-Za-z]+)['\"]")
    found: set[str] = set()
    for path in [*root.rglob("*.lua"), *root.rglob("*.py")]:
        found.update(m.group(1).lower() for m in called.finditer(path.read_text()))
    return found


def test_every_command_of_every_script_is_allowed_to_a_worker() -> None:
    called = _script_commands()
    assert len(called) > 20  # the search finds the scripts
    assert called - set(WORKER_COMMANDS) == set()


def test_the_reader_sends_nothing_that_writes_and_redis_knows_every_command(
    redis_url: str,
) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        for name in WORKER_COMMANDS:
            command = name.partition("|")[0]
            info = client.execute_command("COMMAND", "INFO", command)[command]
            if name in READ_COMMANDS:
                assert "write" not in info["flags"], name
                assert "@write" not in info["acl_categories"], name
    finally:
        client.close()


def test_scrapy_acl_prints_the_rule_with_the_password_hashed(tmp_path: Path) -> None:
    password_file = tmp_path / "pw"
    password_file.write_text("Ab-5e3f-secret\n")
    done = _scrapy("acl", "worker", "--user", "w1", "--password-file", str(password_file),
                   "-s", "FRONTIER_NAMESPACE=fleet:%(spider)s")
    assert done.returncode == 0, done.stderr
    expected = acl_line("w1", "worker", key_patterns("fleet:broad", SEED_LIST), "Ab-5e3f-secret")
    assert done.stdout.strip() == expected
    assert "Ab-5e3f-secret" not in done.stdout
    assert "#" + hashlib.sha256(b"Ab-5e3f-secret").hexdigest() in done.stdout
    assert "~fleet:broad:* ~{fleet:broad/* ~{fleet:broad:*" in done.stdout
    reader = _scrapy("acl", "reader")
    assert reader.returncode == 0 and ">CHANGE-ME" in reader.stdout
    assert "+evalsha" not in reader.stdout and "+hset" not in reader.stdout
    assert _scrapy("acl", "admin").returncode == 2  # a usage error


# ---------------------------------------------------------------- on a real server


@pytest.fixture(scope="module")
def server() -> Iterator[TlsRedis]:
    users = crawler_users(NAMESPACE, SEED_LIST, PASSWORDS, drop={"worker-noscripts": "evalsha"})
    with tls_redis(users, PASSWORDS) as running:
        yield running


@pytest.fixture(scope="module")
def sim() -> Iterator[SimWebProcess]:
    with SimWebProcess(seed=43, n_hosts=3, mix="clean") as process:
        yield process


def _scrapy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scrapy", *args], cwd=REPO,
                          env=proxy_env(None), capture_output=True, text=True, timeout=60,
                          check=False)


def _tls_params(server: TlsRedis) -> str:
    """The TLS options as REDIS_PARAMS (JSON), for a URL that has none."""
    return json.dumps({"ssl_ca_certs": str(server.ca), "ssl_certfile": str(server.cert),
                       "ssl_keyfile": str(server.key)})


def _crawl_as(sim: SimWebProcess, server: TlsRedis, tmp_path: Path, user: str,
              namespace: str = NAMESPACE, params: bool = False) -> tuple[int, str, list[str]]:
    url = server.url(user)
    extra = {"REDIS_PARAMS": _tls_params(server)} if params else {}
    result = run_crawl(sim.proxy_url, sim.web.seed_urls(), tmp_path, {
        "FRONTIER_NAMESPACE": namespace, "PROMETHEUS_ENABLED": False, "DOWNLOAD_DELAY": 0.05,
        "CLOSESPIDER_TIMEOUT": 60, **extra,
    }, timeout=90, env={"BROADCRAWL_REDIS_URL": url.split("?")[0] if params else url})
    errors = [line for line in result.log.splitlines() if "] ERROR: " in line]
    return result.returncode, result.log, errors


@pytest.mark.crawl
def test_a_reader_cannot_crawl_nor_change_the_frontier(
    sim: SimWebProcess, server: TlsRedis, tmp_path: Path
) -> None:
    sim.reset()
    code, log, errors = _crawl_as(sim, server, tmp_path, "reader")
    assert code == 1 and "Traceback" not in log, log[-3000:]
    assert len(errors) == 1, errors
    assert "no permissions to run the 'set' command" in errors[0]
    assert "scrapy acl worker" in errors[0] and PASSWORDS["reader"] not in log
    assert sim.ledger().entries == []  # nothing fetched

    done = _scrapy("frontier", "revisit-now", "--redis-url", server.url("reader"),
                   "-s", f"FRONTIER_NAMESPACE={NAMESPACE}")
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "no permissions to run the 'evalsha' command" in done.stderr
    assert "scrapy acl worker" in done.stderr


@pytest.mark.crawl
def test_a_worker_stays_in_its_own_namespace(
    sim: SimWebProcess, server: TlsRedis, tmp_path: Path
) -> None:
    """(Its TLS options come from REDIS_PARAMS here, not the URL: the refusal
    is the server's, so the connection was made.)"""
    code, log, errors = _crawl_as(sim, server, tmp_path, "worker", namespace="someone-else",
                                  params=True)
    assert code == 1 and "Traceback" not in log, log[-3000:]
    assert len(errors) == 1 and "permissions to access one of the keys" in errors[0], errors
    assert server.admin().keys("someone-else*") == []


@pytest.mark.crawl
def test_a_command_refused_during_the_crawl_ends_it_in_one_line(
    sim: SimWebProcess, server: TlsRedis, tmp_path: Path
) -> None:
    """The worker opens (its ACL lets it read and set the layout), then Redis
    refuses its first script: one error, the crawl ends, exit 1; it does not
    retry for ever as it would for a Redis that went away."""
    code, log, errors = _crawl_as(sim, server, tmp_path, "worker-noscripts")
    assert code == 1 and "Traceback" not in log, log[-3000:]
    assert len(errors) == 1, errors
    assert "Redis refused this worker" in errors[0]
    assert "no permissions to run the 'evalsha' command" in errors[0]
    assert "'finish_reason': 'frontier_unavailable'" in log
    assert "waiting for it" not in log  # not taken for an outage


def test_a_client_without_a_certificate_is_turned_away_in_one_line(server: TlsRedis) -> None:
    done = _scrapy("frontier", "status", "--redis-url",
                   server.url("reader", certificate=False),
                   "-s", f"FRONTIER_NAMESPACE={NAMESPACE}")
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("cannot reach Redis at rediss://reader:***@127.0.0.1:")
    assert PASSWORDS["reader"] not in done.stderr


def test_tls_options_can_come_from_redis_params(server: TlsRedis) -> None:
    url = server.url("reader").split("?")[0]
    assert url.startswith("rediss://") and "ssl_" not in url
    done = _scrapy("frontier", "status", "--redis-url", url, "-s",
                   f"REDIS_PARAMS={_tls_params(server)}", "-s", f"FRONTIER_NAMESPACE={NAMESPACE}")
    assert done.returncode == 0, done.stderr
    assert f"Frontier {NAMESPACE} at rediss://reader:***@127.0.0.1:" in done.stdout
