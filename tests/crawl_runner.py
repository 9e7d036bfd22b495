"""Run a real ``scrapy crawl broad`` against the simulated web.

Used by the end-to-end tests, the demo and the benchmarks. The crawl is a
separate process, exactly as an operator runs it; it reaches the simulated
hosts through the web's proxy (the standard ``http_proxy`` variable), and its
resolver can only answer 127.0.0.1, so nothing leaves loopback even if a
request bypassed the proxy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

#: Crawls started by :func:`start_crawl`; ``stop_leftover_crawls`` (an autouse
#: fixture in conftest) kills the ones a failed test left running, so that a
#: failure stays in its own test instead of crawling on into the next.
STARTED: list[subprocess.Popen[str]] = []

#: Settings every test crawl gets: loopback-only DNS and no stray output.
TEST_SETTINGS: dict[str, Any] = {
    # The crawl resolver (production's) asking the loopback-only one: every
    # name still resolves to 127.0.0.1 (allowed as a DNS answer only), while
    # links to a literal 127.0.0.1 or to localhost are refused as in production.
    # (A string, not a list: -s values that are lists go as JSON.)
    "TWISTED_DNS_RESOLVER": "crawler.dns.CrawlResolver",
    "ADDRESS_GUARD_RESOLVER": "tests.loopback_resolver.LoopbackOnlyResolver",
    "ADDRESS_GUARD_ALLOW_RESOLVED": "127.0.0.0/8",
}

_ITEM_FIELDS = [
    "url", "final_url", "status", "content_type", "length", "fetched_at",
    "depth", "referrer", "redirects", "not_modified", "warc_file", "warc_offset",
]


@dataclass
class CrawlResult:
    """What a crawl left behind: exit code, log, items and wall time."""

    returncode: int
    log: str
    items: list[dict[str, Any]]
    seconds: float

    def summary(self) -> str:
        """The end-of-crawl summary block (crawler/extensions/summary.py), "" if absent."""
        at = self.log.rfind("Crawl summary (")
        return "" if at < 0 else self.log[at:]

    def stat(self, name: str) -> Any:
        """A value from the final stats dump in the log (``None`` if absent)."""
        marker = f"'{name}': "
        for line in reversed(self.log.splitlines()):
            if marker in line:
                return line.split(marker, 1)[1].rstrip(",}")
        return None


_PROXY_VARS = {"no_proxy", "http_proxy", "https_proxy", "all_proxy"}
#: Variables of the test runner's environment a crawl must not inherit: a
#: developer's own frontier URL would take the place of the embedded one.
_PRIVATE_VARS = {"broadcrawl_redis_url"}


def proxy_env(proxy_url: str | None) -> dict[str, str]:
    """The environment of a crawl that must reach the web only through its proxy
    (``None``: through no proxy at all, as on the real-socket web)."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in _PROXY_VARS | _PRIVATE_VARS}
    if proxy_url is not None:
        env["http_proxy"] = env["HTTP_PROXY"] = proxy_url
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def realweb_settings(nameserver: str) -> dict[str, Any]:
    """Settings of a crawl of the real-socket web (tests/realweb): its names resolve
    only through its own DNS server, to loopback addresses the guard allows as
    answers (never as literals in URLs)."""
    return {
        # Strings, not lists: getlist() splits "-s" strings at commas.
        "DNS_NAMESERVERS": nameserver,
        "ADDRESS_GUARD_ALLOW_RESOLVED": "127.0.0.0/8,::1/128",
    }


def crawl_command(seeds: Path | None, items: Path, settings: dict[str, Any],
                  spider_args: dict[str, str] | None = None) -> list[str]:
    """``scrapy crawl broad`` with JSON-lines items (metadata only), settings and
    spider arguments."""
    feeds = {str(items): {"format": "jsonlines", "fields": _ITEM_FIELDS, "overwrite": True}}
    command = [sys.executable, "-m", "scrapy", "crawl", "broad",
               *(["-a", f"seeds={seeds}"] if seeds is not None else []),
               *(arg for k, v in (spider_args or {}).items() for arg in ("-a", f"{k}={v}")),
               "-s", f"FEEDS={json.dumps(feeds)}"]
    for name, value in {**TEST_SETTINGS, **settings}.items():
        shown = json.dumps(value) if isinstance(value, dict | list) else str(value)
        command += ["-s", f"{name}={shown}"]
    return command


#: What every crawl of the real-socket web gets besides its DNS: a log to read,
#: a bound on how long it may run, and no metrics endpoint.
REALWEB_DEFAULTS: dict[str, Any] = {"LOG_LEVEL": "INFO", "CLOSESPIDER_TIMEOUT": 90,
                                    "PROMETHEUS_ENABLED": False}


def crawl_realweb(nameserver: str, seeds: list[str], workdir: Path,
                  settings: dict[str, Any] | None = None, timeout: float = 150) -> CrawlResult:
    """Crawl the real-socket web (names through ``nameserver`` only), which must
    end cleanly: exit code 0 and no traceback in the log."""
    result = run_crawl(None, seeds, workdir,
                       {**realweb_settings(nameserver), **REALWEB_DEFAULTS, **(settings or {})},
                       timeout=timeout)
    assert result.returncode == 0, result.log[-3000:]
    assert "Traceback" not in result.log, result.log[-3000:]
    return result


def start_crawl(
    proxy_url: str | None,
    seeds: list[str] | None,
    workdir: Path,
    settings: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    cwd: Path = REPO,
    spider_args: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """Start ``scrapy crawl broad`` in the background (its log goes to workdir/crawl.log).

    Without a ``JOBDIR`` in ``settings`` the crawl gets a fresh one in
    ``workdir``, so its embedded frontier starts empty; without a ``WARC_DIR``
    its archive goes to ``workdir/warc`` (the default, ``output/warc``, would
    be in the repository). With ``seeds=None``
    the crawl gets no seed file (it joins or resumes a frontier).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    seeds_path = None
    if seeds is not None:
        seeds_path = workdir / "seeds.txt"
        seeds_path.write_text("".join(f"{s}\n" for s in seeds))
    settings = {"JOBDIR": str(workdir / "job"), "WARC_DIR": str(workdir / "warc"),
                "REPORT_DIR": str(workdir / "reports"), **(settings or {})}
    log = (workdir / "crawl.log").open("w")
    try:
        proc = subprocess.Popen(
            crawl_command(seeds_path, workdir / "items.jsonl", settings, spider_args),
            cwd=cwd, env={**proxy_env(proxy_url), **(env or {})},
            stdout=subprocess.DEVNULL, stderr=log, text=True,
        )
    finally:
        log.close()
    STARTED.append(proc)
    return proc


def stop_leftover_crawls() -> list[int]:
    """Kill the started crawls still running; returns their process ids."""
    left = [proc for proc in STARTED if proc.poll() is None]
    for proc in left:
        proc.kill()
        proc.wait()
    STARTED.clear()
    return [proc.pid for proc in left]


def finish_crawl(proc: subprocess.Popen[str], workdir: Path, started: float,
                 timeout: float = 300) -> CrawlResult:
    """Wait for a crawl started by :func:`start_crawl` and collect what it left."""
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    items_path = workdir / "items.jsonl"
    items = [json.loads(line) for line in items_path.read_text().splitlines()] \
        if items_path.exists() else []
    log = (workdir / "crawl.log").read_text()
    # The frontier's watchdog repairs a host that waits for nothing: a safety
    # net, never the mechanism. Every crawl of the tests (and benchmarks) must
    # finish without it.
    repairs = [line for line in log.splitlines() if "Frontier watchdog:" in line]
    assert not repairs, "\n".join(repairs)
    return CrawlResult(proc.returncode, log, items, time.monotonic() - started)


def run_crawl(
    proxy_url: str | None,
    seeds: list[str],
    workdir: Path,
    settings: dict[str, Any] | None = None,
    timeout: float = 300,
    env: dict[str, str] | None = None,
    cwd: Path = REPO,
    spider_args: dict[str, str] | None = None,
) -> CrawlResult:
    """Crawl ``seeds`` through the proxy (``None``: directly); return when it finishes.

    ``cwd`` (with ``PYTHONPATH`` in ``env``) runs another checkout of the project:
    a benchmark's earlier commit."""
    started = time.monotonic()
    proc = start_crawl(proxy_url, seeds, workdir, settings, env, cwd, spider_args)
    return finish_crawl(proc, workdir, started, timeout)


def frontier_dead_letters(workdir: Path) -> list[dict[str, Any]]:
    """The dead letters of the crawl whose JOBDIR is ``workdir/job`` (its embedded
    frontier), as the operator's ``scrapy frontier dead --json`` prints them."""
    done = subprocess.run(
        [sys.executable, "-m", "scrapy", "frontier", "dead", "--json", "--limit", "0",
         "-s", f"JOBDIR={workdir / 'job'}"],
        cwd=REPO, env=proxy_env(None), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def tcp_ports_of(pid: int) -> set[int]:
    """The local ports of process ``pid``'s TCP sockets (Linux ``/proc``): which of
    the requests a test web sees (by their remote port) come from that process."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()  # sl local_address rem_address st ... uid timeout inode
            if fields[9] in inodes:
                ports.add(int(fields[1].rpartition(":")[2], 16))
    return ports
