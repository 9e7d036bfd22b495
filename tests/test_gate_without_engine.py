"""The worker's frontier and its last gate, with no engine: intake, claims and
the start gate (``middlewares/pacing.py``) against a real Redis whose scripts
run on a clock the test moves (tests/frontier_harness.py).

The worker's frontier (``scheduling/worker.py``) needs the crawl's settings
and stats, a Redis client and keys, and three things of the engine (wake it,
its downloads in flight, end the crawl): here those are the test's.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.test import get_crawler

from crawler.lease import GATE_PASS_META, ticket_of
from crawler.middlewares.pacing import STALE_AFTER_S, gate, gate_again, turn_is_stale
from crawler.scheduling.robotsjobs import robots_turn
from crawler.scheduling.worker import EngineLink, WorkerFrontier
from tests.frontier_harness import Harness

SETTINGS: dict[str, Any] = {
    "CONCURRENT_REQUESTS": 8, "CONCURRENT_REQUESTS_PER_DOMAIN": 2, "DOWNLOAD_DELAY": 1.0,
    "DOWNLOAD_DELAY_JITTER": 0.0, "ROBOTSTXT_OBEY": False, "LEARN_ENABLED": False,
    "FRONTIER_CLAIM_SWEEP": 0.0,  # every partition at every claim (the clock is the test's)
}


class Engine:
    """What the worker's frontier asks of an engine, counted."""

    def __init__(self) -> None:
        self.wakes = 0
        self.ended = False

    def link(self) -> EngineLink:
        def wake() -> None:
            self.wakes += 1

        def end() -> None:
            self.ended = True
        return EngineLink(wake, lambda: 0, end)


def worker_on(h: Harness, **settings: Any) -> WorkerFrontier:
    crawler = get_crawler(Spider, {**SETTINGS, **settings})
    return WorkerFrontier(crawler, Spider(name="gate"), h.client, h.keys, "w1",
                          Engine().link(), sync_client=lambda **kw: None)


async def _flushed(worker: WorkerFrontier) -> None:
    while worker.sync.flushing or worker.sync.admissions:
        await asyncio.sleep(0.005)


async def _claimed(worker: WorkerFrontier) -> Request:
    worker.claims.want()
    while worker.claims.claiming:
        await asyncio.sleep(0.005)
    request = worker.claims.pop()
    assert request is not None, "nothing claimed"
    return request


def test_a_late_url_passes_the_start_gate_again_and_keeps_its_turn(make_harness) -> None:
    h = make_harness("late", clock=True)
    worker = worker_on(h)

    async def scenario() -> None:
        assert worker.offer(Request("http://a.test/1"))
        assert worker.offer(Request("http://a.test/2"))
        await _flushed(worker)
        request = await _claimed(worker)
        ticket = ticket_of(request.meta)
        assert ticket is not None and ticket.start_by is not None
        claimed_by = ticket.start_by
        await gate(worker, request)  # within its claim's window: Redis is not asked
        assert ticket.start_by == claimed_by
        # A stall past the window: the turn is stale and the gate is asked
        # again; nobody started the site since its claim, so it goes at once.
        await asyncio.sleep(max(claimed_by - time.monotonic(), 0) + STALE_AFTER_S)
        await gate(worker, request)
        assert ticket.start_by is not None and ticket.start_by > claimed_by
        assert worker.stats.get_value("frontier/pacing/waits") is None
        # The site's next URL is a second away on the frontier's clock.
        worker.claims.want()
        while worker.claims.claiming:
            await asyncio.sleep(0.005)
        assert worker.claims.pop() is None
        await worker.tasks.close(timeout=1)

    h.run(scenario())


def test_a_url_whose_host_was_held_since_its_claim_goes_back_delayed(make_harness) -> None:
    h = make_harness("held", clock=True)
    worker = worker_on(h)

    async def scenario() -> None:
        worker.offer(Request("http://b.test/1"))
        await _flushed(worker)
        request = await _claimed(worker)
        ticket = ticket_of(request.meta)
        assert ticket is not None and ticket.start_by is not None
        host = worker.host_of(ticket.token)
        assert host is not None and await worker.store.hold(host, 30_000)  # a 503 elsewhere
        await asyncio.sleep(max(ticket.start_by - time.monotonic(), 0) + STALE_AFTER_S)
        with pytest.raises(IgnoreRequest, match="host held"):
            await gate(worker, request)
        verdict = ticket.ending()
        assert verdict.op == "retry" and 25_000 <= int(verdict.arg) <= 30_000
        assert worker.stats.get_value("frontier/pacing/given_back/held") == 1
        await worker.tasks.close(timeout=1)

    h.run(scenario())


def test_a_robots_fetch_that_reaches_its_socket_late_passes_the_start_gate_again(
        make_harness) -> None:
    """A robots.txt fetch is a request to its site and domain like a page: its
    pass of the start gate stands for the gate's window, and a fetch that
    reaches its socket after that (a slow connection, a stalled reactor)
    passes the gate again, at once if nothing of the site started since,
    else after the site's delay; it never leaves on a stale turn right
    before another request's."""
    h = make_harness("robots-late", clock=True)
    worker = worker_on(h)
    host = "http://c.test:80"

    async def advance(ms: int) -> None:  # (the frontier's clock, from within the loop)
        await h.client.incrby(h.clock.key, ms)

    async def scenario() -> None:
        assert worker.offer(Request(f"{host}/1"))  # (the site's record, its delay)
        await _flushed(worker)
        # The worker claims the page by itself, and a claim reserves the
        # site's next turn: let it land before the clock moves past it.
        for _ in range(400):
            if worker.stats.get_value("frontier/leases/claimed") and not worker.claims.claiming:
                break
            await asyncio.sleep(0.005)
        assert worker.stats.get_value("frontier/leases/claimed") == 1
        window_ms = worker.claims.window.gate_ms
        await advance(2000)  # (past the claim's turn)
        gate_pass = await robots_turn(worker.store, worker.stats, host, True, None, window_ms)
        assert gate_pass is not None and gate_pass.turn is not None
        request = Request(f"{host}/robots.txt", meta={GATE_PASS_META: gate_pass})
        assert not turn_is_stale(request)
        # The site's next start waits its delay (1 s) and the pass's window.
        assert await worker.store.start_gate(host) == 1000 + window_ms
        await asyncio.sleep(window_ms / 1000 + 0.01)  # the connection took longer
        assert turn_is_stale(request)
        await gate_again(worker, gate_pass)  # no other start since: at once
        assert not turn_is_stale(request)
        assert worker.stats.get_value("frontier/pacing/waits") is None
        # Stale again, and this time a page of the site started in between:
        # the fetch waits for its turn like any request.
        await asyncio.sleep(window_ms / 1000 + 0.01)
        await advance(1000 + window_ms)
        assert (await worker.store.start_turn(host)).wait_ms == 0
        waited = asyncio.ensure_future(gate_again(worker, gate_pass))
        await asyncio.sleep(0.05)
        assert not waited.done() and worker.stats.get_value("frontier/pacing/waits") >= 1
        await advance(1000 + window_ms)
        await asyncio.wait_for(waited, 5)
        assert not turn_is_stale(request)
        await worker.tasks.close(timeout=1)

    h.run(scenario())
