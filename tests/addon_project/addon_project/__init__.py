"""A Scrapy project that knows the broad crawler only as an add-on (tests/test_addon.py)."""
