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
Any other exception is left to Scrapy, traceback and all.

Before the crawl is built, the command reads the configuration the crawl was
started with from its frontier, and gives it to this run under the values given
explicitly (:mod:`crawler.frontier.crawlconfig`, :func:`adopt_stored`): a
resumed crawl, a second worker and a scrapyd job of the same crawl id crawl
as the crawl was started, and each difference is said in one line. Everything
else is Scrapy's ``crawl`` command unchanged; the project's ``COMMANDS_MODULE``
(crawler/settings.py) puts it in place of Scrapy's, and scrapyd's runner
goes through it too.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any

from redis.exceptions import RedisError
from scrapy.commands.crawl import Command as ScrapyCrawlCommand
from scrapy.exceptions import UsageError
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from crawler import compat
from crawler.frontier import crawlconfig
from crawler.frontier.connection import ConnectError, RedisUnreachable, configured_url, connect
from crawler.frontier.crawls import crawl_label
from crawler.frontier.keys import Keys, crawl_namespace
from crawler.pipelines.warc import WARC_UNWRITABLE, warc_dir_problem
from crawler.redaction import one_line
from crawler.scheduling.opening import (
    FRONTIER_UNAVAILABLE,
    URL_SOURCES,
    embedded_folder,
    worker_identity,
)
from crawler.scheduling.scheduler import uses_frontier
from crawler.seedrefusals import all_seeds_refused
from crawler.spiders.args import REVISIT_ARGS, SETTING_OF, BroadArgs, SpiderArgumentError

logger = logging.getLogger(__name__)


class Command(ScrapyCrawlCommand):
    """Scrapy's ``crawl``; a spider's :class:`UsageError` is one line and exit code 1."""

    adopted: crawlconfig.Adopted | None = None
    #: Why the crawl cannot start (said in one line, exit code 1), if it cannot.
    cannot_start: str | None = None

    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        if len(args) == 1 and self.settings is not None and uses_frontier(self.settings):
            deadline = time.monotonic() + (TERMINAL_WAIT if at_terminal() else 0)
            while True:
                try:
                    self.adopted = adopt_stored(self.settings, args[0], opts.spargs)
                    break
                except RedisUnreachable as exc:
                    if time.monotonic() + 0.5 < deadline:
                        time.sleep(0.5)
                        continue
                    self._unreachable(exc, args[0], opts.spargs)
                    break
        if self.cannot_start is None and self.settings is not None:
            self.cannot_start = warc_dir_problem(self.settings, worker_identity(self.settings))

    def _unreachable(self, exc: RedisUnreachable, spider: str, spargs: dict[str, Any]) -> None:
        """At a terminal, a Redis that does not answer ends the command at once;
        else (scrapyd, a supervisor) the worker waits for it (FRONTIER_CONNECT_WAIT)."""
        if at_terminal():
            self.cannot_start = (f"Frontier: {exc}; check that it runs and the URL in "
                                 f"{URL_SOURCES} (FRONTIER_CONNECT_WAIT: how long a worker "
                                 "not run at a terminal waits for it)")
        else:
            self.adopted = _unread(crawl_label(spargs.get("crawl_id"), spider), exc)

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) < 1:
            raise UsageError
        if len(args) > 1:
            raise UsageError("running 'scrapy crawl' with more than one spider is not supported")
        name = args[0]
        assert self.crawler_process
        if self.cannot_start is not None:  # (logging is set up now; nothing was made)
            logger.error(self.cannot_start)
            self.exitcode = 1
            return
        for line in self.adopted.lines if self.adopted else ():  # (logging is set up now)
            logger.info(line)
        crawler = compat.command_crawler(self, name)
        started = self.crawler_process.crawl(crawler, **opts.spargs)
        if isinstance(started, asyncio.Task):
            started.add_done_callback(lambda task: _collect(task, name))
        elif isinstance(started, Deferred):
            started.addErrback(_trap_usage_error, name)
        self.crawler_process.start()
        if self.crawler_process.bootstrap_failed or crawl_failed(_final_stats(crawler)):
            self.exitcode = 1


#: How long ``scrapy crawl`` run at a terminal waits for a Redis that does not answer.
TERMINAL_WAIT = 4.0


def at_terminal() -> bool:
    """Whether a person runs this command at a terminal (not scrapyd, cron, a supervisor)."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def adopt_stored(settings: Any, spider: str, spargs: dict[str, Any]) -> crawlconfig.Adopted:
    """Give ``settings`` the stored configuration of the crawl these options name
    (:func:`crawlconfig.adopt`), if its frontier holds one; the lines to say.

    A crawl whose frontier cannot be read now runs with its own settings, said
    in the first line; its worker warns when it opens the frontier of the values
    that differ from the crawl's. A shared Redis that does not answer raises
    :class:`RedisUnreachable`.
    """
    crawl_id = spargs.get("crawl_id") or settings.get("FRONTIER_CRAWL_ID") or ""
    name = crawl_label(crawl_id, spider)
    try:
        keys = Keys(crawl_namespace(settings.get("FRONTIER_NAMESPACE", "frontier:%(spider)s"),
                                    spider, crawl_id), settings.getint("FRONTIER_PARTITIONS", 16))
        url = configured_url(settings)
    except (ValueError, ConnectError):  # a bad crawl id or URL file: the crawl says so
        return crawlconfig.Adopted([], [])
    folder = None if url else embedded_folder(settings.get("JOBDIR"), spider, create=False)
    if folder is not None and not folder.is_dir():
        return crawlconfig.Adopted([], [])  # no crawl ran there: a new one
    try:
        with connect(url, folder, settings.getdict("REDIS_PARAMS"), notice=logger.debug,
                     cluster=settings.getbool("REDIS_CLUSTER")) as conn:
            stored = crawlconfig.read(conn.client, keys)
    except RedisUnreachable:
        if url:
            raise
        stored = None
    except (ConnectError, RedisError, OSError) as exc:
        return _unread(name, exc)
    if stored is None:
        return crawlconfig.Adopted([], [])
    adopted = crawlconfig.adopt(settings, stored, _arg_settings(spargs), name)
    if adopted.changed:
        settings.set(crawlconfig.CHANGED_SETTING, ",".join(adopted.changed), priority="cmdline")
    return adopted


def _unread(crawl: str, exc: BaseException) -> crawlconfig.Adopted:
    """A run whose crawl's stored configuration could not be read: its own settings apply."""
    return crawlconfig.Adopted(
        [f"Cannot read how crawl {crawl} was started ({one_line(exc)}): this run's settings "
         "apply"], [])


def _arg_settings(spargs: Mapping[str, Any]) -> dict[str, Any]:
    """The crawl settings the broad spider's arguments give (none when one is
    bad: the spider refuses it, in one line)."""
    given = {arg: spargs[arg] for arg in (*SETTING_OF, *REVISIT_ARGS) if arg in spargs}
    try:
        parsed = BroadArgs.parse(**given)
    except SpiderArgumentError:
        return {}
    settings: dict[str, Any] = dict(parsed.settings())
    for arg, setting in REVISIT_ARGS.items():
        if getattr(parsed, arg) is not None:
            settings[setting] = getattr(parsed, arg)
    return settings


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
