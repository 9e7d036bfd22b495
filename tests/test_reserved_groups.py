"""Reserved URLs by group (``scheduling/reserved.py``): whether a worker still
holds reserved URLs of any host of a registered domain, as its releases are
held back by it (``scheduling/sync.py``). The group holds while any of its
hosts has a URL waiting or a chain, and not once the last one left."""

from __future__ import annotations

import asyncio
import time

from scrapy import Request

from crawler.frontier.keys import domain_of
from crawler.frontier.values import Limits
from crawler.scheduling.reserved import Reserved


def test_a_domain_holds_while_any_of_its_hosts_has_a_url_waiting() -> None:
    async def scenario() -> None:
        due: list[Request] = []
        reserved = Reserved(due.extend, Limits(), lambda requests: None, domain_of)
        later = time.monotonic() + 60
        a, b = Request("http://a.s.test/1"), Request("http://b.s.test/1")
        reserved.add(later, a, "http://a.s.test:80")
        reserved.add(later + 1, b, "http://b.s.test:80")
        assert reserved.holds_group("s.test") and not reserved.holds_group("o.test")
        assert reserved.take(lambda r: r is a) == [a]
        assert reserved.holds_group("s.test")  # b still waits
        reserved.chain("http://c.o.test:80", "t0", [Request("http://c.o.test/2")], 100, 0,
                       later)
        assert reserved.holds_group("o.test")
        assert reserved.take() and not reserved.holds_group("s.test")
        assert not reserved.holds_group("o.test")
        reserved.cancel()

    asyncio.run(scenario())
