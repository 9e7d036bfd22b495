"""Downloader middleware: the frontier's last gate before a request is sent.

The frontier spaces *claims* of a host's URLs by the host's delay. Between a
claim and the moment bytes leave, a URL can wait in its worker (a busy
reactor, the robots.txt middleware), and different workers wait differently,
so claims alone cannot keep two workers' requests to one host apart. This
middleware, placed last before the downloader, asks the frontier (one small
script, about a tenth of a millisecond on a local Redis) whether the host may
be contacted now and waits the few milliseconds it is told when not. In the
normal case the answer is "now" and nothing waits.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from crawler.frontier.scheduler import LEASE_META, scheduler_of

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

_MAX_WAIT_S = 60.0


class FrontierPacingMiddleware:
    """Space the starts of requests to one host across all workers."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierPacingMiddleware:
        return cls(crawler)

    async def process_request(self, request: Request) -> None:
        token = request.meta.get(LEASE_META)
        scheduler = scheduler_of(self.crawler)
        if token is None or scheduler is None or scheduler.frontier is None:
            return
        if not scheduler.may_gate:
            return  # no delay anywhere: the gate could only ever say "now"
        host = scheduler.host_of(token)
        if host is None:
            return
        waited = 0.0
        while waited < _MAX_WAIT_S:
            try:
                wait_ms = await scheduler.frontier.start_gate(host)
            except (RedisError, OSError):
                return  # Redis trouble is the scheduler's to report; claims were paced
            if wait_ms <= 0:
                break
            self.crawler.stats.inc_value("frontier/pacing/waits")
            await asyncio.sleep(wait_ms / 1000)
            waited += wait_ms / 1000
