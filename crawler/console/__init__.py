"""The operator's console: a web page over a frontier, and the JSON under it.

``scrapy frontier serve`` runs it against the frontier ``scrapy frontier``
reads (an embedded JOBDIR, ``REDIS_URL``, a crawl id). It reads the frontier
as ``scrapy frontier status`` does, from its own process, never a worker's
reactor; its changes go through the same scripts as ``scrapy frontier host``,
so every worker obeys them from its next request.

- :mod:`~crawler.console.history`: the last hour, sampled, and its small charts;
- :mod:`~crawler.console.views`: what each page and API call shows;
- :mod:`~crawler.console.actions`: what an operator may change, and the log of who did;
- :mod:`~crawler.console.app`: the WSGI application (pages, API, CSRF, auth).
"""
