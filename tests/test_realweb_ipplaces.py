"""Places kept at a server address (``scheduling/ipplaces.py``) on the real-socket web.

Twelve names on one loopback address, each a chain of pages, crawled by one
worker with the IP scope's limit at eight: the worker keeps a place after a
request ends and starts its next request to the address in it, without the
gate's script. What the server received shows the limit held all along
(never more than eight requests open at once, across its names), every page
was fetched once, each name kept its delay, and the worker's count says
places were reused. After the crawl the address counts nothing in flight:
kept places went back at the end of their second (or at the close), rather
than being left to run out with their lease.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pytest
import redis

from crawler.frontier.keys import Keys, crawl_namespace
from tests.crawl_runner import crawl_realweb
from tests.realweb import Host, RealWebProcess, Web
from tests.realweb.sites import ALLOW_ALL, SLACK, chain_site, site_targets

pytestmark = pytest.mark.crawl

PAGES = 8
DELAY = 0.3
IP_CONCURRENCY = 8


def test_a_worker_reuses_its_places_at_an_address_within_its_limit_and_gives_them_back(
        realweb: Callable[..., RealWebProcess], redis_url: str, redis_prefix: str,
        tmp_path: Path) -> None:
    names = [f"k{i}.test" for i in range(12)]
    web = realweb(Web([Host(name, robots=ALLOW_ALL, share="one",
                            pages=chain_site(PAGES, slow=frozenset(range(1, PAGES)),
                                             delay=0.05))
                       for name in names]))
    address = web.address(names[0])
    assert {web.address(name) for name in names} == {address}
    namespace = f"{redis_prefix}places"
    result = crawl_realweb(web.nameserver, [web.url(name) for name in names], tmp_path, {
        "REDIS_URL": redis_url, "FRONTIER_NAMESPACE": namespace,
        "DOWNLOAD_DELAY": DELAY, "DOWNLOAD_DELAY_JITTER": 0,
        "FRONTIER_ADAPTIVE_FACTOR": 0, "ADDRESS_GUARD_ALLOW": "127.0.0.0/8",
        "FRONTIER_IP_CONCURRENCY": IP_CONCURRENCY})
    ledger = web.ledger()
    for name in names:
        assert sorted(ledger.targets(name)) == site_targets(PAGES), name
        arrivals = sorted(r.arrival for r in ledger.for_host(name))  # robots.txt too
        assert min(b - a for a, b in pairwise(arrivals)) >= DELAY - SLACK, name
    assert ledger.max_in_flight_at(address) <= IP_CONCURRENCY
    assert int(result.stat("frontier/ip/places_reused") or 0) > 0, result.log[-2000:]
    client = redis.Redis.from_url(redis_url)
    try:
        keys = Keys(crawl_namespace(namespace, "broad"), 16, 4096)
        assert client.zcard(keys.ip_in_flight(address)) == 0
    finally:
        client.close()
