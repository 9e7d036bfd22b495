"""Extension: the periodic progress line, for the person at the terminal.

Replaces Scrapy's ``LogStats`` (same ``LOGSTATS_INTERVAL``, same final
``responses_per_minute`` stats) with a line that says what a broad crawl's
operator wants to know every minute, each number named by what it counts::

    Progress: 5120 pages fetched; last 60 s: 610 pages/min (540 2xx answers/min),
    errors 2.1% of 640 downloads; frontier: 48211 URLs queued, 64 leased,
    12 delayed, 3 dead letters; hosts: 210 ready, 1480 waiting, 2 breaker-open

"pages" are responses other than robots.txt (the end-of-crawl summary counts
the same, :mod:`crawler.extensions.summary`); "errors" are download exceptions
and 5xx answers, as a share of every download (robots.txt included) that
finished in the interval, shown only over at least
``PROGRESS_MIN_ERROR_SAMPLE`` (20) downloads, else ``errors -``: one timeout
in an idle minute is not "100% errors".
Hosts "waiting" have a next-allowed time in the future: paced by their
delay, backing off after a 429/503, or cooling down behind an open breaker.
The frontier part comes from Redis (one pipelined round trip); when there is
no frontier, or Redis does not answer in time, the line has the pages part only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from scrapy.extensions.logstats import LogStats
from scrapy.utils.defer import deferred_from_coro

from crawler.extensions.summary import PAGES_STAT
from crawler.frontier.keys import Count
from crawler.scheduling.scheduler import scheduler_of

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class ProgressLog(LogStats):
    """Scrapy's LogStats, with pages (not robots.txt), 2xx answers, errors and the frontier."""

    crawler: Crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        ext = super().from_crawler(crawler)
        ext.crawler = crawler
        ext.min_sample = crawler.settings.getint("PROGRESS_MIN_ERROR_SAMPLE", 20)
        ext._prev = {"pages": 0, "useful": 0, "errors": 0, "finished": 0}
        return ext

    def log(self, spider: Spider) -> None:
        self.calculate_stats()
        stats = self.stats.get_stats()
        pages = stats.get(PAGES_STAT, stats.get("response_received_count", 0))
        delta = self._interval_counts(stats, pages)
        deferred_from_coro(self._log_with_frontier(
            progress_text(pages, delta, self.multiplier, self.interval, self.min_sample),
            spider))

    async def _log_with_frontier(self, line: str, spider: Spider) -> None:
        scheduler = scheduler_of(self.crawler)
        frontier = scheduler.frontier if scheduler is not None else None
        if frontier is not None:
            try:
                line += "; " + await asyncio.wait_for(_frontier_part(frontier), timeout=5)
            except Exception as exc:  # the progress line must never break the crawl
                logger.debug("Progress: frontier not read: %s", exc)
        logger.info(line, extra={"spider": spider})

    def _interval_counts(self, stats: dict[str, Any], pages: int) -> dict[str, int]:
        """Pages, 2xx answers, errors and finished downloads since the last line."""
        prefix = "downloader/response_status_count/"
        useful = sum(v for k, v in stats.items() if k.startswith(prefix + "2"))
        errors = stats.get("downloader/exception_count", 0) + sum(
            v for k, v in stats.items() if k.startswith(prefix + "5"))
        finished = stats.get("downloader/response_count", 0) + stats.get(
            "downloader/exception_count", 0)
        now = {"pages": pages, "useful": useful, "errors": errors, "finished": finished}
        delta = {k: now[k] - self._prev[k] for k in now}
        self._prev = now
        return delta


def progress_text(pages: int, delta: dict[str, int], per_minute: float, seconds: float,
                  min_sample: int = 20) -> str:
    """The pages part of the line: totals, the interval's rates, its error share.

    ``delta``: the interval's ``pages``, ``useful``, ``errors`` and
    ``finished`` counts; ``per_minute``: what makes an interval count a rate.
    """
    finished = delta["finished"]
    errors = (f"errors {100 * delta['errors'] / finished:.1f}% of {finished} downloads"
              if finished >= min_sample and finished else
              f"errors - ({finished} downloads)")
    return (f"Progress: {pages} pages fetched; last {seconds:g} s: "
            f"{delta['pages'] * per_minute:.0f} pages/min "
            f"({delta['useful'] * per_minute:.0f} 2xx answers/min), {errors}")


async def _frontier_part(frontier: object) -> str:
    """``frontier: ... queued, ...; hosts: ... ready, ... waiting, ... breaker-open``."""
    counts = await frontier.counts()  # type: ignore[attr-defined]
    ready, waiting = await frontier.ready_hosts()  # type: ignore[attr-defined]
    return (f"frontier: {counts[Count.QUEUED]} URLs queued, {counts[Count.LEASED]} leased, "
            f"{counts[Count.DELAYED]} delayed, {counts[Count.DEAD]} dead letters; hosts: "
            f"{ready} ready, {waiting} waiting, {counts.get(Count.BREAKER_OPEN, 0)} breaker-open")
