"""Recurring crawls on the real-socket web: what the server received on the second run.

Two ``scrapy crawl broad`` runs share one frontier (the same job folder, so
the same crawl): the second fetches every done URL again, with
``If-None-Match`` / ``If-Modified-Since`` from the first answer; the server
answers 304 where nothing changed and the full page where something did.
A single worker with an idle wait keeps revisiting, the interval growing
while the page stays the same, and ends once nothing is due within the wait.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from warcio.archiveiterator import ArchiveIterator

from tests.crawl_runner import CrawlResult, crawl_realweb
from tests.realweb import Host, Page, RealWebProcess, Web, links_to, page
from tests.realweb.sites import ALLOW_ALL
from tests.replay_tools import get, make_collection, wayback
from tests.warc_samples import warcio_check

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


def _two_runs(web: RealWebProcess, workdir: Path) -> tuple[CrawlResult, CrawlResult]:
    """Crawl, change "/changes", wait until everything is due, crawl again; the
    web's ledger holds the second run's requests."""
    # (long enough that no URL comes due again before the first run ends)
    first = _crawl(web, workdir, FRONTIER_REVISIT_AFTER=4)
    assert sorted(r.target for r in web.ledger()) == [
        b"/", b"/changes", b"/dated", b"/etag", b"/plain"]
    assert not any(r.if_none_match or r.if_modified_since for r in web.ledger())
    assert first.stat("revisit/conditional") is None
    web.set_page("a.test", "/changes", page("version 2", headers={"ETag": '"c2"'}))
    web.reset()
    time.sleep(4.2)  # every URL is due again
    # A changed page's interval shrinks (4 / 1.5 s): kept at 4 s, the margin
    # the first run has, so that it does not come due before this run ends.
    second = _crawl(web, workdir, FRONTIER_REVISIT_AFTER=4, FRONTIER_REVISIT_MIN=4)
    assert sorted(r.target for r in web.ledger()) == [  # each once
        b"/", b"/changes", b"/dated", b"/etag", b"/plain"]
    return first, second


def test_the_second_run_asks_only_for_what_changed(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    web = realweb(_web())
    _, second = _two_runs(web, tmp_path)
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
    # due after 1 s, then 2 s (unchanged: x2), then 4 s (x2); a due time is a
    # whole second, rounded up, so never early and at most a second late
    for gap, want in zip(gaps, (1, 2, 4), strict=True):
        assert want - 0.05 <= gap <= want + 1.6, gaps
    # the next one would be 8 s away, beyond the 5 s idle wait: the worker ended
    assert result.seconds < home[-1].arrival - home[0].arrival + 5 + 20
    assert result.stat("revisit/not_modified") == "3"


def _sitemap(web: RealWebProcess, lastmods: dict[str, str]) -> Page:
    entries = "".join(f"<url><loc>{web.url('a.test', path)}</loc><lastmod>{lastmod}</lastmod>"
                      "</url>" for path, lastmod in lastmods.items())
    return page('<?xml version="1.0" encoding="UTF-8"?><urlset xmlns='
                f'"http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>',
                content_type="application/xml")


def test_a_sitemap_that_says_a_page_changed_brings_its_revisit_forward(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    """A sitemap seeds a recurring crawl: it is revisited every 4 s (a seed),
    its pages every hour. Between two runs the sitemap's lastmod of /a moves
    past the first run's fetch: the second run fetches the sitemap and /a
    again, once each, and leaves /b (same lastmod) for its hour."""
    web = realweb(Web([Host("a.test", robots=ALLOW_ALL, pages={
        "/a": page("page a"), "/b": page("page b")})]))
    old = "2026-01-01T00:00:00Z"
    web.set_page("a.test", "/sitemap.xml", _sitemap(web, {"/a": old, "/b": old}))
    settings = {"FRONTIER_REVISIT_AFTER": "1h", "FRONTIER_REVISIT_SEEDS": 4,
                "FRONTIER_REVISIT_MIN": 4, "ROBOTSTXT_OBEY": True}
    seeds = [web.url("a.test", "/sitemap.xml")]
    crawl_realweb(web.nameserver, seeds, tmp_path, {"DOWNLOAD_DELAY": 0, **settings})
    assert sorted(r.target for r in web.ledger() if r.target != b"/robots.txt") == [
        b"/a", b"/b", b"/sitemap.xml"]
    time.sleep(4.2)  # the sitemap is due again
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    web.set_page("a.test", "/sitemap.xml", _sitemap(web, {"/a": now, "/b": old}))
    web.reset()
    second = crawl_realweb(web.nameserver, seeds, tmp_path, {"DOWNLOAD_DELAY": 0, **settings})
    assert [r.target for r in web.ledger() if r.target != b"/robots.txt"] == [
        b"/sitemap.xml", b"/a"]
    assert second.stat("revisit/lastmod") == "1"


def test_pywb_replays_the_second_run_from_the_first_runs_payloads(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    """pywb indexes both runs' files itself and replays each capture of the
    second run: an unchanged page archived as an identical-payload revisit
    comes back with the first run's bytes; a 304 is a server-not-modified
    revisit carrying the first capture's digest, naming it by URI and WARC-Date,
    and that capture replays; a changed page is a full response."""
    web = realweb(_web())
    _two_runs(web, tmp_path)
    warcs = sorted((tmp_path / "warc").glob("*.warc.gz"))
    assert len(warcs) == 2 and warcio_check(*warcs) == 0
    refers = _revisits_by_url(warcs)
    root = tmp_path / "pywb"
    make_collection(root, "c", warcs)
    bodies = {"": None, "plain": b"no validators", "etag": b"same body",
              "dated": b"dated body", "changes": b"version 1"}
    with wayback(root) as base:
        for name, first_body in bodies.items():
            url = web.url("a.test", f"/{name}")
            _, _, index = get(f"{base}/c/cdx?url={quote(url, safe='')}&output=json")
            old, new = (json.loads(line) for line in index.splitlines())
            status, _, body = get(f"{base}/c/{old['timestamp']}id_/{url}")
            assert status == 200 and (first_body is None or body == first_body), name
            first_body = body
            status, headers, again = get(f"{base}/c/{new['timestamp']}id_/{url}")
            assert _memento(headers) == new["timestamp"], name  # the second run's capture
            if name == "changes":
                assert (new["mime"], status, again) == ("text/html", 200, b"version 2")
                continue
            assert new["mime"] == "warc/revisit" and new["digest"] == old["digest"], name
            profile, refers_to = refers[url]
            if name in ("", "plain"):  # fetched in full, the same payload
                assert profile.endswith("/identical-payload-digest")
                assert (status, again) == (200, first_body), name
            else:  # pywb answers the 304 the server sent; the revisit names the capture
                assert profile.endswith("/server-not-modified") and status == 304, name
            assert refers_to == (url, _warc_date_of(warcs[0], url))


def _revisits_by_url(warcs: list[Path]) -> dict[str, tuple[str, tuple[str, str]]]:
    found = {}
    for path in warcs:
        with path.open("rb") as f:
            for record in ArchiveIterator(f):
                if record.rec_type == "revisit":
                    h = record.rec_headers
                    found[h.get_header("WARC-Target-URI")] = (
                        h.get_header("WARC-Profile"),
                        (h.get_header("WARC-Refers-To-Target-URI"),
                         h.get_header("WARC-Refers-To-Date")))
    return found


def _warc_date_of(path: Path, url: str) -> str:
    with path.open("rb") as f:
        return next(r.rec_headers.get_header("WARC-Date") for r in ArchiveIterator(f)
                    if r.rec_type == "response" and r.rec_headers.get_header(
                        "WARC-Target-URI") == url)


def _memento(headers: dict[str, str]) -> str:
    moment = email.utils.parsedate_to_datetime(headers["Memento-Datetime"])
    return moment.strftime("%Y%m%d%H%M%S")


@pytest.mark.parametrize("shared", ["monthly", ""])
def test_crawl_ids_naming_one_digest_index_archive_a_payload_once(
        realweb: Callable[..., RealWebProcess], tmp_path: Path, shared: str) -> None:
    """A new crawl id is a fresh crawl (every page fetched again), but with
    WARC_DIGEST_INDEX shared, what an earlier crawl id archived is a revisit."""
    web = realweb(_web())
    for crawl_id in ("2026-11", "2026-12"):
        _crawl(web, tmp_path, FRONTIER_CRAWL_ID=crawl_id, WARC_DIGEST_INDEX=shared)
    assert len(web.ledger()) == 10  # two fresh crawls: every page twice
    types: dict[str, list[str]] = {}
    for path in sorted((tmp_path / "warc").glob("*.warc.gz")):
        with path.open("rb") as f:
            for record in ArchiveIterator(f):
                if record.rec_type in ("response", "revisit"):
                    url = record.rec_headers.get_header("WARC-Target-URI")
                    types.setdefault(url, []).append(record.rec_type)
    assert len(types) == 5
    second = "revisit" if shared else "response"
    assert all(kinds == ["response", second] for kinds in types.values()), types


def test_the_report_says_what_changed_since_the_last_run(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    """A recurring crawl's report: the latest run's pages next to their last
    fetch, per host (changes.csv) and in report.json; a page removed is gone."""
    web = realweb(Web([Host("a.test", pages={
        "/": links_to("/etag", "/changes", "/gone"),
        "/etag": page("same body", headers={"ETag": '"e1"'}),
        "/changes": page("version 1"),
        "/gone": page("here today"),
    })]))
    _crawl(web, tmp_path, FRONTIER_REVISIT_AFTER=4)
    folder = next((tmp_path / "reports").iterdir())
    assert _changes(folder) == {"new": 4, "changed": 0, "unchanged": 0, "gone": 0}
    web.set_page("a.test", "/changes", page("version 2"))
    web.set_page("a.test", "/gone", None)
    time.sleep(4.2)  # every URL is due again
    _crawl(web, tmp_path, FRONTIER_REVISIT_AFTER=4, FRONTIER_REVISIT_MIN=4)
    # "/" the same digest, "/etag" a 304; "/gone" a 404 now
    assert _changes(folder) == {"new": 0, "changed": 1, "unchanged": 2, "gone": 1}
    report = json.loads((folder / "report.json").read_text())
    assert report["changes"] == {"a.test": {"changed": 1, "unchanged": 2, "gone": 1}}
    assert report["tally"]["hosts"]["a.test"]["pages"] == 8  # both runs' pages


def _changes(folder: Path) -> dict[str, int]:
    rows = (folder / "changes.csv").read_text().splitlines()
    header, (values,) = rows[0].split(","), rows[1:]
    assert values.startswith("a.test,")
    return dict(zip(header[1:], map(int, values.split(",")[1:]), strict=True))
