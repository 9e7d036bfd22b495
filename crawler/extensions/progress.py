"""Extension: the periodic progress line, for the person at the terminal.

Replaces Scrapy's ``LogStats`` (same ``LOGSTATS_INTERVAL``, same final
``responses_per_minute`` stats) with a line that says what a broad crawl's
operator wants to know every minute, each number named by what it counts::

    Progress: 5120 pages fetched; last 60 s: 610 pages/min (540 2xx answers/min),
    errors 2.1% of 640 downloads; frontier: 48211 URLs queued, 64 leased,
    12 delayed, 3 dead letters; hosts: 210 ready, 1480 waiting, 2 breaker-open

"pages" are responses other than robots.txt (the end-of-crawl summary counts
the same, :mod:`crawler.extensions.summary`). "errors" are downloads that
failed on the network (timeouts, refused or reset connections, TLS errors,
failed DNS lookups) and 5xx answers, as a share of the downloads that went to
the network and finished in the interval (robots.txt fetches included):
:func:`download_totals`. Shown only over at least ``PROGRESS_MIN_ERROR_SAMPLE``
(20) downloads, else ``errors -``: one timeout in an idle minute is not "100% errors".

Scrapy counts every exception that ends a request in the downloader
middlewares as a download exception (``downloader/exception_count`` and
``downloader/exception_type_count/<type>``), also an ``IgnoreRequest`` raised
by a middleware's ``process_request`` before anything was sent: a robots.txt
denial, a learned duplicate or trap, an address-guard refusal, a URL given back
to the frontier by the pacing gate or sent to wait for its retry. Those are
the crawler's decisions, not failures, and no download happened: counting them
made a healthy crawl show "errors 49.4%". So an exception type is a failure,
and a download, only if it is no ``IgnoreRequest``; a body cut at
``DOWNLOAD_MAXSIZE`` (``DownloadCancelledError``) is a download but no failure
(the crawler's limit, not the host's fault). A failed lookup that the DNS step
turns into a host outcome never reaches Scrapy's counter: it is counted from
``dns/requests/<kind>`` instead.
Hosts "waiting" have a next-allowed time in the future: paced by their
delay, backing off after a 429/503, or cooling down behind an open breaker.
The frontier part comes from Redis (one pipelined round trip); when there is
no frontier, or Redis does not answer in time, the line has the pages part only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from scrapy.exceptions import DownloadCancelledError, IgnoreRequest
from scrapy.extensions.logstats import LogStats
from scrapy.utils.defer import deferred_from_coro

from crawler.extensions.summary import PAGES_STAT
from crawler.frontier.keys import Count
from crawler.scheduling.worker import frontier_of

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

EXCEPTION_PREFIX = "downloader/exception_type_count/"
STATUS_PREFIX = "downloader/response_status_count/"
#: Page requests whose lookup failed, turned into host outcomes by the DNS step
#: (crawler/middlewares/dns.py) before Scrapy's downloader stats see them.
DNS_FAILED_PREFIX = "dns/requests/"

#: What an exception that ended a request says of its download (:func:`exception_kind`).
ExceptionKind = Literal["decision", "cut", "failure"]


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
        frontier = frontier_of(self.crawler)
        if frontier is not None:
            try:
                line += "; " + await asyncio.wait_for(_frontier_part(frontier.store), timeout=5)
            except Exception as exc:  # the progress line must never break the crawl
                logger.debug("Progress: frontier not read: %s", exc)
            if frontier.paused:
                line += f"; this worker is PAUSED ({frontier.paused})"
        logger.info(line, extra={"spider": spider})

    def _interval_counts(self, stats: dict[str, Any], pages: int) -> dict[str, int]:
        """Pages, 2xx answers, errors and finished downloads since the last line."""
        now = {"pages": pages, **download_totals(stats)}
        delta = {k: now[k] - self._prev[k] for k in now}
        self._prev = now
        return delta


def download_totals(stats: Mapping[str, Any]) -> dict[str, int]:
    """Since the crawl began: ``useful`` (2xx answers), ``errors`` (network failures
    and 5xx answers) and ``finished`` (downloads that went to the network and ended:
    answers, network failures, bodies cut at the size limit).

    Decisions (``IgnoreRequest`` and its subclasses) count in neither: see the
    module docstring for which stats feed which number and why.
    """
    useful = server_errors = failed = cut = 0
    for key, value in stats.items():
        if key.startswith(STATUS_PREFIX):
            status_class = key[len(STATUS_PREFIX):len(STATUS_PREFIX) + 1]
            if status_class == "2":
                useful += value
            elif status_class == "5":
                server_errors += value
        elif key.startswith(EXCEPTION_PREFIX):
            kind = exception_kind(key[len(EXCEPTION_PREFIX):])
            if kind == "failure":
                failed += value
            elif kind == "cut":
                cut += value
        elif key.startswith(DNS_FAILED_PREFIX):
            failed += value
    answers = int(stats.get("downloader/response_count", 0))
    return {"useful": useful, "errors": failed + server_errors,
            "finished": answers + failed + cut}


@functools.cache
def exception_kind(type_name: str) -> ExceptionKind:
    """What an exception type counted by Scrapy's ``DownloaderStats`` (named as
    ``global_object_name`` writes it: ``module.QualName``) says of a download:
    ``decision`` (an ``IgnoreRequest``: nothing was sent), ``cut`` (a body cut at
    ``DOWNLOAD_MAXSIZE``) or ``failure``.

    The type is found among the modules already imported (it was raised, so its
    module is), never by importing one; a type that cannot be found is a failure:
    an exception nobody decided on is more likely a fault than a decision.
    """
    found = _imported_object(type_name)
    if isinstance(found, type) and issubclass(found, IgnoreRequest):
        return "decision"
    if isinstance(found, type) and issubclass(found, DownloadCancelledError):
        return "cut"
    return "failure"


def _imported_object(dotted: str) -> object | None:
    """``a.b.C.D`` as module ``a.b`` (the longest imported prefix), then attributes."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:split]))
        if module is None:
            continue
        found: object = module
        for name in parts[split:]:
            found = getattr(found, name, None)
            if found is None:
                return None
        return found
    return None


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
