"""The crawl's scope shared through Redis (crawler/frontier/scopestate.py), and
what the scope middleware makes of it, on a real Redis under a private prefix."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import redis.asyncio
from scrapy.exceptions import UsageError
from scrapy.utils.test import get_crawler

from crawler.frontier.keys import Keys
from crawler.frontier.scopestate import SharedScope
from crawler.middlewares.scope import ScopeMiddleware
from crawler.scope.rules import Scope
from tests.frontier_harness import Harness


def test_each_form_is_logged_once_and_every_worker_reads_it_once(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("scope")
    a, b = SharedScope(h.client, h.keys), SharedScope(h.client, h.keys)
    assert h.run(a.add(["d:a.test", "h:a.test", "p:test,a)/"])) == 3
    assert h.run(b.add(["d:a.test", "h:www.b.test", "d:b.test"])) == 2  # one known already
    assert h.run(a.news()) == ["d:a.test", "h:a.test", "p:test,a)/", "h:www.b.test", "d:b.test"]
    assert h.run(a.news()) == []
    assert h.run(b.add([])) == 0
    assert h.run(b.news()) == ["d:a.test", "h:a.test", "p:test,a)/", "h:www.b.test", "d:b.test"]
    h.run(a.add(["h:c.test"]))
    assert h.run(a.news()) == ["h:c.test"] and h.run(b.news()) == ["h:c.test"]


def test_a_seed_of_another_worker_widens_this_workers_scope(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("scope2")
    other = Scope("host")
    h.run(SharedScope(h.client, h.keys).add(other.add_seed("https://www.b.test/x")))
    mine = _middleware(Scope("host"))
    mine._seed("http://a.test/")
    assert not mine.scope.decide("https://b.test/page").fetch
    shared = SharedScope(h.client, h.keys)
    h.run(mine.sync(shared))
    assert mine.unshared == []
    assert mine.scope.decide("https://b.test/page").fetch  # b.test's seed, from the other
    assert mine.scope.decide("http://a.test/x").fetch
    assert not mine.scope.decide("http://c.test/").fetch
    # and this worker's seed reached the others
    assert "h:a.test" in [f.decode() for f in h.run(h.client.smembers(h.keys.scope_forms()))]


def test_seed_forms_wait_for_redis_to_come_back(tmp_path: Path) -> None:
    client = redis.asyncio.Redis(unix_socket_path=str(tmp_path / "nothing.sock"))
    mine = _middleware(Scope("domain"))
    mine._seed("http://a.test/")
    asyncio.run(mine.sync(SharedScope(client, Keys("x", 4, 16))))
    assert mine.unshared == ["d:a.test", "h:a.test", "p:test,a)/"]  # kept for the next turn


class _Stats:
    def inc_value(self, *_: object) -> None:
        pass


class _Crawler:
    stats = _Stats()


def _middleware(scope: Scope) -> ScopeMiddleware:
    return ScopeMiddleware(_Crawler(), scope, 20)  # type: ignore[arg-type]



@pytest.mark.parametrize(("settings", "message"), [
    ({"SCOPE": "site"}, "scope='site' is not a scope"),
    ({"SCOPE_HOPS": "two"}, "SCOPE_HOPS='two' is not a whole number"),
    ({"SCOPE_EXCLUDE": ["re:("]}, "scope rule 're:(' is not a regular expression"),
])
def test_a_bad_scope_setting_stops_the_crawl_with_one_line(settings: dict[str, object],
                                                           message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        ScopeMiddleware.from_crawler(get_crawler(settings_dict=settings))
