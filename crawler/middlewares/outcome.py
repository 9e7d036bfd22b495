"""Downloader middleware that notes a request's download error for its lease.

Placed next to the downloader, its ``process_exception`` sees every exception
first (before retries turn it into a new request). An ``IgnoreRequest``
(robots, limits) is a decision, not an error: the lease ends as done.
"""

from __future__ import annotations

from scrapy import Request
from scrapy.exceptions import IgnoreRequest

from crawler.lease import ticket_of


class FrontierOutcomeMiddleware:
    """Note the name of a download error on the request's ticket, for its lease."""

    def process_exception(self, request: Request, exception: Exception) -> None:
        ticket = ticket_of(request.meta)
        if ticket is not None and not isinstance(exception, IgnoreRequest):
            ticket.failed(type(exception).__name__)
