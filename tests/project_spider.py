"""The broad spider as the project configures it, built without a crawl."""

from __future__ import annotations

from scrapy.utils.test import get_crawler

import crawler.settings
from crawler.spiders.broad import BroadSpider


def project_spider(**kwargs: str) -> BroadSpider:
    """A BroadSpider on the project's settings (seeds from stdin), with spider arguments."""
    settings = {k: getattr(crawler.settings, k) for k in dir(crawler.settings) if k.isupper()}
    return BroadSpider.from_crawler(get_crawler(BroadSpider, settings), seeds="-", **kwargs)
