"""A test-only downloader middleware: the reactor stalls again and again just
after a request passed the frontier's start gate, and at the end of each
stall another worker tries to take the host's next turn.

This is the chaos soak's findings 8, 10 and 12 made exact. Placed after the
pacing middleware, it lets the first gated request go on, and from the next
reactor turn on blocks the reactor ``STALL_COUNT`` times for ``STALL_SECONDS``
each, one reactor turn apart: every step of the request (connecting, passing
the gate again, the turns between the gate's answer and the write) has a
stall behind it. After each stall a phantom worker passes the gate for the
same host if it may, straight in Redis as any other worker would, and logs
when it tried and what the gate said. The spacing rule holds between the
crawl's real requests and the phantom's turns as between any two workers'.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING

import redis
from twisted.internet import reactor

from crawler.frontier.store import script_source
from crawler.lease import ticket_of
from crawler.scheduling.worker import frontier_of

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class StallAfterGate:
    """A storm of reactor stalls, starting right after the first request passed the gate."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.seconds = crawler.settings.getfloat("STALL_SECONDS")
        self.left = crawler.settings.getint("STALL_COUNT", 1)
        self.quiet = crawler.settings.getint("STALL_PHANTOM_AFTER", 0)
        self.started = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StallAfterGate:
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        ticket = ticket_of(request.meta)
        if self.started or ticket is None or ticket.start_by is None:
            return
        self.started = True
        worker = frontier_of(self.crawler)
        assert worker is not None
        host = worker.host_of(ticket.token)
        assert host is not None
        frontier = worker.store
        part = frontier.partition(host)
        key = (frontier.keys.site(part, host), frontier.keys.domain(part, host))  # the gate's
        reactor.callLater(0, self._stall, host, key, frontier.limits.jitter)

    def _stall(self, host: str, key: tuple[str, str], jitter: float) -> None:
        time.sleep(self.seconds)
        self.left -= 1
        if self.quiet > 0:
            self.quiet -= 1
        else:
            self._phantom(host, key, jitter)
        if self.left > 0:
            reactor.callLater(0, self._stall, host, key, jitter)
        else:
            logger.warning("Reactor stalls over at %.3f", time.time())

    def _phantom(self, host: str, key: tuple[str, str], jitter: float) -> None:
        client = redis.Redis.from_url(self.crawler.settings["REDIS_URL"])
        try:
            # (no lease: ARGV[1] ""; no earlier turns, no domain delay)
            wait = client.register_script(script_source("start"))(
                keys=list(key), args=["", json.dumps({"jitter": jitter})])[0]
        finally:
            client.close()
        logger.warning("Phantom worker passed the gate of %s at %.3f (wait %s ms)",
                       host, time.time(), wait)
