"""Budgets in the frontier (real Redis): a site's and a domain's pages, bytes and
seconds; what ends when one is spent, and how it comes back."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from crawler.deadletter import DeadReason
from crawler.frontier.admin import FrontierAdmin, parse_host_match
from crawler.frontier.scopestate import SharedScope
from crawler.frontier.values import Admission, Budgets, BudgetSpent, Limits, Release
from crawler.scheduling.budgetwatch import BudgetWatch
from crawler.scheduling.siteruleswatch import SiteRulesWatch
from crawler.scope.rules import Scope
from crawler.siterules import SiteRules
from tests.frontier_harness import Harness, admission, frontier_command


def _drain(h: Harness, worker: str = "w", rounds: int = 50, size: int = 0,
           jobs: list | None = None) -> list:
    """Claim and release (done) until a claim gives no URL: every lease taken
    (the budget jobs handed out meanwhile go to ``jobs``)."""
    taken = []
    for _ in range(rounds):
        result = h.run(h.frontier.claim(10, worker))
        if jobs is not None:
            jobs += result.budget_jobs
        leases = result.leases
        if not leases:
            break
        taken += leases
        h.run(h.frontier.release(
            [Release(x.host, x.fingerprint, "done", size=size) for x in leases], worker))
    return taken


def _jobs(h: Harness) -> list[tuple[str, BudgetSpent]]:
    return h.run(h.frontier.claim(10, "w")).budget_jobs


def _end(h: Harness, host: str, spent: BudgetSpent) -> int:
    reason = DeadReason.now("budget", f"spent {spent.describe()}").json()
    return h.run(h.frontier.park_host(host, reason, whole_site=True, spent=True))


def test_a_page_budget_is_never_overrun_and_ends_the_rest(
        make_harness: Callable[..., Harness], redis_url: str) -> None:
    h = make_harness("bp", concurrency=4, delay_ms=0, budgets=Budgets(host_pages=3))
    f = h.frontier
    h.run(f.admit([admission(f"http://a.test/{i}") for i in range(10)]
                  + [admission(f"https://a.test/s{i}") for i in range(10)]
                  + [admission(f"http://b.test/{i}") for i in range(2)]))
    jobs: list = []
    taken = _drain(h, jobs=jobs)
    by_site: dict[str, int] = {}
    for lease in taken:
        site = lease.host.split("://")[1].split(":")[0]
        by_site[site] = by_site.get(site, 0) + 1
    # every scheme and port of a name share its budget; another name has its own
    assert by_site == {"a.test": 3, "b.test": 2}
    assert [(host.split("://")[1], spent) for host, spent in jobs] in (
        [("a.test:80", BudgetSpent("site", "pages", 3))],
        [("a.test:443", BudgetSpent("site", "pages", 3))])
    assert _jobs(h) == []  # handed out once while it runs
    assert _end(h, jobs[0][0], jobs[0][1]) == 17  # both schemes' queues
    counts = h.run(f.counts())
    assert (counts["queued"], counts["dead"], counts["done"]) == (0, 17, 5)
    # its new links are refused, not seen: they may come back
    again = h.run(f.admit([admission("http://a.test/new"), admission("http://b.test/new")]))
    assert (again.added, again.spent) == (1, 1)
    letters = FrontierAdmin(redis.Redis.from_url(redis_url), h.keys).dead(reason="budget")
    assert len(letters) == 17


def test_a_url_given_back_unstarted_or_refused_unfetched_spends_nothing(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("bg", concurrency=4, delay_ms=0, budgets=Budgets(host_pages=2))
    f = h.frontier
    h.run(f.admit([admission(f"http://a.test/{i}") for i in range(6)]))
    first = h.run(f.claim(10, "w")).leases
    assert len(first) == 2
    h.run(f.release([Release(x.host, x.fingerprint, "return") for x in first], "w"))
    second = h.run(f.claim(10, "w")).leases
    assert len(second) == 2  # the two given back did not count
    robots, guard = second
    blocked = DeadReason("address-blocked", "a.test (127.0.0.1) is loopback").json()
    h.run(f.release([Release(robots.host, robots.fingerprint, "refused", "robots", unsent=True),
                     Release(guard.host, guard.fingerprint, "dead", blocked, unsent=True)], "w"))
    assert len(_drain(h)) == 2  # nor the one robots.txt refused, nor the one the guard did
    counts = h.run(f.counts())
    # neither is done: one refused for good (by reason), one a dead letter to requeue
    assert (counts["done"], counts["dead"], counts["r:robots"]) == (2, 1, 1)


def test_a_byte_budget_ends_the_site_after_the_answer_that_spent_it(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("bb", concurrency=1, delay_ms=0, budgets=Budgets(host_bytes=1000))
    f = h.frontier
    h.run(f.admit([admission(f"http://a.test/{i}") for i in range(5)]))
    jobs: list = []
    assert len(_drain(h, size=600, jobs=jobs)) == 2  # 600, then 1200: spent
    assert [spent for _, spent in jobs] == [BudgetSpent("site", "bytes", 1000)]


def test_a_time_budget_counts_from_the_first_claim(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("bs", clock=True, concurrency=1, delay_ms=0, jitter=0,
                     budgets=Budgets(host_ms=5000))
    f = h.frontier
    h.run(f.admit([admission(f"http://a.test/{i}") for i in range(5)]))
    assert len(_drain(h, rounds=1)) == 1
    h.clock.advance(4999)
    assert len(_drain(h, rounds=1)) == 1
    h.clock.advance(1)
    result = h.run(f.claim(10, "w"))
    assert result.leases == []
    assert [spent for _, spent in result.budget_jobs] == [BudgetSpent("site", "seconds", 5000)]


def test_a_budget_job_whose_worker_vanished_is_handed_out_again(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("bv", clock=True, concurrency=1, delay_ms=0, jitter=0,
                     budgets=Budgets(host_pages=1))
    f = h.frontier
    h.run(f.admit([admission(f"http://a.test/{i}") for i in range(3)]))
    jobs: list = []
    assert len(_drain(h, jobs=jobs)) == 1
    assert len(jobs) == 1
    h.clock.advance(9_999)
    assert _jobs(h) == []
    h.clock.advance(1)
    (host, spent), = _jobs(h)
    assert _end(h, host, spent) == 2
    assert h.run(f.counts())["queued"] == 0


def test_a_domain_budget_is_shared_by_its_sites(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("bd", concurrency=4, delay_ms=0, budgets=Budgets(domain_pages=4))
    f = h.frontier
    h.run(f.admit([admission(f"http://{site}.a.test/{i}")
                   for site in ("www", "img", "docs") for i in range(4)]
                  + [admission(f"http://other.test/{i}") for i in range(5)]))
    jobs: list = []
    taken = _drain(h, jobs=jobs)
    in_domain = [x for x in taken if x.host.endswith(".a.test:80")]
    assert len(in_domain) == 4
    assert len(taken) - len(in_domain) == 4  # other.test's own domain budget
    assert jobs and {spent for _, spent in jobs} == {BudgetSpent("domain", "pages", 4)}


def test_requeued_after_the_budget_was_raised_the_rest_is_crawled(
        make_harness: Callable[..., Harness], redis_url: str) -> None:
    h = make_harness("br", concurrency=4, delay_ms=0, budgets=Budgets(host_pages=2))
    f = h.frontier
    h.run(f.admit([admission(f"http://a.test/{i}") for i in range(6)]))
    jobs: list = []
    assert len(_drain(h, jobs=jobs)) == 2
    (host, spent), = jobs
    assert _end(h, host, spent) == 4
    f.limits.budgets = Budgets(host_pages=10)
    admin = FrontierAdmin(redis.Redis.from_url(redis_url), h.keys)
    assert admin.requeue(reason="budget", host=parse_host_match("a.test")) == 4
    assert h.run(f.admit([admission("http://a.test/new")])).added == 1  # no longer refused
    assert len(_drain(h)) == 5


@pytest.mark.parametrize("name", ["BUDGET_HOST_PAGES", "BUDGET_DOMAIN_SECONDS"])
def test_a_negative_budget_is_refused_by_name(name: str) -> None:
    from scrapy.settings import Settings
    with pytest.raises(ValueError, match=name):
        Budgets.from_settings(Settings({name: -1}))


def test_the_host_command_shows_the_spend_and_raises_a_sites_budget_live(
        make_harness: Callable[..., Harness], redis_url: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    h = make_harness("bc", concurrency=4, delay_ms=0, budgets=Budgets(host_pages=2))
    f = h.frontier
    h.run(f.admit([admission(f"http://a.test/{i}") for i in range(6)]))
    jobs: list = []
    assert len(_drain(h, size=100, jobs=jobs)) == 2
    (host, spent), = jobs
    assert _end(h, host, spent) == 4
    opts = {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": h.keys.namespace,
            "FRONTIER_PARTITIONS": h.keys.partitions, "BUDGET_HOST_PAGES": 2}
    code, out, err = frontier_command(monkeypatch, capsys, "host", "a.test", **opts)
    assert code == 0, err
    assert "budget: pages 2 of 2, bytes 200 (no limit)" in out
    assert "(setting BUDGET_HOST_*); spent: pages" in out
    assert "budget spent: new links refused" in out
    code, out, err = frontier_command(monkeypatch, capsys, "host", "a.test", "--budget-pages",
                                      "5", **opts)
    assert code == 0 and "site a.test: budget 5 pages, for every worker" in err, err
    assert "requeue --reason budget --host a.test" in err
    assert "pages 2 of 5" in out and "(operator)" in out and "spent:" not in out
    # the workers' setting still says 2: the operator's 5 is in force for every one
    assert h.run(f.admit([admission("http://a.test/new")])).added == 1
    assert len(_drain(h)) == 1
    admin = FrontierAdmin(redis.Redis.from_url(redis_url), h.keys)
    assert admin.requeue(reason="budget", host=parse_host_match("a.test")) == 4
    jobs = []
    assert len(_drain(h, jobs=jobs)) == 2  # 5 in all
    assert [spent for _, spent in jobs] == [BudgetSpent("site", "pages", 5)]
    code, _, err = frontier_command(monkeypatch, capsys, "host", "a.test", "--domain",
                                    "--budget-pages", "5", **opts)
    assert code == 2 and "BUDGET_DOMAIN_*" in err


def test_inlinks_raise_a_queued_url_and_never_bring_back_a_claimed_one(
        make_harness: Callable[..., Harness], redis_url: str) -> None:
    h = make_harness("bi", concurrency=1, delay_ms=0, inlink_boost=1)
    f = h.frontier
    h.run(f.admit([admission("http://a.test/deep", priority=-3),
                   admission("http://a.test/near", priority=-1),
                   admission("http://a.test/first", priority=0)]))
    # three more links to /deep: two offers the seen set knows, one bare inlink
    deep = admission("http://a.test/deep", priority=-3)
    bare = Admission(deep.url, deep.host, deep.fingerprint, "")
    result = h.run(f.admit([deep, deep, bare]))
    assert (result.added, result.duplicates) == (0, 2)
    order = [json.loads(x.record)["u"] for x in _drain(h, rounds=10)]
    # /deep: -3 and three links, as high as /first (0), and admitted before it
    assert order == ["http://a.test/deep", "http://a.test/first", "http://a.test/near"]
    # a link to a URL claimed already raises nothing, and adds nothing back
    h.run(f.admit([deep, bare]))
    assert h.run(f.counts())["queued"] == 0
    client = redis.Redis.from_url(redis_url)
    assert not client.exists(h.keys.prefix(f.partition(deep.host)) + ":qm:" + deep.host)


def test_without_inlink_priority_the_order_is_the_admissions(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("bn", concurrency=1, delay_ms=0)
    f = h.frontier
    h.run(f.admit([admission("http://a.test/deep", priority=-3),
                   admission("http://a.test/near", priority=-1)]))
    h.run(f.admit([admission("http://a.test/deep", priority=-3)] * 3))
    order = [json.loads(x.record)["u"] for x in _drain(h, rounds=10)]
    assert order == ["http://a.test/near", "http://a.test/deep"]


@pytest.mark.parametrize(("value", "budgets", "boost"), [
    ("auto", Budgets(), 0), ("auto", Budgets(host_pages=100), 1),
    ("auto", Budgets(domain_pages=5), 1), ("auto", Budgets(host_bytes=5), 0),
    (True, Budgets(), 1), ("false", Budgets(host_pages=1), 0), ("3", Budgets(), 3)])
def test_inlink_priority_is_on_under_a_page_budget_unless_told(
        value: object, budgets: Budgets, boost: int) -> None:
    from scrapy.settings import Settings
    settings = {"FRONTIER_INLINK_PRIORITY": value, **{
        f"BUDGET_{scope.upper()}_{what.upper()}": getattr(budgets, f"{scope}_{what}")
        for scope in ("host", "domain") for what in ("pages", "bytes")}}
    assert Limits.from_settings(Settings(settings)).inlink_boost == boost


def test_the_crawls_budgets_change_live_for_every_worker_and_reset_to_their_settings(
        make_harness: Callable[..., Harness], redis_url: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    h = make_harness("bw", concurrency=4, delay_ms=0, budgets=Budgets(host_pages=2))
    f = h.frontier
    watch = BudgetWatch(h.client, h.keys.budgets(), f.limits)
    h.run(f.admit([admission(f"http://a.test/{i}") for i in range(6)]))
    h.run(watch.look())
    assert f.limits.budgets == Budgets(host_pages=2)  # nothing set: the settings
    jobs: list = []
    assert len(_drain(h, jobs=jobs)) == 2
    assert _end(h, *jobs[0]) == 4
    opts = {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": h.keys.namespace,
            "FRONTIER_PARTITIONS": h.keys.partitions, "BUDGET_HOST_PAGES": 2}
    code, out, err = frontier_command(monkeypatch, capsys, "budget", **opts)
    assert code == 0, err
    assert "budgets: each host 2 pages; each domain no limit  [each worker's settings" in out
    code, out, err = frontier_command(monkeypatch, capsys, "budget", "--pages", "5", **opts)
    assert code == 0 and "budgets: each host 5 pages; each domain no limit, for every worker" \
        in err, err
    code, out, err = frontier_command(monkeypatch, capsys, "budget", "--domain", "--seconds",
                                      "60", **opts)
    assert "each host 5 pages; each domain 60 s  [the operator's" in out
    h.run(watch.look())  # what every worker does once a second
    assert f.limits.budgets == Budgets(host_pages=5, domain_ms=60_000)
    admin = FrontierAdmin(redis.Redis.from_url(redis_url), h.keys)
    assert admin.requeue(reason="budget") == 4
    assert len(_drain(h)) == 3  # 5 in all
    code, _, err = frontier_command(monkeypatch, capsys, "budget", "--reset", **opts)
    assert code == 0 and "each worker's own settings" in err
    h.run(watch.look())
    assert f.limits.budgets == Budgets(host_pages=2)
    code, _, err = frontier_command(monkeypatch, capsys, "budget", "--pages", "-1", **opts)
    assert code == 2 and "--pages takes 0 (no limit) or more" in err
    code, _, err = frontier_command(monkeypatch, capsys, "status", "--pages", "3", **opts)
    assert code == 2 and "apply to budget only" in err


def test_a_site_rules_budget_comes_with_the_sites_first_admission(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("br1", concurrency=4, delay_ms=0, budgets=Budgets(host_pages=5))
    f = h.frontier
    own = [Admission(a.url, a.host, a.fingerprint, a.record, 0, "2:0:2::")
           for a in (admission(f"http://ruled.test/{i}") for i in range(6))]
    h.run(f.admit([*own, *(admission(f"http://other.test/{i}") for i in range(6))]))
    taken = _drain(h)
    assert sum(1 for x in taken if "ruled" in x.host) == 2  # its own budget
    assert sum(1 for x in taken if "other" in x.host) == 5  # the setting's


def test_loading_site_rules_changes_the_sites_there_and_the_scope_for_every_worker(
        make_harness: Callable[..., Harness], redis_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    h = make_harness("brc", concurrency=4, delay_ms=0)
    f = h.frontier
    h.run(f.admit([admission(f"http://{site}/{i}") for site in ("forum.a.test", "b.test")
                   for i in range(3)]))
    seeds = Scope("domain")  # (the workers' seeds: a.test and b.test)
    h.run(SharedScope(h.client, h.keys).add(
        seeds.add_seed("http://forum.a.test/") + seeds.add_seed("http://b.test/")))
    rules = tmp_path / "rules.jsonl"
    rules.write_text('{"site": "test,a,", "delay": 2.5, "budget_pages": 1}\n'
                     'oops\n'
                     '{"site": "b.test", "scope": "exclude"}\n')
    opts = {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": h.keys.namespace,
            "FRONTIER_PARTITIONS": h.keys.partitions}
    code, out, err = frontier_command(monkeypatch, capsys, "rules", str(rules), **opts)
    assert code == 0, err
    assert f"skipping site rule {rules}:2: not a JSON object" in err
    assert "site rules: 2 loaded for every worker" in err
    assert "1 site(s) already in the frontier changed" in err
    assert "3 queued URL(s) now out of scope are dead letters" in err
    code, out, err = frontier_command(monkeypatch, capsys, "host", "forum.a.test", **opts)
    assert "delay 2.5 s (operator)" in out and "pages 0 of 1" in out and "(operator)" in out
    assert [x.host for x in _drain(h)] == ["http://forum.a.test:80"]  # its budget of 1
    code, out, _ = frontier_command(monkeypatch, capsys, "rules", **opts)
    assert '"delay": 2.5' in out
    code, _, err = frontier_command(monkeypatch, capsys, "rules", "--reset", **opts)
    assert code == 0 and "forgotten" in err
    assert not redis.Redis.from_url(redis_url).exists(h.keys.site_rules())
    code, _, err = frontier_command(monkeypatch, capsys, "rules", str(tmp_path / "none"),
                                    **opts)
    assert code == 2 and "cannot be read" in err


def test_site_rules_an_operator_loads_reach_the_workers_intake(
        make_harness: Callable[..., Harness], redis_url: str) -> None:
    h = make_harness("bsw")
    own = SiteRules()
    used: list[SiteRules] = []
    watch = SiteRulesWatch(h.client, h.keys.site_rules(), own, used.append)
    h.run(watch.look())
    assert used == []  # nothing loaded: the worker's own stay
    client = redis.Redis.from_url(redis_url)
    client.set(h.keys.site_rules(), '{"site": "a.test", "budget_pages": 3}\nbad\n')
    h.run(watch.look())
    h.run(watch.look())  # (unchanged: heard once)
    assert len(used) == 1 and used[0].for_host("a.test").budget_pages == 3
    client.delete(h.keys.site_rules())
    h.run(watch.look())
    assert used[-1] is own
