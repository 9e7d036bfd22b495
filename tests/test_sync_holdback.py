"""A finished page of a host with reserved URLs still to start is held back
(``scheduling/sync.py``): it goes with the host's next release that is not,
or when its timer runs out; once it has gone, its timer is off.

A unit test of the holding alone: the scheduler around it is a stand-in that
says the host still has reserved URLs and runs no flush (the flush itself is
proven by the crawl tests).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from scrapy.settings import Settings

from crawler.frontier.values import Release
from crawler.scheduling.sync import Sync


def _sync(lease_ms: int = 60_000) -> Sync:
    def spawn(coro: object, flush: bool) -> None:
        coro.close()  # type: ignore[attr-defined]

    scheduler = SimpleNamespace(
        stats=None, crawler=SimpleNamespace(settings=Settings()), closing=False,
        claims=SimpleNamespace(reserved=SimpleNamespace(holds=lambda host: True)),
        limits=SimpleNamespace(lease_ms=lease_ms), spawn=spawn)
    return Sync(scheduler)  # type: ignore[arg-type]


def test_a_held_back_release_goes_with_the_next_one_and_its_timer_is_off() -> None:
    async def scenario() -> None:
        sync = _sync()
        done = Release("http://a.test:80", b"1" * 16, "done")
        sync.release(done)
        assert sync.releases == [] and sync.held_back == {"http://a.test:80": [done]}
        timer = sync._hold_timers["http://a.test:80"]
        given_back = Release("http://a.test:80", b"2" * 16, "return")
        sync.release(given_back)  # goes at once, and takes the held one with it
        assert sync.releases == [done, given_back] and not sync.held_back
        assert timer.cancelled() and not sync._hold_timers

    asyncio.run(scenario())


def test_a_held_back_release_goes_when_its_timer_runs_out() -> None:
    async def scenario() -> None:
        sync = _sync(lease_ms=150)  # held a third of the lease: 50 ms
        done = Release("http://a.test:80", b"1" * 16, "done")
        sync.release(done)
        await asyncio.sleep(0.1)
        assert sync.releases == [done] and not sync.held_back and not sync._hold_timers

    asyncio.run(scenario())
