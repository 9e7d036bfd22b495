"""The crawl's account, kept by the frontier's scripts as they change what they count.

Against a real Redis: seeds admitted (a seed's redirect target not again),
hosts fetched from, dead letters and parked hosts by their reason's label,
and a requeue that takes them off again. Every reader (the status, the
leftover a closing worker reads) gives the same account.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from redis.asyncio import Redis as AsyncRedis

from crawler.deadletter import DeadReason
from crawler.frontier.account import UNLABELLED, Account, reasons
from crawler.frontier.leftover import LeftoverReader
from crawler.frontier.values import Admission, Release
from crawler.urls import canonical_url, host_key, url_fingerprint
from tests.frontier_world import World, lease_url


def _seed(url: str, *, redirected_from: str = "") -> Admission:
    canon = canonical_url(url)
    assert canon
    meta = {"broad_seed": True, **({"redirect_urls": [redirected_from]} if redirected_from
                                   else {})}
    host = host_key(canon)
    assert host
    return Admission(canon, host, url_fingerprint(canon),
                     json.dumps({"u": canon, "m": meta}), 0)


@pytest.fixture
def world(redis_url: str, redis_prefix: str) -> Iterator[World]:
    w = World(redis_url, redis_prefix + "acct", concurrency=10, delay_ms=0)
    yield w
    w.close()


def _account(w: World, redis_url: str) -> Account:
    """The account as the status reads it, checked against a closing worker's read."""
    status = w.admin.status(oldest=False).account

    async def left() -> Account:
        client = AsyncRedis.from_url(redis_url)
        try:
            return (await LeftoverReader(client, w.keys).read()).account
        finally:
            await client.aclose()

    assert w.run(left()) == status
    return status


def test_the_scripts_keep_the_account_as_they_go(world: World, redis_url: str) -> None:
    w = world
    w.run(w.frontier.admit([_seed("http://a.test/"), _seed("http://b.test/"),
                            _seed("http://a.test/new", redirected_from="http://a.test/old")]))
    w.admit("http://a.test/x", "http://b.test/x")
    by_url = {lease_url(lease): lease for lease in w.claim_all()}

    def rel(url: str, op: str, arg: str = "") -> Release:
        lease = by_url.pop(url)
        return Release(lease.host, lease.fingerprint, op, arg)

    w.release("w", rel("http://a.test/", "done"), rel("http://a.test/x", "done"),
              rel("http://b.test/x", "dead", DeadReason.now("http-503", "503").json()),
              *[Release(x.host, x.fingerprint, "return") for x in by_url.values()])
    account = _account(w, redis_url)
    assert (account.fetched, account.hosts_fetched, account.seeds) == (2, 1, 2)
    assert account.dead == {"http-503": 1} and account.parked == {}

    # A parked host: its queued URLs and its new ones are dead letters of its reason.
    w.admit("http://c.test/1", "http://c.test/2")
    unreachable = DeadReason.now("robots-unreachable", "host parked").json()
    w.run(w.frontier.park_host("http://c.test:80", unreachable))
    w.run(w.frontier.park_host("http://c.test:80", unreachable))  # (parked once, counted once)
    w.admit("http://c.test/3")
    account = _account(w, redis_url)
    assert account.dead == {"robots-unreachable": 3, "http-503": 1}
    assert account.parked == {"robots-unreachable": 1}
    assert account.dead_total == w.assert_consistent()["dead"] == 4
    # The status says the parked host is parked, not finished.
    hosts = w.admin.status().hosts
    assert (hosts["parked"], hosts["finished"]) == (1, 0), hosts

    # The operator brings them back: the account says so at once.
    assert w.admin.requeue(reason="robots-unreachable") == 3
    account = _account(w, redis_url)
    assert account.dead == {"http-503": 1} and account.parked == {}
    assert account.queued == w.assert_consistent()["queued"]


def test_dead_letters_counted_before_their_reasons_were_are_unlabelled() -> None:
    account = Account.of({"dead": 5, "x:http-503": 3, "x:gone": -1, "done": 2, "hf": 1},
                         {"robots": 4, "budget": 0})
    assert account.dead == {"http-503": 3, UNLABELLED: 2}
    assert account.refused == {"robots": 4}
    assert account.fetched_line() == "2 page(s) from 1 host(s); 0 seed(s)"
    assert reasons(account.dead) == "http-503 3, unlabelled 2"
