"""Downloader middleware: what pages teach about their host's URLs, and its use.

On the way out, a claimed URL that a learned rule of its host covers ends
without a request: spelled with a noise parameter (``duplicate-variant``; the
URL without it is offered instead, and the frontier's dedup decides), or of a
pattern refused as a trap (``trap-pattern``). This catches URLs queued
before the rule was learned; new links meet the rules at the frontier's
intake. On the way back, a 200 HTML answer's canonical link, payload and
text sketch are sent to the frontier as evidence
(:class:`crawler.learning.worker.SiteLearning`).

Placed before the robots policy (100), so a URL that is only another
spelling costs no robots check, and, for answers, after decompression (590):
the evidence is the payload as served.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import HtmlResponse

from crawler.learning.rules import TRAP, VARIANT
from crawler.learning.variants import without
from crawler.lease import TICKET_META, ticket_of
from crawler.links import base_url
from crawler.scheduling.worker import frontier_of
from crawler.urls import canonical_url, resolve_link

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from crawler.frontier.values import Lease
    from crawler.learning.worker import SiteLearning
    from crawler.lease import Ticket
    from crawler.scheduling.worker import WorkerFrontier

logger = logging.getLogger(__name__)

_CANONICAL_XPATH = ("//link[contains(concat(' ', normalize-space(translate(@rel, "
                    "'CANONICAL', 'canonical')), ' '), ' canonical ')]/@href")
_LINK_HEADER = re.compile(r'<([^>]*)>\s*;[^,]*?\brel="?canonical\b', re.I)


class SiteLearningMiddleware:
    """Apply the hosts' learned rules to claimed URLs; send pages' evidence."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SiteLearningMiddleware:
        if not crawler.settings.getbool("LEARN_ENABLED", True):
            raise NotConfigured("LEARN_ENABLED is off")
        return cls(crawler)

    def _context(self, request: Request
                 ) -> tuple[WorkerFrontier, SiteLearning, Ticket, Lease] | None:
        """The worker's frontier and learning, and the request's ticket and lease
        (None: not a URL this worker's frontier leased)."""
        frontier = frontier_of(self.crawler)
        ticket = ticket_of(request.meta)
        if frontier is None or frontier.learning is None or ticket is None:
            return None
        lease = frontier.lease_of(ticket.token)
        return None if lease is None else (frontier, frontier.learning, ticket, lease)

    async def process_request(self, request: Request) -> None:
        context = self._context(request)
        if context is None:
            return
        frontier, learning, ticket, lease = context
        rules = await learning.rules_of(lease.host)
        if not rules:
            return
        canon = canonical_url(request.url, frontier.stripper)
        if canon is None:
            return
        pattern = rules.trap(canon)
        if pattern is not None:
            ticket.refuse(TRAP)
            self.stats.inc_value(f"learned/dropped/{TRAP}")
            raise IgnoreRequest(f"{request.url}: of the trap pattern {pattern}")
        if rules.fetched_as_variant(canon):
            ticket.refuse(VARIANT)
            self.stats.inc_value(f"learned/dropped/{VARIANT}")
            self.stats.inc_value("dedup/variant")
            raise IgnoreRequest(f"{request.url}: fetched already, with a noise parameter")
        if rules.variant_of(canon) is not None:
            ticket.refuse(VARIANT)
            self.stats.inc_value(f"learned/dropped/{VARIANT}")
            self.stats.inc_value("dedup/variant")
            meta = {k: v for k, v in request.meta.items() if k != TICKET_META}
            self.crawler.engine.crawl(request.replace(url=without(request.url, rules.noise),
                                                      meta=meta))
            raise IgnoreRequest(f"{request.url}: a spelling of a page with a noise parameter")

    def process_response(self, request: Request, response: Response) -> Response:
        if response.status != 200 or not isinstance(response, HtmlResponse):
            return response
        context = self._context(request)
        if context is None:
            return response
        frontier, learning, _, lease = context
        canon = canonical_url(request.url, frontier.stripper)
        if canon is not None:
            # (the site's delay: its evidence is sent within half of it)
            learning.observe(lease.host, canon, response.body,
                             declared_canonical(response, frontier.stripper),
                             max(lease.pacing) / 1000)
        return response


def declared_canonical(response: HtmlResponse, stripper: object) -> str | None:
    """The canonical URL a page declares (its ``Link`` header first, then
    ``<link rel=canonical>``), as an identity; None without one."""
    header = response.headers.get(b"Link")
    href, base = None, response.url  # a header's link is relative to the page's URL
    if header:
        match = _LINK_HEADER.search(header.decode("latin-1"))
        href = match.group(1) if match else None
    if href is None:
        href, base = response.xpath(_CANONICAL_XPATH).get(), base_url(response)
    if not href:
        return None
    resolved = resolve_link(href, base, response.encoding)
    return None if resolved is None else canonical_url(resolved, stripper)  # type: ignore[arg-type]
