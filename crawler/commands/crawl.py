"""``scrapy crawl``, with a spider's refusal of its arguments reported in one line.

Scrapy makes the spider inside the task (or Deferred) that runs the crawl,
after the command has returned to the reactor, so an exception from the
spider's ``from_crawler`` reaches nobody: ``scrapy crawl broad -a
depth_limit=abc`` logged the reason and then ~25 lines of ``Task exception
was never retrieved``. A :class:`~scrapy.exceptions.UsageError` there is the
user's input, not a bug, and so is a Scrapy or Twisted version the crawler
refuses (:class:`~crawler.compat.CompatibilityError`); this command collects
them from the crawl: each is logged once (a
:class:`~crawler.spiders.args.SpiderArgumentError` is logged by the broad
spider itself), no traceback, exit code 1 (Scrapy's ``bootstrap_failed``).
A frontier that cannot be opened (Redis unreachable or refusing the
worker) closes the spider with ``frontier_unavailable``, also exit code 1;
so does a crawl whose every seed was refused and that crawled nothing else
(:func:`crawler.seedrefusals.all_seeds_refused`: the end-of-crawl summary has
said so in one ERROR line): scrapyd would otherwise show a job that did
nothing as a success. That one is decided from the final stats rather than by
closing the spider early: seeds come from the seed file and from the Redis
seed list, which is read until the frontier has nothing left, so only the
end of the crawl knows that none will come, and a crawl that resumes a
frontier with queued URLs must run them (and succeed) whatever its new seeds.
Any other exception is left to Scrapy, traceback and all. Everything else is
Scrapy's ``crawl`` command unchanged; the project's ``COMMANDS_MODULE``
(crawler/settings.py) puts it in place of Scrapy's, and scrapyd's runner
goes through it too.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from scrapy.commands.crawl import Command as ScrapyCrawlCommand
from scrapy.exceptions import UsageError
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from crawler import compat
from crawler.pipelines.warc import WARC_UNWRITABLE
from crawler.scheduling.opening import FRONTIER_UNAVAILABLE
from crawler.seedrefusals import all_seeds_refused
from crawler.spiders.args import SpiderArgumentError

logger = logging.getLogger(__name__)


class Command(ScrapyCrawlCommand):
    """Scrapy's ``crawl``; a spider's :class:`UsageError` is one line and exit code 1."""

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) < 1:
            raise UsageError
        if len(args) > 1:
            raise UsageError("running 'scrapy crawl' with more than one spider is not supported")
        name = args[0]
        assert self.crawler_process
        crawler = compat.command_crawler(self, name)
        started = self.crawler_process.crawl(crawler, **opts.spargs)
        if isinstance(started, asyncio.Task):
            started.add_done_callback(lambda task: _collect(task, name))
        elif isinstance(started, Deferred):
            started.addErrback(_trap_usage_error, name)
        self.crawler_process.start()
        if self.crawler_process.bootstrap_failed or crawl_failed(_final_stats(crawler)):
            self.exitcode = 1


def _final_stats(crawler: Any) -> Mapping[str, Any]:
    """The crawl's final stats; none for a crawl that never started (Scrapy's
    ``Crawler.stats`` raises until then)."""
    try:
        stats = crawler.stats
    except RuntimeError:
        return {}
    return stats.get_stats() if stats is not None else {}


def crawl_failed(stats: Mapping[str, Any]) -> bool:
    """Whether a crawl that ran must exit with code 1, from its final stats: its
    frontier could not be opened or its WARC_DIR written (each logged why, in
    one line), or
    every seed was refused and nothing else crawled (the summary said so)."""
    return (stats.get("finish_reason") in (FRONTIER_UNAVAILABLE, WARC_UNWRITABLE)
            or all_seeds_refused(stats) is not None)


def _report(exc: BaseException, name: str) -> bool:
    """Log a spider's usage error once; whether ``exc`` was one.

    A :class:`~crawler.compat.CompatibilityError` (a Scrapy or Twisted whose
    private names changed) is no bug either: its message says all there is.
    """
    if not isinstance(exc, UsageError | compat.CompatibilityError):
        return False
    if not isinstance(exc, SpiderArgumentError):  # the broad spider has logged those
        logger.error("Cannot start the %s spider: %s", name, exc)
    return True


def _collect(task: asyncio.Task[None], name: str) -> None:
    """Retrieve a usage error from the crawl's task, so asyncio does not print it."""
    if task.cancelled():
        return
    exc = task.exception()  # retrieving it is what keeps asyncio quiet
    if exc is not None and not _report(exc, name):
        # Not ours to hide: hand it back to asyncio's handler, traceback and all.
        task.get_loop().call_exception_handler({
            "message": "Task exception was never retrieved", "exception": exc, "future": task})


def _trap_usage_error(failure: Failure, name: str) -> Failure | None:
    """The same for :class:`~scrapy.crawler.CrawlerProcess` (a Deferred, not a task)."""
    if _report(failure.value, name):
        return None
    return failure
