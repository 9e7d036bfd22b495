"""``scrapy frontier`` and its admin operations, against a real Redis.

The frontier state is built with the real :class:`Frontier` (admit, claim,
release), so the admin scripts are checked against what workers write, and
after every change the counts must still agree with the queues themselves.
"""

from __future__ import annotations

import asyncio
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
from redis.asyncio import Redis as AsyncRedis
from redis.backoff import NoBackoff
from redis.retry import Retry
from scrapy.cmdline import execute
from scrapy.settings import Settings

import crawler.settings
from crawler.frontier.admin import (
    AdminError,
    FrontierAdmin,
    RedisUnreachable,
    connect,
    frontier_keys,
    parse_dead,
    parse_host,
    safe_url,
)
from crawler.frontier.embedded import EmbeddedRedis
from crawler.frontier.keys import Keys
from crawler.frontier.store import Admission, Frontier, Lease, Limits, Release
from crawler.urls import canonical_url, host_key, url_fingerprint

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 4
A, B, C = "http://a.test:80", "http://b.test:80", "http://c.test:80"


def _admission(url: str, priority: int = 0) -> Admission:
    canon = canonical_url(url)
    assert canon
    host = host_key(canon)
    assert host
    record = json.dumps({"u": canon, **({"p": priority} if priority else {})})
    return Admission(canon, host, url_fingerprint(canon), record, priority)


class World:
    """A frontier built by the real store, plus the admin on a sync client."""

    def __init__(self, url: str, namespace: str, **limits: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.aclient = AsyncRedis.from_url(url)
        self.keys = Keys(namespace, PARTITIONS, seen_buckets=64)
        self.frontier = Frontier(self.aclient, self.keys, Limits(**limits))
        self.client = redis.Redis.from_url(url)
        # as the command does: the layout stored by workers, else the settings
        keys, found = frontier_keys(self.client, namespace, PARTITIONS, seen_buckets=64)
        assert keys == self.keys
        self.admin = FrontierAdmin(self.client, keys, layout_found=found)

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def admit(self, *urls: str, priority: int = 0) -> None:
        self.run(self.frontier.admit([_admission(u, priority) for u in urls]))

    def claim_all(self, worker: str = "w") -> list[Lease]:
        leases: list[Lease] = []
        while batch := self.run(self.frontier.claim(50, worker)).leases:
            leases += batch
        return leases

    def release(self, worker: str, *releases: Release) -> None:
        assert self.run(self.frontier.release(releases, worker))[:2] == (len(releases), 0)

    def structure_counts(self) -> dict[str, int]:
        """Counts taken from the queues themselves, to check the counters against."""
        queued = dead = delayed = 0
        for part in range(PARTITIONS):
            prefix = self.keys.prefix(part)
            queued += sum(self.client.zcard(k) for k in self.client.scan_iter(
                match=f"{prefix}:q:*".replace("{", "\\{").replace("}", "\\}")))
            dead += self.client.hlen(self.keys.dead(part))
            delayed += self.client.zcard(f"{prefix}:delayed")
        return {"queued": queued, "dead": dead, "delayed": delayed}

    def assert_consistent(self) -> dict[str, int]:
        counts = self.run(self.frontier.counts())
        assert {k: counts[k] for k in ("queued", "dead", "delayed")} == self.structure_counts()
        return counts

    def close(self) -> None:
        self.run(self.aclient.aclose())
        self.loop.close()
        self.client.close()


def _url(lease: Lease) -> str:
    return str(json.loads(lease.record)["u"])


@pytest.fixture
def world(redis_url: str, redis_prefix: str) -> Iterator[World]:
    """a.test: 5 URLs, b.test: 3, c.test: 2; then 3 dead, 1 done, the rest queued."""
    w = World(redis_url, redis_prefix + "adm", concurrency=10, delay_ms=0)
    w.admit(*[f"http://a.test/{i}" for i in range(5)], *[f"http://b.test/{i}" for i in range(3)],
            *[f"http://c.test/{i}" for i in range(2)])
    by_url = {_url(lease): lease for lease in w.claim_all("w1")}
    assert len(by_url) == 10

    def rel(url: str, op: str, arg: str = "") -> Release:
        lease = by_url.pop(url)
        return Release(lease.host, lease.fingerprint, op, arg)

    w.release("w1",
              rel("http://a.test/0", "dead", '{"reason":"download-error","error":"TimeoutError",'
                                             f'"t":{round(time.time())}}}'),
              rel("http://a.test/1", "dead",
                  '{"reason":"download-error","error":"DNSLookupError"}'),
              rel("http://b.test/0", "dead", '{"reason":"http-404"}'),
              rel("http://c.test/0", "done"),
              *[Release(x.host, x.fingerprint, "return") for x in by_url.values()])
    yield w
    w.close()


# ---------------------------------------------------------------------- helpers


def test_safe_url_never_shows_a_password() -> None:
    assert safe_url("redis://:hunter2@h:6379/0") == "redis://***@h:6379/0"
    assert safe_url("redis://bob:hunter2@h/1") == "redis://bob:***@h/1"
    assert safe_url("redis://hunter2@h/1") == "redis://***@h/1"
    assert "hunter2" not in safe_url("unix:///tmp/r.sock?db=0&password=hunter2")
    assert safe_url("redis://127.0.0.1:1/0") == "redis://127.0.0.1:1/0"
    error = RedisUnreachable("redis://:hunter2@h/0", OSError("auth hunter2\nfailed"), "hunter2")
    assert str(error) == "cannot reach Redis at redis://***@h/0: auth *** failed"


def test_parse_host_accepts_names_and_urls() -> None:
    assert parse_host("Example.COM") == "http://example.com:80"
    assert parse_host("http://example.com:80") == "http://example.com:80"
    assert parse_host("https://example.com") == "https://example.com:443"
    with pytest.raises(AdminError):
        parse_host("ftp://example.com/")


def test_dead_letter_whose_fingerprint_holds_newlines() -> None:
    fp = b"\n" * 4 + b"x" * 12
    letter = parse_dead(fp, b'http://a.test:80\n{"reason":"r","error":"E"}\n' + fp + b'{"u":"U"}')
    assert (letter.host, letter.reason, letter.error, letter.url) == ("http://a.test:80", "r",
                                                                     "E", "U")
    plain = parse_dead(fp, b"h\nnot json\n" + fp + b"{}")
    assert (plain.reason, plain.url) == ("not json", "")


# ---------------------------------------------------------------------- status


def test_status_counts_hosts_and_workers(world: World) -> None:
    now = time.time()
    workers = world.keys.workers()
    world.client.hset(workers, mapping={
        "box:1": json.dumps({"seen": now - 2, "held": 4, "pid": 1, "host": "box"}),
        "box:2": json.dumps({"seen": now - 600, "held": 1, "pid": 2, "host": "box"}),
        "broken": "{",
    })
    # b.test paced: its next-allowed time is a minute ahead
    part = world.admin.partition(B)
    world.client.zadd(world.keys.ready(part), {B: int(now * 1000) + 60_000})
    st = world.admin.status()
    c = st.counts
    assert (c["queued"], c["leased"], c["delayed"], c["done"], c["dead"], c["hosts"]) == (
        6, 0, 0, 1, 3, 3)
    assert st.hosts == {"total": 3, "ready_now": 2, "paced": 1, "other": 0,
                        "busy": 0, "draining": 0, "finished": 0}
    assert [(w.id, w.state, w.held) for w in st.workers] == [
        ("box:1", "alive", 4), ("box:2", "gone", 1), ("broken", "?", None)]
    assert st.partitions == PARTITIONS and not st.layout_found
    # just admitted: the oldest queue head has waited under the 10 s mark step
    assert st.oldest_queued_s is not None and 0 <= st.oldest_queued_s <= 10


def test_status_says_what_hosts_that_cannot_be_claimed_are_doing(
        redis_url: str, redis_prefix: str) -> None:
    """One URL in flight per site: a host with more queued is busy, one with only
    a lease or a retry is draining, one with nothing left is finished."""
    w = World(redis_url, redis_prefix + "states", concurrency=1, delay_ms=0)
    try:
        w.admit("http://a.test/0", "http://a.test/1", "http://b.test/0", "http://c.test/0",
                "http://d.test/0")
        leases = {_url(lease).split("/")[2]: lease for lease in w.claim_all("w1")}
        assert sorted(leases) == ["a.test", "b.test", "c.test", "d.test"]
        w.release("w1", Release(leases["c.test"].host, leases["c.test"].fingerprint, "done"),
                  Release(leases["d.test"].host, leases["d.test"].fingerprint, "retry",
                          "60000"))
        st = w.admin.status()
        assert st.hosts == {"total": 4, "ready_now": 0, "paced": 0, "other": 4,
                            "busy": 1, "draining": 2, "finished": 1}
        # Without the queue scan (the metrics' cheap refresh) only the remainder is known.
        assert w.admin.status(oldest=False).hosts == {
            "total": 4, "ready_now": 0, "paced": 0, "other": 4}
        w.release("w1", *(Release(leases[h].host, leases[h].fingerprint, "done")
                          for h in ("a.test", "b.test")))
        st = w.admin.status()
        assert (st.hosts["ready_now"], st.hosts["busy"], st.hosts["draining"],
                st.hosts["finished"]) == (1, 0, 1, 2)
    finally:
        w.close()


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
                            "finished"]
    assert values.split() == ["3", "0", "0", "0", "0", "3"]
    assert "busy/other" not in proc.stdout


def test_status_reads_the_oldest_queue_head_age_from_time_marks(world: World) -> None:
    sec = int(world.client.time()[0])
    for part in range(PARTITIONS):  # as if every URL so far was admitted an hour ago
        marks = f"{world.keys.prefix(part)}:e"
        if world.client.exists(marks):
            world.client.delete(marks)
            world.client.zadd(marks, {str(sec - 3600): 1})
    assert 3600 <= world.admin.status().oldest_queued_s <= 3610
    world.admit("http://new.test/1")  # a fresh URL does not hide the old ones
    assert world.admin.status().oldest_queued_s >= 3600
    for lease in world.claim_all("w9"):  # nothing queued: no age
        world.release("w9", Release(lease.host, lease.fingerprint, "done"))
    assert world.admin.status().oldest_queued_s is None


def test_stored_layout_wins_over_settings(world: World) -> None:
    world.client.set(f"{world.keys.namespace}:layout",
                     json.dumps({"partitions": PARTITIONS, "seen_buckets": 64}))
    keys, found = frontier_keys(world.client, world.keys.namespace, partitions=16)
    assert found and keys == world.keys


# ---------------------------------------------------------------------- dead, requeue


def test_dead_lists_and_filters(world: World) -> None:
    letters = world.admin.dead()
    assert sorted(d.url for d in letters) == [
        "http://a.test/0", "http://a.test/1", "http://b.test/0"]
    (b,) = world.admin.dead(reason="http-404")
    assert (b.url, b.host, b.error) == ("http://b.test/0", B, "")
    assert {(d.url, d.error) for d in world.admin.dead(host=A)} == {
        ("http://a.test/0", "TimeoutError"), ("http://a.test/1", "DNSLookupError")}
    assert len(world.admin.dead(limit=1)) == 1
    assert world.admin.dead(reason="download-error", host=B) == []


def test_requeue_puts_dead_letters_back_and_they_are_claimed(world: World) -> None:
    assert world.admin.requeue(reason="download-error") == 2
    counts = world.assert_consistent()
    assert (counts["dead"], counts["queued"]) == (1, 8)
    assert [d.url for d in world.admin.dead()] == ["http://b.test/0"]
    assert world.admin.requeue(reason="download-error") == 0  # nothing left to move
    claimed = {_url(lease) for lease in world.claim_all("w2")}
    assert {"http://a.test/0", "http://a.test/1"} <= claimed and len(claimed) == 8
    assert world.admin.requeue(host=B) == 1
    assert world.assert_consistent()["dead"] == 0


@pytest.mark.parametrize("front", [False, True])
def test_requeue_order_back_or_front(redis_url: str, redis_prefix: str, front: bool) -> None:
    w = World(redis_url, redis_prefix + "ord", concurrency=1, delay_ms=0)
    try:
        w.admit(*[f"http://x.test/{i}" for i in range(3)])
        (first,) = w.run(w.frontier.claim(1, "w")).leases
        w.release("w", Release(first.host, first.fingerprint, "dead", '{"reason":"r"}'))
        assert w.admin.requeue(front=front) == 1
        order = []
        for _ in range(3):
            (lease,) = w.run(w.frontier.claim(1, "w")).leases
            order.append(_url(lease))
            w.release("w", Release(lease.host, lease.fingerprint, "done"))
        expected = ["/0", "/1", "/2"] if front else ["/1", "/2", "/0"]
        assert order == [f"http://x.test{p}" for p in expected]
    finally:
        w.close()


# ---------------------------------------------------------------------- drop-host


def test_drop_host_makes_its_urls_dead_and_unclaimable(world: World) -> None:
    # a.test/2 is delayed (a retry), a.test/3 and /4 queued, when the host is dropped
    leases = {_url(x): x for x in world.claim_all("w3")}
    retry = leases.pop("http://a.test/2")
    world.release("w3", Release(retry.host, retry.fingerprint, "retry", "60000"),
                  *[Release(x.host, x.fingerprint, "return") for x in leases.values()])
    result = world.admin.drop_host(A)
    assert (result.queued, result.delayed, result.in_flight) == (2, 1, 0)
    counts = world.assert_consistent()
    assert (counts["queued"], counts["delayed"], counts["dead"]) == (3, 0, 6)
    dropped = world.admin.dead(reason="dropped")
    assert sorted(d.url for d in dropped) == [f"http://a.test/{i}" for i in (2, 3, 4)]
    assert not any(x.host == A for x in world.claim_all("w4"))
    part = world.admin.partition(A)
    assert world.client.hget(world.keys.host(part, A), "n") == b"0"
    assert world.client.zscore(world.keys.ready(part), A) is None
    with pytest.raises(AdminError, match="not in the frontier"):
        world.admin.drop_host("http://nowhere.test:80")
    # the drop lasts: new links to the host are refused, and not marked seen
    late = [_admission("http://a.test/late"), _admission("http://b.test/late")]
    result = world.run(world.frontier.admit(late))
    assert (result.added, result.blocked) == (1, 1)
    assert world.assert_consistent()["blocked"] == 1
    # a drop is undone by requeueing its dead letters, and the host unblocked
    assert world.admin.requeue(reason="dropped", host=A) == 3
    assert world.assert_consistent()["queued"] == 4
    assert world.run(world.frontier.admit(late[:1])).added == 1


# ---------------------------------------------------------------------- the command


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
    assert "2 matching (host http://a.test:80), of 3 dead" in out
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


def test_command_usage_errors(monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _scrapy(monkeypatch, capsys, "explode")
    assert code == 2 and "give one of: status, dead, requeue, drop-host" in err
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


def test_connect_names_the_url_without_password() -> None:
    with pytest.raises(RedisUnreachable, match=r"^cannot reach Redis at redis://\*\*\*@"), \
            connect("redis://:hunter2@127.0.0.1:1/0", None):
        pass
