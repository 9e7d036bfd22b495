"""No lost wake-ups: every waiting host is looked at again, in every outcome.

Each test builds one waiting state with the real scripts, on a real Redis and
the harness's clock, ends what it waits for in the way that used to strand
it, and checks that the host is claimed again by the time the thing it waited
for is over (plus a claim): a registered domain whose robots job ran out or
whose lookup failed, a server address whose woken host needed its name
resolved again, an address with room and nobody left to wake its queue.
Then what is left is read back (``lua/leftover.lua``): held hosts say why and
until when, and a host that waits for nothing is found and repaired.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis
from scrapy.utils.test import get_crawler

from crawler.frontier.control import Change, HostControl
from crawler.frontier.dnsstate import DNSRetry, HostDNS
from crawler.frontier.ipgates import DnsNote, IpGates
from crawler.frontier.leftover import LeftoverReader
from crawler.frontier.values import Release
from crawler.scheduling.watchdog import WAITING_GAP_S, Watchdog
from tests.frontier_harness import Harness, admission

ADDR = "127.0.7.1"


def _gates(h: Harness) -> IpGates:
    return IpGates(h.client, h.keys, h.frontier.limits, h.frontier.due)


def _note(h: Harness, hosts: list[str], go: list[bool], address: str = ADDR) -> None:
    for host, ok in zip(hosts, go, strict=True):
        h.run(_gates(h).note(h.frontier.partition(host),
                             [DnsNote(host, address, 1_000, ok, 15_000)]))


def _hosts_of(leases: list) -> set[str]:
    return {x.host for x in leases}


# ------------------------------------------------------------------ domains

def test_a_robots_job_whose_lookup_failed_frees_its_domain_at_once(
        make_harness: Callable[..., Harness]) -> None:
    """Domain concurrency 1: the robots job of s0 holds the domain, s1 waits for
    it. s0's name does not resolve: the DNS hold replaces the job, and s1 is
    handed out at the next claim, not when the job's lease would have run out."""
    h = make_harness("lvd", clock=True, delay_ms=0, domain_concurrency=1, robots_ms=120_000)
    f = h.frontier
    h.run(f.admit([admission("http://s0.a.test/"), admission("http://s1.a.test/")]))
    first = h.run(f.claim(10, "w"))
    assert len(first.robots_jobs) == 1
    (job,) = first.robots_jobs
    h.run(HostDNS(f, DNSRetry(30_000, 60_000, 6)).failed(job, job=True, kind="timeout"))
    h.clock.advance(1)
    (other,) = h.run(f.claim(10, "w")).robots_jobs
    assert other != job


def test_a_full_domain_is_looked_at_again_when_its_lease_runs_out(
        make_harness: Callable[..., Harness]) -> None:
    """A robots job whose end is never reported (its worker gave it up, or died)
    holds the domain until its lease runs out, and not a moment longer: the
    other site of the domain is handed out then (its own host held for an
    hour meanwhile, so only the waiting one can go)."""
    h = make_harness("lve", clock=True, delay_ms=0, domain_concurrency=1, robots_ms=120_000)
    f = h.frontier
    hosts = {"http://s0.a.test:80", "http://s1.a.test:80"}
    h.run(f.admit([admission("http://s0.a.test/"), admission("http://s1.a.test/")]))
    (job,) = h.run(f.claim(10, "w")).robots_jobs
    h.run(f.hold(job, 3_600_000))
    assert h.run(f.claim(10, "w")).robots_jobs == []  # the other waits for the domain
    h.clock.advance(60_000)
    assert h.run(f.claim(10, "w")).robots_jobs == []  # ... as long as the job may run
    h.clock.advance(60_001)
    assert h.run(f.claim(10, "w")).robots_jobs == sorted(hosts - {job})


# ------------------------------------------------------------------ addresses

def test_a_woken_host_keeps_its_place_when_its_name_is_looked_up_again(
        make_harness: Callable[..., Harness]) -> None:
    """Address concurrency 1, three names: one goes, two wait. Its request ends;
    the next is woken with a place reserved. Its address record ran out
    meanwhile, so it gets a DNS job first: joining again, it keeps its place
    (before, its own reservation counted against it and it went to the back
    of the queue, with nobody left to wake anyone)."""
    h = make_harness("lvw", clock=True, delay_ms=0, ip_concurrency=1)
    f, gates = h.frontier, _gates(h)
    h.run(f.admit([admission(f"http://n{i}.test/") for i in range(3)]))
    hosts = h.run(f.claim(10, "w")).dns_jobs
    joined = h.run(gates.join(ADDR, [(f.partition(x), x) for x in hosts]))
    assert joined.go.count(True) == 1
    _note(h, hosts, joined.go)
    (lease,) = h.run(f.claim(10, "w")).leases
    assert h.run(gates.take(ADDR, lease.token, f.partition(lease.host), lease.host)).wait_ms == 0
    h.clock.advance(2_000)  # the notes said the address holds 1 s
    h.run(f.release([Release(lease.host, lease.fingerprint, "done")], "w"))
    (wake,) = h.run(gates.end(ADDR, [lease.token]))
    h.run(gates.wake(ADDR, [wake]))
    (again,) = h.run(f.claim(10, "w")).dns_jobs  # woken, but its address is stale
    assert again == wake.host
    rejoined = h.run(gates.join(ADDR, [(f.partition(again), again)]))
    assert rejoined.go == [True] and rejoined.wakes == []
    _note(h, [again], [True])
    assert _hosts_of(h.run(f.claim(10, "w")).leases) == {again}


def test_an_idle_address_with_room_moves_its_queue_when_anyone_joins(
        make_harness: Callable[..., Harness]) -> None:
    """The request that held an address's only place ended without a word (its
    worker died): nobody is woken. The next host that comes to the address at
    its own time (the fallback) finds room: it takes its turn behind the head
    of the queue, and the head is popped for the caller to wake."""
    h = make_harness("lvi", clock=True, delay_ms=0, ip_concurrency=1, lease_ms=10_000)
    f, gates = h.frontier, _gates(h)
    h.run(f.admit([admission(f"http://n{i}.test/") for i in range(3)]))
    hosts = h.run(f.claim(10, "w")).dns_jobs
    joined = h.run(gates.join(ADDR, [(f.partition(x), x) for x in hosts]))
    _note(h, hosts, joined.go)
    (lease,) = h.run(f.claim(10, "w")).leases
    h.run(gates.take(ADDR, lease.token, f.partition(lease.host), lease.host))
    waiting = [x for x, ok in zip(hosts, joined.go, strict=True) if not ok]
    h.clock.advance(10_001)  # its lease and its place at the address run out
    last = waiting[-1]
    again = h.run(gates.join(ADDR, [(f.partition(last), last)]))
    assert again.go == [False]  # not its turn: the head's
    assert [w.host for w in again.wakes] == [waiting[0]]


# ------------------------------------------------------------------ what is left

def test_held_hosts_say_why_and_until_when(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("lvh", clock=True, concurrency=1, delay_ms=0, robots_ms=0)
    f = h.frontier
    h.run(f.admit([admission(f"http://{n}.test/{i}") for n in ("r", "d", "ok") for i in range(2)]))
    leases = h.run(f.claim(10, "w")).leases
    by_host = {x.host: x for x in leases}
    h.run(f.release([
        Release(by_host["http://r.test:80"].host, by_host["http://r.test:80"].fingerprint,
                "retry", "60000", hold_ms=60_000),
        *(Release(x.host, x.fingerprint, "done") for x in leases
          if x.host != "http://r.test:80")], "w"))
    now = h.clock.now_ms()
    h.run(HostDNS(f, DNSRetry(30_000, 60_000, 6)).failed("http://d.test:80", kind="timeout"))
    left = h.run(LeftoverReader(h.client, h.keys).read())
    states = {x.host: (x.state, x.until_ms - now, x.detail, x.queued) for x in left.hosts}
    assert states == {"http://r.test:80": ("retry-after", 60_000, "", 1),
                      "http://d.test:80": ("dns", 30_000, "timeout 1", 1),
                      "http://ok.test:80": ("ready", 0, "", 1)}
    assert not left.only_held(20_000)  # ok.test may go now
    h.run(f.release([Release(x.host, x.fingerprint, "done")
                     for x in h.run(f.claim(10, "w")).leases], "w"))
    left = h.run(LeftoverReader(h.client, h.keys).read())
    assert left.delayed == 1 and left.delayed_next_ms == now + 60_000
    assert left.only_held(20_000)
    # A run of failed lookups holds its host by its hold's length (30 s), whatever
    # is left of it; the server's Retry-After (and the delayed retry) holds by
    # when it ends (in 60 s).
    (dns,) = [x for x in left.hosts if x.state == "dns"]
    assert dns.hold_ms == 30_000
    assert left.only_held(30_000)
    assert not left.only_held(30_001)
    h.clock.advance(25_000)
    left = h.run(LeftoverReader(h.client, h.keys).read())
    assert left.only_held(30_000)  # 5 s left of the DNS hold: held still
    assert not left.only_held(36_000)  # the retry is due in 35 s


def test_a_host_waiting_for_nothing_is_found_and_repaired(
        make_harness: Callable[..., Harness]) -> None:
    h = make_harness("lvl", clock=True, delay_ms=0)
    f = h.frontier
    h.run(f.admit([admission("http://a.test/"), admission("http://b.test/")]))
    part = f.partition("http://a.test:80")
    h.run(h.client.zrem(h.keys.ready(part), "http://a.test:80"))  # a lost wake
    h.run(h.client.hset(h.keys.site(part, "http://a.test:80"), "i", 3))  # a drifted count
    reader = LeftoverReader(h.client, h.keys)
    lost = h.run(reader.read()).lost()
    assert [(x.host, x.detail) for x in lost] == [("http://a.test:80", "")]
    assert not h.run(reader.read()).only_held(0)  # a lost host is no held one
    crawler = get_crawler()
    pokes: list[int] = []
    watchdog = Watchdog(reader, crawler.stats, lambda: pokes.append(1), interval_s=1,
                        grace_ms=10_000, held_wait_ms=20_000)
    left = h.run(watchdog.look())
    assert left is not None and [x.detail for x in left.lost()] == ["repaired"]
    assert crawler.stats.get_value("frontier/stalls_repaired") == 1 and pokes == [1]
    assert _hosts_of(h.run(f.claim(10, "w")).leases) == {"http://a.test:80",
                                                          "http://b.test:80"}
    h.run(watchdog.look())  # nothing more to repair: the count stays
    assert crawler.stats.get_value("frontier/stalls_repaired") == 1


def test_a_domain_whose_wake_was_lost_is_woken(make_harness: Callable[..., Harness]) -> None:
    h = make_harness("lvx", clock=True, delay_ms=0, domain_concurrency=1)
    f = h.frontier
    h.run(f.admit([admission("http://s0.a.test/"), admission("http://s1.a.test/")]))
    (first,) = h.run(f.claim(10, "w")).leases
    part = f.partition(first.host)
    h.run(f.release([Release(first.host, first.fingerprint, "done")], "w"))
    h.run(h.client.delete(h.keys.prefix(part) + ":dwake"))  # the wake, lost
    reader = LeftoverReader(h.client, h.keys)
    (waiting,) = h.run(reader.read()).hosts
    assert waiting.state == "lost" and "a.test" in waiting.detail
    (woken,) = h.run(reader.read(repair=True)).hosts
    assert woken.state == "domain" and woken.detail.endswith("(woken)")
    assert len(h.run(f.claim(10, "w")).leases) == 1


@pytest.mark.parametrize(("paused", "name"), [("site", "s0.a.test"), ("domain", "a.test")])
def test_a_paused_host_is_held_until_an_operator_acts(
        make_harness: Callable[..., Harness], redis_url: str, paused: str, name: str) -> None:
    h = make_harness("lvp" + paused, clock=True, delay_ms=0, domain_concurrency=2)
    f = h.frontier
    h.run(f.admit([admission("http://s0.a.test/")]))
    control = HostControl(redis.Redis.from_url(redis_url), h.keys, f.limits)
    control.change(name, Change(pause=True), scope=paused)
    assert h.run(f.claim(10, "w")).leases == []
    left = h.run(LeftoverReader(h.client, h.keys).read())
    (host,) = left.hosts
    assert (host.state, host.until_ms) == ("paused", -1)
    assert paused in host.detail
    assert not left.only_held(20_000)  # a finite crawl waits for the operator's resume


def test_a_host_in_a_run_of_failed_lookups_is_held_by_it_while_it_waits_for_its_domain(
        make_harness: Callable[..., Harness]) -> None:
    """Between two lookups of a run of failures, a host may wait for its domain
    (another site of it has the domain's one place): it is held by its run
    all the same, as it is in the ready set, so that what is left reads the
    same a moment after the decision that only held work is left."""
    h = make_harness("lvr", clock=True, delay_ms=0, domain_concurrency=1)
    f = h.frontier
    h.run(f.admit([admission("http://s0.a.test/"), admission("http://s1.a.test/")]))
    (first,) = h.run(f.claim(10, "w")).leases
    other = "http://s1.a.test:80" if first.host == "http://s0.a.test:80" else "http://s0.a.test:80"
    reader = LeftoverReader(h.client, h.keys)
    waiting = {x.host: x for x in h.run(reader.read()).hosts}[other]
    assert (waiting.state, waiting.detail) == ("domain", "a.test")
    h.run(HostDNS(f, DNSRetry(3_000, 60_000, 6)).failed(other, kind="timeout"))
    h.clock.advance(3_001)  # its hold is over; the domain's one place is still taken,
    assert h.run(f.claim(10, "w")).leases == []  # so it waits for the domain again
    waiting = {x.host: x for x in h.run(reader.read()).hosts}[other]
    assert (waiting.state, waiting.detail, waiting.hold_ms) == ("dns", "timeout 1", 3_000)
    assert waiting.held


def test_the_watchdog_reads_seldom_while_the_next_claim_is_soon() -> None:
    watchdog = Watchdog(None, None, lambda: None, interval_s=5, grace_ms=10_000,  # type: ignore[arg-type]
                        held_wait_ms=20_000)
    # (monotonic seconds; no read yet: the last one counts as at 0)
    assert not watchdog.wants_read(now=9.5)  # idle from now: it settles first
    assert watchdog.wants_read(now=10.6)
    # a claim is due in 8 s (a Crawl-delay): a wait, no read until a minute passed
    assert not watchdog.wants_read(now=10.6, due_in_ms=8_000)
    assert watchdog.wants_read(now=WAITING_GAP_S, due_in_ms=8_000)
    # due later than the held wait: maybe only held work is left, so it reads
    assert watchdog.wants_read(now=10.6, due_in_ms=60_000)
