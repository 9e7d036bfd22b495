"""Downloader middleware: no page request that robots.txt disallows.

Replaces Scrapy's ``RobotsTxtMiddleware``, which fails open (a robots.txt
that times out means "allow everything") and keeps a per-process cache with
no expiry. Here the frontier decides *when* a host may be contacted (not
before its robots.txt is resolved, for every worker) and this middleware
decides *whether* a page may be: against the rules the frontier stored for
the host, at the version the page's lease was claimed under.

A disallowed URL is not an error: its lease ends refused, reason
``robots`` (stats ``robots/denied``; ``scrapy frontier refused``), never
done. ``dont_obey_robotstxt`` in a request's meta skips the check, as in
Scrapy.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NoReturn

from scrapy.exceptions import IgnoreRequest, NotConfigured

from crawler.lease import ticket_of
from crawler.robots.fetch import ROBOTS_FETCH_META
from crawler.scheduling.worker import frontier_of

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: How a refusal by robots.txt starts (the crawl report counts them by it).
DENIED_MESSAGE = "forbidden by robots.txt"

#: The reason a disallowed page's lease is refused with.
DENIED_REASON = "robots"


class RobotsPolicyMiddleware:
    """Check each page request against its host's robots rules."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._warned = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RobotsPolicyMiddleware:
        if not crawler.settings.getbool("ROBOTSTXT_OBEY"):
            raise NotConfigured("ROBOTSTXT_OBEY is off")
        return cls(crawler)

    async def process_request(self, request: Request) -> None:
        meta = request.meta
        if meta.get(ROBOTS_FETCH_META) or meta.get("dont_obey_robotstxt"):
            return
        frontier = frontier_of(self.crawler)
        ticket = ticket_of(meta)
        host = frontier.host_of(ticket.token) if frontier is not None and ticket else None
        if host is None or ticket is None or frontier is None or frontier.robots is None:
            self._not_from_frontier(request)
        rules = await frontier.robots.rules_for(host, ticket.robots_version)
        if rules is None:
            # The frontier said robots was known but holds no rules (an
            # operator deleted them?): fail closed, the URL is tried later.
            ticket.retry_after(frontier.limits.lease_ms)
            self.crawler.stats.inc_value("robots/missing_rules")
            raise IgnoreRequest(f"no robots rules stored for {host}")
        if not rules.allowed(request.url):
            ticket.refuse(DENIED_REASON)
            self.crawler.stats.inc_value("robots/denied")
            logger.debug("Forbidden by robots.txt: %s", request.url,
                         extra={"url": request.url, "host": host})
            raise IgnoreRequest(f"{DENIED_MESSAGE}: {request.url}")
        self.crawler.stats.inc_value("robots/allowed")

    def _not_from_frontier(self, request: Request) -> NoReturn:
        """A request that did not come from the frontier cannot be checked: refused."""
        self.crawler.stats.inc_value("robots/unchecked")
        if not self._warned:
            self._warned = True
            logger.error(
                "Robots policy: %s did not come from the frontier scheduler, so its "
                "robots.txt is unknown and it is not sent. The policy needs SCHEDULER = "
                "'crawler.scheduling.scheduler.FrontierScheduler' (or ROBOTSTXT_OBEY = False, "
                "or dont_obey_robotstxt in the request's meta)", request.url)
        raise IgnoreRequest(f"robots.txt unknown: {request.url}")
