"""Every admitted URL ends once, with its fate, and "done" means fetched.

A property test on the real-socket web (tests/realweb): each example draws a
web of six sites from a seed, every kind at least once:

* ``plain``: every page answers 200;
* ``robots``: robots.txt disallows some pages, which are never requested and
  end refused (reason ``robots``), never done;
* ``broken``: some pages answer 500 on every try, which end as dead letters
  once their one retry is spent;
* ``blocked``: its address is left out of the address guard's allow-list in
  the first run, so nothing reaches it and its URLs end as ``address-blocked``
  dead letters that name the setting that allows them.

The first run may be cut short (``CLOSESPIDER_PAGECOUNT``, drawn). The
operator then allows the blocked sites' addresses, requeues the dead letters
of ``address-blocked`` (``scrapy frontier requeue``) and runs the crawl again
without seeds: a resume with other settings. At the end, from the servers'
own ledger, the items written and the frontier's records:

* every page of every site was requested, but the disallowed ones, which
  never were;
* the frontier counts as done exactly the pages that were fetched (an item
  each; a broken page's last answer is an item too, with its status, and a
  dead letter), and every URL it admitted is done, dead or refused, once;
* the dead letters are exactly the broken pages, the refusals exactly the
  disallowed ones.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from crawler.frontier.admin import FrontierAdmin
from crawler.frontier.keys import Keys, add_counts
from crawler.frontier.schema import refused_at_lease
from tests.crawl_runner import REALWEB_DEFAULTS, REPO, proxy_env, realweb_settings, run_crawl
from tests.realweb import Host, RealWebProcess, Web, links_to, page

pytestmark = pytest.mark.crawl

KINDS = ("plain", "robots", "broken", "blocked")
PARTITIONS = 16


@dataclass
class Site:
    """One drawn site: its kind, its pages, and which of them are disallowed or broken."""

    name: str
    kind: str
    paths: list[str]
    disallowed: set[str] = field(default_factory=set)
    broken: set[str] = field(default_factory=set)

    def host(self) -> Host:
        pages = {"/": links_to(*self.paths)}
        for path in self.paths:
            pages[path] = (page("down", status=500) if path in self.broken
                           else page(f"{self.name}{path}"))
        rules = "".join(f"Disallow: {p}$\n" for p in sorted(self.disallowed)) or "Allow: /\n"
        return Host(self.name, robots=f"User-agent: *\n{rules}", pages=pages)

    def fetchable(self) -> set[str]:
        """The pages that answer, and may be fetched."""
        return {"/", *self.paths} - self.disallowed - self.broken


def draw_sites(rng: random.Random) -> list[Site]:
    kinds = [*KINDS, rng.choice(KINDS), rng.choice(KINDS)]
    rng.shuffle(kinds)
    sites = []
    for i, kind in enumerate(kinds):
        paths = [f"/p{k}" for k in range(rng.randint(3, 6))]
        site = Site(f"f{i}.test", kind, paths)
        if kind == "robots":
            site.disallowed = set(rng.sample(paths, rng.randint(1, len(paths) - 1)))
        elif kind == "broken":
            site.broken = set(rng.sample(paths, rng.randint(1, 2)))
        sites.append(site)
    return sites


def frontier_books(client: redis.Redis, keys: Keys) -> tuple[int, dict[str, int]]:
    """URLs the frontier admitted (its seen sets), and its counts summed."""
    counts: dict[str, int] = {}
    seen = 0
    for part in range(keys.partitions):
        add_counts(counts, client.hgetall(keys.counts(part)))
        for key in client.scan_iter(match=f"*{keys.prefix(part)}:s:*", count=1000):
            seen += client.scard(key)
    return seen, counts


def requeue(settings: dict[str, Any], reason: str) -> str:
    """``scrapy frontier requeue --reason`` as the operator runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "scrapy", "frontier", "requeue", "--reason", reason,
         *(arg for k, v in settings.items() for arg in ("-s", f"{k}={v}"))],
        cwd=REPO, env=proxy_env(None), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def pages_requested(web: RealWebProcess, name: str) -> set[str]:
    return {t.decode() for t in web.ledger().targets(name) if t != b"/robots.txt"}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_admitted_url_ends_once_and_done_is_fetched(
        seed: int, realweb: Callable[..., RealWebProcess], redis_url: str, redis_prefix: str,
        tmp_path: Path) -> None:
    rng = random.Random(seed)
    sites = draw_sites(rng)
    web = realweb(Web([site.host() for site in sites]))
    blocked = [s for s in sites if s.kind == "blocked"]
    namespace = f"{redis_prefix}fates"
    store = {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": namespace,
             "FRONTIER_PARTITIONS": PARTITIONS}
    common = {**realweb_settings(web.nameserver), **REALWEB_DEFAULTS, **store,
              "DOWNLOAD_DELAY": 0, "RETRY_TIMES": 1, "RETRY_BACKOFF_BASE": 0.1,
              "RETRY_BACKOFF_MAX": 0.2, "BREAKER_THRESHOLD": 100, "SCOPE_SETTLE_SECONDS": 0}
    # First run: the blocked sites' addresses are not on the allow-list.
    allowed = ",".join(f"{web.address(s.name)}/32" for s in sites if s.kind != "blocked")
    cut = rng.choice([0, 4, 8])  # pages before the first run stops (0: it runs to its end)
    first = run_crawl(None, [web.url(s.name) for s in sites], tmp_path / "first", {
        **common, "ADDRESS_GUARD_ALLOW_RESOLVED": allowed,
        **({"CLOSESPIDER_PAGECOUNT": cut} if cut else {})}, timeout=150)
    assert first.returncode == 0 and "Traceback" not in first.log, first.log[-3000:]
    client = redis.Redis.from_url(redis_url)
    admin = FrontierAdmin(client, Keys(namespace, PARTITIONS))
    for site in blocked:
        assert web.ledger().targets(site.name) == [], "a blocked site was reached"
    letters = admin.dead(reason="address-blocked")
    assert {x.host.split("://")[1].split(":")[0] for x in letters} <= {s.name for s in blocked}
    if not cut:  # it ran to its end: every blocked site's seed is a dead letter, not done
        assert {x.url for x in letters} >= {web.url(s.name) for s in blocked}
    for letter in letters:
        assert "ADDRESS_GUARD_ALLOW" in letter.error, letter.error

    # The operator allows them, brings their URLs back and runs the crawl again.
    requeue(store, "address-blocked")
    second = run_crawl(None, [], tmp_path / "second", common, timeout=150)
    assert second.returncode == 0 and "Traceback" not in second.log, second.log[-3000:]

    for site in sites:
        assert pages_requested(web, site.name) == {"/", *site.paths} - site.disallowed, site
    items = {(row["url"], row["status"]) for run in (first, second) for row in run.items}
    fetched = {url for url, status in items if status == 200}
    assert fetched == {web.url(s.name, p) for s in sites for p in s.fetchable()}
    # a broken page's last answer is a row too (with its status), and a dead letter
    assert {url for url, status in items if status != 200} == {
        web.url(s.name, p) for s in sites for p in s.broken}

    seen, counts = frontier_books(client, Keys(namespace, PARTITIONS))
    refused = refused_at_lease(counts)
    dead = admin.dead()
    # done is fetched: one item each, and nothing else
    assert counts.get("done", 0) == len(fetched)
    # every admitted URL ended once: done, dead or refused; none left in flight
    assert {k: counts.get(k, 0) for k in ("queued", "leased", "delayed")} == dict.fromkeys(
        ("queued", "leased", "delayed"), 0)
    assert seen == counts.get("done", 0) + counts.get("dead", 0) + sum(refused.values())
    assert counts.get("dead", 0) == len(dead)
    assert sorted(x.url for x in dead) == sorted(
        web.url(s.name, p) for s in sites for p in s.broken)
    assert refused == ({"robots": n} if (n := sum(len(s.disallowed) for s in sites)) else {})
    # the operator's list of refusals says the same, with the URLs themselves
    listed = subprocess.run(
        [sys.executable, "-m", "scrapy", "frontier", "refused", "--json",
         *(arg for k, v in store.items() for arg in ("-s", f"{k}={v}"))],
        cwd=REPO, env=proxy_env(None), capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr[-2000:]
    by_reason = {row["reason"]: row for row in map(json.loads, listed.stdout.splitlines())}
    disallowed = {web.url(s.name, p) for s in sites for p in s.disallowed}
    assert {r: row["count"] for r, row in by_reason.items()} == refused
    if disallowed:
        assert set(by_reason["robots"]["examples"]) == disallowed
