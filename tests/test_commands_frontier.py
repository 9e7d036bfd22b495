"""``scrapy frontier`` (crawler/commands/frontier.py), in this process and as the
real command, against a real Redis and the embedded one."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from scrapy.cmdline import execute
from scrapy.settings import Settings

import crawler.settings
from crawler.frontier.embedded import EmbeddedRedis
from crawler.frontier.values import Release
from tests.frontier_world import PARTITIONS, World, filled_world, sites_world

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def world(redis_url: str, redis_prefix: str) -> Iterator[World]:
    """See :func:`filled_world`."""
    w = filled_world(redis_url, redis_prefix + "adm")
    yield w
    w.close()


def _settings(**values: Any) -> Settings:
    settings = Settings()
    settings.setmodule(crawler.settings, priority="project")
    settings.set("COMMANDS_MODULE", "crawler.commands", priority="project")
    settings.update(values, priority="cmdline")
    return settings


def _scrapy(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            *argv: str, **settings: Any) -> tuple[int, str, str]:
    """Run ``scrapy frontier ...`` in this process (as the cmdline would)."""
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as exit_info:
        execute(["scrapy", "frontier", *argv], _settings(**settings))
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


def test_command_dead_requeue_drop_host(world: World, redis_url: str,
                                        monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    namespace = world.keys.namespace
    opts = {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": namespace,
            "FRONTIER_PARTITIONS": PARTITIONS}
    code, out, _ = _scrapy(monkeypatch, capsys, "dead", "--host", "a.test", **opts)
    assert code == 0
    assert "TimeoutError" in out and "http://a.test/1" in out and "b.test" not in out
    assert "2 matching (host a.test, every scheme and port), of 3 dead" in out
    code, out, _ = _scrapy(monkeypatch, capsys, "dead", "--json", "--limit", "1", **opts)
    assert code == 0 and len(out.splitlines()) == 1 and json.loads(out)["url"]
    code, out, _ = _scrapy(monkeypatch, capsys, "requeue", "--reason", "http-404", **opts)
    assert (code, out.strip()) == (0, "requeued 1 dead letter(s) (reason http-404)")
    code, out, _ = _scrapy(monkeypatch, capsys, "drop-host", "c.test", **opts)
    assert code == 0 and out.startswith("dropped http://c.test:80: 1 queued and 0 delayed")
    code, _, err = _scrapy(monkeypatch, capsys, "drop-host", "nowhere.test", **opts)
    assert (code, err.strip()) == (
        1, f"host http://nowhere.test:80 is not in the frontier {namespace}")
    code, out, _ = _scrapy(monkeypatch, capsys, "status", **opts)
    assert code == 0 and f"Frontier {namespace} at {redis_url}" in out
    # admitted a moment ago (a loaded machine may take a second to get here)
    assert re.search(r"Oldest queued URL waiting [01]s \(\+-10 s\)", out), out
    counts = world.assert_consistent()
    assert (counts["queued"], counts["dead"]) == (6, 3)


def test_command_host_names_every_scheme_and_port_a_url_one(
        redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    w = sites_world(redis_url, redis_prefix + "sites")
    try:
        opts = {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": w.keys.namespace,
                "FRONTIER_PARTITIONS": PARTITIONS}
        code, out, _ = _scrapy(monkeypatch, capsys, "dead", "--host", "g.test", "--json",
                               **opts)
        assert code == 0
        assert sorted(json.loads(line)["host"] for line in out.splitlines()) == [
            "http://g.test:80", "http://g.test:8080", "https://g.test:443"]
        code, out, _ = _scrapy(monkeypatch, capsys, "dead", "--host", "https://g.test/", **opts)
        assert code == 0 and "https://g.test/1" in out and "http://g.test/0" not in out
        assert "1 matching (host https://g.test:443), of 5 dead" in out
        code, out, _ = _scrapy(monkeypatch, capsys, "requeue", "--host", "g.test", **opts)
        assert (code, out.strip()) == (
            0, "requeued 3 dead letter(s) (host g.test, every scheme and port)")
        assert sorted(d.host for d in w.admin.dead()) == [
            "http://other.test:80", "https://www.g.test:443"]
        code, out, _ = _scrapy(monkeypatch, capsys, "--help")
        assert "every scheme and port" in out
    finally:
        w.close()


def test_command_usage_errors(monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _scrapy(monkeypatch, capsys, "explode")
    assert code == 2 and "give one of: status, hosts, dead, refused, requeue, drop-host" in err
    code, _, err = _scrapy(monkeypatch, capsys, "dead", "--watch", "1")
    assert code == 2 and "--watch" in err


@pytest.fixture(scope="module")
def command_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for ``python -m scrapy`` that finds the ``frontier`` command.

    ``-s COMMANDS_MODULE=...`` alone cannot: Scrapy looks the command up
    before it reads ``-s``. Until crawler/settings.py sets COMMANDS_MODULE, a
    settings module (in a temporary folder) that adds it stands in.
    """
    env = dict(os.environ)
    if getattr(crawler.settings, "COMMANDS_MODULE", None) == "crawler.commands":
        return env
    folder = tmp_path_factory.mktemp("settings")
    (folder / "frontier_command_settings.py").write_text(
        "from crawler.settings import *  # noqa: F403\n"
        'COMMANDS_MODULE = "crawler.commands"\n')
    env["SCRAPY_SETTINGS_MODULE"] = "frontier_command_settings"
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "frontier", *argv,
         "-s", "COMMANDS_MODULE=crawler.commands"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_status_json_from_the_real_command(world: World, redis_url: str,
                                           command_env: dict[str, str]) -> None:
    world.client.hset(world.keys.workers(), "box:1",
                      json.dumps({"seen": time.time(), "held": 0, "pid": 1, "host": "box"}))
    proc = _run(command_env, "status", "--json", "-s", f"REDIS_URL={redis_url}",
                "-s", f"FRONTIER_NAMESPACE={world.keys.namespace}",
                "-s", f"FRONTIER_PARTITIONS={PARTITIONS}")
    assert proc.returncode == 0, proc.stderr
    status = json.loads(proc.stdout)
    assert status["namespace"] == world.keys.namespace and status["redis"] == redis_url
    assert {k: status["counts"][k] for k in ("queued", "leased", "done", "dead", "hosts")} == {
        "queued": 6, "leased": 0, "done": 1, "dead": 3, "hosts": 3}
    assert status["hosts"]["total"] == 3
    assert [(w["id"], w["state"]) for w in status["workers"]] == [("box:1", "alive")]


def test_unreachable_redis_is_one_line_and_exit_code_1(command_env: dict[str, str]) -> None:
    proc = _run(command_env, "status", "-s", "REDIS_URL=redis://:hunter2@127.0.0.1:1/0")
    assert proc.returncode == 1
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("cannot reach Redis at redis://***@127.0.0.1:1/0: ")
    assert "hunter2" not in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------------- embedded Redis


def _answers(server: EmbeddedRedis) -> bool:
    if not server.socket.exists():
        return False
    client = redis.Redis(unix_socket_path=str(server.socket), socket_timeout=2,
                         retry=Retry(NoBackoff(), 0))
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def test_embedded_redis_is_stopped_only_if_the_command_started_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    server = EmbeddedRedis(tmp_path / "frontier")
    code, _, err = _scrapy(monkeypatch, capsys, "status", JOBDIR=str(tmp_path))
    assert code == 1 and err.startswith(f"no frontier in {tmp_path / 'frontier'}")
    (tmp_path / "frontier").mkdir()
    code, out, _ = _scrapy(monkeypatch, capsys, "status", "--json", JOBDIR=str(tmp_path))
    assert code == 0 and json.loads(out)["counts"]["queued"] == 0
    assert not _answers(server)  # started for the command, stopped after it
    server.start()
    try:
        code, out, _ = _scrapy(monkeypatch, capsys, "status", "--json", JOBDIR=str(tmp_path))
        assert code == 0 and json.loads(out)["redis"] == server.url
        assert _answers(server)  # it was running before: left running
    finally:
        server.stop()


def test_status_after_a_finished_crawl_shows_finished_hosts(
        redis_url: str, redis_prefix: str, command_env: dict[str, str]) -> None:
    w = World(redis_url, redis_prefix + "finished", concurrency=2, delay_ms=0)
    try:
        w.admit("http://a.test/0", "http://a.test/1", "http://b.test/0", "http://c.test/0")
        w.release("w1", *(Release(x.host, x.fingerprint, "done") for x in w.claim_all("w1")))
        proc = _run(command_env, "status", "-s", f"REDIS_URL={redis_url}",
                    "-s", f"FRONTIER_NAMESPACE={w.keys.namespace}",
                    "-s", f"FRONTIER_PARTITIONS={PARTITIONS}")
    finally:
        w.close()
    assert proc.returncode == 0, proc.stderr
    head, values = next((line, after) for line, after in zip(
        proc.stdout.splitlines(), proc.stdout.splitlines()[1:], strict=False)
        if line.startswith("Hosts"))
    assert head.split() == ["Hosts", "total", "ready", "now", "paced", "busy", "draining",
                            "parked", "finished"]
    assert values.split() == ["3", "0", "0", "0", "0", "0", "3"]
    # the account: what was fetched, from how many hosts
    assert "Fetched  4 page(s) from 3 host(s); 0 seed(s)" in proc.stdout
    assert "busy/other" not in proc.stdout
