"""Sitemaps named by robots.txt seed the crawl (``-a sitemaps=1``)."""

from __future__ import annotations

import gzip

from scrapy.http import Request, Response, TextResponse, XmlResponse

from crawler.signals import robots_sitemaps_found
from crawler.spiders.broad import BroadSpider
from tests.project_spider import project_spider

URLSET = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>http://a.test/one?utm_source=x</loc></url>
  <url><loc>http://a.test/two</loc></url>
  <url><loc>mailto:someone@a.test</loc></url>
</urlset>"""
INDEX = b"""<?xml version="1.0" encoding="UTF-8"?>
<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <sitemap><loc>http://a.test/sitemap-pages.xml.gz</loc></sitemap>
</sitemapindex>"""


def _parse(spider: BroadSpider, response: Response) -> list[Request]:
    return list(spider.parse_sitemap(response))


def test_pages_of_a_sitemap_are_parsed_and_nested_sitemaps_followed() -> None:
    spider = project_spider(sitemaps="1")
    assert spider.follow_sitemaps
    pages = _parse(spider, XmlResponse("http://a.test/sitemap.xml", body=URLSET))
    assert [(r.url, r.callback) for r in pages] == [
        ("http://a.test/one", spider.parse), ("http://a.test/two", spider.parse)]
    nested = _parse(spider, XmlResponse("http://a.test/sitemap.xml", body=INDEX))
    assert [(r.url, r.callback) for r in nested] == [
        ("http://a.test/sitemap-pages.xml.gz", spider.parse_sitemap)]
    gz = Response("http://a.test/sitemap-pages.xml.gz", body=gzip.compress(URLSET))
    assert [r.url for r in _parse(spider, gz)] == ["http://a.test/one", "http://a.test/two"]


def test_what_is_not_a_sitemap_is_counted_not_raised() -> None:
    spider = project_spider()
    assert not spider.follow_sitemaps  # off unless asked for
    html = TextResponse("http://a.test/sitemap.xml", body=b"<html>nope</html>")
    broken_gz = Response("http://a.test/s.xml.gz", body=b"\x1f\x8b\x08garbage")
    assert _parse(spider, html) == [] and _parse(spider, broken_gz) == []
    assert spider.crawler.stats.get_value("broad/sitemaps/unreadable") == 2



def test_a_spider_that_did_not_ask_ignores_the_robots_sitemaps() -> None:
    spider = project_spider(sitemaps="0")
    results = spider.crawler.signals.send_catch_log(
        robots_sitemaps_found, host="http://a.test", urls=["http://a.test/sitemap.xml"])
    assert results == []
    assert spider.crawler.stats.get_value("broad/sitemaps/queued") is None


def test_a_sitemaps_pages_carry_its_priority_and_freshness() -> None:
    spider = project_spider()
    body = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>http://a.test/top</loc><priority>1.0</priority></url>
  <url><loc>http://a.test/plain</loc></url>
  <url><loc>http://a.test/low</loc><priority>0.0</priority><lastmod>2001-01-01</lastmod></url>
</urlset>"""
    pages = _parse(spider, XmlResponse("http://a.test/sitemap.xml", body=body))
    assert [(r.url, r.priority) for r in pages] == [
        ("http://a.test/top", 2), ("http://a.test/plain", 0), ("http://a.test/low", -3)]
