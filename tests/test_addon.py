"""The add-on: one ``ADDONS`` entry gives another Scrapy project this crawler.

Settings-level tests compare what the add-on produces with the manual wiring
of :mod:`crawler.settings`, built the way Scrapy builds a crawler's settings
(process settings, the add-on's pre-crawler hook, the crawler's copy, its
add-ons). The crawl test runs ``scrapy crawl links`` in the fixture project
``tests/addon_project`` (a plain ``scrapy.Spider``; its settings hold little
more than ``ADDONS``) against the simulated web, and checks what the server
received.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tomllib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from scrapy import Spider
from scrapy.addons import AddonManager
from scrapy.crawler import Crawler
from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings, Settings
from scrapy.utils.misc import load_object
from scrapy.utils.python import global_object_name
from warcio.archiveiterator import ArchiveIterator

from crawler import settings as broad_settings
from crawler.addon import (
    PROCESS_ONLY,
    PROJECT_OWN,
    AddonConfigError,
    BroadCrawlAddon,
    addon_settings,
)
from crawler.dns.lookups import SystemLookup
from crawler.dns.resolver import CrawlResolver
from crawler.middlewares.warc import WarcCaptureMiddleware
from crawler.resolver import GuardedResolver
from crawler.spiders.broad import BroadSpider
from tests.crawl_runner import TEST_SETTINGS, proxy_env
from tests.simweb import SimWebProcess
from tests.simweb.ledger import Ledger, is_robots_path
from tests.simweb.model import RULES_BODY_MODES

ADDON = "crawler.addon.BroadCrawlAddon"
PROJECT = Path(__file__).resolve().parent / "addon_project"
ADDON_PRIORITY = SETTINGS_PRIORITIES["addon"]
_ADDON_ONLY = {"ADDONS": {ADDON: 100}}
COMPONENT_DICTS = ("DOWNLOADER_MIDDLEWARES", "SPIDER_MIDDLEWARES", "ITEM_PIPELINES", "EXTENSIONS")


# ---------------------------------------------------------------- settings level


def crawler_settings(project: dict[str, Any] | ModuleType,
                     spidercls: type[Spider] = Spider) -> Settings:
    """A crawler's settings as ``scrapy crawl`` builds them, up to its add-ons."""
    settings = Settings()
    if isinstance(project, ModuleType):
        settings.setmodule(project, "project")
    else:
        settings.setdict(project, "project")
    AddonManager.load_pre_crawler_settings(settings)  # CrawlerProcess.__init__
    crawler = Crawler(spidercls, settings)  # copies them, applies custom_settings
    crawler.addons.load_settings(crawler.settings)  # the start of _apply_settings
    return crawler.settings


def components(settings: BaseSettings, name: str) -> dict[str, int]:
    """A component priority dict as Scrapy composes it (``_BASE`` included,
    disabled ones dropped), keyed by import path whatever the key's form."""
    return {global_object_name(load_object(key)): order
            for key, order in settings.get_component_priority_dict_with_base(name).items()}


@pytest.fixture(scope="module")
def manual() -> Settings:
    return crawler_settings(broad_settings)


@pytest.fixture(scope="module")
def with_addon() -> Settings:
    return crawler_settings({"ADDONS": {ADDON: 100}})


@pytest.mark.parametrize("name", COMPONENT_DICTS)
def test_components_match_the_manual_wiring(manual: Settings, with_addon: Settings,
                                            name: str) -> None:
    assert components(with_addon, name) == components(manual, name)


def test_replaced_scrapy_components_are_off(with_addon: Settings) -> None:
    middlewares = components(with_addon, "DOWNLOADER_MIDDLEWARES")
    assert "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware" not in middlewares
    assert "scrapy.downloadermiddlewares.retry.RetryMiddleware" not in middlewares
    assert middlewares["crawler.middlewares.robots.RobotsPolicyMiddleware"] == 100
    assert middlewares["crawler.middlewares.retry.RetryPolicyMiddleware"] == 550
    extensions = components(with_addon, "EXTENSIONS")
    assert "scrapy.extensions.logstats.LogStats" not in extensions
    assert extensions["crawler.extensions.progress.ProgressLog"] == 0
    assert components(with_addon, "ITEM_PIPELINES") == {"crawler.pipelines.warc.WarcPipeline": 300}


def test_download_handlers_match_the_manual_wiring(manual: Settings,
                                                   with_addon: Settings) -> None:
    handlers = dict(with_addon.getwithbase("DOWNLOAD_HANDLERS"))
    assert handlers == dict(manual.getwithbase("DOWNLOAD_HANDLERS"))
    assert handlers["http"] == handlers["https"] == "crawler.handlers.CountedHTTP11DownloadHandler"


def test_settings_match_the_manual_wiring(manual: Settings, with_addon: Settings) -> None:
    for name in ("SCHEDULER", "REQUEST_FINGERPRINTER_CLASS", "TWISTED_DNS_RESOLVER",
                 "ADDRESS_GUARD_RESOLVER", "DOWNLOAD_CONNECT_TIMEOUT", "ROBOTSTXT_OBEY"):
        assert with_addon[name] == manual[name] == getattr(broad_settings, name), name
    plain = {name for name, value in addon_settings().items() if not isinstance(value, dict)}
    assert {"ROBOTS_CACHE_SIZE", "RETRY_TIMES", "BACKOFF_HTTP_CODES", "BREAKER_THRESHOLD",
            "FRONTIER_PARTITIONS", "WARC_MAX_SIZE", "PROMETHEUS_PORT",
            "ADDRESS_GUARD_ALLOW_RESOLVED"} <= plain
    differ = {name: (with_addon[name], manual[name]) for name in plain
              if with_addon[name] != manual[name]}
    assert differ == {}
    low = {name for name in plain if with_addon.getpriority(name) != ADDON_PRIORITY}
    assert low == set(), "every value at 'addon' priority, so the project's win"


def test_project_identity_is_not_brought_along(with_addon: Settings) -> None:
    scrapy_defaults = Settings()
    assert {n for n in dir(broad_settings) if n.isupper()} >= PROJECT_OWN
    for name in PROJECT_OWN:
        assert with_addon[name] == scrapy_defaults[name], name
    assert with_addon["USER_AGENT"].startswith("Scrapy/")


# (A component dict in custom_settings would replace the project's whole dict:
# Scrapy's rule for a setting given at a higher priority, not the add-on's.)
_SPIDER_OWN = {"WARC_ENABLED": False}


class _CustomSpider(Spider):
    name = "custom"
    custom_settings = _SPIDER_OWN


def test_project_spider_and_command_line_values_win(caplog: pytest.LogCaptureFixture) -> None:
    project = {
        "ADDONS": {ADDON: 100},
        "ROBOTS_CACHE_SIZE": 5,
        "ADDRESS_GUARD_ALLOW": ["10.20.0.0/16"],
        "DOWNLOADER_MIDDLEWARES": {
            # disabled by a class object, re-ordered and re-enabled by import paths
            WarcCaptureMiddleware: None,
            "crawler.middlewares.retry.RetryPolicyMiddleware": 540,
            "scrapy.downloadermiddlewares.retry.RetryMiddleware": 560,
        },
        "DOWNLOAD_HANDLERS": {"https": None},
        "EXTENSIONS": {"scrapy.extensions.logstats.LogStats": 0},
    }
    settings = Settings()
    settings.setdict(project, "project")
    settings.set("ROBOTS_TIMEOUT", 2.5, "cmdline")
    AddonManager.load_pre_crawler_settings(settings)
    crawler = Crawler(_CustomSpider, settings)
    crawler.addons.load_settings(crawler.settings)
    s = crawler.settings
    assert (s["ROBOTS_CACHE_SIZE"], s.getpriority("ROBOTS_CACHE_SIZE")) == (5, 20)
    assert s.getlist("ADDRESS_GUARD_ALLOW") == ["10.20.0.0/16"]
    assert s.getfloat("ROBOTS_TIMEOUT") == 2.5
    assert s.getbool("WARC_ENABLED") is False
    middlewares = components(s, "DOWNLOADER_MIDDLEWARES")
    assert "crawler.middlewares.warc.WarcCaptureMiddleware" not in middlewares
    assert middlewares["crawler.middlewares.retry.RetryPolicyMiddleware"] == 540
    assert middlewares["scrapy.downloadermiddlewares.retry.RetryMiddleware"] == 560
    assert middlewares["crawler.middlewares.robots.RobotsPolicyMiddleware"] == 100
    handlers = s.getwithbase("DOWNLOAD_HANDLERS")
    assert handlers["https"] is None
    assert handlers["http"] == "crawler.handlers.CountedHTTP11DownloadHandler"
    extensions = components(s, "EXTENSIONS")
    assert extensions["scrapy.extensions.logstats.LogStats"] == 0
    assert extensions["crawler.extensions.prometheus.PrometheusExtension"] == 0
    assert not [r for r in caplog.records if r.name == "crawler.addon"]


def test_process_settings_come_before_any_crawler(with_addon: Settings) -> None:
    """The CrawlerProcess installs the resolver from its own settings."""
    process = Settings({"ADDONS": {ADDON: 100}})
    AddonManager.load_pre_crawler_settings(process)
    for name in PROCESS_ONLY:
        assert process[name] == getattr(broad_settings, name), name
    assert process["TWISTED_DNS_RESOLVER"] == "crawler.dns.CrawlResolver"
    # The rest is there too, for spiders' update_settings (before add-ons').
    for name in ("SCHEDULER", "BROAD_DEFAULT_FEED", "ROBOTS_CACHE_SIZE"):
        assert process[name] == with_addon[name], name
    assert components(process, "DOWNLOADER_MIDDLEWARES") == components(
        with_addon, "DOWNLOADER_MIDDLEWARES")
    # What Scrapy does with them (it passes the process for the crawler).
    resolver = CrawlResolver.from_crawler(SimpleNamespace(settings=process), reactor=None)
    assert isinstance(resolver.lookup, SystemLookup)  # no DNS_NAMESERVERS: the machine's
    assert resolver.cache.size == broad_settings.DNSCACHE_SIZE
    assert resolver.policy.check_ip("10.0.0.1", resolved=True) is not None
    # The older guard still builds from the same settings (around Scrapy's resolver).
    guarded = GuardedResolver.from_crawler(SimpleNamespace(settings=process), reactor=None)
    assert type(guarded.inner).__name__ == "CachingThreadedResolver"


def test_the_broad_spider_gets_its_default_feed_in_another_project() -> None:
    settings = crawler_settings({"ADDONS": {ADDON: 100}}, BroadSpider)
    assert list(settings.getdict("FEEDS")) == [broad_settings.BROAD_DEFAULT_FEED]


class _LateSpider(Spider):
    """Enables the add-on in its own settings, after the process settings were made."""

    name = "late"
    custom_settings = _ADDON_ONLY


def test_addon_enabled_too_late_for_the_resolver_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="crawler.addon"):
        settings = crawler_settings({}, _LateSpider)
    assert settings["SCHEDULER"] == broad_settings.SCHEDULER
    assert settings["TWISTED_DNS_RESOLVER"] == Settings()["TWISTED_DNS_RESOLVER"]
    assert "DNS answers are not checked" in caplog.text


def test_a_project_scheduler_is_refused_with_what_to_do() -> None:
    with pytest.raises(AddonConfigError, match=r"needs the frontier scheduler.*Remove SCHEDULER"):
        crawler_settings({"ADDONS": {ADDON: 100},
                          "SCHEDULER": "scrapy.core.scheduler.Scheduler"})


def test_addon_class_is_what_the_entry_names() -> None:
    assert load_object(ADDON) is BroadCrawlAddon


_BUILD = """
import json, sys
from scrapy import Spider
from scrapy.crawler import CrawlerProcess

process = CrawlerProcess({"ADDONS": {"@ADDON@": 100}})
crawler = process.create_crawler(Spider)
crawler._apply_settings()  # add-ons first, then the reactor is installed
from twisted.internet import reactor
print(json.dumps({
    "reactor": type(reactor).__name__,
    "fingerprinter": type(crawler.request_fingerprinter).__name__,
    "extensions": [type(e).__name__ for e in crawler.extensions.middlewares],
}))
""".replace("@ADDON@", ADDON)


def test_a_plain_spiders_crawler_builds_and_the_reactor_is_left_alone(tmp_path: Path) -> None:
    """CrawlerProcess installs the reactor after the add-ons ran: importing the
    components must not import (and so install) Twisted's default reactor."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
           "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    out = subprocess.run([sys.executable, "-c", _BUILD], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    built = json.loads(out.stdout.splitlines()[-1])
    assert built["reactor"] == "AsyncioSelectorReactor"
    assert built["fingerprinter"] == "CanonicalRequestFingerprinter"
    assert {"ProgressLog", "PrometheusExtension"} <= set(built["extensions"])
    assert "LogStats" not in built["extensions"]


# ---------------------------------------------------------------- crawl level

AGENT = "AddonBot"  # the fixture project's USER_AGENT token
DELAY = 0.3
MAX_CRAWL_DELAY = 0.5  # Crawl-delays of this web (0.2-1 s) clamped: the test stays short
LAG = 0.1  # server arrival times lag by up to ~0.1 s on busy cores
DEPTH_LIMIT = broad_settings.DEPTH_LIMIT  # the add-on's default, not overridden


@dataclass
class AddonCrawl:
    returncode: int
    log: str
    items: list[dict[str, Any]]
    ledger: Ledger
    warc_dir: Path

    def stat(self, name: str) -> str | None:
        marker = f"'{name}': "
        for line in reversed(self.log.splitlines()):
            if marker in line:
                return line.split(marker, 1)[1].rstrip(",}")
        return None


@pytest.fixture(scope="module")
def sim() -> Iterator[SimWebProcess]:
    # 12 hosts, 153 reachable pages, 6 with robots rules (and /private/ links).
    with SimWebProcess(seed=7, n_hosts=12, mix="clean") as process:
        yield process


@pytest.fixture(scope="module")
def crawl(sim: SimWebProcess, tmp_path_factory: pytest.TempPathFactory) -> AddonCrawl:
    tmp = tmp_path_factory.mktemp("addon")
    items = tmp / "items.jsonl"
    settings = {
        **TEST_SETTINGS,  # loopback-only DNS
        # Frontier and WARC files: nothing in the fixture project.
        "JOBDIR": str(tmp / "job"), "WARC_DIR": str(tmp / "warc"),
        "DOWNLOAD_DELAY": DELAY, "DOWNLOAD_DELAY_JITTER": 0,
        "ROBOTS_MAX_CRAWL_DELAY": MAX_CRAWL_DELAY,
        "LOGSTATS_INTERVAL": 1,
        "FEEDS": json.dumps({str(items): {"format": "jsonlines"}}),
    }
    command = [sys.executable, "-m", "scrapy", "crawl", "links",
               "-a", "start=" + ",".join(sim.web.seed_urls())]
    for name, value in settings.items():
        command += ["-s", f"{name}={value}"]
    env = {k: v for k, v in proxy_env(sim.proxy_url).items()
           if k not in {"SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT"}}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    sim.reset()
    with (tmp / "crawl.log").open("w") as log:
        done = subprocess.run(command, cwd=PROJECT, env=env, stdout=subprocess.DEVNULL,
                              stderr=log, timeout=120, check=False)
    rows = [json.loads(line) for line in items.read_text().splitlines()] \
        if items.exists() else []
    return AddonCrawl(done.returncode, (tmp / "crawl.log").read_text(), rows, sim.ledger(),
                      tmp / "warc")


def _expected(sim: SimWebProcess) -> dict[tuple[str, str], int]:
    return sim.web.reachable(sim.web.seed_urls(), user_agent=AGENT)


def _crawl_delay(sim: SimWebProcess, host: str) -> float | None:
    """The host's robots Crawl-delay (after the clamp), None without one."""
    spec = sim.web.host(host)
    assert spec is not None
    return min(spec.crawl_delay, MAX_CRAWL_DELAY) if spec.robots in RULES_BODY_MODES else None


@pytest.mark.crawl
def test_the_project_crawls_with_the_addon(crawl: AddonCrawl) -> None:
    assert crawl.returncode == 0, crawl.log[-3000:]
    assert "Traceback" not in crawl.log, crawl.log[-3000:]
    assert "BroadCrawlAddon" in crawl.log  # "Enabled addons"
    assert "Frontier frontier:links on" in crawl.log  # the scheduler
    assert "WARC: writing to" in crawl.log  # the pipeline
    assert "Metrics: http://127.0.0.1:" in crawl.log  # Prometheus, on loopback
    assert "] INFO: Progress: " in crawl.log  # the progress line, not LogStats's
    assert "DNS answers are not checked" not in crawl.log  # the guarded resolver


@pytest.mark.crawl
def test_every_reachable_allowed_page_fetched_exactly_once(
        sim: SimWebProcess, crawl: AddonCrawl) -> None:
    expected = _expected(sim)
    # The add-on's DEPTH_LIMIT never binds here: the frontier keeps the depth
    # a URL was first seen at, so a binding limit would make the set depend on
    # timing.
    assert max(expected.values()) < DEPTH_LIMIT
    fetched = Counter(sim.web.page_identity(e["host"], e["path"])
                      for e in crawl.ledger if not is_robots_path(e["path"]))
    assert len(expected) > 100
    assert {i: n for i, n in fetched.items() if n > 1} == {}, "fetched more than once"
    assert sorted(set(expected) - set(fetched)) == [], "reachable pages never fetched"
    assert sorted(set(fetched) - set(expected)) == [], "fetched pages no correct crawl reaches"
    assert {e["user_agent"].split("/")[0] for e in crawl.ledger} == {AGENT}
    ok = sum(1 for e in crawl.ledger if not is_robots_path(e["path"]) and e["status"] == 200)
    assert len(crawl.items) == ok


@pytest.mark.crawl
def test_robots_rules_are_obeyed(sim: SimWebProcess, crawl: AddonCrawl) -> None:
    assert crawl.ledger.disallowed_fetches(sim.web, user_agent=AGENT) == []
    assert int(crawl.stat("robots/denied") or 0) > 0, "the web links to /private/ pages"
    for host in crawl.ledger.hosts():
        [robots] = crawl.ledger.robots_fetches(host)
        assert all(e["arrival"] >= robots["arrival"] for e in crawl.ledger.page_requests(host))


@pytest.mark.crawl
def test_per_host_politeness(sim: SimWebProcess, crawl: AddonCrawl) -> None:
    hosts = crawl.ledger.hosts()
    assert hosts == {h.name for h in sim.web.hosts}
    assert any(_crawl_delay(sim, host) for host in hosts)
    for host in hosts:
        # A Crawl-delay means one request at a time, at least that far apart;
        # else CONCURRENT_REQUESTS_PER_DOMAIN (4) and DOWNLOAD_DELAY (no jitter).
        crawl_delay = _crawl_delay(sim, host)
        assert crawl.ledger.max_in_flight(host) <= (1 if crawl_delay else 4), host
        gap = crawl.ledger.min_gap(host)  # from the robots.txt fetch on
        assert gap is not None and gap >= max(DELAY, crawl_delay or 0) - LAG, (host, gap)


@pytest.mark.crawl
def test_warc_files_hold_every_answer(crawl: AddonCrawl) -> None:
    files = sorted(crawl.warc_dir.glob("*.warc.gz"))
    assert files and all(f.name.startswith("links-") for f in files)
    assert not list(crawl.warc_dir.glob("*.open"))
    archived: Counter[tuple[str, int]] = Counter()
    for path in files:
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type in ("response", "revisit"):
                    archived[(record.rec_headers.get_header("WARC-Target-URI"),
                              int(record.http_headers.get_statuscode()))] += 1
    served = Counter((f"http://{e['host']}{e['path']}", e["status"]) for e in crawl.ledger
                     if e["done"] is not None and e["status"])
    assert archived == served
    assert any(url.endswith("/robots.txt") for url, _ in archived)


# ---------------------------------------------------------------- commands

ENTRY_COMMANDS = ("frontier", "partition", "warc")


def test_the_commands_entry_points_name_the_projects_commands() -> None:
    """The entry point names are the names COMMANDS_MODULE gives the same classes
    (a module's last name), so both ways of finding them agree."""
    root = Path(__file__).resolve().parent.parent
    declared = tomllib.loads((root / "pyproject.toml").read_text())["project"]["entry-points"]
    commands = declared["scrapy.commands"]
    assert sorted(commands) == list(ENTRY_COMMANDS)
    for name, target in commands.items():
        assert load_object(target.replace(":", ".")) is load_object(
            f"crawler.commands.{name}.Command")


def _fresh_scrapy(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in {"SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT"}}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                         env.get("PYTHONPATH", "")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run([sys.executable, "-m", "scrapy", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_a_fresh_project_with_the_addon_has_the_commands(tmp_path: Path) -> None:
    """``scrapy frontier``, ``warc`` and ``partition`` come from the installed
    package's ``scrapy.commands`` entry points: no COMMANDS_MODULE needed.
    (Failing after a pull? The install's metadata predates the entry points:
    ``pip install -e .`` again.)"""
    made = _fresh_scrapy(tmp_path, "startproject", "shop")
    assert made.returncode == 0, made.stderr[-2000:]
    project = tmp_path / "shop"
    settings = project / "shop" / "settings.py"
    with settings.open("a") as out:
        out.write(f'\nADDONS = {{"{ADDON}": 100}}\n')
    assert "COMMANDS_MODULE" not in settings.read_text()
    listed = _fresh_scrapy(project)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "active project: shop" in listed.stdout
    for name in ENTRY_COMMANDS:
        assert f"\n  {name} " in listed.stdout, (name, listed.stdout)
        shown = _fresh_scrapy(project, name, "--help")
        assert shown.returncode == 0, (name, shown.stderr[-2000:])
        assert shown.stdout.startswith(f"Usage\n=====\n  scrapy {name} "), shown.stdout
    # And they work there, not only their help.
    (tmp_path / "seeds.txt").write_text("http://a.test/\nhttp://b.test/x\n")
    split = _fresh_scrapy(project, "partition", str(tmp_path / "seeds.txt"), "-n", "2",
                          "-o", str(tmp_path / "parts"))
    assert split.returncode == 0, split.stderr[-2000:]
    assert len(list((tmp_path / "parts").glob("part-*.txt"))) == 2
    got = _fresh_scrapy(project, "warc", "get", "http://a.test/",
                        "-s", f"WARC_DIR={tmp_path / 'warc'}")
    assert (got.returncode, got.stderr.strip()) == (
        1, f"http://a.test/: not in the archive at {tmp_path / 'warc'}")
