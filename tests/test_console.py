"""The operator's console (crawler/console/), served for real over a real Redis frontier.

Each test serves the console on a loopback port and talks HTTP to it, as a
browser or a tool would: the pages show what ``scrapy frontier`` shows, the
JSON carries the same numbers, a change made through a form is in force in
the frontier (and on its control log, with who made it), and a request that
is not the console's own (no CSRF token, another site's ``Origin``, no
password when one is set) changes nothing. The last test runs the real
``scrapy frontier serve`` command.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from crawler.console.app import ConsoleApp
from crawler.console.history import History
from crawler.console.views import Views
from crawler.frontier import live
from crawler.frontier.control import HostControl
from crawler.frontier.schema import CRAWL
from crawler.frontier.tophosts import TopHosts
from crawler.frontier.values import Limits, Release
from crawler.metrics.auth import Credentials, require_basic_auth
from crawler.metrics.server import serve_app, stop
from crawler.scope.rules import Rules, Scope
from tests.frontier_world import PARTITIONS, World, filled_world, lease_url

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = '<img src=x onerror="alert(1)">'


class Browser:
    """A client of one served console: no redirects followed, cookies none needed."""

    def __init__(self, base: str, auth: tuple[str, str] | None = None) -> None:
        self.base = base
        self.auth = auth
        self.opener = urllib.request.build_opener(_NoRedirect)

    def call(self, method: str, path: str, data: dict[str, str] | None = None,
             headers: dict[str, str] | None = None, json_body: bool = False
             ) -> tuple[int, dict[str, str], str]:
        body = None
        sent = dict(headers or {})
        if data is not None:
            body = (json.dumps(data) if json_body else urlencode(data)).encode()
            sent["Content-Type"] = ("application/json" if json_body
                                    else "application/x-www-form-urlencoded")
        if self.auth:
            token = base64.b64encode(":".join(self.auth).encode()).decode()
            sent["Authorization"] = f"Basic {token}"
        request = urllib.request.Request(self.base + path, data=body, method=method,
                                         headers=sent)
        try:
            with self.opener.open(request, timeout=10) as response:
                return response.status, dict(response.headers), response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read().decode()

    def get(self, path: str) -> str:
        status, _, body = self.call("GET", path)
        assert status == 200, (path, status, body[:500])
        return body

    def json(self, path: str) -> Any:
        return json.loads(self.get(path))

    def csrf_of(self, path: str) -> str:
        """The token in a page's forms, as a browser submits it."""
        found = re.search(r'name="csrf" value="([^"]+)"', self.get(path))
        assert found is not None
        return unescape(found.group(1))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@pytest.fixture
def world(redis_url: str, redis_prefix: str) -> Iterator[World]:
    w = filled_world(redis_url, redis_prefix + "console")
    # a dead letter whose error is hostile text, as strangers' servers send it
    w.admit("http://d.test/x")
    leases = w.claim_all("w2")
    w.release("w2", *(
        Release(x.host, x.fingerprint, "dead",
                json.dumps({"reason": "download-error", "error": HOSTILE}))
        if lease_url(x) == "http://d.test/x" else Release(x.host, x.fingerprint, "return")
        for x in leases))
    yield w
    w.close()


def _served(world: World, credentials: Credentials | None = None
            ) -> tuple[ConsoleApp, str, Any]:
    control = HostControl(world.client, world.keys, Limits())
    history = History()
    history.add(world.admin.status(oldest=False).counts, at=time.time() - 20)
    history.add(world.admin.status(oldest=False).counts)
    views = Views(world.admin, control, history, "redis://test", lambda: [])
    app = ConsoleApp(views, title="test console")
    served = app if credentials is None else require_basic_auth(
        app, credentials, realm="broadcrawl console", what="this console")
    server, thread, port = serve_app(served, "127.0.0.1", range(0, 1), name="console")
    return app, f"http://127.0.0.1:{port}", (server, thread)


@pytest.fixture
def console(world: World) -> Iterator[tuple[Browser, ConsoleApp]]:
    app, base, running = _served(world)
    yield Browser(base), app
    stop(*running)


def test_the_pages_show_what_the_frontier_holds(world: World,
                                                console: tuple[Browser, ConsoleApp]) -> None:
    browser, _ = console
    counts = world.admin.status().counts
    page = browser.get("/")
    assert world.keys.namespace in page
    for state in ("queued", "dead", "done"):
        shown = re.search(rf'id="count-{state}"><small>{state}</small><b>([\d,]+)</b>', page)
        assert shown is not None and int(shown.group(1).replace(",", "")) == counts[state]
    assert "<svg" in page and "<script" not in page
    # it refreshes itself (no script needed), as do the lists without a form to type in
    assert '<meta http-equiv="refresh" content="10">' in page
    assert '<meta http-equiv="refresh"' in browser.get("/refused")
    assert '<meta http-equiv="refresh"' not in browser.get("/host?name=a.test")  # forms

    hosts = browser.get("/hosts")
    for host in ("http://a.test:80", "http://b.test:80", "http://c.test:80"):
        assert host in hosts
    assert "http://d.test:80" not in hosts  # nothing queued
    assert "http://d.test:80" in browser.get("/hosts?by=dead")
    searched = browser.get("/hosts?q=b.te")
    assert "http://b.test:80" in searched and "http://a.test:80" not in searched

    site = browser.get("/host?name=a.test")
    assert "Site <code>a.test</code>" in site and 'value="pause"' in site

    dead = browser.get("/dead")
    assert "download-error" in dead and "http-404" in dead
    # a stranger's text is shown as text, never run
    assert HOSTILE not in dead and "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in dead

    assert browser.call("GET", "/host?name=nowhere.test")[0] == 404
    assert browser.call("GET", "/hosts?by=nonsense")[0] == 400
    assert browser.call("GET", "/no-such-page")[0] == 404


def test_the_json_carries_the_numbers_scrapy_frontier_shows(
        world: World, console: tuple[Browser, ConsoleApp]) -> None:
    browser, _ = console
    status = browser.json("/api/status")
    assert status["counts"] == world.admin.status().counts
    assert status["namespace"] == world.keys.namespace
    assert len(status["history"]["queued"]) == 2
    rows = [r.as_dict() for r in TopHosts(world.client, world.keys).top("queued", 50)]
    hosts = browser.json("/api/hosts?by=queued&top=50")
    assert [{k: v for k, v in r.items() if k not in ("state", "why", "group")}
            for r in hosts] == rows
    # why each waits, as the frontier's leftover script says (nothing holds them here)
    assert {r["host"]: (r["state"], r["group"]) for r in hosts} == dict.fromkeys(
        ("http://a.test:80", "http://b.test:80", "http://c.test:80"), ("ready", "queued"))
    dead = browser.json("/api/dead?limit=10")
    assert dead["by_reason"] == {"download-error": 3, "http-404": 1}
    assert {d["url"] for d in dead["letters"]} == {d.url for d in world.admin.dead()}
    assert browser.json("/api/dead?host=a.test")["by_reason"] == {"download-error": 2}
    view = browser.json("/api/host?name=b.test")
    assert view["site"] == "b.test" and view["dead"] == 1
    assert browser.call("GET", "/api/host?name=")[0] == 400


def test_a_host_paused_through_its_page_is_paused_for_every_worker_and_logged(
        world: World, console: tuple[Browser, ConsoleApp]) -> None:
    browser, _ = console
    control = HostControl(world.client, world.keys, Limits())
    token = browser.csrf_of("/host?name=a.test")
    status, headers, _ = browser.call("POST", "/host?name=a.test",
                                      {"csrf": token, "scope": "site", "action": "pause"})
    assert status == 303 and headers["Location"].startswith("/host?name=a.test&done=")
    view = control.view("a.test")
    assert view is not None and view.site_gate.paused
    assert view.log[0]["change"] == "pause" and view.log[0]["who"] == "console user at 127.0.0.1"
    page = browser.get(headers["Location"])
    assert "paused by an operator" in page and "console user at 127.0.0.1" in page
    states = {r["host"]: r["state"] for r in browser.json("/api/hosts")}
    assert states["http://a.test:80"] == "paused" and states["http://b.test:80"] == "ready"

    status, _, body = browser.call("POST", "/host?name=a.test",
                                   {"csrf": token, "scope": "domain", "action": "slow",
                                    "delay": "2.5"})
    assert status == 303
    view = control.view("a.test")
    assert view is not None and view.domain_gate.delay_s == 2.5
    assert view.domain_gate.delay_from == "operator"

    # the API takes the token in a header, and answers in JSON
    status, _, body = browser.call("POST", "/api/host?name=a.test", {"action": "resume"},
                                   headers={"X-CSRF-Token": token}, json_body=True)
    assert status == 200 and json.loads(body)["done"] == "site a.test: resume"
    view = control.view("a.test")
    assert view is not None and not view.site_gate.paused


def test_a_post_that_is_not_the_console_s_own_changes_nothing(
        world: World, console: tuple[Browser, ConsoleApp]) -> None:
    browser, app = console
    control = HostControl(world.client, world.keys, Limits())
    refused = [
        browser.call("POST", "/host?name=a.test", {"action": "pause"}),
        browser.call("POST", "/host?name=a.test", {"action": "pause", "csrf": "guess"}),
        browser.call("POST", "/api/host?name=a.test", {"action": "pause"}, json_body=True),
        browser.call("POST", "/host?name=a.test", {"action": "pause", "csrf": app.csrf},
                     headers={"Origin": "http://evil.test"}),
    ]
    assert [status for status, _, _ in refused] == [403, 403, 403, 403]
    view = control.view("a.test")
    assert view is not None and not view.site_gate.paused and view.log == []
    assert browser.call("GET", "/requeue")[0] == 405
    status, _, body = browser.call("POST", "/api/host?name=a.test",
                                   {"action": "slow", "delay": "soon"},
                                   headers={"X-CSRF-Token": app.csrf}, json_body=True)
    assert status == 400 and "delay takes a number" in json.loads(body)["error"]


def test_dead_letters_come_back_from_their_page_and_a_host_is_dropped_from_its(
        world: World, console: tuple[Browser, ConsoleApp]) -> None:
    browser, _ = console
    token = browser.csrf_of("/dead")
    status, headers, _ = browser.call("POST", "/requeue", {"csrf": token, "reason": "http-404"})
    assert status == 303 and "requeued+1+dead+letter" in headers["Location"]
    assert world.admin.dead(reason="http-404") == []
    queued_before = world.admin.status().counts["queued"]
    status, _, _ = browser.call("POST", "/host?name=a.test",
                                {"csrf": token, "action": "drop"})
    assert status == 303
    assert {d.url for d in world.admin.dead(reason="dropped")} == {
        f"http://a.test/{i}" for i in (2, 3, 4)}
    assert world.admin.status().counts["queued"] == queued_before - 3
    world.assert_consistent()
    # Both actions are on the overview's list of changes by operators, the newest first.
    _, _, page = browser.call("GET", "/")
    actions = page.split('id="actions"')[1].split("</table>")[0]
    rows = re.findall(r"<tr><td>[^<]*</td><td>(.*?)</td><td>([^<]*)</td></tr>", actions)
    assert [re.sub(r"<[^>]+>", "", what) for what, _ in rows] == [
        "site a.test: drop (3 URLs)", "crawl: requeue 1 (reason http-404)"]
    assert all(who for _, who in rows)


def test_with_a_password_set_reading_and_writing_need_it(world: World) -> None:
    app, base, running = _served(world, Credentials(b"ops", b"s3cret"))
    try:
        anonymous, wrong = Browser(base), Browser(base, ("ops", "nope"))
        assert anonymous.call("GET", "/")[0] == 401
        assert wrong.call("GET", "/api/status")[0] == 401
        assert anonymous.call("POST", "/host?name=a.test",
                              {"csrf": app.csrf, "action": "pause"})[0] == 401
        ops = Browser(base, ("ops", "s3cret"))
        assert ops.call("GET", "/")[0] == 200
        status, _, _ = ops.call("POST", "/host?name=b.test",
                                {"csrf": app.csrf, "action": "pause"})
        assert status == 303
        view = HostControl(world.client, world.keys, Limits()).view("b.test")
        assert view is not None and view.log[0]["who"] == "ops (console, 127.0.0.1)"
    finally:
        stop(*running)


def test_scrapy_frontier_serve_serves_the_crawl_on_loopback(world: World, redis_url: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-m", "scrapy", "frontier", "serve", "--port", "0",
         "-s", f"REDIS_URL={redis_url}", "-s", f"FRONTIER_NAMESPACE={world.keys.namespace}",
         "-s", f"FRONTIER_PARTITIONS={PARTITIONS}", "-s", "CONSOLE_SAMPLE_SECONDS=0.5"],
        cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = ""
        deadline = time.monotonic() + 30
        while "console of" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
        found = re.search(r"at (http://127\.0\.0\.1:\d+)/", line)
        assert found is not None, line
        browser = Browser(found.group(1))
        assert browser.json("/api/status")["counts"] == world.admin.status().counts
        time.sleep(1.2)  # two samples or more: the charts have a line
        assert len(browser.json("/api/status")["history"]["queued"]) >= 2
    finally:
        code, rest = _interrupt(proc)
    assert code == 130, rest  # Ctrl-C: the server stopped, the command said so


def _interrupt(proc: subprocess.Popen[str]) -> tuple[int | None, str]:
    """Ctrl-C ``proc``; its exit status (None: still running after 20 s, then
    killed) and the rest of its stderr, with every thread's stack (faulthandler,
    SIGABRT) when it hung."""
    proc.send_signal(signal.SIGINT)
    try:
        code: int | None = proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # -X faulthandler: the stacks to stderr
        code = None
    try:
        rest = proc.communicate(timeout=10)[1] or ""
    except subprocess.TimeoutExpired:
        proc.kill()
        rest = proc.communicate()[1] or ""
    return code, rest[-6000:]


def test_a_host_s_recent_fetches_and_the_errors_by_kind_come_from_the_workers(
        world: World, console: tuple[Browser, ConsoleApp]) -> None:
    browser, _ = console


    feeds = {name: live.LiveFetches() for name in ("w1", "w2")}
    feeds["w1"].fetched("a.test", "http://a.test/1", "200", 0.25, 1200)
    time.sleep(0.01)  # (the newest first: a later millisecond)
    feeds["w2"].fetched("a.test", "http://a.test/2", "error: TimeoutError", 0.0, 0)
    feeds["w2"].error("TimeoutError")
    feeds["w1"].fetched("b.test", "http://b.test/1", "404", 0.1, 10)
    for name, feed in feeds.items():
        world.client.hset(world.keys.workers(), name, "")
        world.run(live.write(world.aclient, world.keys, name, feed))
        assert feed.pending() == ({}, [])  # written: nothing left to write
    recent = browser.json("/api/host?name=a.test")["recent"]
    assert [(f["url"], f["outcome"], f["worker"]) for f in recent] == [
        ("http://a.test/2", "error: TimeoutError", "w2"), ("http://a.test/1", "200", "w1")]
    page = browser.get("/host?name=a.test")
    assert "http://a.test/1" in page and "error: TimeoutError" in page
    assert "http://b.test/1" not in page


def test_a_worker_keeps_the_recent_fetches_of_its_busiest_hosts_only(
        monkeypatch: pytest.MonkeyPatch) -> None:


    monkeypatch.setattr(live, "HOSTS_KEPT", 2)
    feed = live.LiveFetches()
    for i in range(live.RECENT + 3):
        feed.fetched("a.test", f"http://a.test/{i}", "200", 0.0, 1)
    feed.fetched("b.test", "http://b.test/", "200", 0.0, 1)
    fields, gone = feed.pending()
    assert gone == []
    assert [row[1] for row in json.loads(fields["recent:a.test"])] == [
        f"http://a.test/{i}" for i in range(3, live.RECENT + 3)]
    feed.fetched("c.test", "http://c.test/", "200", 0.0, 1)  # a.test is the oldest: out
    assert feed.pending() == ({"recent:c.test": json.dumps(list(feed.recent["c.test"]))},
                              ["recent:a.test"])


def test_a_host_s_page_says_whether_it_is_in_the_crawl_s_scope(world: World) -> None:
    seeds = Scope()
    forms = seeds.add_seed("http://a.test/")  # as a worker shares its seeds' forms
    world.client.sadd(world.keys.scope_forms(), *forms)
    control = HostControl(world.client, world.keys, Limits())
    views = Views(world.admin, control, History(), "redis://test", lambda: [],
                  Rules(mode="domain"))
    assert views.host("a.test")["scope"] == {
        "rules": Rules(mode="domain").describe(), "from": "settings", "in_scope": True,
        "rule": "in-scope"}
    assert views.host("b.test")["scope"]["in_scope"] is False
    assert views.host("b.test")["scope"]["rule"] == "domain"


def test_the_overview_shows_how_the_crawl_was_started(
        world: World, console: tuple[Browser, ConsoleApp]) -> None:
    browser, _ = console
    assert 'id="crawl-config"' not in browser.get("/")  # a crawl begun before records
    world.client.hset(world.keys.crawl(), mapping={
        CRAWL.started: 1_765_000_000_000, CRAWL.runs: 3,
        CRAWL.config: json.dumps({"SCOPE": "any", "BUDGET_HOST_PAGES": 60, "DEPTH_LIMIT": 0})})
    page = browser.get("/")
    assert ('<p id="crawl-config">Crawl started 2025-12-06 05:46:40 UTC, 3 runs; SCOPE=any, '
            "BUDGET_HOST_PAGES=60</p>") in page
    assert browser.json("/api/status")["crawl"]["config"]["SCOPE"] == "any"


def test_every_host_is_listed_by_its_state_with_why(
        world: World, console: tuple[Browser, ConsoleApp]) -> None:
    browser, _ = console
    # d.test has nothing queued (its one URL is a dead letter); c.test is parked
    # by an operator's drop; a.test and b.test have queued URLs
    world.admin.drop_host("http://c.test:80")

    def listed(state: str) -> dict[str, str]:
        return {r["host"]: r["why"] for r in browser.json(f"/api/hosts?state={state}")}

    assert set(listed("queued")) == {"http://a.test:80", "http://b.test:80"}
    assert listed("parked") == {"http://c.test:80": "dropped by an operator"}
    assert set(listed("finished")) == {"http://d.test:80"}
    assert listed("held") == {} and listed("waiting") == {}
    page = browser.get("/hosts?state=parked")
    assert "http://c.test:80" in page and "dropped by an operator" in page
    assert "http://a.test:80" not in page
    assert browser.call("GET", "/hosts?state=nonsense")[0] == 400
