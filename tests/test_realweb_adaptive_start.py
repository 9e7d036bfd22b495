"""Adaptive pacing from a site's first answer, on the real-socket web.

A server whose pages answer in 1 s, crawled with the defaults
(``DOWNLOAD_DELAY`` 1 s with its jitter, ``CONCURRENT_REQUESTS_PER_DOMAIN``
4, ``FRONTIER_ADAPTIVE_FACTOR`` 2): how slowly a site answers is not known
before its first answer, so until then it gets one request at a time, and
from that answer on its next request waits twice the answer's time after
the answer ended. What the server saw: never two requests open at once, and
every pause between an answer's end and the next request at least the
adaptive pause (before, a site's first claim reserved its next URLs a delay
apart: the second came 0.02 s after the first answer, the third while the
second was still open).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pytest

from tests.crawl_runner import crawl_realweb
from tests.realweb import Host, RealWebProcess, Web, links_to
from tests.realweb.sites import SLACK

pytestmark = pytest.mark.crawl

ANSWER_S = 1.0
FACTOR = 2.0  # FRONTIER_ADAPTIVE_FACTOR's default


def test_a_slow_site_is_paced_from_its_first_answer(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    pages = {"/": links_to(*(f"/{k}" for k in range(1, 5)), delay=ANSWER_S)}
    pages.update({f"/{k}": links_to("/", delay=ANSWER_S) for k in range(1, 5)})
    web = realweb(Web([Host("slow.test", pages=pages, robots="User-agent: *\nAllow: /\n")]))
    # Every page a seed: the site's first claim finds them all queued.
    seeds = [web.url("slow.test", path) for path in ["/", "/1", "/2", "/3", "/4"]]
    crawl_realweb(web.nameserver, seeds, tmp_path / "crawl")
    ledger = web.ledger()
    requests = [r for r in ledger.for_host("slow.test") if r.target != b"/robots.txt"]
    assert sorted(r.target for r in requests) == [b"/", b"/1", b"/2", b"/3", b"/4"]
    assert ledger.max_in_flight("slow.test") == 1, [(r.target, r.arrival, r.done)
                                                     for r in requests]
    pauses = [b.arrival - a.done for a, b in pairwise(requests)]  # type: ignore[operator]
    assert min(pauses) >= FACTOR * ANSWER_S - SLACK, pauses
