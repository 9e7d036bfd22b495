"""The crawl's scope shared through Redis (crawler/frontier/scopestate.py), and
what the scope middleware makes of it, on a real Redis under a private prefix."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
import redis.asyncio
from scrapy import Request
from scrapy.exceptions import UsageError
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

from crawler.frontier.admin import FrontierAdmin
from crawler.frontier.keys import Keys
from crawler.frontier.scopestate import SharedScope, read_rules, write_rules
from crawler.middlewares.scope import ScopeMiddleware
from crawler.scope.rules import Rules, Scope
from crawler.seeds import SEED_META
from tests.frontier_harness import Harness, admission, frontier_command


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


def test_the_forms_left_unshared_are_saved_as_the_worker_closes(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("scope3")
    mine = _middleware(Scope("domain"))
    mine._seed("http://a.test/")  # a crawl stopped before its next turn of sharing
    h.run(mine._share_rest(SharedScope(h.client, h.keys)))
    assert mine.unshared == []
    later = _middleware(Scope("domain"))
    h.run(later.sync(SharedScope(h.client, h.keys)))
    assert later.scope.decide("http://a.test/p1").fetch


def test_a_seed_of_an_earlier_run_widens_the_scope_when_its_page_comes() -> None:
    """A seed given back by ``scrapy frontier requeue`` to a run without seeds:
    its page's links are in scope, another host's are not."""
    mine = _middleware(Scope("domain"))
    seed = Request("http://f3.test/", meta={SEED_META: True})
    page = HtmlResponse(seed.url, body=b"", request=seed)
    links = [Request("http://f3.test/p0"), Request("http://other.test/")]
    assert [r.url for r in mine.process_spider_output(page, links)] == ["http://f3.test/p0"]
    assert mine.unshared == ["d:f3.test", "h:f3.test", "p:test,f3)/"]  # for the others too
    again = HtmlResponse(seed.url, body=b"", request=seed)
    assert [r.url for r in mine.process_spider_output(again, [])] == []
    assert len(mine.unshared) == 3  # (a scope that covers it already: nothing new)


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


def test_an_operators_change_reaches_every_worker_and_its_reset_gives_back_their_settings(
        make_harness: Callable[..., Harness], redis_url: str) -> None:
    h = make_harness("scope-x")
    sync_client = redis.Redis.from_url(redis_url)
    one, two = _middleware(Scope("host")), _middleware(Scope("domain", hops=1))
    one._seed("http://a.test/")
    h.run(one.sync(SharedScope(h.client, h.keys)))
    write_rules(sync_client, h.keys, Rules("host", 0, exclude=("re:/private/",)))
    assert read_rules(sync_client, h.keys) == Rules("host", 0, exclude=("re:/private/",))
    shared_one, shared_two = SharedScope(h.client, h.keys), SharedScope(h.client, h.keys)
    for mine, shared in ((one, shared_one), (two, shared_two)):
        h.run(mine.sync(shared))
        assert mine.scope.rules() == Rules("host", 0, exclude=("re:/private/",))
        assert mine.scope.decide("http://a.test/x").fetch
        assert not mine.scope.decide("http://a.test/private/x").fetch
        assert not mine.scope.decide("http://docs.a.test/").fetch  # host, no hops
    # a worker started later reads the change from the log's start
    late = _middleware(Scope("any"))
    h.run(late.sync(SharedScope(h.client, h.keys)))
    assert late.scope.rules().mode == "host" and late.scope.decide("http://a.test/").fetch
    write_rules(sync_client, h.keys, None)
    assert read_rules(sync_client, h.keys) is None
    h.run(two.sync(shared_two))
    assert two.scope.rules() == Rules("domain", 1)
    assert two.scope.decide("http://docs.a.test/").fetch


def test_the_scope_command_changes_the_scope_and_ends_what_it_put_out(
        make_harness: Callable[..., Harness], redis_url: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    h = make_harness("scope-cmd", concurrency=4, delay_ms=0)
    seeds = Scope("domain")
    h.run(SharedScope(h.client, h.keys).add(
        seeds.add_seed("http://a.test/") + seeds.add_seed("http://b.test/")))
    h.run(h.frontier.admit([admission(f"http://a.test/{i}") for i in range(3)]
                           + [admission(f"http://b.test/{i}") for i in range(4)]
                           + [admission("http://b.test/keep/1")]))
    opts = {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": h.keys.namespace,
            "FRONTIER_PARTITIONS": h.keys.partitions}
    code, out, err = frontier_command(monkeypatch, capsys, "scope", **opts)
    assert code == 0, err
    assert "scope: scope=domain  [each worker's settings" in out
    assert "seeds cover 2 registered domain(s), 2 host name(s), 2 prefix(es)" in out
    code, out, err = frontier_command(monkeypatch, capsys, "scope", "--exclude", "b.test",
                                      "--include", "re:/keep/", **opts)
    assert code == 0, err
    assert "5 queued URL(s) now out of scope are dead letters" in err  # exclude wins
    assert "requeue --reason out-of-scope" in err
    code, out, err = frontier_command(monkeypatch, capsys, "scope", "--remove", "b.test",
                                      "--exclude", "re://b\\.test/[0-9]", **opts)
    assert code == 0, err
    assert "0 queued URL(s) now out of scope" in err
    assert "scope: scope=domain, include=re:/keep/, exclude=re://b\\.test/[0-9]  [the operator's" \
        in out
    counts = h.run(h.frontier.counts())
    assert (counts["queued"], counts["dead"]) == (3, 5)
    letters = FrontierAdmin(redis.Redis.from_url(redis_url), h.keys).dead(reason="out-of-scope")
    assert sorted(x.url for x in letters) == [
        *(f"http://b.test/{i}" for i in range(4)), "http://b.test/keep/1"]
    code, _, err = frontier_command(monkeypatch, capsys, "scope", "--remove", "nothing", **opts)
    assert code == 2 and "--remove nothing: no such rule" in err
    code, _, err = frontier_command(monkeypatch, capsys, "scope", "--mode", "site", **opts)
    assert code == 2 and "scope='site' is not a scope" in err
    code, _, err = frontier_command(monkeypatch, capsys, "scope", "--delay", "1", **opts)
    assert code == 2 and "apply to host" in err
    code, out, err = frontier_command(monkeypatch, capsys, "scope", "--reset", **opts)
    assert code == 0 and "each worker's own settings" in err
    assert read_rules(redis.Redis.from_url(redis_url), h.keys) is None
