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
    what: str  # "SIGKILL", "SIGTERM", "SIGSTOP", "SIGCONT", "join", "restart", "redis-restart"
    worker: str = ""
    leased: int = 0  # URLs the worker held leased at that moment


def simweb_tag(worker_id: str) -> dict[str, Any]:
    """How a worker names itself to the simulated web (its ledger's ``client``)."""
    return {"DEFAULT_REQUEST_HEADERS": {**DEFAULT_REQUEST_HEADERS, CLIENT_HEADER: worker_id}}


@dataclass
class Worker:
    """One worker slot and its current process."""

    slot: int
    seeds: list[str]
    root: Path
    settings: dict[str, Any]
    proxy_url: str | None  # None: the web is reached directly (the real-socket web)
    #: The settings that name the worker to the web's ledger.
    tag: Callable[[str], dict[str, Any]] = simweb_tag
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
                                 **self.tag(self.worker_id)})

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
    worker = worker_id.encode()
    held = 0
    for part in range(keys.partitions):
        for member in client.zrange(keys.leased(part), 0, -1):
            # host \n score \n worker \n entry: the worker is the third field
            fields = member.split(b"\n", 3)
            held += len(fields) > 3 and fields[2] == worker
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
        #: The worker SIGSTOPped, and when it is let go on (SIGCONT).
        self._stopped: tuple[Worker, float] | None = None

    def now(self) -> float:
        return time.monotonic() - self.started

    def run(self) -> float:
        """Start every worker, strike, wait until all have exited; return the wall time."""
        self.started = time.monotonic()
        for worker in self.workers:
            worker.start()
        next_kill, termed, redis_done = self.plan.first_kill, False, False
        stop_done, joined = self.plan.stop_at is None, self.plan.join_at is None
        while True:
            self._continue_stopped()
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
            if busy and not stop_done and self.now() >= self.plan.stop_at:  # type: ignore[operator]
                stop_done = self._stop()
            if busy and not joined and self.now() >= self.plan.join_at:  # type: ignore[operator]
                joined = self._join()
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
        """A running worker, not the one struck last (so the strikes move around),
        nor the one stopped now."""
        last = self.events[-1].worker if self.events else ""
        stopped = self._stopped[0] if self._stopped else None
        running = [w for w in self.workers
                   if w.running() and w.worker_id != last and w is not stopped]
        return self.rng.choice(running) if running else None

    def _stop(self) -> bool:
        """SIGSTOP a worker: its leases run out while it stands still, and the URLs
        it held go to the others (count them now: each may be fetched twice)."""
        worker = self._victim()
        if worker is None:
            return False
        assert worker.proc is not None
        leased = self._leased(worker.worker_id)
        os.kill(worker.proc.pid, signal.SIGSTOP)
        self._stopped = (worker, self.now() + self.plan.stop_for)
        self.events.append(Event(self.now(), time.time(), "SIGSTOP", worker.worker_id, leased))
        self.log(f"[{self.now():6.1f} s] SIGSTOP {worker.worker_id} (held {leased} leases)")
        return True

    def _continue_stopped(self) -> None:
        if self._stopped is None or self.now() < self._stopped[1]:
            return
        worker, _ = self._stopped
        self._stopped = None
        if worker.running():
            os.kill(worker.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
            self.events.append(Event(self.now(), time.time(), "SIGCONT", worker.worker_id))
            self.log(f"[{self.now():6.1f} s] SIGCONT {worker.worker_id}")

    def _join(self) -> bool:
        """One more worker joins the crawl under way (the first one's seeds: those
        queued already are duplicates the frontier drops)."""
        first = self.workers[0]
        worker = Worker(len(self.workers), first.seeds, first.root, first.settings,
                        first.proxy_url, first.tag)
        self.workers.append(worker)
        worker.start()
        self.events.append(Event(self.now(), time.time(), "join", worker.worker_id))
        self.log(f"[{self.now():6.1f} s] {worker.worker_id} joins")
        return True

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
                os.kill(worker.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
                worker.signal(signal.SIGKILL)
                worker.proc.wait()  # type: ignore[union-attr]
                worker.reap()
