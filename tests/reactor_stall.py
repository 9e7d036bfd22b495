"""A test-only downloader middleware: the reactor stalls just after a request
passed the frontier's start gate, and meanwhile another worker takes the
host's next turn.

This is the chaos soak's finding 8 made exact. Placed after the pacing
middleware, it lets the first gated request go on, and on the next reactor
turn (while that request connects and is written) blocks the reactor for
``STALL_SECONDS``. At the end of the stall a phantom worker passes the gate
for the same host, straight in Redis as any other worker would, and the
moment it did is logged. A crawler that sent its stale turn now would reach
the host right after the phantom's turn.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import redis
from twisted.internet import reactor

from crawler.frontier.pacing import GATE_META
from crawler.frontier.scheduler import LEASE_META, scheduler_of
from crawler.frontier.store import script_source

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class StallAfterGate:
    """Stall the reactor once, right after the first request passed the gate."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.seconds = crawler.settings.getfloat("STALL_SECONDS")
        self.stalled = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StallAfterGate:
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        if self.stalled or GATE_META not in request.meta:
            return
        self.stalled = True
        reactor.callLater(0, self._stall, request)

    def _stall(self, request: Request) -> None:
        time.sleep(self.seconds)
        scheduler = scheduler_of(self.crawler)
        assert scheduler is not None and scheduler.frontier is not None
        frontier = scheduler.frontier
        host = scheduler.host_of(request.meta[LEASE_META])
        assert host is not None
        client = redis.Redis.from_url(self.crawler.settings["REDIS_URL"])
        try:
            start = client.register_script(script_source("start"))
            wait = start(keys=[frontier.keys.host(frontier.partition(host), host)],
                         args=[frontier.limits.jitter])
        finally:
            client.close()
        logger.warning("Phantom worker passed the gate of %s at %.3f (wait %s ms)",
                       host, time.time(), wait)
