"""Spider middleware: seed lines pushed onto a Redis list join the running crawl.

    redis-cli RPUSH broad:start_urls https://example.com/   # feed running workers

The frontier scheduler holds the list's reader
(:class:`crawler.frontier.seedfeed.SeedFeed`: a batch is taken and noted
under the worker, and acknowledged only once its URLs are admitted). This
middleware appends what the list holds to the spider's own start requests
(``process_start``), so any spider under the frontier scheduler reads the
feed, and a fed seed passes every spider middleware as a seed from the
spider's file does. The start stream ends when the list is empty and the
frontier has nothing left (after ``FRONTIER_IDLE_WAIT``), which lets the
crawl close; lines pushed after that wait for the next crawl.

Settings: ``REDIS_START_URLS_KEY`` (the scheduler's), ``REDIS_START_URLS_POLL_SECONDS``
(how often an empty list is looked at again) and ``BROAD_SEEDS_ADD_SCHEME``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy import Request
from scrapy.exceptions import NotConfigured

from crawler.frontier.seedfeed import SeedFeed
from crawler.frontier.workers import DEFAULT_LEASE_SECONDS
from crawler.scheduling.scheduler import uses_frontier
from crawler.scheduling.worker import WorkerFrontier, frontier_of
from crawler.seeds import parse_seed_line, seed_request
from crawler.urls import stripper_from_settings

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


#: A gone worker's batch waits for its heartbeat's lease to run out anyway:
#: looking for one this many times a lease (not at every poll of the list)
#: hands it back soon enough, for a command or two a few seconds.
ORPHAN_CHECKS_PER_LEASE = 4


class SeedFeedMiddleware:
    """After the spider's own start requests, the seeds of the shared Redis list."""

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        self.crawler = crawler
        self.poll_seconds = s.getfloat("REDIS_START_URLS_POLL_SECONDS", 1.0)
        self.add_scheme = s.getbool("BROAD_SEEDS_ADD_SCHEME", False)
        self.stripper = stripper_from_settings(s)
        self.lease_seconds = s.getfloat("FRONTIER_LEASE_SECONDS", DEFAULT_LEASE_SECONDS)
        self._orphans_at = 0.0  # (monotonic) when to look for a gone worker's batch next

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SeedFeedMiddleware:
        if not uses_frontier(crawler.settings):
            # (by design: Scrapy would log a reason given to NotConfigured as a WARNING)
            logger.debug("Disabled %s.%s: the seed feed belongs to the frontier scheduler",
                         __name__, cls.__name__)
            raise NotConfigured
        return cls(crawler)

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for item in start:
            yield item
        frontier = frontier_of(self.crawler)
        if frontier is not None and frontier.seed_feed is not None:
            async for request in self._feed(frontier, frontier.seed_feed):
                yield request

    async def _feed(self, frontier: WorkerFrontier, feed: SeedFeed
                    ) -> AsyncIterator[Request]:
        """Seed requests from the list, for as long as the crawl has work."""
        logger.info("Reading seed lines pushed onto Redis list %s", feed.key)
        source, item = f"{feed.key} (Redis list)", 0
        while True:
            try:
                lines = await feed.take()
            except (RedisError, OSError) as exc:
                frontier.health.trouble(exc)  # one warning per outage, not one per poll
                if frontier.health.refused:
                    return  # the worker's ACL: the crawl is ending (health said why)
                lines = []
            for raw in lines:
                item += 1
                parsed = parse_seed_line(raw, source=source, line=item,
                                         add_scheme=self.add_scheme, stripper=self.stripper)
                request = None if parsed is None else seed_request(parsed, self.crawler.stats)
                if request is not None:
                    yield request
            if lines:
                await self._ack_when_admitted(frontier, feed)
                continue
            if not frontier.pending():
                return
            if time.monotonic() >= self._orphans_at:
                self._orphans_at = time.monotonic() + self.lease_seconds / ORPHAN_CHECKS_PER_LEASE
                await self._adopt_orphans(frontier, feed)
            await asyncio.sleep(self.poll_seconds)

    @staticmethod
    async def _ack_when_admitted(frontier: WorkerFrontier, feed: SeedFeed) -> None:
        """Forget the batch once it is in the frontier (a Redis error: it is taken again)."""
        try:
            if await frontier.wait_admitted():
                await feed.ack()
        except (RedisError, OSError) as exc:
            logger.warning("Seed feed: cannot acknowledge a batch of %s: %s", feed.key, exc)

    async def _adopt_orphans(self, frontier: WorkerFrontier, feed: SeedFeed) -> None:
        """Put back the batches of workers that stopped beating, for every worker."""
        try:
            await feed.adopt_orphans(frontier.keys.workers(), self.lease_seconds)
        except (RedisError, OSError) as exc:
            logger.warning("Seed feed: cannot check %s for lost batches: %s", feed.taken, exc)
