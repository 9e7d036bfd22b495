"""The crawler's own Scrapy signals (``crawler.signals.connect(handler, signal=...)``).

They carry values that are observations, not counts - a Crawl-delay, a
Retry-After wait - so that an extension can put them in a histogram
(:mod:`crawler.extensions.prometheus`) without the policies knowing about
metrics. Stats keep the counts.
"""

#: A host's robots.txt asked for a Crawl-delay (or Request-rate) that now
#: paces it. Arguments: ``host`` (key), ``seconds`` (after clamping).
crawl_delay_applied = object()

#: A response's Retry-After decided how long its URL waits. Arguments:
#: ``url``, ``seconds`` (after capping at RETRY_AFTER_MAX).
retry_after_applied = object()

#: The crawl resolver finished a lookup (not a cache hit; crawler/dns/).
#: Arguments: ``result`` ("ok", "nxdomain", "nodata", "servfail", "timeout",
#: "blocked"), ``seconds`` (both rounds of a confirmed NXDOMAIN).
dns_lookup_done = object()

#: A host's robots.txt was fetched and lists sitemaps. Arguments: ``host``
#: (key), ``urls`` (the sitemap URLs, at most 50 per robots.txt). The robots
#: policy only announces them; a spider that wants them (the broad spider
#: with ``-a sitemaps=1``) connects to this signal and queues them itself.
robots_sitemaps_found = object()

#: A seed was refused before it was fetched (the address guard, the
#: frontier's intake). Arguments: ``url``, ``reason``; the crawl report says
#: what became of each seed.
seed_refused = object()

#: The address guard refused a host's robots.txt fetch (the host's name
#: resolved to an address it refuses), so the host was parked and its queued
#: URLs are dead letters. Arguments: ``host`` (key), ``blocked`` (the
#: :class:`crawler.addressguard.AddressBlocked`: name, address, reason).
host_blocked = object()
