"""A finished page of a host with reserved URLs still to start is held back
(``scheduling/sync.py``): it goes with the host's next release that is not,
or when its timer runs out; once it has gone, its timer is off.

A unit test of the holding alone: the worker around it is a set of callbacks
saying the host still has reserved URLs, and the tasks run no flush (the
flush itself is proven by tests/test_worker_parts.py and the crawl tests).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from crawler.frontier.values import Limits, Release
from crawler.scheduling.sync import Sync, SyncHooks
from crawler.scheduling.tasks import Tasks


class _NoFlush(Tasks):
    def spawn(self, coro: Any, *, flush: bool = False) -> None:
        coro.close()


def _sync(lease_ms: int = 60_000) -> Sync:
    def nothing(*args: object) -> None:
        return None

    store = SimpleNamespace(limits=Limits(lease_ms=lease_ms))
    hooks = SyncHooks(holds_reserved=lambda host: True, changed=nothing, forget=nothing,
                      give_back_site=nothing, flushed=nothing)
    return Sync(store, "w", None, None, _NoFlush(), hooks)  # type: ignore[arg-type]


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


def test_a_domains_reservation_is_released_in_one_go_by_its_last_host() -> None:
    """Held back by group (the registered domain): the finished pages of a
    domain's reservation, one URL of each of its hosts, wait while any host
    of the domain has reserved URLs here, and the first release of the domain
    that is not held back takes them all; another domain's go their own way."""
    async def scenario() -> None:
        reserved = {"s.test": True}
        sync = _sync()
        sync.hooks.holds_reserved = lambda group: reserved.get(group, False)
        sync.hooks.group_of = lambda host: host.split("://")[1].split(".", 1)[1].split(":")[0]
        a = Release("http://a.s.test:80", b"1" * 16, "done")
        b = Release("http://b.s.test:80", b"2" * 16, "done")
        other = Release("http://c.o.test:80", b"3" * 16, "done")
        sync.release(a)
        sync.release(b)
        sync.release(other)
        assert sync.held_back == {"s.test": [a, b]} and sync.releases == [other]
        reserved["s.test"] = False  # the domain's last reserved URL started
        last = Release("http://h.s.test:80", b"4" * 16, "done")
        sync.release(last)
        assert sync.releases == [other, a, b, last] and not sync.held_back
        assert not sync._hold_timers

    asyncio.run(scenario())
