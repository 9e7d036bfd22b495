"""Downloader middleware that notes a request's download error, and the
bytes its answers brought, for its lease.

Placed next to the downloader, its ``process_exception`` sees every exception
first (before retries turn it into a new request). An ``IgnoreRequest``
(robots, limits) is a decision, not an error: the component that raised it
gave the lease its verdict; one that gave none (Scrapy's own, a user's)
leaves a URL that was not fetched, which dies of it (reason ``ignored``),
never done. Its
``process_response`` sees each body as it came (before decompression), for
the site's byte budget.
"""

from __future__ import annotations

from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response

from crawler.lease import ticket_of


class FrontierOutcomeMiddleware:
    """Note the name of a download error, or the size of an answer, on the
    request's ticket, for its lease."""

    def process_response(self, request: Request, response: Response) -> Response:
        ticket = ticket_of(request.meta)
        if ticket is not None:
            ticket.received(len(response.body))
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        ticket = ticket_of(request.meta)
        if ticket is None:
            return
        if isinstance(exception, IgnoreRequest):
            ticket.ignored_by(str(exception) or type(exception).__name__)
        else:
            ticket.failed(type(exception).__name__)
