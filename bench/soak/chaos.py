"""The chaos driver: three workers on one Redis, killed, stopped and restarted.

Workers are real ``scrapy crawl broad`` processes (``tests.crawl_runner``),
each with its own seed file (the seeds split by the frontier's own hash, as
``scrapy partition`` splits them for a fleet) and its own log; every
incarnation gets a fresh worker id (``w1.2`` is worker slot 1's third start),
as a restarted scrapyd job would. A restarted worker is given its seed file
again: seeds it had not yet queued when it died must not be lost, and those it
had are duplicates the frontier drops.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from scrapy.settings.default_settings import DEFAULT_REQUEST_HEADERS

from bench.soak.scenario import Scenario
from crawler.frontier.keys import Keys
from tests.crawl_runner import start_crawl
from tests.redis_server import RedisServer
from tests.simweb.server import CLIENT_HEADER


@dataclass
class Event:
    """One thing the driver did, for the report."""

    at: float  # seconds from the start
    wall: float  # epoch seconds, the clock of the web server's ledger
    what: str  # "SIGKILL", "SIGTERM", "restart", "redis-restart"
    worker: str = ""
    leased: int = 0  # URLs the worker held leased at that moment


@dataclass
class Worker:
    """One worker slot and its current process."""

    slot: int
    seeds: list[str]
    root: Path
    settings: dict[str, Any]
    proxy_url: str
    generation: int = 0
    proc: subprocess.Popen[str] | None = None
    stopped_by: str = ""  # the signal the driver sent this incarnation, if any
    #: (worker id, exit code, signal the driver sent or "") per ended incarnation
    exits: list[tuple[str, int, str]] = field(default_factory=list)

    @property
    def worker_id(self) -> str:
        return f"w{self.slot}.{self.generation}"

    @property
    def workdir(self) -> Path:
        return self.root / self.worker_id

    def start(self) -> None:
        self.generation += 1
        self.stopped_by = ""
        self.proc = start_crawl(self.proxy_url, self.seeds, self.workdir,
                                {**self.settings, "FRONTIER_WORKER_ID": self.worker_id,
                                 "JOBDIR": str(self.workdir / "job"),
                                 "DEFAULT_REQUEST_HEADERS": {
                                     **DEFAULT_REQUEST_HEADERS, CLIENT_HEADER: self.worker_id}})

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.stopped_by = sig.name
        os.kill(self.proc.pid, sig)

    def reap(self) -> int | None:
        """The exit code once the process has ended (recorded once), else None."""
        if self.proc is None or self.proc.poll() is None:
            return None
        code = self.proc.returncode
        self.exits.append((self.worker_id, code, self.stopped_by))
        self.proc = None
        return code


def leased_by(client: redis.Redis, keys: Keys, worker_id: str) -> int:
    """URLs ``worker_id`` holds leased right now (from every partition's lease table)."""
    needle = b"\n" + worker_id.encode() + b"\n"
    held = 0
    for part in range(keys.partitions):
        for value in client.hvals(keys.lease_details(part)):
            # host \n score \n worker \n entry: the worker is the third field
            fields = value.split(b"\n", 3)
            held += len(fields) > 2 and b"\n" + fields[2] + b"\n" == needle
    return held


def frontier_busy(client: redis.Redis, keys: Keys) -> bool:
    """Whether URLs are still queued, leased or delayed anywhere."""
    pipe = client.pipeline(transaction=False)
    for part in range(keys.partitions):
        pipe.hmget(keys.counts(part), "queued", "leased", "delayed")
    return any(int(v or 0) for reply in pipe.execute() for v in reply)


class ChaosDriver:
    """Run the workers to the end of the crawl while striking on the scenario's plan."""

    def __init__(self, scenario: Scenario, workers: list[Worker], redis_server: RedisServer,
                 keys: Keys, log: Callable[[str], None] = print) -> None:
        self.scenario = scenario
        self.plan = scenario.chaos
        self.workers = workers
        self.redis = redis_server
        self.keys = keys
        self.log = log
        self.events: list[Event] = []
        self.rng = random.Random(scenario.seed)
        self.started = 0.0
        self._restart_at: dict[int, float] = {}
        self._client = redis.Redis.from_url(redis_server.url, socket_timeout=5)

    def now(self) -> float:
        return time.monotonic() - self.started

    def run(self) -> float:
        """Start every worker, strike, wait until all have exited; return the wall time."""
        self.started = time.monotonic()
        for worker in self.workers:
            worker.start()
        next_kill, termed, redis_done = self.plan.first_kill, False, False
        while True:
            self._reap_and_restart()
            if not self._any_running() and not self._restart_at:
                return self.now()
            if self.now() > self.scenario.timeout:
                self._kill_everything()
                raise TimeoutError(f"the crawl did not end within {self.scenario.timeout:.0f} s")
            busy = self._busy()
            kills = sum(e.what == "SIGKILL" for e in self.events)
            if busy and self.now() >= next_kill and kills < self.plan.max_kills:
                self._strike(signal.SIGKILL)
                next_kill += self.plan.kill_every
            if busy and not termed and self.now() >= self.plan.term_at:
                termed = self._strike(signal.SIGTERM)
            if busy and not redis_done and self.now() >= self.plan.redis_restart_at:
                self._restart_redis()
                redis_done = True
            time.sleep(0.2)

    # ------------------------------------------------------------------ steps

    def _busy(self) -> bool:
        try:
            return frontier_busy(self._client, self.keys)
        except redis.RedisError:
            return True

    def _any_running(self) -> bool:
        return any(w.running() for w in self.workers)

    def _victim(self) -> Worker | None:
        """A running worker, not the one struck last (so the strikes move around)."""
        last = self.events[-1].worker if self.events else ""
        running = [w for w in self.workers if w.running() and w.worker_id != last]
        return self.rng.choice(running) if running else None

    def _strike(self, sig: signal.Signals) -> bool:
        worker = self._victim()
        if worker is None:
            return False
        name = "SIGKILL" if sig == signal.SIGKILL else "SIGTERM"
        # A killed worker's leases stay in Redis: count them after the kill,
        # exactly. A stopping one returns its leases: count them before.
        leased = 0 if sig == signal.SIGKILL else self._leased(worker.worker_id)
        worker.signal(sig)
        leased = leased or self._leased(worker.worker_id)
        self.events.append(Event(self.now(), time.time(), name, worker.worker_id, leased))
        self.log(f"[{self.now():6.1f} s] {name} {worker.worker_id} (held {leased} leases)")
        if sig == signal.SIGKILL:
            self._restart_at[worker.slot] = self.now() + self.plan.restart_after
        else:
            self._restart_at[worker.slot] = -1.0  # once it has exited
        return True

    def _leased(self, worker_id: str) -> int:
        try:
            return leased_by(self._client, self.keys, worker_id)
        except redis.RedisError:
            return 0

    def _reap_and_restart(self) -> None:
        for worker in self.workers:
            code = worker.reap()
            if code is not None:
                self.log(f"[{self.now():6.1f} s] {worker.exits[-1][0]} exited with {code}")
            due = self._restart_at.get(worker.slot)
            if due is None or worker.running():
                continue
            if (due < 0 and worker.proc is None) or (0 <= due <= self.now()):
                del self._restart_at[worker.slot]
                worker.start()
                self.events.append(Event(self.now(), time.time(), "restart", worker.worker_id))
                self.log(f"[{self.now():6.1f} s] started {worker.worker_id}")

    def _restart_redis(self) -> None:
        self.log(f"[{self.now():6.1f} s] Redis restart: stopping")
        self._client.close()
        self.redis.stop()
        time.sleep(self.plan.redis_down_for)
        self.redis.start()
        self.events.append(Event(self.now(), time.time(), "redis-restart"))
        self.log(f"[{self.now():6.1f} s] Redis restart: answering again")

    def _kill_everything(self) -> None:
        for worker in self.workers:
            if worker.running():
                worker.signal(signal.SIGKILL)
                worker.proc.wait()  # type: ignore[union-attr]
                worker.reap()
