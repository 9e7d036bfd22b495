"""One account of a crawl: every view tells the same story, and the servers agree.

A crawl on the real-socket web meets every kind of outcome: pages that answer
200 and 404, links found twice, a page robots.txt disallows, a page that
answers 500 on every try, a host whose address the guard refuses and a name
that does not exist. Then the five views an operator reads are asked:

* the summary the crawl logged last;
* ``scrapy frontier status --json``;
* the report ``scrapy frontier report`` writes (its JSON and its page);
* the console (its JSON and its overview page);
* the Prometheus exposition of the frontier's metrics.

Each gives pages fetched, hosts fetched from, seeds, refusals, dead letters
and parked hosts by reason; all five must be equal, to the unit, and equal
to what the servers' own ledger says was fetched.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from crawler.console.app import ConsoleApp
from crawler.console.history import History
from crawler.console.views import Views
from crawler.frontier.admin import FrontierAdmin
from crawler.frontier.control import HostControl
from crawler.frontier.keys import Keys
from crawler.frontier.values import Limits
from crawler.metrics.frontier import FrontierCollector
from tests.crawl_runner import REALWEB_DEFAULTS, REPO, proxy_env, realweb_settings, run_crawl
from tests.realweb import Host, RealWebProcess, Web, links_to, page

pytestmark = pytest.mark.crawl

PARTITIONS = 8
FIELDS = ("fetched", "hosts_fetched", "seeds", "refused", "dead", "parked")


def _web() -> Web:
    return Web([
        Host("a.test", robots="User-agent: *\nAllow: /\n", pages={
            "/": links_to("/p0", "/p1", "/gone", "/p0", "http://b.test/"),
            "/p0": page("a p0"),
            "/p1": links_to("/", "/p0"),
            "/gone": page("gone", status=404)}),
        Host("b.test", robots="User-agent: *\nDisallow: /secret\n", pages={
            "/": links_to("/secret", "/open"), "/open": page("b open"),
            "/secret": page("never")}),
        Host("c.test", robots="User-agent: *\nAllow: /\n", pages={
            "/": links_to("/down", "/ok"), "/ok": page("c ok"),
            "/down": page("down", status=500)}),
        Host("d.test", robots="User-agent: *\nAllow: /\n", pages={"/": page("d")}),
    ])


def _frontier(settings: dict[str, Any], *argv: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "scrapy", "frontier", *argv,
         *(arg for k, v in settings.items() for arg in ("-s", f"{k}={v}"))],
        cwd=REPO, env=proxy_env(None), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _of_account(account: dict[str, Any]) -> dict[str, Any]:
    return {name: account[name] for name in FIELDS}


def _from_summary(log: str) -> dict[str, Any]:
    """The summary's figures, read back from its words."""
    block = log[log.rindex("Crawl summary ("):]
    fetched = re.search(r"pages fetched: ([\d,]+) from ([\d,]+) host\(s\), ([\d,]+) seed",
                        block)
    assert fetched, block

    def by_reason(text: str | None) -> dict[str, int]:
        if not text:
            return {}
        pairs = (part.rsplit(" ", 1) for part in text.split(", "))
        return {reason: int(n.replace(",", "")) for reason, n in pairs}

    refused = re.search(r"[\d,]+ refused \(([^)]*)\)", block)
    dead = re.search(r"dead letters: [\d,]+ URLs \(([^;]*);", block)
    parked = re.search(r"[\d,]+ host\(s\) parked \(([^)]*)\)", block)
    return {"fetched": int(fetched[1].replace(",", "")),
            "hosts_fetched": int(fetched[2].replace(",", "")),
            "seeds": int(fetched[3].replace(",", "")),
            "refused": by_reason(refused and refused[1]),
            "dead": by_reason(dead and dead[1]), "parked": by_reason(parked and parked[1])}


def _cards(html: str) -> dict[str, int]:
    """The account's figures as a page shows them (``id="account-NAME"``)."""
    found = {}
    for name in ("fetched", "hosts", "seeds", "refused", "dead", "parked"):
        shown = re.search(rf'id="account-{name}">[^<]*(?:<b>)?([\d,]+)<', html)
        assert shown, name
        found[name] = int(shown[1].replace(",", ""))
    return found


def _totals(account: dict[str, Any]) -> dict[str, int]:
    return {"fetched": account["fetched"], "hosts": account["hosts_fetched"],
            "seeds": account["seeds"], "refused": sum(account["refused"].values()),
            "dead": sum(account["dead"].values()), "parked": sum(account["parked"].values())}


class _Status(Collector):
    """The frontier's families of one status read, as a scrape exposes them."""

    def __init__(self, collector: FrontierCollector) -> None:
        self.collector = collector

    def collect(self) -> Any:
        return self.collector.families(self.collector.reader.read(oldest=False), "test")


def _from_metrics(client: redis.Redis, keys: Keys) -> dict[str, Any]:
    registry = CollectorRegistry()
    registry.register(_Status(FrontierCollector(client, keys, "reader")))
    samples = [s for family in text_string_to_metric_families(generate_latest(registry).decode())
               for s in family.samples]

    def one(name: str, **labels: str) -> int:
        return int(next(s.value for s in samples if s.name == name
                        and all(s.labels.get(k) == v for k, v in labels.items())))

    def by_reason(name: str) -> dict[str, int]:
        return {s.labels["reason"]: int(s.value) for s in samples if s.name == name}

    return {"fetched": one("crawler_frontier_urls", state="done"),
            "hosts_fetched": one("crawler_frontier_hosts_fetched_total"),
            "seeds": one("crawler_frontier_seeds_total"),
            "refused": by_reason("crawler_frontier_refused_total"),
            "dead": by_reason("crawler_frontier_dead_letters"),
            "parked": by_reason("crawler_frontier_hosts_parked")}


def test_the_five_views_tell_one_story_and_the_servers_agree(
        realweb: Callable[..., RealWebProcess], redis_url: str, redis_prefix: str,
        tmp_path: Path) -> None:
    web = realweb(_web())
    namespace = f"{redis_prefix}account"
    store = {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": namespace,
             "FRONTIER_PARTITIONS": PARTITIONS}
    allowed = ",".join(f"{web.address(name)}/32" for name in ("a.test", "b.test", "c.test"))
    seeds = [web.url(name) for name in ("a.test", "b.test", "c.test", "d.test")]
    seeds.append("http://nx.test/")  # a name the web's DNS server does not know
    crawl = run_crawl(None, seeds, tmp_path / "crawl", {
        **realweb_settings(web.nameserver), **REALWEB_DEFAULTS, **store,
        "DOWNLOAD_DELAY": 0, "RETRY_TIMES": 1, "RETRY_BACKOFF_BASE": 0.1,
        "RETRY_BACKOFF_MAX": 0.2, "BREAKER_THRESHOLD": 100, "SCOPE_SETTLE_SECONDS": 0,
        "ADDRESS_GUARD_ALLOW_RESOLVED": allowed}, timeout=150)
    assert crawl.returncode == 0 and "Traceback" not in crawl.log, crawl.log[-3000:]

    # What the servers say: every page answered but the broken one, once a URL.
    ledger = web.ledger()
    answered = {(r.host, r.target) for r in ledger if r.target != b"/robots.txt"}
    broken = {("c.test", b"/down")}
    assert {t for h, t in answered if h == "b.test"} == {b"/", b"/open"}  # not /secret
    assert not ledger.for_host("d.test")  # the guard let nothing reach it
    truth = {"fetched": len(answered - broken),
             "hosts_fetched": len({h for h, _ in answered - broken}),
             "seeds": len(seeds)}
    assert truth == {"fetched": 8, "hosts_fetched": 3, "seeds": 5}

    client = redis.Redis.from_url(redis_url)
    keys = Keys(namespace, PARTITIONS)
    admin = FrontierAdmin(client, keys)
    letters = Counter(x.reason for x in admin.dead())
    assert letters["http-500"] == 1 and letters["address-blocked"] == 1, letters
    assert sum(n for reason, n in letters.items() if reason.startswith("dns-")) == 1, letters

    views: dict[str, dict[str, Any]] = {"summary": _from_summary(crawl.log)}
    status = json.loads(_frontier(store, "status", "--json"))
    views["status"] = _of_account(status["account"])
    out = tmp_path / "report"
    _frontier(store, "report", "--out", str(out))
    report = json.loads((out / "report.json").read_text())
    views["report"] = _of_account(report["account"])
    console = Views(admin, HostControl(client, keys, Limits()), History(), "redis://test",
                    lambda: [])
    overview = console.overview()
    views["console"] = _of_account(overview["account"])
    views["metrics"] = _from_metrics(client, keys)

    first = views["summary"]
    assert {k: first[k] for k in truth} == truth, first
    assert first["refused"] == {"robots": 1}
    assert first["dead"] == dict(letters)  # the labels the dead-letter listing filters on
    assert set(first["parked"]) == {"address-blocked", *(r for r in letters
                                                         if r.startswith("dns-"))}
    for name, view in views.items():
        assert view == first, f"{name} tells another story: {view} != {first}"

    # The pages show the same figures as their JSON.
    expected = _totals(first)
    assert _cards((out / "report.html").read_text()) == expected
    app = ConsoleApp(console, title="test")
    assert _cards(_get(app, "/")) == expected
    assert json.loads(_get(app, "/api/status"))["account"]["fetched"] == expected["fetched"]


def _get(app: ConsoleApp, path: str) -> str:
    """One GET of the console, as a WSGI server makes it."""
    replies: list[str] = []
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "",
               "wsgi.input": None, "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "80",
               "HTTP_HOST": "127.0.0.1", "wsgi.url_scheme": "http"}
    body = b"".join(app(environ, lambda status, headers: replies.append(status)))
    assert replies and replies[0].startswith("200"), (path, replies)
    return body.decode()
