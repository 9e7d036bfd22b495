"""A crawl's record: the first run stamps when it began and stores how it was
started, each run counts, a later run takes the stored values under the ones
given explicitly, and a worker that opens a crawl under way says what it
continues (against a real Redis where one is read or written)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from scrapy.settings import Settings

from crawler.frontier.crawlconfig import (
    STORED_PRIORITY,
    adopt,
    aread,
    differences,
    same,
    store,
)
from crawler.frontier.crawls import (
    CrawlRecord,
    CrawlRun,
    continuing_line,
    note_run,
    nothing_left_line,
)
from crawler.frontier.keys import Keys
from crawler.frontier.schema import CRAWL


def _note(redis_url: str, keys: Keys, held: bool) -> CrawlRun:
    """A run noted on a frontier that holds URLs already (``held``) or none."""
    async def run() -> CrawlRun:
        client = aredis.Redis.from_url(redis_url)
        try:
            return await note_run(client, keys, {"done": 1} if held else {})
        finally:
            await client.aclose()
    return asyncio.run(run())


def test_the_first_run_stamps_the_start_and_every_run_counts(
        redis_url: str, redis_prefix: str) -> None:
    keys = Keys(f"{redis_prefix}runs", 4)
    first = _note(redis_url, keys, held=False)
    assert first.runs == 1 and first.started_ms is not None
    second = _note(redis_url, keys, held=True)
    assert second == CrawlRun(first.started_ms, 2)  # the start is the first run's
    assert keys.crawl() in keys.globals()  # (scrapy frontier delete removes it)
    stored = redis.Redis.from_url(redis_url).hgetall(keys.crawl())
    assert stored == {CRAWL.started.encode(): str(first.started_ms).encode(),
                      CRAWL.runs.encode(): b"2"}


def test_a_crawl_begun_before_its_record_is_not_stamped_now(
        redis_url: str, redis_prefix: str) -> None:
    keys = Keys(f"{redis_prefix}old", 4)
    assert _note(redis_url, keys, held=True) == CrawlRun(None, 1)
    line = continuing_line("old", CrawlRun(None, 1), {"done": 3})
    assert line is not None and "(started before its start was recorded, 1 runs)" in line


def test_the_continuing_line_says_what_the_frontier_holds() -> None:
    assert continuing_line("new", CrawlRun(1_765_000_000_000, 1), {"queued": 0}) is None
    counts = {"done": 50, "queued": 31, "dead": 2, "delayed": 1, "r:robots": 4, "dup": 9}
    assert continuing_line("slow", CrawlRun(1_765_000_000_000, 3), counts) == (
        "Continuing crawl slow (started 2025-12-06 05:46:40 UTC, 3 runs): 50 done, "
        "31 queued, 1 delayed for a retry, 2 dead letters, 4 refused; seeds it has seen "
        "before are skipped")
    # a second worker joining a crawl that holds nothing yet says so too
    assert continuing_line("x", CrawlRun(1, 2), {}) is not None


def test_nothing_left_names_the_commands_that_start_afresh() -> None:
    line = nothing_left_line("slow", {"done": 5, "dead": 2, "r:robots": 1},
                             delete="scrapy frontier delete --yes -s JOBDIR=job",
                             requeue="scrapy frontier requeue -s JOBDIR=job")
    assert line == (
        "Nothing was left to do in crawl slow: earlier runs ended every URL it holds (5 done, "
        "2 dead letters, 1 refused) and the seeds given were seen before, so nothing was "
        "fetched. To crawl again from the start, give a new crawl id (-a crawl_id=NEW) or "
        "delete this crawl (scrapy frontier delete --yes -s JOBDIR=job); to fetch its 2 "
        "dead letter(s) again: scrapy frontier requeue -s JOBDIR=job")
    assert "requeue" not in nothing_left_line("x", {"done": 1}, delete="d", requeue="r")


def test_stored_values_apply_under_explicit_ones_and_each_explicit_difference_is_said() -> None:
    settings = Settings({"SCOPE": "domain", "BUDGET_HOST_PAGES": 0}, priority="project")
    settings.set("DOWNLOAD_DELAY", "0.5", priority="cmdline")  # -s DOWNLOAD_DELAY=0.5
    stored = {"SCOPE": "any", "BUDGET_HOST_PAGES": 2, "DOWNLOAD_DELAY": 1.0,
              "SCOPE_HOPS": 1, "CLOSESPIDER_PAGECOUNT": 5}
    adopted = adopt(settings, stored, {"SCOPE_HOPS": 1}, "slow")
    assert settings["SCOPE"] == "any" and settings.getint("BUDGET_HOST_PAGES") == 2
    assert settings.getpriority("SCOPE") == STORED_PRIORITY
    assert settings["DOWNLOAD_DELAY"] == "0.5"  # given: it wins
    assert settings.getint("CLOSESPIDER_PAGECOUNT") == 0  # no crawl setting: not taken
    assert adopted.changed == ["DOWNLOAD_DELAY"]  # hops=1 was given again, the same
    assert adopted.lines == [
        "Crawl slow was started with DOWNLOAD_DELAY=1.0; this run gives 0.5, which applies "
        "and is kept for the next runs",
        "Crawl slow keeps what it was started with: SCOPE=any (the project's: domain), "
        "BUDGET_HOST_PAGES=2 (the project's: 0); -s NAME=VALUE (or the spider argument) "
        "changes one"]
    # a spider argument is explicit too, and beats a stored value
    by_arg = adopt(Settings(), {"SCOPE": "domain"}, {"SCOPE": "any"}, "x")
    assert by_arg.changed == ["SCOPE"] and "gives any" in by_arg.lines[0]


@pytest.mark.parametrize(("a", "b", "alike"), [
    ("1", 1, True), ("1.0", 1, True), ("0.25", 0.25, True), ("True", True, True),
    ("false", 0, True), ("a.test,b.test", ["a.test", "b.test"], True),
    ("127.0.0.0/8", ["127.0.0.0/8"], True), (None, "", True),
    ("1", 2, False), ("a,b", ["b", "a"], False), ("domain", "any", False),
])
def test_values_compare_as_settings_mean_them(a: Any, b: Any, alike: bool) -> None:
    assert same(a, b) is alike


def test_the_first_worker_stores_the_configuration_and_later_ones_only_what_they_change(
        redis_url: str, redis_prefix: str) -> None:
    keys = Keys(f"{redis_prefix}config", 4)

    async def run() -> tuple[dict[str, Any], ...]:
        client = aredis.Redis.from_url(redis_url)
        try:
            first = await store(client, keys, {"SCOPE": "any", "DOWNLOAD_DELAY": 1})
            other = await store(client, keys, {"SCOPE": "domain", "DOWNLOAD_DELAY": 2,
                                               "SCOPE_HOPS": 1}, changed=["DOWNLOAD_DELAY"])
            return first, other, await aread(client, keys) or {}
        finally:
            await client.aclose()
    first, other, stored = asyncio.run(run())
    assert first == {"SCOPE": "any", "DOWNLOAD_DELAY": 1}
    # the change given, and a name the stored one lacked; not the scope it was not given
    assert other == stored == {"SCOPE": "any", "DOWNLOAD_DELAY": 2, "SCOPE_HOPS": 1}
    assert differences(stored, {"SCOPE": "domain", "DOWNLOAD_DELAY": 2}) == [
        "SCOPE=domain (the crawl's: any)"]
    record = CrawlRecord.parse(redis.Redis.from_url(redis_url).hgetall(keys.crawl()))
    assert record is not None and record.config == stored and record.runs == 0
