"""Scrapy extensions of the crawler (Prometheus metrics arrive in a later issue)."""
