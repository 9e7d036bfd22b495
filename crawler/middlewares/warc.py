"""Downloader middleware: archive every response as it was received.

At priority 650 this middleware sees a response
before ``RedirectMiddleware`` (600) turns a 3xx into a new request, before
``HttpCompressionMiddleware`` (590) decodes the body and before the retry
policy (550) turns a 429 into a wait. So the archive holds what the server
sent - the compressed body with its ``Content-Encoding``, each redirect hop,
each error status and each retried answer - and robots.txt fetches, which
never reach a spider. Requests are archived as Scrapy sends them, with the
``Host`` header Twisted adds and without proxy credentials.

Writing happens on the archive's thread (:mod:`crawler.warc.writer`); this
method only waits when the writer's queue is full, which is how a slow disk
slows the crawl. The record's future goes into ``request.meta["warc"]`` so
that :class:`crawler.pipelines.warc.WarcPipeline` can say where the page went,
and onto the request's lease ticket: the page counts as done only once its
records are written (:mod:`crawler.scheduling.leases`).
"""

from __future__ import annotations

import http
import time
from typing import TYPE_CHECKING, Any

from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.defer import Deferred

from crawler.lease import ticket_of
from crawler.revisit import not_modified
from crawler.robots.fetch import ROBOTS_FETCH_META
from crawler.warc.exchange import TRUNCATED_DISCONNECT, TRUNCATED_LENGTH, Exchange
from crawler.wiretap import tap_of, without_fields

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from crawler.pipelines.warc import Archive

#: ``request.meta`` key holding the Future of the response's WARC record.
WARC_META = "warc"
#: Request headers never archived: credentials for a proxy are not the page's.
_SECRET_HEADERS = frozenset({"proxy-authorization"})
#: Response headers left out: the archived body is de-chunked already.
_TRANSFER_HEADERS = frozenset({"transfer-encoding"})
#: The same, as the raw heads' lower-case names.
_RAW_SECRET = frozenset(name.encode() for name in _SECRET_HEADERS)
_RAW_TRANSFER = frozenset(name.encode() for name in _TRANSFER_HEADERS)


class WarcCaptureMiddleware:
    """Hand each response, with its request, to the crawl's archive."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._archive: Archive | None = None
        self._looked = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    @property
    def archive(self) -> Archive | None:
        """The WARC pipeline's archive (None: archiving is off). Looked up at the
        first response: the pipelines are made after this middleware."""
        if not self._looked:
            from crawler.pipelines.warc import archive_of

            self._archive, self._looked = archive_of(self.crawler), True
        return self._archive

    async def process_response(self, request: Request, response: Response) -> Response:
        archive = self.archive
        writer = archive.writer if archive is not None else None
        if writer is None:  # archiving is off, or the crawl is closing
            return response
        record = await writer.put(capture(request, response))
        request.meta[WARC_META] = record
        ticket = ticket_of(request.meta)
        if ticket is not None:  # the lease ends once the record is written
            ticket.archiving(own_copy(record))
        return response


def own_copy(record: Deferred[Any]) -> Deferred[Any]:
    """A Deferred of its own with ``record``'s outcome: the pipeline's await
    consumes ``record``'s result, and the lease must still read it."""
    copy: Deferred[Any] = Deferred()

    def hand_on(outcome: Any) -> Any:
        copy.callback(outcome)
        return outcome

    record.addBoth(hand_on)
    return copy


def capture(request: Request, response: Response) -> Exchange:
    """The :class:`Exchange` of ``request`` and ``response`` (plain data only),
    with the heads as they went over the wire when the download kept them."""
    tap = tap_of(request)
    return Exchange(
        url=response.url,
        method=request.method,
        request_headers=_request_headers(request),
        request_body=request.body,
        status=response.status,
        reason=_reason(response.status),
        response_headers=[(k, v) for k, v in _headers(response.headers)
                          if k.lower() not in _TRANSFER_HEADERS],
        body=response.body,
        received_at=time.time(),
        protocol=response.protocol or "HTTP/1.1",
        # Through a proxy the peer is the proxy, not the server.
        ip_address=None if request.meta.get("proxy") or response.ip_address is None
        else str(response.ip_address),
        truncated=_truncated(response.flags),
        kind="robots" if request.meta.get(ROBOTS_FETCH_META) else "page",
        not_modified_of=_not_modified_of(request, response),
        request_head=without_fields(tap.sent, _RAW_SECRET) if tap and tap.sent else None,
        response_head=(without_fields(tap.head, _RAW_TRANSFER)
                       if tap and tap.head and _answers(tap.head, response) else None),
    )


def _answers(head: bytes, response: Response) -> bool:
    """Whether the head the tap kept is this response's (a response a
    middleware made up, a cached one, has none of its own)."""
    return head.split(b" ", 2)[1:2] == [str(response.status).encode()]


def _not_modified_of(request: Request, response: Response) -> str | None:
    """The digest of the capture a 304 stands for: the one the frontier kept for
    the URL, when the request was made conditional on it."""
    if not not_modified(response.status, request.headers):
        return None
    ticket = ticket_of(request.meta)
    if ticket is None or ticket.revisit is None or not ticket.revisit.digest:
        return None
    return f"sha1:{ticket.revisit.digest}"


def _request_headers(request: Request) -> list[tuple[str, str]]:
    parsed = urlparse_cached(request)
    headers = [("Host", parsed.netloc.rpartition("@")[2])]
    headers += [(k, v) for k, v in _headers(request.headers)
                if k.lower() not in _SECRET_HEADERS and k.lower() != "host"]
    return headers


def _headers(headers: object) -> list[tuple[str, str]]:
    return [(key.decode("latin-1"), value.decode("latin-1"))
            for key, values in headers.items()  # type: ignore[attr-defined]
            for value in values]


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def _truncated(flags: list[str]) -> str | None:
    if "download_stopped" in flags:  # cut on purpose (robots.txt past its size limit)
        return TRUNCATED_LENGTH
    if "dataloss" in flags or "partial" in flags:
        return TRUNCATED_DISCONNECT
    return None
