"""Prometheus metrics of a crawl (served by :mod:`crawler.extensions.prometheus`).

- :mod:`crawler.metrics.stats` - Scrapy's stats, read at scrape time and
  exposed as counters and gauges with bounded labels (no second set of
  counters to keep in step);
- :mod:`crawler.metrics.frontier` - the shared frontier's state from Redis,
  cached for a few seconds and exported by one worker only;
- :mod:`crawler.metrics.server` - the HTTP endpoint on a port of a range.
"""
