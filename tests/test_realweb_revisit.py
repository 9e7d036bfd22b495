"""Recurring crawls on the real-socket web: what the server received on the second run.

Two ``scrapy crawl broad`` runs share one frontier (the same job folder, so
the same crawl): the second fetches every done URL again, with
``If-None-Match`` / ``If-Modified-Since`` from the first answer; the server
answers 304 where nothing changed and the full page where something did.
A single worker with an idle wait keeps revisiting, the interval growing
while the page stays the same, and ends once nothing is due within the wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.crawl_runner import CrawlResult, crawl_realweb
from tests.realweb import Host, RealWebProcess, Web, links_to, page

pytestmark = pytest.mark.crawl

LAST_MODIFIED = "Tue, 01 Dec 2026 10:00:00 GMT"


def _web() -> Web:
    return Web([Host("a.test", pages={
        "/": links_to("/etag", "/dated", "/changes", "/plain"),
        "/etag": page("same body", headers={"ETag": '"e1"'}),
        "/dated": page("dated body", headers={"Last-Modified": LAST_MODIFIED}),
        "/changes": page("version 1", headers={"ETag": '"c1"'}),
        "/plain": page("no validators"),
    })])


def _crawl(web: RealWebProcess, workdir: Path, **settings: Any) -> CrawlResult:
    return crawl_realweb(web.nameserver, [web.url("a.test", "/")], workdir,
                         {"DOWNLOAD_DELAY": 0, "ROBOTSTXT_OBEY": False, **settings})


def test_the_second_run_asks_only_for_what_changed(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    web = realweb(_web())
    # (long enough that no URL comes due again before the first run ends)
    first = _crawl(web, tmp_path, FRONTIER_REVISIT_AFTER=4)
    assert sorted(r.target for r in web.ledger()) == [
        b"/", b"/changes", b"/dated", b"/etag", b"/plain"]
    sent = {r.target: r for r in web.ledger()}
    assert not any(r.if_none_match or r.if_modified_since for r in sent.values())
    assert first.stat("revisit/conditional") is None

    web.set_page("a.test", "/changes", page("version 2", headers={"ETag": '"c2"'}))
    web.reset()
    time.sleep(4.2)  # every URL is due again
    second = _crawl(web, tmp_path, FRONTIER_REVISIT_AFTER=4)

    assert sorted(r.target for r in web.ledger()) == [  # each once
        b"/", b"/changes", b"/dated", b"/etag", b"/plain"]
    sent = {r.target: r for r in web.ledger()}
    assert (sent[b"/etag"].if_none_match, sent[b"/etag"].status) == ('"e1"', 304)
    assert (sent[b"/dated"].if_modified_since, sent[b"/dated"].status) == (LAST_MODIFIED, 304)
    assert sent[b"/dated"].if_none_match is None
    assert (sent[b"/changes"].if_none_match, sent[b"/changes"].status) == ('"c1"', 200)
    assert sent[b"/changes"].body_bytes == len(b"version 2")
    for target in (b"/", b"/plain"):  # nothing to be conditional on
        assert (sent[target].if_none_match, sent[target].if_modified_since) == (None, None)
    assert sent[b"/etag"].body_bytes == sent[b"/dated"].body_bytes == 0

    items = {item["url"].rsplit("/", 1)[1]: item for item in second.items}
    assert {k: (v["status"], v.get("not_modified")) for k, v in items.items()} == {
        "": (200, False), "etag": (304, True), "dated": (304, True),
        "changes": (200, False), "plain": (200, False)}
    assert second.stat("revisit/conditional") == "3"
    assert second.stat("revisit/not_modified") == "2"
    assert second.stat("revisit/changed") == "1"
    assert second.stat("revisit/unchanged") == "2"  # "/" and "/plain": the same digest


def test_a_worker_that_waits_keeps_revisiting_less_often_while_nothing_changes(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    web = realweb(Web([Host("a.test", pages={
        "/": page("home", headers={"ETag": '"h"'})})]))
    result = _crawl(web, tmp_path, FRONTIER_REVISIT_AFTER=1, FRONTIER_REVISIT_FACTOR=2,
                    FRONTIER_REVISIT_MAX=8, FRONTIER_IDLE_WAIT=5)
    home = [r for r in web.ledger() if r.target == b"/"]
    assert [r.status for r in home] == [200, 304, 304, 304]
    gaps = [b.arrival - a.arrival for a, b in pairwise(home)]
    # due after 1 s, then 2 s (unchanged: x2), then 4 s (x2)
    for gap, want in zip(gaps, (1, 2, 4), strict=True):
        assert want - 0.05 <= gap <= want + 1.1, gaps
    # the next one would be 8 s away, beyond the 5 s idle wait: the worker ended
    assert result.seconds < home[-1].arrival - home[0].arrival + 5 + 20
    assert result.stat("revisit/not_modified") == "3"
