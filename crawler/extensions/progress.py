"""Extension: the periodic progress line, for the person at the terminal.

Replaces Scrapy's ``LogStats`` (same ``LOGSTATS_INTERVAL``, same final
``responses_per_minute`` stats) with a line that says what a broad crawl's
operator wants to know every minute::

    Crawled 5120 pages (at 610 pages/min, 540 useful), 2.1% errors; frontier:
    48211 queued, 64 leased, 12 delayed, 3 dead; hosts: 210 ready, 1480
    waiting, 2 breaker-open

"useful" pages are 2xx answers; errors are download exceptions and 5xx
answers, as a share of everything the downloader finished in the interval.
Hosts "waiting" have a next-allowed time in the future: paced by their
delay, backing off after a 429/503, or cooling down behind an open breaker.
The frontier part comes from Redis (one pipelined round trip); when there is
no frontier, or Redis does not answer in time, the line has the pages part only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from scrapy.extensions.logstats import LogStats
from scrapy.utils.defer import deferred_from_coro

from crawler.frontier.scheduler import scheduler_of

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class ProgressLog(LogStats):
    """Scrapy's LogStats, with useful pages, the error rate and the frontier."""

    crawler: Crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        ext = super().from_crawler(crawler)
        ext.crawler = crawler
        ext._prev = {"useful": 0, "errors": 0, "finished": 0}
        return ext

    def log(self, spider: Spider) -> None:
        self.calculate_stats()
        useful, errors, finished = self._interval_counts()
        line = (f"Crawled {self.pages} pages (at {self.prate:.0f} pages/min, "
                f"{useful * self.multiplier:.0f} useful), "
                f"{100 * errors / finished if finished else 0:.1f}% errors")
        deferred_from_coro(self._log_with_frontier(line, spider))

    async def _log_with_frontier(self, line: str, spider: Spider) -> None:
        scheduler = scheduler_of(self.crawler)
        frontier = scheduler.frontier if scheduler is not None else None
        if frontier is not None:
            try:
                line += "; " + await asyncio.wait_for(_frontier_part(frontier), timeout=5)
            except Exception as exc:  # the progress line must never break the crawl
                logger.debug("Progress: frontier not read: %s", exc)
        logger.info(line, extra={"spider": spider})

    def _interval_counts(self) -> tuple[int, int, int]:
        """2xx answers, errors and everything finished since the last line."""
        stats = self.stats.get_stats()
        prefix = "downloader/response_status_count/"
        useful = sum(v for k, v in stats.items() if k.startswith(prefix + "2"))
        errors = stats.get("downloader/exception_count", 0) + sum(
            v for k, v in stats.items() if k.startswith(prefix + "5"))
        finished = stats.get("downloader/response_count", 0) + stats.get(
            "downloader/exception_count", 0)
        now = {"useful": useful, "errors": errors, "finished": finished}
        delta = [now[k] - self._prev[k] for k in ("useful", "errors", "finished")]
        self._prev = now
        return delta[0], delta[1], delta[2]


async def _frontier_part(frontier: object) -> str:
    """``frontier: ... queued, ...; hosts: ... ready, ... waiting, ... breaker-open``."""
    counts = await frontier.counts()  # type: ignore[attr-defined]
    ready, waiting = await frontier.ready_hosts()  # type: ignore[attr-defined]
    return (f"frontier: {counts['queued']} queued, {counts['leased']} leased, "
            f"{counts['delayed']} delayed, {counts['dead']} dead; hosts: {ready} ready, "
            f"{waiting} waiting, {counts.get('breaker_open', 0)} breaker-open")
