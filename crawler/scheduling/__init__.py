"""The Scrapy-facing side of the frontier: the scheduler the engine talks to.

``crawler/frontier/`` is the storage (keys, records, Lua scripts, the
embedded server); this package turns it into a Scrapy scheduler:

- :mod:`.scheduler`: the engine's API (``enqueue_request``, ``next_request``,
  ``has_pending_requests``, open and close) and the wiring of the parts below;
- :mod:`.opening`: the worker's identity, reaching Redis, the layout check;
- :mod:`.intake`: which enqueued requests become admissions, which are refused;
- :mod:`.leases`: the leases this worker holds and how each one ends;
- :mod:`.sync`: admissions and releases batched and sent in the background;
- :mod:`.robotsjobs`: robots.txt fetches the frontier hands out as jobs;
- :mod:`.heartbeat`: the worker's heartbeat and lease renewals;
- :mod:`.health`: whether Redis answers, as the worker last saw it.
"""
