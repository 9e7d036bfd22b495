"""A plain spider: one item per page, and every link of an HTML page followed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scrapy import Request, Spider
from scrapy.http import HtmlResponse, Response
from scrapy.linkextractors import LinkExtractor


class LinksSpider(Spider):
    """``scrapy crawl links -a start=URL1,URL2,...``"""

    name = "links"

    def __init__(self, start: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [url for url in start.split(",") if url]
        # Documents (PDFs, images...) are pages too: no extension is skipped.
        self.links = LinkExtractor(deny_extensions=[])

    def parse(self, response: Response) -> Iterator[dict[str, Any] | Request]:
        yield {"url": response.url, "status": response.status}
        if isinstance(response, HtmlResponse):
            for link in self.links.extract_links(response):
                yield response.follow(link, callback=self.parse)
