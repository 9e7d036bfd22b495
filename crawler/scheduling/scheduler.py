"""The Scrapy scheduler on top of the Redis frontier.

``SCHEDULER = "crawler.scheduling.scheduler.FrontierScheduler"``.

This is the engine's adapter: it opens the worker's frontier
(:class:`.worker.WorkerFrontier`, which owns everything that talks to Redis)
and answers the engine's calls from it. The engine talks to a scheduler
synchronously (``enqueue_request`` and ``next_request`` return at once), so
nothing here waits for Redis on the reactor thread: requests to admit and
leases to release are batched and flushed by a background task (:mod:`.sync`),
and claimed URLs wait in a small local buffer sized to the free download
slots (:mod:`.claims`). Per-host politeness lives in Redis, so the limits hold
across every worker; Scrapy's own download slots are made pass-through so
they neither add a second delay nor hold requests that another host could use.

A claimed URL's lease ends exactly once, when the engine is done with the
request it became (:mod:`.leases`). A retry of the same URL ends it as
``retry`` (delayed by the host's delay); a redirect to another URL admits the
new URL and the old lease ends as ``done``.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import time
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy import Request, Spider, signals
from scrapy.exceptions import CloseSpider, NotConfigured
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.misc import load_object
from scrapy.utils.reactor import is_asyncio_reactor_installed

from crawler import compat
from crawler.frontier import crawlconfig
from crawler.frontier.connection import ConnectError, async_client, configured_url, sync_client
from crawler.frontier.crawls import (
    CrawlRun,
    continuing_line,
    crawl_label,
    note_run,
    nothing_left_line,
)
from crawler.frontier.embedded import EmbeddedRedis
from crawler.frontier.keys import Count, Keys, crawl_namespace
from crawler.lease import ticket_of
from crawler.redaction import one_line, safe_url, url_password
from crawler.scheduling.health import refusal
from crawler.scheduling.opening import (
    FRONTIER_UNAVAILABLE,
    check_layout,
    embedded_folder,
    wait_for_redis,
    worker_identity,
)
from crawler.scheduling.worker import EngineLink, WorkerFrontier

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)


def scheduler_of(crawler: Crawler) -> FrontierScheduler | None:
    """The frontier scheduler of a crawl, if it uses one and the crawl has
    started (for what belongs to the crawl's run rather than its frontier:
    the embedded Redis, the command that continues it)."""
    try:
        scheduler = crawler.engine.scheduler
    except RuntimeError:  # Crawler.engine before the crawl starts
        return None
    return scheduler if isinstance(scheduler, FrontierScheduler) else None


def uses_frontier(settings: Any) -> bool:
    """Whether a crawl's ``SCHEDULER`` is the frontier scheduler (or a subclass)."""
    scheduler = settings.get("SCHEDULER")
    try:
        cls = load_object(scheduler) if isinstance(scheduler, str) else scheduler
    except (ImportError, ValueError, NameError, AttributeError):
        return False
    return isinstance(cls, type) and issubclass(cls, FrontierScheduler)


class FrontierScheduler:
    """A Scrapy scheduler whose queues, dedup and politeness live in Redis."""

    def __init__(self, crawler: Crawler) -> None:
        if not is_asyncio_reactor_installed():
            raise NotConfigured("the frontier scheduler needs Scrapy's asyncio reactor")
        self.crawler = crawler
        self.stats = crawler.stats
        s = crawler.settings
        self.worker = worker_identity(s)
        #: The shared Redis's URL (None: the embedded one), known once opening began.
        self.redis_url: str | None = None
        self.redis_params: dict[str, Any] = s.getdict("REDIS_PARAMS")
        self.cluster = s.getbool("REDIS_CLUSTER")
        self.partitions = s.getint("FRONTIER_PARTITIONS", 16)
        self.seen_buckets = s.getint("FRONTIER_SEEN_BUCKETS", 4096)
        self.namespace_template = s.get("FRONTIER_NAMESPACE", "frontier:%(spider)s")
        self.crawl_id: str = s.get("FRONTIER_CRAWL_ID") or ""
        self.connect_wait = s.getfloat("FRONTIER_CONNECT_WAIT", 60.0)
        self.jobdir = s.get("JOBDIR")
        self.embedded: EmbeddedRedis | None = None
        #: The Redis URL the frontier is on (the embedded one's too), once open.
        self.url: str | None = None
        #: The worker's open frontier (None until open, or if it could not be).
        self.frontier: WorkerFrontier | None = None
        self.spider: Spider | None = None
        self._closer: asyncio.Future[None] | None = None
        self._wake_engine: Any = None
        #: The frontier could not be opened: the spider is closed once open.
        self.unopened = False
        #: This run of the crawl (when it began, how many runs), once open.
        self.run: CrawlRun | None = None
        #: Whether the frontier held a crawl under way when this worker opened it.
        self.continuing = False
        #: Said at the end when this run continued a crawl with nothing left to do.
        self.nothing_left: str | None = None
        #: Why this worker may not claim, by who paused it (the disk guard),
        #: kept from the start: a pause asked before the frontier opens holds
        #: once it is open.
        self.pauses: dict[str, str] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierScheduler:
        compat.check()  # the engine hooks need Scrapy's private names
        scheduler = cls(crawler)
        crawler.signals.connect(scheduler._reached_downloader,
                                signal=signals.request_reached_downloader)
        crawler.signals.connect(scheduler._close_if_unopened, signal=signals.spider_opened)
        return scheduler

    @property
    def left(self) -> Any:
        """What was left in the frontier when the crawl stopped (the summary's)."""
        return None if self.frontier is None else self.frontier.left

    # ------------------------------------------------------------------ open / close

    def open(self, spider: Spider) -> Deferred[None]:
        self.spider = spider
        return deferred_from_coro(self._open_or_close())

    async def _open_or_close(self) -> None:
        """Open the frontier, or have the spider closed with one line saying why.

        A Redis that cannot be reached or refuses the worker, or a frontier laid
        out for other workers, is the operator's to fix, not a bug: one ERROR
        line (the URL without its password, what to check), then the spider
        closes with ``frontier_unavailable``, which ``scrapy crawl`` turns into
        exit code 1. The close is asked for once
        the spider is open (:meth:`_close_if_unopened`): an exception here, or
        a ``CloseSpider`` before the rest of the engine has started, ends in a
        traceback from every component that expected an open spider.
        """
        try:
            await self._open()
        except (ConnectError, NotConfigured) as exc:  # NotConfigured: a foreign layout
            logger.error("Frontier: %s", exc)
        except (RedisError, OSError) as exc:
            where = safe_url(self.url) if self.url else "Redis"
            hint = refusal(exc)
            logger.error("Frontier: %s refused to open the frontier: %s%s", where,
                         one_line(exc, url_password(self.url) if self.url else None),
                         f"; {hint}" if hint else "")
        else:
            return
        self.unopened = True
        self.frontier = None

    def _end_crawl(self) -> None:
        """Redis refuses this worker's commands (:class:`RedisHealth` said why):
        end the crawl rather than lease URLs it cannot give back."""
        engine = self.crawler.engine
        if self._closer is None and engine is not None and engine.spider is not None:
            self._closer = asyncio.ensure_future(
                engine.close_spider_async(reason=FRONTIER_UNAVAILABLE))

    def _close_if_unopened(self) -> None:
        if self.unopened:
            raise CloseSpider(FRONTIER_UNAVAILABLE)

    async def _open(self) -> None:
        assert self.spider is not None
        self.redis_url = configured_url(self.crawler.settings)
        # Starting or adopting the embedded server waits on a file lock and on
        # the server's start: in a thread, so the reactor runs on meanwhile.
        url = self.redis_url or await asyncio.to_thread(self._start_embedded)
        self.url = url
        client = async_client(url, self.redis_params, self._cluster)
        namespace = crawl_namespace(self.namespace_template, self.spider.name, self._crawl_id)
        keys = Keys(namespace, self.partitions, self.seen_buckets)
        await wait_for_redis(client, url, self.connect_wait)
        await check_layout(client, keys)
        self._install_engine_hooks()
        engine = self.crawler.engine
        self.frontier = WorkerFrontier(
            self.crawler, self.spider, client, keys, self.worker,
            EngineLink(self._wake, lambda: len(engine.downloader.active), self._end_crawl),
            self.sync_client)
        self.frontier.pauses.update(self.pauses)  # (asked before it opened)
        counts = await self.frontier.start()
        self.run = await note_run(client, keys, counts)
        continuing = continuing_line(self.crawl_name(), self.run, counts)
        self.continuing = continuing is not None
        if continuing is not None:
            logger.info(continuing, extra={"namespace": namespace, "runs": self.run.runs})
        await self._keep_config(client, keys)
        logger.info(
            "Frontier %s on %s: %s queued, %s leased, %s delayed, %s done, %s dead; worker %s",
            namespace, safe_url(url), counts[Count.QUEUED], counts[Count.LEASED],
            counts[Count.DELAYED], counts[Count.DONE], counts[Count.DEAD], self.worker,
            extra={"worker": self.worker, "namespace": namespace},
        )

    async def _keep_config(self, client: Any, keys: Keys) -> None:
        """Store the crawl's configuration (the first worker's; the values this
        run gave explicitly), and warn of values this worker runs with that are
        not the crawl's (a worker not started by ``scrapy crawl``, which takes them)."""
        config = crawlconfig.effective(self.crawler.settings, self.spider)
        changed = self.crawler.settings.getlist(crawlconfig.CHANGED_SETTING)
        stored = await crawlconfig.store(client, keys, config, changed)
        differ = crawlconfig.differences(stored, config, changed)
        if differ:
            logger.warning("Frontier: this worker runs crawl %s with other values than the "
                           "crawl's: %s; scrapy crawl starts a worker with the crawl's",
                           self.crawl_name(), ", ".join(differ))

    @property
    def _cluster(self) -> bool:
        return self.cluster and self.redis_url is not None  # the embedded one is not

    def sync_client(self, **overrides: Any) -> Any:
        """A blocking client on the frontier's Redis, for threads (metrics, WARC digests)."""
        assert self.url is not None, "the frontier is not open"
        return sync_client(self.url, self.redis_params, self._cluster, **overrides)

    def _start_embedded(self) -> str:
        assert self.spider is not None
        self.embedded = EmbeddedRedis(embedded_folder(self.jobdir, self.spider.name))
        return self.embedded.start()

    def _install_engine_hooks(self) -> None:
        """Hook the engine where the frontier needs it (:mod:`crawler.compat`).

        A lease ends when the engine is done with its request, claimed URLs
        wake the engine at once instead of on its 5 s heartbeat, and Scrapy's
        download slots add no delay: the frontier paces every host for all
        workers (claims here, starts in :mod:`crawler.middlewares.pacing`), and a
        request it handed out must never wait in a slot while its turn passes.
        """
        engine = self.crawler.engine
        compat.hook_request_done(engine, self._finished)
        self._wake_engine = compat.engine_wakeup(engine)
        compat.pass_through_download_slots(engine.downloader)

    def _wake(self) -> None:
        self._wake_engine()

    def close(self, reason: str) -> Deferred[None]:
        return deferred_from_coro(self._close(reason))

    async def _close(self, reason: str) -> None:
        if self.frontier is not None:
            await self.frontier.close()
            self.nothing_left = self._nothing_left(reason)
        if self.embedded is not None and not await asyncio.to_thread(self.embedded.leave):
            logger.info("Frontier: leaving the embedded Redis running: "
                        "another process uses it")
        logger.info("Frontier closed (%s)", reason)

    def _nothing_left(self, reason: str) -> str | None:
        """The WARNING of a run that continued a crawl, found nothing to do and
        fetched nothing (:func:`nothing_left_line`), else None."""
        left = self.left
        if (not self.continuing or left is None or reason != "finished"
                or left.queued or left.leased or left.delayed
                or self.stats.get_value("frontier/leases/claimed")):
            return None
        return nothing_left_line(self.crawl_name(), left.counts,
                                 delete=self.frontier_command("delete", "--yes"),
                                 requeue=self.frontier_command("requeue"))

    def pause(self, source: str, why: str) -> None:
        """Claim nothing until :meth:`resume` (``source``: who asks, e.g. the disk
        guard), whether the frontier is open yet or not (:meth:`WorkerFrontier.pause`)."""
        self.pauses[source] = why
        if self.frontier is not None:
            self.frontier.pause(source, why)

    def resume(self, source: str) -> None:
        """End ``source``'s pause (:meth:`WorkerFrontier.resume`)."""
        self.pauses.pop(source, None)
        if self.frontier is not None:
            self.frontier.resume(source)

    def continue_command(self) -> str:
        """The command that takes this crawl up where it stopped (its frontier:
        the job folder's embedded Redis, or the shared one and the crawl id)."""
        assert self.spider is not None
        return self._command(["crawl", self.spider.name], "-a", "crawl_id=")

    def frontier_command(self, *words: str) -> str:
        """``scrapy frontier WORDS`` on this crawl's frontier (``delete``, ``requeue``)."""
        return self._command(["frontier", *words], "--crawl-id", "")

    def _command(self, words: list[str], id_option: str, id_prefix: str) -> str:
        words = ["scrapy", *words]
        if self._crawl_id:
            words += [id_option, f"{id_prefix}{self._crawl_id}"]
        if self.redis_url is None and self.jobdir:
            words += ["-s", f"JOBDIR={self.jobdir}"]
        command = shlex.join(words)
        return command if self.redis_url is None else f"{command} (with the same Redis)"

    @property
    def _crawl_id(self) -> str:
        return getattr(self.spider, "crawl_id", None) or self.crawl_id

    def crawl_name(self) -> str:
        """How the log names this crawl: its id, else the spider's default crawl."""
        assert self.spider is not None
        return crawl_label(self._crawl_id, self.spider.name)

    # ------------------------------------------------------------------ scheduler API

    def enqueue_request(self, request: Request) -> bool:
        return self.frontier is not None and self.frontier.offer(request)

    def next_request(self) -> Request | None:
        return None if self.frontier is None else self.frontier.claims.pop()

    def has_pending_requests(self) -> bool:
        return self.frontier is not None and self.frontier.pending()

    def __len__(self) -> int:
        return 0 if self.frontier is None else len(self.frontier)

    # ------------------------------------------------------------------ engine hooks

    def _finished(self, request: Request) -> None:
        if self.frontier is not None:
            self.frontier.finished(request)

    def _reached_downloader(self, request: Request, spider: Spider) -> None:
        ticket = ticket_of(request.meta)
        if ticket is not None:
            ms = round((time.monotonic() - ticket.claimed) * 1000)
            self.stats.max_value("frontier/claim_to_download_ms/max", ms)
            if ms > 20:
                self.stats.inc_value("frontier/claim_to_download_ms/over_20")


__all__ = ["FrontierScheduler", "scheduler_of", "uses_frontier"]
