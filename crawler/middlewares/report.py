"""Downloader middleware: tally every download for the crawl's reports.

Next to the downloader (960, after the outcome middleware's 950), it sees
each answer as it came (a redirect before it is followed, robots.txt
fetches too) and each download error first, and it sees the robots policy's
refusals, whose ``IgnoreRequest`` every middleware's ``process_exception``
is shown. What it counts (:class:`crawler.reports.tally.Tally`) is saved in
the frontier when the worker closes, added to what the same worker id saved
in earlier runs of the crawl; then this worker writes the crawl's report,
every worker's tallies together, into ``REPORT_DIR``/CRAWL
(:mod:`crawler.reports.write`). ``scrapy frontier report`` writes it again
on demand.

While the worker runs, its most recent fetches per host and its download
errors by kind go to the frontier every ``CONSOLE_LIVE_SECONDS`` (5; 0: never)
for the operator's console (:mod:`crawler.frontier.live`), and its tally so
far every :data:`LIVE_TALLY_S` seconds, so that the console's report page and
``scrapy frontier report`` are live during the crawl.

Settings: ``REPORT_ENABLED`` (True), ``REPORT_DIR`` (``output/reports``),
``CONSOLE_LIVE_SECONDS``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisClusterException, RedisError
from scrapy import signals
from scrapy.exceptions import IgnoreRequest, NotConfigured

from crawler.frontier import live
from crawler.frontier import reports as saved_reports
from crawler.frontier.admin import FrontierAdmin
from crawler.frontier.keys import Keys, site_of
from crawler.frontier.live import LiveFetches
from crawler.lease import ticket_of
from crawler.middlewares.robots import DENIED_MESSAGE
from crawler.middlewares.scope import scope_of
from crawler.reports.build import build
from crawler.reports.tally import Tally, change_of
from crawler.reports.write import write
from crawler.revisit import short_digest
from crawler.robots.fetch import ROBOTS_FETCH_META
from crawler.scheduling.worker import frontier_of
from crawler.seeds import SEED_META
from crawler.signals import seed_refused
from crawler.urls import host_key
from crawler.warc.records import payload_digest

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


#: How often (s) a running worker saves its tally so far, for live reports.
LIVE_TALLY_S = 30.0


def crawl_folder(namespace: str) -> str:
    """The report folder's name of a crawl: its namespace, file-name safe."""
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in namespace)


class ReportMiddleware:
    """Tallies downloads; saves the tally and writes the crawl's report on close."""

    def __init__(self, crawler: Crawler, folder: Path, live_s: float = 5.0) -> None:
        self.crawler = crawler
        self.folder = folder
        self.live_s = live_s
        self.live = LiveFetches()
        self.revisits = False  # whether the frontier revisits (known once it is open)
        self.tally = Tally()  # this run's (the process's); the frontier keeps the total
        self.started = round(time.time(), 3)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ReportMiddleware:
        if not crawler.settings.getbool("REPORT_ENABLED", True):
            raise NotConfigured("REPORT_ENABLED is off")
        s = crawler.settings
        middleware = cls(crawler, Path(s.get("REPORT_DIR", "output/reports")),
                         s.getfloat("CONSOLE_LIVE_SECONDS", 5.0))
        crawler.signals.connect(middleware.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(middleware.seed_refused, signal=seed_refused)
        return middleware

    def spider_opened(self) -> None:
        frontier = frontier_of(self.crawler)
        if frontier is None:
            logger.info("Report: none is written without the frontier scheduler")
            return
        frontier.on_close.append(self._save)
        self.revisits = frontier.leases.revisits is not None
        if self.live_s > 0:
            frontier.tasks.spawn(self._write_live(frontier))

    async def _write_live(self, frontier: Any) -> None:
        """Every ``live_s`` seconds, what changed in the recent fetches, and every
        :data:`LIVE_TALLY_S` the tally so far (until close)."""
        tallied = time.monotonic()
        while not frontier.tasks.closing:
            await asyncio.sleep(self.live_s)
            try:
                await live.write(frontier.client, frontier.keys, frontier.worker, self.live)
                if time.monotonic() - tallied >= LIVE_TALLY_S and not frontier.tasks.closing:
                    tallied = time.monotonic()
                    run = self.tally.as_dict()
                    await saved_reports.save_live(frontier.client, frontier.keys,
                                                  frontier.worker, {
                        "total": run, "run": run, "started": self.started,
                        "ended": round(time.time(), 3)})
            except (RedisError, OSError) as exc:  # the next round writes it
                logger.debug("Report: recent fetches not written: %s", exc)

    # --- what the downloads show

    def process_response(self, request: Request, response: Response) -> Response:
        host = _site(request.url)
        if request.meta.get(ROBOTS_FETCH_META):
            self.tally.robots(host, str(response.status))
            self.live.fetched(host, request.url, str(response.status), 0.0, len(response.body))
            return response
        kind = response.headers.get(b"Content-Type") or b""
        mime = kind.split(b";", 1)[0].strip().lower().decode("latin-1")
        latency = request.meta.get("download_latency")
        seconds = latency if isinstance(latency, float | int) else 0.0
        self.tally.page(host, response.status, mime, len(response.body), seconds, time.time())
        self.live.fetched(host, request.url, str(response.status), seconds, len(response.body))
        self._compare(request, response, host)
        if request.meta.get(SEED_META) and not 300 <= response.status < 400:
            self.tally.seed(_seed_url(request), str(response.status))
        return response

    def _compare(self, request: Request, response: Response, host: str) -> None:
        """With revisits on: the page next to its last fetch (the digest is the
        one the revisit middleware computes too: only for a revisit's answer)."""
        ticket = ticket_of(request.meta) if self.revisits else None
        if ticket is None:
            return
        previous = ticket.revisit.digest if ticket.revisit is not None else None
        what = change_of(response.status, previous,
                         lambda: short_digest(payload_digest(response.body)))
        if what is not None:
            self.tally.change(host, what)

    def process_exception(self, request: Request, exception: BaseException) -> None:
        host = _site(request.url)
        if isinstance(exception, IgnoreRequest):
            if str(exception).startswith(DENIED_MESSAGE):
                self.tally.denied(host)
                if request.meta.get(SEED_META):
                    self.tally.seed(_seed_url(request), "robots-denied")
            return
        kind = type(exception).__name__
        self.live.fetched(host, request.url, f"error: {kind}", 0.0, 0)
        self.live.error(kind)
        if request.meta.get(ROBOTS_FETCH_META):
            self.tally.robots(host, f"error: {kind}")
            return
        self.tally.error(host, kind)
        if request.meta.get(SEED_META):
            self.tally.seed(_seed_url(request), f"error: {kind}")

    def seed_refused(self, url: str, reason: str) -> None:
        self.tally.seed(url, f"refused: {reason}")

    # --- on close

    async def _save(self, client: Any, keys: Keys) -> None:
        frontier = frontier_of(self.crawler)
        assert frontier is not None
        scope = scope_of(self.crawler)
        if scope is not None:
            self.tally.off_scope.update(scope.off_scope)
        try:
            earlier = await saved_reports.saved(client, keys, frontier.worker) or {}
            total = Tally.of(earlier.get("total", {}))
            total.merge(self.tally)
            await saved_reports.save(client, keys, frontier.worker, {
                "total": total.as_dict(), "run": self.tally.as_dict(),
                "started": self.started, "ended": round(time.time(), 3)})
            await client.delete(keys.live(frontier.worker))  # a worker gone fetches nothing
        except (RedisError, RedisClusterException, OSError, TimeoutError) as exc:
            logger.warning("Report: this worker's tally not saved (%s: %s): the crawl's "
                           "report will lack its pages", type(exc).__name__, exc)
            return
        folder = self.folder / crawl_folder(keys.namespace)
        began = time.monotonic()
        try:
            page = await asyncio.to_thread(self._write, frontier.sync_client, keys, folder)
        except OSError as exc:  # the folder: the operator's to mend
            logger.error("Report: could not write %s: %s", folder, exc)
            return
        except Exception as exc:  # the frontier's Redis gone (a cluster's node): the tally
            # is saved, and scrapy frontier report writes the report once it is back
            logger.warning("Report: not written (%s: %s); scrapy frontier report writes it",
                           type(exc).__name__, exc)
            return
        logger.info("Report: %s (and CSV and JSON beside it; written in %.1f s)", page,
                    time.monotonic() - began)

    def _write(self, sync_client: Any, keys: Keys, folder: Path) -> Path:
        client = sync_client()
        try:
            return write(build(FrontierAdmin(client, keys)), folder)
        finally:
            client.close()


def _site(url: str) -> str:
    key = host_key(url)
    return site_of(key) if key else "(not a URL)"


def _seed_url(request: Request) -> str:
    """The seed a request is (or was redirected from)."""
    chain = request.meta.get("redirect_urls") or [request.url]
    return str(chain[0])
