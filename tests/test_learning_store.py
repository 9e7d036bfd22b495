"""What hosts' pages teach, kept in a real Redis (crawler/frontier/sitefacts.py,
lua/learn.lua): observations built by the real pure functions (page_evidence,
observations), weighed by the real script, read back as SiteRules.

Every test has its own namespace (conftest's make_harness / redis_prefix) and
runs its coroutines on the harness's loop; nothing here flushes a database.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator

import pytest
import redis

from crawler.frontier.keys import partition_of
from crawler.frontier.sitefacts import (
    HostFacts,
    LearnLimits,
    News,
    Observation,
    SiteFacts,
    facts_of,
    forget,
)
from crawler.learning.rules import SiteRules
from crawler.learning.traps import page_text, sketch, url_pattern
from crawler.learning.variants import identity_key, page_evidence
from crawler.learning.worker import SiteLearning, observations
from crawler.urls import canonical_url, host_key
from tests.frontier_harness import Harness

HOST = "http://a.test:80"
EVENTS = "/events/{n}/{n}/{n}"


def canon(url: str) -> str:
    result = canonical_url(url)
    assert result is not None
    return result


def key_of(url: str) -> str:
    return identity_key(canon(url))


_rng = random.Random(20260315)
VOCAB = ["".join(_rng.choice("bdfgklmnprstvz") + _rng.choice("aeiou")
                 for _ in range(_rng.randint(2, 4))) for _ in range(3000)]
TEMPLATE = " ".join(random.Random(1).choice(VOCAB) for _ in range(120))


def unrelated_page(seed: int) -> bytes:
    """A page of 150 words of its own (seeded: the same every run)."""
    rng = random.Random(seed)
    text = " ".join(rng.choice(VOCAB) for _ in range(150))
    return f"<html><body><p>{text}</p></body></html>".encode()


def event_page(day: int) -> bytes:
    """A calendar page: the template's 120 words and a sentence with its date."""
    return (f"<html><head><title>Events</title></head><body><p>{TEMPLATE}</p>"
            f"<p>The events of 2026-03-{day:02d} are below</p></body></html>").encode()


class Worker:
    """One worker's side: what its fetched pages send, and the rules it reads."""

    def __init__(self, h: Harness, limits: LearnLimits | None = None) -> None:
        self.h = h
        self.facts = SiteFacts(h.client, h.keys, limits or LearnLimits())

    def ops(self, url: str, body: bytes, declared: str | None = None, *,
            traps: bool = False) -> tuple[str, list[Observation]]:
        """As SiteLearning.observe builds them: the host and the page's observations."""
        page = canon(url)
        host = host_key(page)
        assert host is not None
        pattern = url_pattern(page) if traps else None
        text_sketch = sketch(page_text(body)) if pattern is not None else None
        evidence = page_evidence(page, body, canon(declared) if declared else None)
        return host, observations(evidence, pattern, text_sketch)

    def see(self, url: str, body: bytes, declared: str | None = None, *,
            traps: bool = False) -> list[News]:
        """One fetched page, sent alone; the news it made."""
        host, ops = self.ops(url, body, declared, traps=traps)
        return self.send({host: ops})

    def send(self, batch: dict[str, list[Observation]]) -> list[News]:
        news, current = self.h.run(self.facts.observe(batch))
        # every batch answers with its hosts' rules as they stand
        assert set(current) == {host for host, ops in batch.items() if ops}
        for host, stored in current.items():
            assert SiteRules.parse(*stored) == self.rules(host)
        return news

    def rules(self, host: str = HOST) -> SiteRules:
        return SiteRules.parse(*self.h.run(self.facts.rules([host]))[host])

    def facts_key(self, host: str = HOST) -> str:
        return self.h.keys.facts(partition_of(host, self.h.keys.partitions), host)

    def hlen(self, host: str = HOST) -> int:
        return int(self.h.run(self.h.client.hlen(self.facts_key(host))))

    def count(self, name: str, host: str = HOST) -> int:
        part = partition_of(host, self.h.keys.partitions)
        return int(self.h.run(self.h.client.hget(self.h.keys.counts(part), name)) or 0)


@pytest.fixture
def harness(make_harness: Callable[..., Harness]) -> Harness:
    return make_harness("lf")


@pytest.fixture
def worker(harness: Harness) -> Worker:
    return Worker(harness)


@pytest.fixture
def sync_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def learned(name: str, detail: str, host: str = HOST) -> News:
    return News(host, "learned", name, detail)


# ------------------------------------------------------------ canonical links


def test_a_host_with_no_facts_has_empty_rules(worker: Worker) -> None:
    assert worker.h.run(worker.facts.rules([HOST])) == {HOST: (None, None, None)}
    assert worker.rules() == SiteRules()
    assert worker.send({}) == []
    assert worker.send({HOST: []}) == []
    assert worker.hlen() == 0


def test_canonical_links_that_drop_ref_teach_it_once_a_payload_confirms(worker: Worker) -> None:
    assert worker.see("http://a.test/p/1?ref=a", b"one", "http://a.test/p/1") == []
    assert worker.see("http://a.test/p/2?ref=b", b"two", "http://a.test/p/2") == []
    assert worker.rules() == SiteRules()  # the site's word alone: its page 2 may differ
    assert worker.see("http://a.test/c", b"C") == []
    assert worker.see("http://a.test/c?ref=z", b"C") == [
        learned("ref", "2 canonical link(s), 1 identical payload(s)")]
    rules = worker.rules()
    assert rules.noise == {"ref"}
    # the clean identities were never fetched, but their pages were (with ref)
    assert rules.fetched == {key_of("http://a.test/p/1"), key_of("http://a.test/p/2")}
    assert rules.fetched_as_variant(canon("http://a.test/p/1"))
    assert rules.fetched_as_variant(canon("http://a.test/p/2"))
    assert not rules.fetched_as_variant(canon("http://a.test/p/3"))
    assert rules.variant_of(canon("http://a.test/p/3?x=1&ref=c")) == "http://a.test/p/3?x=1"
    assert worker.count("rules") == 1
    # learned once: more agreeing pages are no news
    assert worker.see("http://a.test/p/3?ref=c", b"three", "http://a.test/p/3") == []
    assert worker.count("rules") == 1


def test_a_site_naming_page_one_the_canonical_of_page_two_loses_no_page(worker: Worker) -> None:
    """Canonical links alone never teach: here the payloads differ, so ``page``
    matters, whatever the site's links say."""
    for n in range(1, 5):
        assert worker.see(f"http://a.test/list{n}?page=2", f"list {n}, page 2".encode(),
                          f"http://a.test/list{n}") == []
    assert worker.rules() == SiteRules()
    assert worker.see("http://a.test/list1", b"list 1, page 1") == []
    assert worker.see("http://a.test/list2", b"list 2, page 1") == []
    assert worker.rules() == SiteRules()


def test_fetched_lists_only_the_identities_never_fetched(worker: Worker) -> None:
    assert worker.see("http://a.test/p/1", b"one", "http://a.test/p/1") == []
    assert worker.see("http://a.test/p/1?utm=a", b"one", "http://a.test/p/1") == [
        learned("utm", "1 canonical link(s), 1 identical payload(s)")]
    assert worker.rules().fetched == frozenset()  # /p/1 was fetched itself
    assert worker.see("http://a.test/q/1?ref=a", b"q1", "http://a.test/q/1") == []
    assert worker.see("http://a.test/q/2?ref=b", b"q2", "http://a.test/q/2") == []
    assert worker.see("http://a.test/q/1", b"q1", "http://a.test/q/1") == [
        learned("ref", "2 canonical link(s), 1 identical payload(s)")]
    rules = worker.rules()
    assert rules.noise == {"ref", "utm"}
    assert rules.fetched == {key_of("http://a.test/q/2")}  # /q/1 was fetched itself


@pytest.mark.parametrize("clean_first", [True, False])
def test_a_canonical_link_and_an_identical_payload_from_one_path_teach(
        worker: Worker, clean_first: bool) -> None:
    body = b"<html><p>the page x</p></html>"
    pages = [("http://a.test/x", "http://a.test/x"), ("http://a.test/x?ref=1", "http://a.test/x")]
    if not clean_first:
        pages.reverse()
    assert worker.see(pages[0][0], body, pages[0][1]) == []
    assert worker.see(pages[1][0], body, pages[1][1]) == [
        learned("ref", "1 canonical link(s), 1 identical payload(s)")]
    rules = worker.rules()
    assert rules.noise == {"ref"}
    assert not rules.fetched_as_variant("http://a.test/x")  # fetched itself


def test_identical_payloads_alone_teach_from_two_pairs(worker: Worker) -> None:
    assert worker.see("http://a.test/x", b"X") == []
    assert worker.see("http://a.test/x?sid=1", b"X") == []
    assert worker.see("http://a.test/y?sid=2", b"Y") == []
    assert worker.see("http://a.test/y", b"Y") == [
        learned("sid", "0 canonical link(s), 2 identical payload(s)")]


def test_evidence_is_per_host(worker: Worker) -> None:
    b_host, c_host = "http://b.test:80", "http://c.test:8080"
    batch: dict[str, list[Observation]] = {}
    for url in ("http://a.test/p/1?ref=1", "http://b.test/p/2?ref=2", "http://c.test:8080/p/3?ref=3"):
        clean = url.partition("?")[0]
        host, ops = worker.ops(url, clean.encode(), clean)
        batch[host] = ops
    assert set(batch) == {HOST, b_host, c_host}
    assert worker.send(batch) == []  # one page each: nothing learned
    batch = dict(worker.ops(url, url.encode(), url.partition("?")[0]) for url in (
        "http://a.test/q/1?ref=1", "http://c.test:8080/q/3?ref=3"))
    assert worker.send(batch) == []  # canonical links, and no payload yet
    batch = dict(worker.ops(url, url.encode(), url) for url in (
        "http://a.test/p/1", "http://c.test:8080/p/3"))
    news = worker.send(batch)
    assert sorted(news) == sorted([learned("ref", "2 canonical link(s), 1 identical payload(s)"),
                                   learned("ref", "2 canonical link(s), 1 identical payload(s)",
                                           c_host)])
    assert worker.rules(HOST).noise == worker.rules(c_host).noise == {"ref"}
    assert worker.rules(b_host).noise == frozenset()


# ---------------------------------------------------------- counter-evidence


def test_a_canonical_link_that_keeps_the_param_blocks_it_for_good(worker: Worker) -> None:
    # a select-style page: /list?ref=1 is its own page, ref matters
    assert worker.see("http://a.test/list?ref=1", b"list 1", "http://a.test/list?ref=1") == []
    assert worker.see("http://a.test/p/1?ref=a", b"one", "http://a.test/p/1") == []
    assert worker.see("http://a.test/p/2?ref=b", b"two", "http://a.test/p/2") == []
    assert worker.see("http://a.test/x", b"X") == []
    assert worker.see("http://a.test/x?ref=1", b"X", "http://a.test/x") == []
    assert worker.see("http://a.test/p/3?ref=c", b"three", "http://a.test/p/3") == []
    assert worker.rules().noise == frozenset()


def test_a_payload_that_differs_withdraws_a_learned_rule(worker: Worker) -> None:
    worker.see("http://a.test/p/1?ref=a", b"one", "http://a.test/p/1")
    worker.see("http://a.test/p/2?ref=b", b"two", "http://a.test/p/2")
    worker.see("http://a.test/c", b"C")
    assert worker.see("http://a.test/c?ref=z", b"C") == [
        learned("ref", "2 canonical link(s), 1 identical payload(s)")]
    assert worker.rules().fetched
    assert worker.see("http://a.test/x", b"X") == []
    assert worker.see("http://a.test/x?ref=1", b"not X") == [
        News(HOST, "withdrawn", "ref", "evidence that it matters")]
    assert worker.rules() == SiteRules()  # the rule and what it covered (f) are gone
    assert worker.see("http://a.test/p/3?ref=c", b"three", "http://a.test/p/3") == []
    assert worker.rules().noise == frozenset()


def test_two_values_of_a_param_with_two_payloads_block_it(worker: Worker) -> None:
    # /y itself never fetched: its two spellings with sort= differ
    assert worker.see("http://a.test/y?sort=1", b"Y1") == []
    assert worker.see("http://a.test/y?sort=2", b"Y2") == []
    assert worker.see("http://a.test/p/1?sort=a", b"one", "http://a.test/p/1") == []
    assert worker.see("http://a.test/p/2?sort=b", b"two", "http://a.test/p/2") == []
    assert worker.rules().noise == frozenset()


def test_a_host_whose_canonical_links_name_one_page_teaches_nothing_by_them(
        worker: Worker, sync_client: redis.Redis) -> None:
    keys = worker.h.keys
    for n, path in enumerate(("/a", "/b", "/c"), 1):
        assert worker.see(f"http://a.test{path}", path.encode(), "http://a.test/") == []
        assert facts_of(sync_client, keys, HOST).canonical_unreliable == (n == 3)
    assert worker.see("http://a.test/", b"home", "http://a.test/") == []
    # /?page=N "drop" page by the same canonical, and their payloads differ from /'s
    assert worker.see("http://a.test/?page=1", b"page one", "http://a.test/") == []
    assert worker.see("http://a.test/?page=2", b"page two", "http://a.test/") == []
    # two pages whose canonical drops sort, nothing against: ignored all the same
    assert worker.see("http://a.test/l/1?sort=a", b"l1", "http://a.test/l/1") == []
    assert worker.see("http://a.test/l/2?sort=b", b"l2", "http://a.test/l/2") == []
    assert worker.rules() == SiteRules()
    facts = facts_of(sync_client, keys, HOST)
    assert facts.noise == []
    assert facts.evidence["page"][1] > 0
    assert facts.canonical_unreliable
    # payloads still count
    assert worker.see("http://a.test/z", b"Z") == []
    assert worker.see("http://a.test/z?sid=1", b"Z") == []
    assert worker.see("http://a.test/w?sid=2", b"W") == []
    assert worker.see("http://a.test/w", b"W") == [
        learned("sid", "0 canonical link(s), 2 identical payload(s)")]


def test_a_rule_taught_by_canonical_links_goes_when_they_turn_out_unreliable(
        worker: Worker) -> None:
    worker.see("http://a.test/p/1?ref=a", b"one", "http://a.test/p/1")
    worker.see("http://a.test/p/2?ref=b", b"two", "http://a.test/p/2")
    worker.see("http://a.test/same", b"S")
    assert worker.see("http://a.test/same?ref=z", b"S")  # learned: one payload confirms
    assert worker.see("http://a.test/a", b"a", "http://a.test/") == []
    assert worker.see("http://a.test/b", b"b", "http://a.test/") == []
    assert worker.see("http://a.test/c", b"c", "http://a.test/") == [
        News(HOST, "withdrawn", "ref", "canonical links unreliable")]
    assert worker.rules() == SiteRules()


def test_other_pages_named_once_each_do_not_make_canonical_links_unreliable(
        worker: Worker, sync_client: redis.Redis) -> None:
    for n in range(1, 6):
        worker.see(f"http://a.test/print/{n}", b"p", f"http://a.test/p/{n}")
    assert not facts_of(sync_client, worker.h.keys, HOST).canonical_unreliable


def test_one_page_fetched_three_times_is_not_three_pages(
        worker: Worker, sync_client: redis.Redis) -> None:
    for _ in range(3):
        worker.see("http://a.test/index.html", b"home", "http://a.test/")
    assert not facts_of(sync_client, worker.h.keys, HOST).canonical_unreliable


def test_one_pair_of_identical_payloads_is_one_observation(worker: Worker) -> None:
    assert worker.see("http://a.test/x", b"X") == []
    assert worker.see("http://a.test/x?sid=1", b"X") == []
    assert worker.see("http://a.test/x", b"X") == []  # /x revisited, unchanged


def test_a_param_name_with_a_space_teaches_nothing(worker: Worker) -> None:
    # names are stored space-separated: "a b" would read back as "a" and "b"
    worker.see("http://a.test/p/1?a+b=1", b"one", "http://a.test/p/1")
    assert worker.see("http://a.test/p/2?a+b=2", b"two", "http://a.test/p/2") == []
    assert worker.rules().noise == frozenset()


# ------------------------------------------------------------------- traps


def test_pages_of_a_pattern_that_keep_coming_back_alike_are_a_trap(worker: Worker) -> None:
    news = [worker.see(f"http://a.test/events/2026/03/{day}", event_page(day), traps=True)
            for day in range(1, 21)]
    assert {i + 1: n for i, n in enumerate(news) if n} == {
        16: [News(HOST, "trap", EVENTS, "15 of 16 pages alike")]}  # the 15th alike page
    rules = worker.rules()
    assert rules.patterns == {EVENTS}
    assert rules.trap(canon("http://a.test/events/2027/1/1")) == EVENTS
    assert rules.trap(canon("http://a.test/product/1")) is None
    assert worker.count("traps") == 1


def test_a_trap_is_found_within_one_batch_as_across_batches(worker: Worker) -> None:
    """The script keeps a pattern's state for the whole batch: twenty pages sent
    at once decide as twenty sent one by one (the 16th makes it a trap, and
    the pages after it are refused already, not counted)."""
    ops: list[Observation] = []
    for day in range(1, 21):
        ops += worker.ops(f"http://a.test/events/2026/03/{day}", event_page(day), traps=True)[1]
    assert worker.send({HOST: ops}) == [News(HOST, "trap", EVENTS, "15 of 16 pages alike")]
    assert worker.rules().patterns == {EVENTS}
    assert worker.h.run(worker.h.client.hget(worker.facts_key(), f"t:{EVENTS}")) is None


def test_a_variant_waits_for_its_page_across_batches_and_hosts_of_an_older_build(
        worker: Worker, sync_client: redis.Redis) -> None:
    """A page fetched plus a parameter before the page itself waits in w:KEY
    until it comes; a new page looks for such a wait only while some are
    counted (wn), or always on a host whose facts an older build wrote (no
    wn)."""
    key = worker.facts_key()
    worker.see("http://a.test/x?sid=1", b"X")
    assert sync_client.hget(key, "wn") == b"1"
    worker.see("http://a.test/x", b"X")
    assert sync_client.hget(key, "wn") == b"0"
    assert [f for f in sync_client.hkeys(key) if f.startswith(b"w:")] == []
    # an older build's host: no count, a wait in place
    sync_client.hdel(key, "wn")
    worker.see("http://a.test/y?sid=2", b"Y")
    sync_client.hdel(key, "wn")
    assert worker.see("http://a.test/y", b"Y") == [
        learned("sid", "0 canonical link(s), 2 identical payload(s)")]
    assert sync_client.hget(key, "wn") is None  # still counted as unknown: looks each time


def test_a_catalogue_of_unrelated_pages_is_no_trap(worker: Worker) -> None:
    for n in range(1, 41):
        assert worker.see(f"http://a.test/product/{n}", unrelated_page(n), traps=True) == []
    assert worker.rules() == SiteRules()
    assert worker.count("traps") == 0


def test_alike_pages_must_also_be_half_of_the_pattern(worker: Worker) -> None:
    for n in range(30):
        assert worker.see(f"http://a.test/item/{n}", unrelated_page(n), traps=True) == []
    news = [worker.see(f"http://a.test/item/{100 + day}", event_page(day), traps=True)
            for day in range(1, 40)]
    # the 31st alike page (page 62) is the first that is half of the pattern's pages
    assert {30 + i + 1: n for i, n in enumerate(news) if n} == {
        62: [News(HOST, "trap", "/item/{n}", "31 of 62 pages alike")]}


@pytest.mark.parametrize(("second", "bits"), [
    ("ff00000000000000", 8),  # the high half, its sign bit included
    ("00000000ff000000", 8),
    ("80000001800000c1", 6),
    ("ff80000000000000", 9),
    ("00000000ff800000", 9),
    ("f0000000f000000f", 12),
    ("ffffffffffffffff", 64),
])
def test_the_script_measures_distance_as_python_does(
        worker: Worker, second: str, bits: int) -> None:
    from crawler.learning.traps import distance

    assert distance("0000000000000000", second) == bits
    one = Worker(worker.h, LearnLimits(alike_pages=1, alike_share=0.0, distance=8))
    one.send({HOST: [("T", "/z/{n}", "0000000000000000")]})
    news = one.send({HOST: [("T", "/z/{n}", second)]})
    assert news == ([News(HOST, "trap", "/z/{n}", "1 of 2 pages alike")] if bits <= 8 else [])


def test_the_same_few_pages_fetched_again_are_no_trap(worker: Worker) -> None:
    news = [worker.see(f"http://a.test/item/{n}", unrelated_page(n), traps=True)
            for _ in range(6) for n in (1, 2, 3)]
    assert not any(news)


# ------------------------------------------------------------------ bounds


def test_a_hosts_evidence_stays_within_max_fields(harness: Harness) -> None:
    worker = Worker(harness, LearnLimits(max_fields=20))
    news: list[News] = worker.see("http://a.test/c", b"C") + worker.see("http://a.test/c?ref=z",
                                                                         b"C")
    for n in range(100):
        news += worker.see(f"http://a.test/item/{n}?ref={n}&p{n}=1", unrelated_page(n),
                           f"http://a.test/item/{n}", traps=True)
        news += worker.see(f"http://a.test/day{n}/1?s={n}", unrelated_page(1000 + n),
                           f"http://a.test/print/{n}", traps=True)
        assert worker.hlen() <= 20 + 5  # + r, x, f, cm, cu
    assert worker.hlen() >= 20
    # what fit early still decides: ref had its two pages before the hash filled up
    assert learned("ref", "1 canonical link(s), 1 identical payload(s)") in news
    assert worker.rules().noise >= {"ref"}


# ---------------------------------------------------------------- operator


def test_facts_of_and_forget(worker: Worker, sync_client: redis.Redis) -> None:
    keys = worker.h.keys
    assert facts_of(sync_client, keys, HOST) == HostFacts([], [], {}, False)
    worker.see("http://a.test/p/1?ref=a", b"one", "http://a.test/p/1")
    worker.see("http://a.test/p/2?ref=b", b"two", "http://a.test/p/2")
    worker.see("http://a.test/x", b"X")
    worker.see("http://a.test/x?ref=1", b"X")
    worker.see("http://a.test/list?cat=1", b"cats", "http://a.test/list?cat=1")
    for day in range(1, 17):
        worker.see(f"http://a.test/events/2026/03/{day}", event_page(day), traps=True)
    facts = facts_of(sync_client, keys, HOST)
    assert facts == HostFacts(["ref"], [EVENTS], {"cat": (0, 1), "ref": (3, 0)}, False)
    assert facts.as_dict() == {"noise": ["ref"], "patterns": [EVENTS],
                               "evidence": {"cat": [0, 1], "ref": [3, 0]},
                               "canonical_unreliable": False}

    assert forget(sync_client, keys, HOST, param="ref")
    assert not forget(sync_client, keys, HOST, param="ref")
    facts = facts_of(sync_client, keys, HOST)
    assert (facts.noise, facts.patterns, facts.evidence) == ([], [EVENTS], {"cat": (0, 1)})
    assert worker.rules() == SiteRules(patterns=frozenset({EVENTS}))
    # its evidence went with it: it takes new pages and a payload to teach it again
    assert worker.see("http://a.test/p/3?ref=c", b"three", "http://a.test/p/3") == []
    assert worker.see("http://a.test/p/4?ref=d", b"four", "http://a.test/p/4") == []
    assert worker.see("http://a.test/p/4", b"four") == [
        learned("ref", "2 canonical link(s), 1 identical payload(s)")]

    assert not forget(sync_client, keys, HOST, pattern="/nothing/{n}")
    assert forget(sync_client, keys, HOST, pattern=EVENTS)
    assert not forget(sync_client, keys, HOST, pattern=EVENTS)
    assert facts_of(sync_client, keys, HOST).patterns == []
    assert worker.rules().patterns == frozenset()
    assert worker.rules().noise == {"ref"}

    assert forget(sync_client, keys, HOST)
    assert sync_client.exists(worker.facts_key()) == 0
    assert facts_of(sync_client, keys, HOST) == HostFacts([], [], {}, False)
    assert not forget(sync_client, keys, HOST)
    assert worker.rules() == SiteRules()


# ------------------------------------------------------------ two workers


def test_evidence_from_two_workers_adds_up(make_harness: Callable[..., Harness]) -> None:
    one, two = Worker(make_harness("lf")), Worker(make_harness("lf"))
    assert one.h.client is not two.h.client
    assert one.see("http://a.test/p/1?ref=a", b"one", "http://a.test/p/1") == []
    assert two.see("http://a.test/p/2?ref=b", b"two", "http://a.test/p/2") == []
    assert one.see("http://a.test/p/2", b"two") == [
        learned("ref", "2 canonical link(s), 1 identical payload(s)")]
    assert one.rules() == two.rules()
    assert one.rules().noise == {"ref"}
    # payloads too: a spelling on one worker, the clean page on the other
    assert two.see("http://a.test/x?sid=1", b"X") == []
    assert one.see("http://a.test/x", b"X") == []
    assert one.see("http://a.test/y?sid=2", b"Y") == []
    assert two.see("http://a.test/y", b"Y") == [
        learned("sid", "0 canonical link(s), 2 identical payload(s)")]
    assert one.count("rules") == 2


class _Stats:
    def inc_value(self, name: str, count: int = 1) -> None:
        return None


def test_a_pages_evidence_is_sent_within_half_its_sites_delay(worker: Worker) -> None:
    """SiteLearning batches a page's evidence for half its site's delay (a
    tenth of a second at least, two at most): a page of a site paced at 1 s
    reaches the frontier after about half a second, not before; one of a
    site paced at 0.2 s brings the whole batch forward to a tenth of a second."""
    learning = SiteLearning(worker.facts, _Stats(), ttl=30.0, traps=False)
    slow, fast = "http://slow.test/a", "http://fast.test/b"

    async def scenario() -> list[bool]:
        seen = []
        learning.observe(host_key(canon(slow)) or "", canon(slow) or "", b"<p>a</p>", None, 1.0)
        await asyncio.sleep(0.25)
        seen.append(await _exists(worker, slow))
        await asyncio.sleep(0.55)
        seen.append(await _exists(worker, slow))
        learning.observe(host_key(canon(slow)) or "", canon(slow + "2") or "", b"<p>c</p>",
                         None, 4.0)
        learning.observe(host_key(canon(fast)) or "", canon(fast) or "", b"<p>b</p>", None, 0.2)
        await asyncio.sleep(0.4)
        seen.append(await _exists(worker, slow + "2"))
        seen.append(await _exists(worker, fast))
        return seen

    assert worker.h.run(scenario()) == [False, True, True, True]


async def _exists(worker: Worker, url: str) -> bool:
    page = canon(url)
    host = host_key(page)
    assert page is not None and host is not None
    key = page_evidence(page, b"", None).key
    return bool(await worker.h.client.hexists(worker.facts_key(host), f"d:{key}"))


def test_two_values_of_a_parameter_with_one_payload_confirm_its_canonical_links(
        worker: Worker) -> None:
    """The page itself never fetched: two spellings of it with the same payload are
    the content's word that the parameter changes nothing."""
    assert worker.see("http://a.test/p/1?ref=a", b"one", "http://a.test/p/1") == []
    assert worker.see("http://a.test/p/1?ref=b", b"one", "http://a.test/p/1") == [
        learned("ref", "1 canonical link(s), 1 identical payload(s)")]
    # two values, two pages: the parameter matters after all
    worker.see("http://a.test/q?sel=1", b"first")
    worker.see("http://a.test/q?sel=2", b"second")
    assert "sel" not in worker.rules().noise
