"""Downloader middleware: retries that wait in the frontier, and host backoff.

Replaces Scrapy's ``RetryMiddleware``, which ignores ``Retry-After`` and
re-queues at once (scrapy/scrapy#3849). Here a transient failure (a status in
``RETRY_HTTP_CODES`` or an exception in ``RETRY_EXCEPTIONS``) sends the URL to
the frontier's *delayed* state for the wait the server asked for
(``Retry-After``, seconds or HTTP date, capped by ``RETRY_AFTER_MAX``) or, when
it said nothing, an exponential backoff with full jitter
(``RETRY_BACKOFF_BASE`` x 2^attempt, capped by ``RETRY_BACKOFF_MAX``). The
worker keeps nothing while it waits: no slot, no memory. A 429 or 503 also
holds the whole host back for every worker (``BACKOFF_HTTP_CODES``). After
``RETRY_TIMES`` retries the URL is dead with its reason and last error.

Every outcome is also a health report for the host's circuit breaker: a 5xx
or a network error is a failure, any other answer a success.

Under Scrapy's own scheduler (no frontier, so no lease to delay) a retry is
what Scrapy's ``RetryMiddleware`` does: the request again at once, up to
``RETRY_TIMES``, with the same ``retry/*`` stats.

The decision is a verb on the request's ticket (:mod:`crawler.lease`); the
scheduler turns it into the lease's release.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.retry import get_retry_request
from scrapy.exceptions import DownloadCancelledError, IgnoreRequest, NotConfigured
from scrapy.utils.misc import load_object

from crawler.backoff import full_jitter, retry_after_seconds
from crawler.deadletter import DeadReason
from crawler.lease import Ticket, ticket_of
from crawler.scheduling.scheduler import uses_frontier
from crawler.scheduling.worker import frontier_of
from crawler.signals import retry_after_applied

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

__all__ = ["RetryPolicyMiddleware", "full_jitter", "retry_after_seconds"]


class RetryPolicyMiddleware:
    """Classify each answer: retry later, give up, and tell the host's health."""

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.max_retries = s.getint("RETRY_TIMES")
        #: Under another scheduler there are no leases to delay: retry as Scrapy does.
        self.on_frontier = uses_frontier(s)
        self.codes = {int(c) for c in s.getlist("RETRY_HTTP_CODES")}
        self.backoff_codes = {int(c) for c in s.getlist("BACKOFF_HTTP_CODES", [429, 503])}
        self.base = s.getfloat("RETRY_BACKOFF_BASE", 1.0)
        self.cap = s.getfloat("RETRY_BACKOFF_MAX", 600.0)
        self.after_max = s.getfloat("RETRY_AFTER_MAX", 3600.0)
        self.exceptions = tuple(
            load_object(e) if isinstance(e, str) else e for e in s.getlist("RETRY_EXCEPTIONS"))

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RetryPolicyMiddleware:
        if not crawler.settings.getbool("RETRY_ENABLED"):
            raise NotConfigured("RETRY_ENABLED is off")
        return cls(crawler)

    def process_response(self, request: Request, response: Response) -> Response:
        ticket = ticket_of(request.meta)
        if ticket is None:
            if self.on_frontier or response.status not in self.codes:
                return response  # a robots.txt fetch: its policy retries it
            return self._at_once(request, f"http-{response.status}") or response
        status = response.status
        health = "fail" if status >= 500 else "ok"
        if status not in self.codes or request.meta.get("dont_retry"):
            ticket.done(health)
            return response
        wait = self._wait(request, response)
        hold = wait if status in self.backoff_codes else 0.0
        if hold:
            self.stats.inc_value("backoff/host_holds")
            frontier = frontier_of(self.crawler)
            if frontier is not None:
                frontier.hold_now(ticket.token, hold)
        self._retry_or_give_up(request, ticket, f"http-{status}", f"HTTP {status}", wait,
                               hold, health)
        return response  # given up: the spider still sees the answer

    def process_exception(self, request: Request, exception: Exception) -> Request | None:
        ticket = ticket_of(request.meta)
        if ticket is None:
            if self.on_frontier or not isinstance(exception, self.exceptions):
                return None
            return self._at_once(request, "download-error")
        if isinstance(exception, DownloadCancelledError):
            # Scrapy cancels a body past DOWNLOAD_MAXSIZE: not transient, not the
            # host's fault; fetching it again would only cut it again.
            self.stats.inc_value("download/aborted/too-large")
            ticket.dead(DeadReason.now("too-large", str(exception)[:200]))
            return None
        if not isinstance(exception, self.exceptions) or request.meta.get("dont_retry"):
            return None
        attempt = request.meta.get("retry_times", 0) + 1
        wait = full_jitter(attempt - 1, self.base, self.cap)
        error = f"{type(exception).__name__}: {exception}"[:200].rstrip(": ")
        self._retry_or_give_up(request, ticket, "download-error", error, wait, 0.0, "fail")
        return None

    def _at_once(self, request: Request, reason: str) -> Request | None:
        """A retry under Scrapy's own scheduler: the same request again, now
        (Scrapy's ``get_retry_request``: ``RETRY_TIMES``, the ``retry/*`` stats,
        ``dont_retry``). Without the frontier nothing can wait outside a
        download slot, so ``Retry-After``, host holds and breakers do not apply."""
        if request.meta.get("dont_retry"):
            return None
        return get_retry_request(request, spider=self.crawler.spider, reason=reason,
                                 max_retry_times=request.meta.get("max_retry_times",
                                                                  self.max_retries))

    def _retry_or_give_up(self, request: Request, ticket: Ticket, reason: str, error: str,
                          wait: float, hold: float, health: str) -> None:
        """Delay the URL in the frontier (raising IgnoreRequest), or mark it dead."""
        attempt = request.meta.get("retry_times", 0) + 1
        max_retries = request.meta.get("max_retry_times", self.max_retries)
        hold_ms = round(hold * 1000)
        if attempt > max_retries:
            self.stats.inc_value("retry/max_reached")
            self.stats.inc_value(f"retry/gave_up/{reason}")
            ticket.dead(DeadReason.now(reason, error, attempt), health=health, hold_ms=hold_ms)
            return
        request.meta["retry_times"] = attempt
        ticket.retry_after(round(wait * 1000), health=health, hold_ms=hold_ms)
        self.stats.inc_value("retry/count")
        self.stats.inc_value(f"retry/reason_count/{reason}")
        logger.debug("Retrying %s in %.1f s (attempt %d, %s)", request.url, wait, attempt,
                     error, extra={"url": request.url, "retry_in": wait, "error": error})
        raise IgnoreRequest(f"retry in {wait:.1f} s: {error}")

    def _wait(self, request: Request, response: Response) -> float:
        asked = retry_after_seconds(response.headers.get(b"Retry-After"), time.time())
        if asked is None:
            attempt = request.meta.get("retry_times", 0)
            return full_jitter(attempt, self.base, self.cap)
        self.stats.inc_value("retry/retry_after")
        if asked > self.after_max:
            self.stats.inc_value("retry/retry_after_capped")
            logger.info("Retry-After of %.0f s from %s capped to %.0f s (RETRY_AFTER_MAX)",
                        asked, request.url, self.after_max, extra={"url": request.url})
            asked = self.after_max
        self.crawler.signals.send_catch_log(retry_after_applied, url=request.url, seconds=asked)
        return asked

