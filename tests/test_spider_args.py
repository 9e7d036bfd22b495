"""Spider arguments arrive as strings (scrapyd passes nothing else) and are checked at once."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scrapy.crawler import AsyncCrawlerRunner, Crawler, CrawlerRunner
from scrapy.exceptions import NotConfigured, UsageError
from scrapy.settings import Settings
from scrapy.spidermiddlewares.depth import DepthMiddleware
from scrapy.utils.reactor import is_reactor_installed
from scrapy.utils.test import get_crawler, get_reactor_settings

import crawler.settings
from crawler.middlewares.admission import AdmissionMiddleware
from crawler.spiders.args import (
    BroadArgs,
    SpiderArgumentError,
    describe,
    lookalikes,
    to_bool,
    to_count,
    to_seed_source,
)
from crawler.spiders.broad import BroadSpider

PROJECT = {k: getattr(crawler.settings, k) for k in dir(crawler.settings) if k.isupper()}
ROOT = Path(__file__).resolve().parents[1]


def _crawler(**settings: Any) -> Crawler:
    """A crawler as ``Crawler.crawl`` has it when it makes the spider: not configured yet."""
    values = {**get_reactor_settings(), **PROJECT, **settings}
    runner = CrawlerRunner(values) if is_reactor_installed() else AsyncCrawlerRunner(values)
    return runner.create_crawler(BroadSpider)


@pytest.fixture
def seeds(tmp_path: Path) -> Path:
    path = tmp_path / "part-0.txt"
    path.write_text("http://a.test/\n")
    return path


# ------------------------------------------------------------ conversions


@pytest.mark.parametrize(("text", "expected"), [
    ("1", True), ("true", True), ("Yes", True), (" on ", True), (True, True),
    ("0", False), ("FALSE", False), ("no", False), ("off", False), (False, False),
])
def test_yes_no_values(text: object, expected: bool) -> None:
    assert to_bool("sitemaps", text) is expected


@pytest.mark.parametrize("text", ["", "2", "maybe", "y", "None"])
def test_other_yes_no_values_are_refused(text: str) -> None:
    with pytest.raises(SpiderArgumentError, match=rf"sitemaps={text!r} is not a yes/no value"):
        to_bool("sitemaps", text)


@pytest.mark.parametrize(("text", "expected"), [("0", 0), ("3", 3), (" 12 ", 12), (7, 7)])
def test_counts(text: object, expected: int) -> None:
    assert to_count("depth_limit", text) == expected


@pytest.mark.parametrize(
    "text", ["", "abc", "2.5", "1e3", "+3", "--3", "-", "10_000", "٣", True, 1.0, None])
def test_what_is_not_a_whole_number_is_refused(text: object) -> None:
    with pytest.raises(SpiderArgumentError, match=r"^spider argument depth_limit=.* whole number"):
        to_count("depth_limit", text)


@pytest.mark.parametrize("value", ["-1", -1])
def test_negative_counts_are_refused(value: object) -> None:
    with pytest.raises(SpiderArgumentError, match=r"depth_limit=.*-1.* must not be negative"):
        to_count("depth_limit", value)


def test_a_seed_file_must_be_a_readable_file(seeds: Path, tmp_path: Path) -> None:
    assert to_seed_source("seeds", str(seeds)) == str(seeds)
    assert to_seed_source("seeds", "-") == "-"
    with pytest.raises(SpiderArgumentError, match=r"seeds='.*missing.txt': no such file$"):
        to_seed_source("seeds", str(tmp_path / "missing.txt"))
    with pytest.raises(SpiderArgumentError, match="not a regular file"):
        to_seed_source("seeds", str(tmp_path))
    with pytest.raises(SpiderArgumentError, match="is empty"):
        to_seed_source("seeds", "")


def test_a_relative_seed_path_is_reported_with_where_it_was_looked_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpiderArgumentError) as info:
        to_seed_source("seeds", "seeds/part-1.txt")
    assert str(info.value) == (f"spider argument seeds='seeds/part-1.txt' "
                               f"({tmp_path / 'seeds/part-1.txt'}): no such file")


def test_an_unreadable_seed_file_is_refused(seeds: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (chmod 0 would not do: the tests may run as root, who reads every file.)
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != seeds)
    with pytest.raises(SpiderArgumentError, match="not readable by this process"):
        to_seed_source("seeds", str(seeds))


def test_errors_are_usage_and_value_errors_on_one_line() -> None:
    with pytest.raises(SpiderArgumentError) as info:
        BroadArgs.parse(part="first\nsecond")
    assert isinstance(info.value, UsageError) and isinstance(info.value, ValueError)
    assert "\n" not in str(info.value)  # repr() of the value escapes it
    assert str(info.value).startswith("spider argument part='first\\nsecond'")


def test_parse_converts_every_argument(seeds: Path) -> None:
    args = BroadArgs.parse(seeds=str(seeds), part="1", sitemaps="yes", depth_limit="3",
                           max_pages_per_host="50")
    assert args == BroadArgs(str(seeds), 1, True, 3, 50)
    assert args.settings() == {"DEPTH_LIMIT": 3, "ADMISSION_MAX_PAGES_PER_HOST": 50}
    assert BroadArgs.parse() == BroadArgs() and BroadArgs().settings() == {}
    assert describe(args, {"foo": "x"}).startswith(f"seeds={seeds}, part=1, sitemaps=True")
    assert describe(BroadArgs()) == "none"


def test_limits_override_project_settings_but_contradict_command_line_ones() -> None:
    settings = Settings({"DEPTH_LIMIT": 10, "ADMISSION_MAX_PAGES_PER_HOST": 10_000})
    BroadArgs(depth_limit=2, max_pages_per_host=0).apply(settings)
    assert settings.getint("DEPTH_LIMIT") == 2
    assert settings.getint("ADMISSION_MAX_PAGES_PER_HOST") == 0
    cmdline = Settings()
    cmdline.set("DEPTH_LIMIT", "5", priority="cmdline")
    BroadArgs(depth_limit=5).apply(cmdline)  # the same value twice is no contradiction
    with pytest.raises(SpiderArgumentError, match=(
            r"^spider argument depth_limit=4 contradicts DEPTH_LIMIT=5 "
            r"\(set at cmdline priority\): give one$")):
        BroadArgs(depth_limit=4).apply(cmdline)


def test_lookalikes_of_known_arguments() -> None:
    assert lookalikes(["depht_limit", "seed", "max-pages-per-host", "Part", "colour", "_job"]) == {
        "depht_limit": "depth_limit", "seed": "seeds",
        "max-pages-per-host": "max_pages_per_host", "Part": "part"}


# ------------------------------------------------------------ the spider


def test_string_arguments_reach_the_spider_and_the_components(seeds: Path) -> None:
    crawler = _crawler()
    spider = BroadSpider.from_crawler(crawler, seeds=str(seeds), part="0", sitemaps="0",
                                      depth_limit="2", max_pages_per_host="7")
    assert spider.seeds_path == str(seeds)
    assert spider.part == "0"  # text, so a metric label of partition 0 is not empty
    assert spider.follow_sitemaps is False
    # Components are built after the spider, from the settings it set.
    crawler._apply_settings()
    assert DepthMiddleware.from_crawler(crawler).maxdepth == 2
    assert AdmissionMiddleware.from_crawler(crawler).max_pages == 7


def test_without_arguments_the_settings_decide() -> None:
    crawler = _crawler(ROBOTS_SITEMAPS=True)
    spider = BroadSpider.from_crawler(crawler)
    assert spider.seeds_path is None and spider.part is None
    assert spider.follow_sitemaps is True
    assert crawler.settings.getint("DEPTH_LIMIT") == PROJECT["DEPTH_LIMIT"]


def test_an_explicit_sitemaps_no_turns_the_setting_off() -> None:
    spider = BroadSpider.from_crawler(_crawler(ROBOTS_SITEMAPS=True), sitemaps="off")
    assert spider.follow_sitemaps is False


def test_a_worker_without_seeds_joins_the_frontier_but_needs_one() -> None:
    assert BroadSpider.from_crawler(_crawler()).seeds_path is None  # the frontier scheduler
    with pytest.raises(NotConfigured, match="needs seeds"):
        BroadSpider.from_crawler(_crawler(SCHEDULER="scrapy.core.scheduler.Scheduler"))


@pytest.mark.parametrize(("name", "value", "message"), [
    ("seeds", "/nonexistent/part-9.txt", "seeds='/nonexistent/part-9.txt': no such file"),
    ("part", "one", "part='one' is not a whole number"),
    ("part", "-1", "part='-1' must not be negative"),
    ("sitemaps", "sure", "sitemaps='sure' is not a yes/no value"),
    ("depth_limit", "3.5", "depth_limit='3.5' is not a whole number"),
    ("max_pages_per_host", "lots", "max_pages_per_host='lots' is not a whole number"),
])
def test_a_bad_argument_stops_the_spider_with_one_logged_line(
        name: str, value: str, message: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR), pytest.raises(SpiderArgumentError, match=message):
        BroadSpider.from_crawler(_crawler(), **{name: value})
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "\n" not in errors[0]
    assert errors[0].startswith(f"Cannot start the broad spider: spider argument {message}")


def test_limits_given_after_the_crawler_was_configured_must_agree_with_it(seeds: Path) -> None:
    configured = get_crawler(BroadSpider, {**PROJECT, "DEPTH_LIMIT": 2})  # frozen settings
    BroadSpider.from_crawler(configured, seeds=str(seeds), depth_limit="2")
    with pytest.raises(SpiderArgumentError, match="depth_limit=3 comes too late"):
        BroadSpider.from_crawler(configured, seeds=str(seeds), depth_limit="3")


def test_a_contradicted_limit_stops_the_spider(caplog: pytest.LogCaptureFixture) -> None:
    crawler = _crawler()
    crawler.settings.set("ADMISSION_MAX_PAGES_PER_HOST", 9, priority="cmdline")
    with caplog.at_level(logging.ERROR), pytest.raises(SpiderArgumentError):
        BroadSpider.from_crawler(crawler, max_pages_per_host="3")
    assert "max_pages_per_host=3 contradicts ADMISSION_MAX_PAGES_PER_HOST=9" in caplog.text


@pytest.mark.parametrize(("given", "message"), [
    ({"depht_limit": "2"}, "depht_limit is not an argument of the broad spider: use depth_limit"),
    ({"allowed_domains": "example.com"}, "allowed_domains is not an argument of the broad "
     "spider: use scope=domain (the seeds' registered domains), scope=host, or include=URL"),
    ({"colour": "blue"}, "colour is not an argument of the broad spider (known: crawl_id, "),
])
def test_an_argument_the_spider_does_not_know_is_refused_with_what_to_use(
        seeds: Path, caplog: pytest.LogCaptureFixture, given: dict[str, str],
        message: str) -> None:
    with caplog.at_level(logging.ERROR), pytest.raises(SpiderArgumentError):
        BroadSpider.from_crawler(_crawler(), seeds=str(seeds), **given)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors[0].startswith(f"Cannot start the broad spider: spider argument {message}")


def test_scrapyds_job_id_is_kept(seeds: Path) -> None:
    spider = BroadSpider.from_crawler(_crawler(), seeds=str(seeds), _job="abc123")
    assert spider._job == "abc123"


@pytest.mark.parametrize(("given", "message"), [
    ({"scope": "site"}, "scope='site' is not a scope (use one of domain, host, prefix, any)"),
    ({"hops": "-1"}, "hops='-1' must not be negative"),
    ({"include": "re:("}, "include='re:(': scope rule 're:(' is not a regular expression"),
])
def test_a_bad_scope_argument_stops_the_spider(
        seeds: Path, given: dict[str, str], message: str) -> None:
    with pytest.raises(SpiderArgumentError, match=re.escape(message)):
        BroadSpider.from_crawler(_crawler(), seeds=str(seeds), **given)


def test_scope_arguments_set_the_scope_settings(seeds: Path) -> None:
    crawler = _crawler()
    BroadSpider.from_crawler(crawler, seeds=str(seeds), scope="Prefix", hops="1",
                             include="re:/keep/ com,example)/x/", exclude="re:\\.pdf$")
    s = crawler.settings
    assert (s.get("SCOPE"), s.getint("SCOPE_HOPS")) == ("prefix", 1)
    assert s.get("SCOPE_INCLUDE") == "re:/keep/ com,example)/x/"
    assert s.get("SCOPE_EXCLUDE") == "re:\\.pdf$"


# ------------------------------------------------------------ scrapy crawl


def _scrapy_crawl(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``scrapy crawl broad ...`` as a user runs it, from the project's folder."""
    env = {k: v for k, v in os.environ.items() if k not in {"SCRAPY_SETTINGS_MODULE",
                                                             "SCRAPY_PROJECT"}}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "broad", *argv,
         "-s", f"JOBDIR={tmp_path / 'job'}", "-s", "PROMETHEUS_ENABLED=0"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(("argv", "message"), [
    (["-a", "depth_limit=abc"],
     "spider argument depth_limit='abc' is not a whole number (expected 0, 1, 2, ...)"),
    (["-a", "depth_limit=3", "-s", "DEPTH_LIMIT=5"],
     "spider argument depth_limit=3 contradicts DEPTH_LIMIT=5 (set at cmdline priority): "
     "give one"),
])
def test_a_bad_argument_is_one_line_and_exit_code_1_from_scrapy_crawl(
        tmp_path: Path, argv: list[str], message: str) -> None:
    proc = _scrapy_crawl(tmp_path, *argv)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "never retrieved" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1, proc.stderr
    assert errors[0].endswith(f"Cannot start the broad spider: {message}")
    assert not (tmp_path / "job").exists()  # refused before anything was opened


def test_other_start_failures_keep_their_traceback(tmp_path: Path) -> None:
    """Only usage errors are collected: a failure that is not one still shows where it was."""
    proc = _scrapy_crawl(tmp_path, "-s", "SCHEDULER=scrapy.core.scheduler.Scheduler")
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "NotConfigured: the broad spider needs seeds" \
        in proc.stderr


def test_sitemaps_takes_yes_no_or_the_urls_of_sitemaps() -> None:
    from crawler.spiders.args import BroadArgs, SpiderArgumentError, describe
    assert BroadArgs.parse(sitemaps="yes").sitemaps is True
    urls = BroadArgs.parse(sitemaps="https://a.test/sitemap.xml http://b.test/s.xml.gz")
    assert urls.sitemaps is None
    assert urls.sitemap_urls == ("https://a.test/sitemap.xml", "http://b.test/s.xml.gz")
    assert "sitemaps=https://a.test/sitemap.xml http://b.test/s.xml.gz" in describe(urls)
    with pytest.raises(SpiderArgumentError, match=r"'ftp://x/s\.xml' is not an http"):
        BroadArgs.parse(sitemaps="https://a.test/s.xml ftp://x/s.xml")
