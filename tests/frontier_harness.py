"""A frontier on a real Redis for store tests, and a server clock the test holds.

``Harness`` runs the frontier's coroutines on an event loop of its own, so a
test reads like sequential code; conftest.py's ``make_harness`` builds one
under the test's key prefix. ``admission(url)`` is what the scheduler would
admit for a URL.

The scripts take their time from Redis (``redis.call('TIME')`` in
crawler/frontier/lua/common.lua), so a test that waited for a delay, a lease
or a hold to pass used to sleep and race the server clock: on a loaded
machine a few hundred milliseconds between two calls made "still held" false,
or a sleep too short. A harness made with ``clock=True`` loads every script
with that call replaced by a read of a key the test sets: the clock stands
still between calls, and ``h.clock.advance(ms)`` moves it. The scripts are
otherwise the production ones, unchanged; if they stop reading the time that
way, the harness fails at once rather than testing against the real clock.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from scrapy.cmdline import execute
from scrapy.settings import Settings

import crawler.settings
from crawler.frontier.keys import Keys
from crawler.frontier.store import Frontier
from crawler.frontier.values import Admission, Limits
from crawler.urls import canonical_url, host_key, url_fingerprint
from tests.redis_server import started_redis

ROOT = Path(__file__).resolve().parent.parent

# redis.call('TIME') as the scripts spell it (Redis commands ignore case).
_TIME_CALL = re.compile(r"""redis\.call\(\s*(['"])TIME\1\s*\)""", re.IGNORECASE)
_TIME_WORD = re.compile(r"""(['"])TIME\1""", re.IGNORECASE)
_CLOCK_LUA = """\
-- tests/frontier_harness.py: the test's clock in place of redis.call('TIME').
local function test_clock_time()
  local ms = tonumber(redis.call('GET', %s))
  if not ms then error('the test clock is not set') end
  return {tostring(math.floor(ms / 1000)), tostring((ms %% 1000) * 1000)}
end
"""


def admission(url: str, priority: int = 0) -> Admission:
    """The admission of ``url`` (canonical, with its host key and fingerprint)."""
    canon = canonical_url(url)
    assert canon
    host = host_key(canon)
    assert host
    return Admission(canon, host, url_fingerprint(canon), f'{{"u":"{canon}"}}', priority)


def clocked_source(source: str, clock_key: str) -> str:
    """``source`` with every ``redis.call('TIME')`` reading ``clock_key`` instead.

    Raises when nothing was replaced in a script that mentions TIME, or when
    something still reads the server's clock afterwards.
    """
    if not re.fullmatch(r"[\w:.{}/-]+", clock_key):
        raise ValueError(f"unexpected characters in the clock key {clock_key!r}")
    replaced, n = _TIME_CALL.subn("test_clock_time()", source)
    if _TIME_WORD.search(replaced):
        raise AssertionError("a script reads the server's TIME in a way the test clock "
                             "does not replace: update tests/frontier_harness.py")
    if n == 0:
        return source
    return _CLOCK_LUA % f"'{clock_key}'" + replaced


class _ClockedRedis(Redis):
    """An async client whose scripts read the test clock (see :func:`clocked_source`)."""

    clock_key = ""

    def register_script(self, script: Any) -> Any:
        if isinstance(script, bytes):
            script = script.decode("utf-8")
        return super().register_script(clocked_source(script, self.clock_key))


class ServerClock:
    """The time the harness's scripts see, in ms; it moves only when told to."""

    def __init__(self, harness: Harness, key: str) -> None:
        self._harness = harness
        self.key = key
        sec, usec = harness.run(harness.client.time())
        self.start_ms = sec * 1000 + usec // 1000  # the server's real time, to start
        harness.run(harness.client.set(key, self.start_ms))

    def now_ms(self) -> int:
        return int(self._harness.run(self._harness.client.get(self.key)))

    def advance(self, ms: int) -> int:
        """Move the clock on by ``ms``; the new time."""
        assert ms >= 0, "the clock never goes back"
        return int(self._harness.run(self._harness.client.incrby(self.key, ms)))


class Harness:
    """Runs frontier coroutines on one event loop with one async client.

    ``clock=True``: the scripts see :attr:`clock`, not the server's time.
    """

    def __init__(self, url: str, namespace: str, *, clock: bool = False,
                 **limits: int | float) -> None:
        self.loop = asyncio.new_event_loop()
        if clock:
            client = _ClockedRedis.from_url(url)
            client.clock_key = f"{namespace}:clock"
            self.client: Redis = client
        else:
            self.client = Redis.from_url(url)
        self.keys = Keys(namespace, partitions=4, seen_buckets=64)
        self._clock = ServerClock(self, f"{namespace}:clock") if clock else None
        # Every partition is asked at every claim unless the test says
        # otherwise (partitiondue.py): these tests change the frontier from
        # other clients (a second worker, an operator's command) and claim at
        # once, and a worker's reckoning of the server's time follows its own
        # clock, not the test's.
        limits.setdefault("claim_sweep_ms", 0)
        self.frontier = Frontier(self.client, self.keys, Limits(**limits))  # type: ignore[arg-type]

    @property
    def clock(self) -> ServerClock:
        if self._clock is None:
            raise RuntimeError("this harness runs on the server's clock (make it with clock=True)")
        return self._clock

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.run(self.client.aclose())
        self.loop.close()


@contextmanager
def own_server_harness(namespace: str, **options: Any) -> Iterator[Harness]:
    """A harness on a redis-server of its own: its command counts are the test's alone."""
    with started_redis() as server:
        h = Harness(server.url, namespace, **options)
        try:
            yield h
        finally:
            h.close()


def frontier_command(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                     *argv: str, **settings: Any) -> tuple[int, str, str]:
    """Run ``scrapy frontier ARGV...`` in this process, with the project's
    settings and ``settings`` from the command line: (exit code, stdout, stderr)."""
    s = Settings()
    s.setmodule(crawler.settings, priority="project")
    s.set("COMMANDS_MODULE", "crawler.commands", priority="project")
    s.update(settings, priority="cmdline")
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as exit_info:
        execute(["scrapy", "frontier", *argv], s)
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err
