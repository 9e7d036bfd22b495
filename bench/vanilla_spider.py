"""The baseline of ``bench.vanilla``: a bare Scrapy spider, no project code.

What a Scrapy user writes first for a broad crawl: start from the seeds,
yield an item per page, follow every link the stock ``LinkExtractor`` finds.
The bench runs it with ``scrapy runspider`` from a directory outside the
project (so the project's ``scrapy.cfg`` and settings are not picked up),
with ``ROBOTSTXT_OBEY`` and the same concurrency, delay and depth as the
project's crawl. Seeds come from the file named by ``-a seeds=PATH``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import scrapy
from scrapy.http import HtmlResponse, Response
from scrapy.linkextractors import LinkExtractor


class VanillaSpider(scrapy.Spider):
    name = "vanilla"

    def __init__(self, seeds: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        with open(seeds, encoding="utf-8") as lines:
            self.start_urls = [line.strip() for line in lines if line.strip()]
        self.links = LinkExtractor()

    def parse(self, response: Response) -> Iterator[Any]:
        if not isinstance(response, HtmlResponse):
            yield {"url": response.url, "status": response.status}
            return
        yield {"url": response.url, "status": response.status,
               "title": response.css("title::text").get()}
        for link in self.links.extract_links(response):
            if link.url.startswith(("http://", "https://")):  # not the web's ftp: links
                yield response.follow(link)
