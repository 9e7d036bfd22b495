"""A test-only extension: what delay Scrapy's own download slots add in a crawl.

On every ``request_reached_downloader`` (the request is in its download slot,
before the slot decides when it may start) it records the slot's delay and
jitter in the stats, as ``test/slot_delay_ms/max`` and
``test/slot_jitter_pct/max``, which the crawl's final stats dump shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy import signals

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler


class SlotDelays:
    """Records the largest delay and jitter of the download slots requests went through."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        crawler.signals.connect(self.reached, signal=signals.request_reached_downloader)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SlotDelays:
        return cls(crawler)

    def reached(self, request: Request, spider: Spider) -> None:
        assert self.crawler.engine is not None and self.crawler.stats is not None
        slot = self.crawler.engine.downloader.slots[request.meta["download_slot"]]
        stats = self.crawler.stats
        stats.inc_value("test/slot_probes")
        stats.max_value("test/slot_delay_ms/max", round(slot.delay * 1000))
        stats.max_value("test/slot_jitter_pct/max", round(slot.jitter * 100))
