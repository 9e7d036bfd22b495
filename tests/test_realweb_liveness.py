"""Liveness on the real-socket web (tests/realweb): a finite crawl always finishes.

Politeness is proved elsewhere (tests/test_realweb_politeness.py); here the
question is the other half of a gate: everything it holds back must be let
through again, so that a crawl with a finite web ends by itself. The gates
that can strand work are the ones whose waiters are woken by someone else:
the server address's (IP scope: hosts parked until a request on the address
ends, places reserved for the hosts woken), the registered domain's, and the
DNS step (hosts held after a failed lookup, robots jobs that resolve first).

Each test runs a real ``scrapy crawl broad`` in a subprocess, names resolved
only by the web's DNS server, and asserts on what the servers received (the
web's ledger), on how the crawl ended (``finish_reason`` in the stats dump,
``Spider closed (finished)``) and on the end-of-crawl summary. A stalled
crawl does not hang a test: ``CLOSESPIDER_TIMEOUT`` ends it with the finish
reason ``closespider_timeout``, which the tests report.

``frontier/stalls_repaired`` is the count of a watchdog's repairs (a safety
net that wakes what no gate woke); it must stay 0: liveness has to come from
the gates themselves.

Timing margins are lopsided on purpose (a loaded 2-core CI machine): the
politeness bounds are strict, the durations generous.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.crawl_runner import (
    REALWEB_DEFAULTS,
    CrawlResult,
    finish_crawl,
    frontier_dead_letters,
    realweb_settings,
    start_crawl,
    tcp_ports_of,
)
from tests.realweb import Host, Page, RealWebProcess, Web, links_to
from tests.realweb.dns import Failure
from tests.realweb.ledger import Ledger

pytestmark = pytest.mark.crawl

SUBPAGES = 4  # a five-page site: "/" links to /1 ... /4, each links back to "/"
#: What a five-page site's server receives when it is crawled once, robots.txt included.
SITE_TARGETS = sorted([b"/", b"/robots.txt", *(f"/{k}".encode() for k in range(1, SUBPAGES + 1))])


def five_pages(delay: float = 0.0) -> dict[str | bytes, Page]:
    """``/`` linking to ``/1`` ... ``/4``, each linking back; every answer ``delay`` s late."""
    pages: dict[str | bytes, Page] = {
        "/": links_to(*(f"/{k}" for k in range(1, SUBPAGES + 1)), delay=delay)}
    for k in range(1, SUBPAGES + 1):
        pages[f"/{k}"] = links_to("/", delay=delay)
    return pages


def chain(n_pages: int, delay: float) -> dict[str | bytes, Page]:
    """``/`` -> ``/1`` -> ... -> ``/n_pages-1``, each answer ``delay`` s late: a host
    whose crawl lasts at least ``n_pages x delay`` s, one request at a time."""
    pages: dict[str | bytes, Page] = {"/": links_to("/1", delay=delay)}
    for k in range(1, n_pages):
        pages[f"/{k}"] = links_to(*([f"/{k + 1}"] if k + 1 < n_pages else []), delay=delay)
    return pages


def target_of(key: str | bytes) -> bytes:
    """A page key as the request-target the server sees."""
    return key if isinstance(key, bytes) else key.encode()


def crawl(web: RealWebProcess, seeds: list[str], workdir: Path, **settings: Any
          ) -> CrawlResult:
    """A crawl of ``web`` from ``seeds``, however it ends (the test says what it must)."""
    started = time.monotonic()
    proc = start_crawl(None, seeds, workdir,
                       {**realweb_settings(web.nameserver), **REALWEB_DEFAULTS, **settings})
    return finish_crawl(proc, workdir, started, timeout=240)


def finish_reason(result: CrawlResult) -> str | None:
    """The ``finish_reason`` of the stats dump (``finished``, ``closespider_timeout``...)."""
    value = result.stat("finish_reason")
    return None if value is None else value.strip("'\"")


def assert_ended_by_itself(result: CrawlResult) -> None:
    """The crawl ran out of work and closed (not its CLOSESPIDER_TIMEOUT), cleanly,
    and no watchdog had to wake anything on the way."""
    reason = finish_reason(result)
    assert reason == "finished", (
        f"the crawl did not end by itself: finish reason {reason!r} after "
        f"{result.seconds:.0f} s\n{result.summary() or result.log[-3000:]}")
    assert "Spider closed (finished)" in result.log, result.log[-3000:]
    assert result.returncode == 0, result.log[-3000:]
    assert "Traceback" not in result.log, result.log[-3000:]
    assert_no_stall_repaired(result)


def assert_no_stall_repaired(result: CrawlResult) -> None:
    repaired = result.stat("frontier/stalls_repaired")
    assert repaired in (None, "0"), (
        f"frontier/stalls_repaired = {repaired}: the watchdog had to wake what the "
        "gates left stranded")


def wrongly_crawled(ledger: Ledger, names: list[str], expected: list[bytes]
                    ) -> dict[str, Counter[bytes]]:
    """The hosts among ``names`` whose requests were not exactly ``expected``, once
    each: what each received instead."""
    return {name: Counter(ledger.targets(name)) for name in names
            if sorted(ledger.targets(name)) != expected}


def test_sixty_names_on_one_server_are_all_crawled_and_the_crawl_ends(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    """Sixty names on one address (shared hosting), five pages each answering in
    0.2 s, FRONTIER_IP_CONCURRENCY=2, next to ten hosts of their own:

    * every page of every host is requested exactly once (350 pages) and each
      robots.txt once: every host parked for the address is let through;
    * the shared address never had more than two requests open at once, and
      did have two (the limit is used, not serialised);
    * the crawl ends by itself, with no watchdog repair.

    The sixty names are also one registered domain (shared.test), so the
    domain's gate takes its turn between the address's wake and the claim:
    a host woken for a place at the address that its domain sends to wait
    must keep that place (else the address's places run out with nobody in
    flight to wake the next host, and only the hosts' fallback times move
    the crawl). The domain delay is 0.05 s so that the address, not the
    domain, is the bound: the shared server needs at least 60 x 5 x 0.2 / 2
    = 30 s, well inside the 90 s allowed.
    """
    shared = [f"n{i:02d}.shared.test" for i in range(60)]
    solo = [f"o{i}.solo.test" for i in range(10)]
    hosts = [Host(name, robots=None, share="big", pages=five_pages(delay=0.2)) for name in shared]
    hosts += [Host(name, robots=None, pages=five_pages()) for name in solo]
    web = realweb(Web(hosts))
    address = web.address(shared[0])
    assert {web.address(name) for name in shared} == {address}
    result = crawl(web, [web.url(name) for name in [*shared, *solo]], tmp_path / "crawl",
                   ADDRESS_GUARD_ALLOW="127.0.0.0/8", FRONTIER_IP_CONCURRENCY=2,
                   FRONTIER_IP_DELAY=0, CONCURRENT_REQUESTS_PER_DOMAIN=2, DOWNLOAD_DELAY=0,
                   FRONTIER_DOMAIN_DELAY=0.05, CLOSESPIDER_TIMEOUT=90)

    ledger = web.ledger()
    wrong = wrongly_crawled(ledger, [*shared, *solo], SITE_TARGETS)
    pages = sum(1 for r in ledger if r.target != b"/robots.txt")
    assert not wrong, (
        f"{len(wrong)} of 70 hosts not crawled exactly once ({pages} of 350 pages "
        f"requested; finish reason {finish_reason(result)!r} after {result.seconds:.0f} s); "
        f"what they received: {dict(list(wrong.items())[:8])}")
    on_server = ledger.at_address(address)
    assert len(on_server) == 60 * len(SITE_TARGETS)
    assert ledger.max_in_flight_at(address) == 2, [
        (r.host, r.target, r.arrival, r.done) for r in on_server[:40]]
    assert_ended_by_itself(result)


def test_robots_jobs_whose_lookups_time_out_do_not_stall_their_domain(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    """Twelve names of one registered domain (h0 ... h11.sf.test) that the DNS
    server never answers, linked from three sites, next to an answering host
    of the same domain (www.sf.test, a chain of pages taking at least 11 s)
    and two ordinary hosts; DNS_TIMEOUT=1, DNS_RETRY_BASE=3 (and
    FRONTIER_HELD_WAIT=2: a 3 s hold is a long one here),
    FRONTIER_DOMAIN_CONCURRENCY=2, robots.txt obeyed:

    * each silent name's first lookup (the IP scope's DNS job) times out and
      holds its host DNS_RETRY_BASE (3 s); when the hold ends, its robots
      job looks the name up again, times out again, and must give its place
      in the domain back: the domain still lets www.sf.test through to its
      last page, and every silent name gets its second lookup;
    * every page of the answering hosts is fetched exactly once, and no
      request reaches a silent name's server;
    * the crawl then ends by itself although the silent names' URLs are
      still held (a run of failed lookups), and the summary says so, well
      within the 90 s allowed.
    """
    silent = [f"h{i}.sf.test" for i in range(12)]
    sites = ["a.test", "b.test", "c.test"]
    ordinary = ["o1.test", "o2.test"]
    hosts = [Host(name, robots=None, pages={
        "/": links_to(*(f"http://{h}/" for h in silent[k::3]), "/1"),
        "/1": links_to("/", *(f"http://{h}/x" for h in silent[k::3]))})
        for k, name in enumerate(sites)]
    hosts += [Host(name, robots=None, dns_fail="silent", pages=five_pages()) for name in silent]
    www = chain(11, delay=1.0)  # /10 at depth 10: DEPTH_LIMIT
    hosts += [Host("www.sf.test", robots=None, pages=www)]
    hosts += [Host(name, robots=None, pages=five_pages()) for name in ordinary]
    web = realweb(Web(hosts))
    result = crawl(web, [web.url(name) for name in [*sites, "www.sf.test", *ordinary]],
                   tmp_path / "crawl", DNS_TIMEOUT=1, DNS_RETRY_BASE=3,
                   FRONTIER_HELD_WAIT=2, FRONTIER_DOMAIN_CONCURRENCY=2,
                   DOWNLOAD_DELAY=0, FRONTIER_ADAPTIVE_FACTOR=0, CLOSESPIDER_TIMEOUT=90)

    ledger = web.ledger()
    assert_ended_by_itself(result)
    wrong = wrongly_crawled(ledger, ordinary, SITE_TARGETS)
    wrong |= wrongly_crawled(ledger, sites, [b"/", b"/1", b"/robots.txt"])
    wrong |= wrongly_crawled(ledger, ["www.sf.test"],
                             sorted([b"/robots.txt", *(target_of(t) for t in www)]))
    assert not wrong, wrong
    assert not ledger.hosts() & set(silent), "a silent name reached its server"
    for name in silent:
        asked = sorted(q.at for q in web.dns_questions(name))
        assert asked and asked[-1] - asked[0] >= 2.5, (
            f"{name} was not looked up again after its DNS hold: its robots job "
            f"never ran (questions at {[round(a - asked[0], 1) for a in asked]})")
    # The summary names what is left: the twelve names, held by their lookups.
    after = result.summary()
    assert re.search(r"\n  left in the frontier: \d+ URL\(s\) queued on 12 host\(s\)", after), after
    assert re.search(r"\n    held: dns 12 host\(s\) \(http://h\d+\.sf\.test:80: dns-timeout, "
                     r"\d+ failed lookup\(s\), retry at \d\d:\d\d:\d\d", after), after
    assert f"continue with: scrapy crawl broad -s JOBDIR={tmp_path / 'crawl' / 'job'}" in after


def test_nxdomain_servfail_and_silent_names_end_within_a_minute_with_the_defaults(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    """Two answering hosts link to a name that does not exist (NXDOMAIN), one
    whose nameserver fails (SERVFAIL) and one that is never answered, with
    the project's DNS settings (DNS_TIMEOUT 5 s, holds from DNS_RETRY_BASE
    30 s, dead letters only after six failed lookups, ~15 min):

    * the crawl ends by itself within a minute of wall time: a finite crawl
      whose only URLs left are held for long does not wait for them;
    * the answering hosts are crawled completely;
    * the NXDOMAIN name's URLs are ``dns-nxdomain`` dead letters at once;
    * the summary says the SERVFAIL and silent names' URLs are held, and why.
    """
    bad: dict[str, Failure] = {"gone.test": "nxdomain", "broken.test": "servfail",
                               "quiet.test": "silent"}
    links = [f"http://{name}{path}" for name in bad for path in ("/", "/x")]
    site = {"/": links_to("/1", "/2", *links[0::2]), "/1": links_to("/", *links[1::2]),
            "/2": links_to("/")}
    answering = ["ok1.test", "ok2.test"]
    hosts = [Host(name, robots=None, pages=site) for name in answering]
    hosts += [Host(name, robots=None, dns_fail=fail, pages=five_pages())
              for name, fail in bad.items()]
    web = realweb(Web(hosts))
    workdir = tmp_path / "crawl"
    started = time.monotonic()
    # (the failing names are linked, not seeded: in scope only with SCOPE any)
    result = crawl(web, [web.url(name) for name in answering], workdir, SCOPE="any")
    wall = time.monotonic() - started

    assert_ended_by_itself(result)
    assert wall < 60, wall
    ledger = web.ledger()
    assert not wrongly_crawled(ledger, answering, [b"/", b"/1", b"/2", b"/robots.txt"])
    assert ledger.hosts() == set(answering)
    for name in bad:
        assert web.dns_questions(name), f"{name} was never looked up"
    dead = frontier_dead_letters(workdir)
    assert sorted((d["url"], d["reason"]) for d in dead) == [
        ("http://gone.test/", "dns-nxdomain"), ("http://gone.test/x", "dns-nxdomain")], dead
    # The summary names the names left held, why and until when.
    after = result.summary()
    held = next((line for line in after.splitlines() if line.startswith("    held: ")), "")
    assert held.startswith("    held: dns 2 host(s) ("), after
    # (one lookup; two when a loaded machine keeps the crawl past DNS_RETRY_BASE)
    for name, kind in (("broken.test", "servfail"), ("quiet.test", "timeout")):
        assert re.search(rf"http://{re.escape(name)}:80: dns-{kind}, [12] failed lookup\(s\), "
                         r"retry at \d\d:\d\d:\d\d", held), held
    assert "2 dead letter(s) in all" in after, after


def test_a_worker_killed_while_hosts_wait_for_their_address_loses_nothing(
        realweb: Callable[..., RealWebProcess], redis_url: str, redis_prefix: str,
        tmp_path: Path) -> None:
    """Two workers on one Redis share a crawl of forty names on one address
    (each name its own registered domain, five pages answering in 0.15 s,
    FRONTIER_IP_CONCURRENCY=2) and four ordinary hosts. Worker 0 starts
    alone; once the shared server has answered some of its pages, while
    most of its names still wait for a place, worker 1 joins and worker 0 is
    killed (SIGKILL: no release, no goodbye) while it holds a place at the
    address: its requests stay counted there, as its leases stay with it,
    until FRONTIER_LEASE_SECONDS=10 s runs out, and worker 1 has no request
    of its own there whose end would wake the next host.

    * worker 1 ends by itself, with no watchdog repair;
    * every page of every host was requested (once, or twice for what worker
      0 had in flight when it died: at most its CONCURRENT_REQUESTS, each
      first requested before the kill);
    * the shared server never had more than two requests open at once (a
      killed worker's requests end, for the server, when its sockets close).
    """
    names = [f"n{i:02d}.test" for i in range(40)]
    ordinary = [f"o{i}.test" for i in range(4)]
    hosts = [Host(name, robots=None, share="big", pages=five_pages(delay=0.15))
             for name in names]
    hosts += [Host(name, robots=None, pages=five_pages()) for name in ordinary]
    web = realweb(Web(hosts))
    address = web.address(names[0])
    concurrent = 16
    settings = {**realweb_settings(web.nameserver), **REALWEB_DEFAULTS,
                "REDIS_URL": redis_url, "FRONTIER_NAMESPACE": f"{redis_prefix}kill",
                "ADDRESS_GUARD_ALLOW": "127.0.0.0/8", "FRONTIER_IP_CONCURRENCY": 2,
                "FRONTIER_IP_DELAY": 0, "CONCURRENT_REQUESTS": concurrent,
                "CONCURRENT_REQUESTS_PER_DOMAIN": 2, "DOWNLOAD_DELAY": 0,
                "FRONTIER_LEASE_SECONDS": 10, "FRONTIER_CLAIM_SWEEP": 0}
    seeds = [web.url(name) for name in [*names, *ordinary]]
    started = time.monotonic()
    # Worker 0 alone first, so that the address's open requests are its own;
    # worker 1 joins, and worker 0 dies while it still holds a place there.
    # (Should this fail, the autouse fixture stop_leftover_crawls kills both.)
    victim = start_crawl(None, seeds[0::2], tmp_path / "w0", settings)
    pages = _wait_at(web, address, victim, 60, lambda pages, own: pages >= 10 and own >= 2)
    survivor = start_crawl(None, seeds[1::2], tmp_path / "w1", settings)
    theirs = set([*names, *ordinary][1::2])
    deadline = time.monotonic() + 30
    while not theirs & web.ledger().hosts():  # worker 1 crawls (its seeds are in)
        assert survivor.poll() is None and time.monotonic() < deadline, "worker 1 never crawled"
        time.sleep(0.03)
    _wait_at(web, address, victim, 20, lambda pages, own: own >= 1)
    victim.kill()
    killed = time.time()
    victim.wait()
    result = finish_crawl(survivor, tmp_path / "w1", started, timeout=180)
    assert pages < 150, "the shared server was nearly done before the kill"

    assert_ended_by_itself(result)
    ledger = web.ledger()
    missing = {name: sorted(set(SITE_TARGETS) - set(ledger.targets(name)))
               for name in [*names, *ordinary]}
    missing = {name: targets for name, targets in missing.items() if targets}
    assert not missing, missing
    requested = Counter((r.host, r.target) for r in ledger)
    twice = {key: n for key, n in requested.items() if n > 1}
    assert sum(n - 1 for n in twice.values()) <= concurrent, twice
    for host, target in twice:
        first = min(r.arrival for r in ledger.for_host(host) if r.target == target)
        assert first < killed, (host, target, first - killed)
    assert ledger.max_in_flight_at(address) <= 2, [
        (r.host, r.target, r.arrival, r.done) for r in ledger.at_address(address)[:40]]


def _wait_at(web: RealWebProcess, address: str, worker: Any, timeout: float,
             ready: Callable[[int, int], bool]) -> int:
    """Wait until ``ready(pages, open)`` holds for the pages the shared server at
    ``address`` has answered and the requests ``worker`` has open there; the
    pages."""
    deadline = time.monotonic() + timeout
    while True:
        assert worker.poll() is None, "worker 0 ended early"
        on_server = web.ledger().at_address(address)
        pages = sum(1 for r in on_server if r.target != b"/robots.txt")
        ports = tcp_ports_of(worker.pid)
        own = sum(1 for r in on_server if r.done is None and r.remote_port in ports)
        if ready(pages, own):
            return pages
        assert time.monotonic() < deadline, (
            f"{pages} pages on the shared server, {own} open from worker 0, in {timeout} s")
        time.sleep(0.03)
