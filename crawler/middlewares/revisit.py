"""Downloader middleware: ask only for what changed, and note what each answer was.

With revisits on (``FRONTIER_REVISIT_AFTER``), a URL fetched before carries
its last validator on its ticket (:class:`crawler.lease.Ticket`): the request
goes out with ``If-None-Match`` (its ``ETag``) or ``If-Modified-Since`` (its
``Last-Modified``), and a ``304 Not Modified`` is let through to the spider,
flagged ``not_modified`` in ``response.flags`` and ``response.meta``, so that
it is parsed for nothing, archived as a revisit, and pipelines may skip it.

Every answer's payload digest (base32 SHA-1 of the body as it came, the
WARC-Payload-Digest) and validator go onto the ticket: the frontier compares
the digest with the last one to lengthen or shorten the URL's interval
(:mod:`crawler.revisit`). At 640, beside the WARC capture (650): the body is
still as received (decompression is at 590), and a redirect (600) has not
been turned into a new request yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crawler.lease import ticket_of
from crawler.revisit import NOT_MODIFIED, Refetch, not_modified, short_digest, validator_of
from crawler.scheduling.worker import frontier_of
from crawler.warc.records import payload_digest

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

class RevisitMiddleware:
    """Conditional requests for revisits; each answer's digest and validator."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        #: FRONTIER_REVISIT_CONDITIONAL off: refetch in full (the archive still
        #: stores an unchanged payload once, as an identical-payload revisit).
        self.conditional = crawler.settings.getbool("FRONTIER_REVISIT_CONDITIONAL", True)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def _on(self) -> bool:
        frontier = frontier_of(self.crawler)
        return frontier is not None and frontier.leases.revisits is not None

    def process_request(self, request: Request) -> None:
        ticket = ticket_of(request.meta)
        if ticket is None or ticket.revisit is None or not self.conditional:
            return
        headers = ticket.revisit.conditional_headers()
        if not headers:
            return
        for name, value in headers.items():
            request.headers.setdefault(name, value)
        allowed = list(request.meta.get("handle_httpstatus_list", ()))
        if 304 not in allowed:
            request.meta["handle_httpstatus_list"] = [*allowed, 304]
        self.stats.inc_value("revisit/conditional")

    def process_response(self, request: Request, response: Response) -> Response:
        ticket = ticket_of(request.meta)
        if ticket is None or not self._on():
            return response
        if not_modified(response.status, request.headers):
            ticket.fetched(Refetch(validator=validator_of(response.headers), not_modified=True))
            request.meta[NOT_MODIFIED] = True
            response.flags.append(NOT_MODIFIED)
            return response
        digest = short_digest(payload_digest(response.body))
        ticket.fetched(Refetch(digest, validator_of(response.headers)))
        return response
