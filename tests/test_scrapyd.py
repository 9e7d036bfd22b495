"""Deployment with scrapyd: the egg, scrapy.cfg targets, and two jobs sharing one frontier.

The crawl test runs a real scrapyd on a free loopback port, deploys the
project with ``scrapyd-deploy`` (which builds the egg with ``setup.py
bdist_egg``) and schedules two jobs through ``schedule.json``, each with one
partition of the seeds; every argument and setting reaches the jobs as text,
exactly as in production. The checks are on what the simulated web received.

Nothing leaves 127.0.0.0/8: scrapyd and its jobs get the simulated web's proxy
in ``http_proxy`` (and no ``no_proxy``), and the jobs resolve every name with
the loopback-only resolver of the other crawl tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crawler.frontier.keys import partition_of
from crawler.urls import host_key
from tests.crawl_runner import REPO, TEST_SETTINGS, CrawlResult, proxy_env
from tests.redis_server import free_port
from tests.simweb import SimWebProcess

PROJECT = "crawler"
DELAY = 0.5  # DOWNLOAD_DELAY, without jitter: every gap to one host must be at least this
LAG = 0.1  # the server's arrival times lag by up to this much on busy cores
# No depth limit: with one, which pages a concurrent crawl reaches depends on
# the order it finds them in (a page first found deep is not found again
# shallower), so the ground truth would not be exact.
DEPTH = 0
HOSTS = 30  # 30 seeds, ~520 pages, <= 43 a host: ~25 s of crawling at 0.5 s a page
JOB_TIMEOUT = 75.0


# ------------------------------------------------------------ helpers


def _project_copy(dest: Path) -> Path:
    """What a deploy reads, copied so that building the egg writes nothing in the repo."""
    dest.mkdir(parents=True)
    for name in ("setup.py", "pyproject.toml", "README.md", "scrapy.cfg"):
        shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "crawler", dest / "crawler",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without what would point Scrapy at the repo's project, nor proxies."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SCRAPY_", "SCRAPYD_")) and k != "PYTHONPATH"
           and not k.lower().endswith("_proxy")}
    return {**env, **extra}


#: Straight to the loopback scrapyd, whatever proxy this environment names.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _deploy(project_dir: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scrapyd_client.deploy", *args],
                          cwd=project_dir, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.fixture(scope="module")
def project_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _project_copy(tmp_path_factory.mktemp("deploy") / "project")


# ------------------------------------------------------------ egg and scrapy.cfg


def test_the_egg_holds_the_project_and_works_zipped(project_dir: Path, tmp_path: Path) -> None:
    egg = tmp_path / "crawler.egg"
    built = _deploy(project_dir, "--build-egg", str(egg), env=_clean_env())
    assert built.returncode == 0, built.stdout + built.stderr
    with zipfile.ZipFile(egg) as zipped:
        names = zipped.namelist()
        entry_points = zipped.read("EGG-INFO/entry_points.txt").decode()
    assert {n.split("/", 1)[0] for n in names} == {"EGG-INFO", "crawler"}  # no tests, bench
    lua = sorted(p.name for p in (REPO / "crawler/frontier/lua").glob("*.lua"))
    assert lua and sorted(Path(n).name for n in names if n.endswith(".lua")) == lua
    assert "[scrapy]\nsettings = crawler.settings" in entry_points
    # The commands' entry points (pyproject.toml) are in the egg too.
    assert ("[scrapy.commands]\nfrontier = crawler.commands.frontier:Command\n"
            "partition = crawler.commands.partition:Command\n"
            "warc = crawler.commands.warc:Command") in entry_points
    # Activated as scrapyd's runner does it, in a process that ignores
    # PYTHONPATH and starts outside the repo: the project and its Lua scripts
    # come from the zipped egg, ahead of the editable install of the repo.
    probe = textwrap.dedent(f"""
        import os, pkgutil, zipimport
        from scrapyd.runner import activate_egg
        activate_egg({str(egg)!r})
        import crawler
        from crawler.frontier.store import script_source
        assert os.environ["SCRAPY_SETTINGS_MODULE"] == "crawler.settings"
        assert isinstance(crawler.__loader__, zipimport.zipimporter), crawler.__loader__
        assert crawler.__file__.startswith({str(egg)!r}), crawler.__file__
        for name in {[n.removesuffix(".lua") for n in lua]!r}:
            assert pkgutil.get_data("crawler.frontier", f"lua/{{name}}.lua")
        assert "redis.call" in script_source("claim")
        import crawler.spiders.broad, crawler.settings
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-I", "-W", "ignore", "-c", probe], cwd=tmp_path,
                            env=_clean_env(), capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.stdout.strip() == "ok", result.stderr


def test_deploy_targets_take_their_address_and_credentials_from_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from scrapyd_client.utils import get_config

    # The example target of scrapy.cfg, uncommented as its comment says.
    text = (REPO / "scrapy.cfg").read_text()
    example = text[text.index("# [deploy:fleet]"):]
    assert "password" in example and "${SCRAPYD_PASSWORD}" in example  # never a literal
    cfg = tmp_path / "scrapy.cfg"
    cfg.write_text(text + "\n" + "\n".join(line.removeprefix("# ")
                                            for line in example.splitlines()) + "\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.scrapy.cfg of whoever runs this
    monkeypatch.setenv("SCRAPYD_URL", "http://127.0.0.1:6801/")
    monkeypatch.setenv("SCRAPYD_USERNAME", "ops")
    monkeypatch.setenv("SCRAPYD_PASSWORD", "p%ss$word")
    config = get_config()
    assert dict(config.items("deploy:fleet")) == {
        "url": "http://127.0.0.1:6801/", "project": "crawler",
        "username": "ops", "password": "p%ss$word"}
    assert config.get("deploy:local", "url") == "http://127.0.0.1:6800/"
    assert config.get("settings", "default") == "crawler.settings"


# ------------------------------------------------------------ a real scrapyd


class Scrapyd:
    """A scrapyd process on a loopback port, with its directories in ``root``."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        root.mkdir(parents=True, exist_ok=True)
        dirs = {name: root / name for name in ("eggs", "logs", "items", "dbs")}
        (root / "scrapyd.conf").write_text(textwrap.dedent(f"""\
            [scrapyd]
            bind_address = 127.0.0.1
            http_port = {self.port}
            username =
            password =
            eggs_dir = {dirs["eggs"]}
            logs_dir = {dirs["logs"]}
            items_dir = {dirs["items"]}
            dbs_dir = {dirs["dbs"]}
            jobs_to_keep = 5
            max_proc = 2
            poll_interval = 0.2
            """))
        self.log = (root / "scrapyd.out").open("w")
        # Its cwd holds scrapyd.conf (read from ./) and nothing of the project.
        self.proc = subprocess.Popen([sys.executable, "-m", "scrapyd"], cwd=root, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.job_pids: set[int] = set()

    def wait_ready(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, self.output()
            with contextlib.suppress(OSError):
                if self.get("daemonstatus.json")["status"] == "ok":
                    return
            assert time.monotonic() < deadline, "scrapyd did not start\n" + self.output()
            time.sleep(0.1)

    def get(self, endpoint: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with _DIRECT.open(self.url + endpoint + query, timeout=10) as reply:
            return json.load(reply)

    def post(self, endpoint: str, fields: list[tuple[str, str]]) -> Any:
        data = urllib.parse.urlencode(fields).encode()
        with _DIRECT.open(self.url + endpoint, data=data, timeout=60) as reply:
            answer = json.load(reply)
        assert answer.get("status") == "ok", answer
        return answer

    def wait_finished(self, jobs: set[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            listed = self.get("listjobs.json", project=PROJECT)
            self.job_pids |= {j["pid"] for j in listed["running"] if j.get("pid")}
            if jobs <= {j["id"] for j in listed["finished"]}:
                return
            assert time.monotonic() < deadline, f"jobs not finished: {listed}"
            time.sleep(0.3)

    def job_log(self, job: str) -> str:
        return (self.root / "logs" / PROJECT / "broad" / f"{job}.log").read_text()

    def output(self) -> str:
        self.log.flush()
        return (self.root / "scrapyd.out").read_text()[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        for pid in self.job_pids:  # jobs of a failed test may outlive their scrapyd
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimWebProcess]:
    with SimWebProcess(seed=31, n_hosts=HOSTS, mix="clean") as process:
        yield process


def _job_env(proxy_url: str, root: Path) -> dict[str, str]:
    """scrapyd's environment, which its jobs inherit: the proxy, and ``tests`` importable.

    Only the ``tests`` package is put on PYTHONPATH (for the loopback-only
    resolver), not the repo: ``crawler`` must come from the deployed egg.
    """
    shim = root / "pythonpath"
    shim.mkdir(parents=True)
    (shim / "tests").symlink_to(REPO / "tests", target_is_directory=True)
    env = {k: v for k, v in proxy_env(proxy_url).items() if not k.startswith("SCRAPY")}
    env["PYTHONPATH"] = str(shim)
    assert not {"no_proxy", "https_proxy"} & {k.lower() for k in env}
    return env


def _split_seeds(seeds: list[str], directory: Path) -> list[Path]:
    parts = [directory / f"part-{i}.txt" for i in range(2)]
    directory.mkdir(parents=True)
    for i, path in enumerate(parts):
        lines = [u for u in seeds if partition_of(host_key(u) or "", 2) == i]
        assert lines, "a partition without seeds tests nothing"
        path.write_text("".join(f"{u}\n" for u in lines))
    return parts


@pytest.mark.crawl
def test_two_scrapyd_jobs_crawl_their_partitions_into_one_frontier(
    sim: SimWebProcess, redis_url: str, redis_prefix: str, project_dir: Path, tmp_path: Path
) -> None:
    sim.reset()
    web = sim.web
    scrapyd = Scrapyd(tmp_path / "scrapyd", _job_env(sim.proxy_url, tmp_path))
    try:
        scrapyd.wait_ready()
        # Deploy to a target whose URL comes from the environment, as an
        # operator's [deploy:fleet] would.
        with (project_dir / "scrapy.cfg").open("a") as cfg:
            cfg.write("\n[deploy:test]\nurl = ${SCRAPYD_TEST_URL}\nproject = crawler\n")
        deployed = _deploy(project_dir, "test", "--version", "r1",
                           env=_clean_env(SCRAPYD_TEST_URL=scrapyd.url))
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        assert json.loads(deployed.stdout)["spiders"] >= 1
        assert scrapyd.get("listspiders.json", project=PROJECT)["spiders"] == ["broad"]

        settings = {
            **TEST_SETTINGS,
            "REDIS_URL": redis_url,
            "FRONTIER_NAMESPACE": redis_prefix + "scrapyd",
            "REDIS_START_URLS_KEY": redis_prefix + "start_urls",
            "FRONTIER_PARTITIONS": 4, "FRONTIER_SEEN_BUCKETS": 256,
            "DOWNLOAD_DELAY": DELAY, "DOWNLOAD_DELAY_JITTER": 0,
            "DEPTH_LIMIT": DEPTH, "ROBOTSTXT_OBEY": False,
            "WARC_DIR": str(tmp_path / "warc"), "LOG_LEVEL": "INFO",
            # scrapyd's items_dir feed takes every field; the body is bytes.
            "FEED_EXPORT_FIELDS": "url,final_url,status,depth,referrer",
        }
        setting_fields = [("setting", f"{k}={v}") for k, v in settings.items()]
        parts = _split_seeds(web.seed_urls(), tmp_path / "seeds")
        started = time.monotonic()
        jobs = [
            scrapyd.post("schedule.json", [
                ("project", PROJECT), ("spider", "broad"), *setting_fields,
                ("seeds", str(path)), ("part", str(i)), ("sitemaps", "no"),
                ("max_pages_per_host", "200"),
            ])["jobid"]
            for i, path in enumerate(parts)
        ]
        scrapyd.wait_finished(set(jobs), JOB_TIMEOUT)
        crawl_seconds = time.monotonic() - started

        logs = [scrapyd.job_log(job) for job in jobs]
        for i, log in enumerate(logs):
            assert "'finish_reason': 'finished'" in log, log[-3000:]
            assert " ERROR: " not in log and "Traceback" not in log, log[-3000:]
            assert f"Spider arguments: seeds={parts[i]}, part={i}, sitemaps=False, " \
                   "max_pages_per_host=200" in log
        results = [CrawlResult(0, log, [], crawl_seconds) for log in logs]
        assert sum(int(r.stat("seeds/loaded") or 0) for r in results) == len(web.seed_urls())
        done = [int(r.stat("frontier/leases/done") or 0) for r in results]
        assert min(done) > 20, done  # both jobs did real work

        ledger = sim.ledger()
        fetched = ledger.pages(web)
        expected = set(web.reachable(web.seed_urls(), obey_robots=False))
        assert len(expected) > 400
        assert {page: n for page, n in fetched.items() if n > 1} == {}, "fetched twice"
        assert expected - set(fetched) == set(), "reachable pages never fetched"
        assert set(fetched) <= expected
        for host in ledger.hosts():
            gap = ledger.min_gap(host)
            assert gap is None or gap >= DELAY - LAG, (host, gap)
            assert ledger.max_in_flight(host) <= 4, host  # CONCURRENT_REQUESTS_PER_DOMAIN

        # A job with an argument it cannot read fails at once, with one line saying why.
        bad = scrapyd.post("schedule.json", [
            ("project", PROJECT), ("spider", "broad"), *setting_fields,
            ("seeds", str(parts[0])), ("depth_limit", "two")])["jobid"]
        scrapyd.wait_finished({bad}, 30)
        log = scrapyd.job_log(bad)
        assert ("ERROR: Cannot start the broad spider: spider argument depth_limit='two' "
                "is not a whole number") in log, log[-3000:]
        assert "Spider opened" not in log
    finally:
        scrapyd.stop()


@pytest.mark.crawl
def test_a_weekly_scrapyd_job_revisits_the_same_crawl(
    redis_url: str, redis_prefix: str, project_dir: Path, tmp_path: Path
) -> None:
    """The README's weekly schedule: the same job (crawl_id=weekly, revisit=7d)
    scheduled twice. The second finds every page due (a week has passed: here
    ``scrapy frontier revisit-now`` says so) and asks each host's server only
    for what changed: a 304 from every server that gave a validator, the page
    again from the others; nothing new, nothing fetched twice."""
    with SimWebProcess(seed=37, n_hosts=8, mix="clean", validators=True) as sim:
        scrapyd = Scrapyd(tmp_path / "scrapyd", _job_env(sim.proxy_url, tmp_path))
        try:
            scrapyd.wait_ready()
            cfg = (project_dir / "scrapy.cfg").read_text()
            if "[deploy:test]" not in cfg:
                (project_dir / "scrapy.cfg").write_text(
                    cfg + "\n[deploy:test]\nurl = ${SCRAPYD_TEST_URL}\nproject = crawler\n")
            deployed = _deploy(project_dir, "test", "--version", "weekly",
                               env=_clean_env(SCRAPYD_TEST_URL=scrapyd.url))
            assert deployed.returncode == 0, deployed.stdout + deployed.stderr
            frontier = {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": redis_prefix + "weekly",
                        "FRONTIER_PARTITIONS": 4, "FRONTIER_SEEN_BUCKETS": 256}
            settings = {**TEST_SETTINGS, **frontier,
                        "REDIS_START_URLS_KEY": redis_prefix + "weekly_start_urls",
                        "DOWNLOAD_DELAY": 0, "ROBOTSTXT_OBEY": False,
                        "WARC_DIR": str(tmp_path / "warc"), "LOG_LEVEL": "INFO",
                        "FEED_EXPORT_FIELDS": "url,status,not_modified"}
            seeds = tmp_path / "seeds.txt"
            seeds.write_text("".join(f"{u}\n" for u in sim.web.seed_urls()))
            schedule = [("project", PROJECT), ("spider", "broad"),
                        *[("setting", f"{k}={v}") for k, v in settings.items()],
                        ("seeds", str(seeds)), ("crawl_id", "weekly"), ("revisit", "7d")]
            first_job = scrapyd.post("schedule.json", schedule)["jobid"]
            scrapyd.wait_finished({first_job}, JOB_TIMEOUT)
            first = sim.ledger().pages(sim.web)
            assert len(first) > 50 and set(first.values()) == {1}

            sim.reset()
            made_due = subprocess.run(
                [sys.executable, "-m", "scrapy", "frontier", "revisit-now", "--crawl-id",
                 "weekly", *[a for k, v in frontier.items() for a in ("-s", f"{k}={v}")]],
                cwd=REPO, env=_clean_env(), capture_output=True, text=True, timeout=60)
            assert made_due.returncode == 0, made_due.stderr
            assert f"{len(first)} done URL(s)" in made_due.stdout.replace(",", "")

            second_job = scrapyd.post("schedule.json", schedule)["jobid"]
            scrapyd.wait_finished({second_job}, JOB_TIMEOUT)
            log = scrapyd.job_log(second_job)
            assert "'finish_reason': 'finished'" in log and "Traceback" not in log, log[-3000:]
            assert "Revisits: a done URL is fetched again after 604800s" in log
            ledger = sim.ledger()
            assert ledger.pages(sim.web) == first  # every page once more, and only those
            statuses = {(e["host"], e["status"]) for e in ledger
                        if (e["host"], e["path"]) in {(h, p) for h, p in first}}
            for host, status in statuses:
                with_validator = sim.web.validator_kind(host) != "none"
                assert status == (304 if with_validator else 200), (host, status)
            assert {s for _, s in statuses} == {200, 304}  # both kinds of host were there
            result = CrawlResult(0, log, [], 0)
            assert int(result.stat("revisit/not_modified")) == sum(
                1 for e in ledger if e["status"] == 304)
        finally:
            scrapyd.stop()
