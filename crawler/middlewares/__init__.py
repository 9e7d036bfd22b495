"""Scrapy middlewares of the crawler, one policy per module."""
