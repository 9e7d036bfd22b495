"""Spider middleware that decides which discovered requests enter the crawl.

It applies :mod:`crawler.admission` to every request a spider yields (seeds
included): URLs with no canonical form, trap URLs and URLs of hosts that
already used their page budget are dropped before they reach the scheduler,
so they cost neither queue memory nor a download slot.

The per-host budget counts distinct canonical URLs admitted in this process.
Once the Redis frontier owns admission it counts them for every worker.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy.exceptions import NotConfigured
from scrapy.spidermiddlewares.base import BaseSpiderMiddleware

from crawler.admission import TrapRules
from crawler.urls import canonical_host_key, canonical_url, stripper_from_settings, url_fingerprint

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


class AdmissionMiddleware(BaseSpiderMiddleware):
    """Drop trap URLs and URLs past a host's page budget.

    Settings: ``ADMISSION_ENABLED``, ``ADMISSION_MAX_PAGES_PER_HOST`` (0 means
    no cap) and the ``ADMISSION_TRAP_*`` rules of :class:`TrapRules`. Stats:
    ``admission/admitted``, ``admission/refused/<reason>``. A request with
    ``meta["dont_admit"] = True`` skips the checks (internal requests).
    """

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        settings = crawler.settings
        if not settings.getbool("ADMISSION_ENABLED", True):
            raise NotConfigured("ADMISSION_ENABLED is False")
        self.stats = crawler.stats
        self.traps = TrapRules.from_settings(settings)
        self.max_pages = settings.getint("ADMISSION_MAX_PAGES_PER_HOST", 0)
        self.stripper = stripper_from_settings(settings)
        self._admitted: dict[str, set[bytes]] = {}
        self._full_hosts_logged: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> AdmissionMiddleware:
        return cls(crawler)

    def get_processed_request(self, request: Request, response: Response | None) -> Request | None:
        if request.meta.get("dont_admit"):
            return request
        reason = self.refusal(request.url)
        if reason is None:
            self.stats.inc_value("admission/admitted")
            return request
        self.stats.inc_value(f"admission/refused/{reason}")
        logger.debug("Not admitted (%s): %s", reason, request.url, extra={"reason": reason})
        return None

    def refusal(self, url: str) -> str | None:
        """Why ``url`` may not enter the crawl, or ``None`` when it may."""
        canon = canonical_url(url, self.stripper)
        if canon is None:
            return "not-http-url"
        trap = self.traps.check(canon)
        if trap is not None:
            return trap
        return self._charge_host(canon)

    def _charge_host(self, canon: str) -> str | None:
        if not self.max_pages:
            return None
        host = canonical_host_key(canon)
        seen = self._admitted.setdefault(host, set())
        fingerprint = url_fingerprint(canon)
        if fingerprint in seen:
            return None  # a duplicate: the dupefilter drops it, it costs no budget
        if len(seen) >= self.max_pages:
            if host not in self._full_hosts_logged:
                self._full_hosts_logged.add(host)
                logger.info("Host reached its page budget of %d", self.max_pages,
                            extra={"host": host})
            return "host-budget"
        seen.add(fingerprint)
        return None
