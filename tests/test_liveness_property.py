"""Liveness of the frontier: a finite crawl always finishes, nothing is parked for ever.

A stateful property test (hypothesis ``RuleBasedStateMachine``) drives the
production Lua scripts (claim, release, start, robots, dns, hold and the IP
scope's ipgate, ipend, ipjoin, ipnote, ippark, ipwake) on a real Redis, on
the harness's clock (tests/frontier_harness.py), and plays the workers' side
the way the scheduler does (crawler/scheduling/ipscope.py, robotsjobs.py,
crawler/middlewares/dns.py, pacing.py): a small world of host names, several
on one server address, one whose name never resolves, two or three workers
that claim, answer their DNS jobs, join and wake addresses, fetch robots.txt
files and pages with every outcome (success, failures that open breakers,
retries, Retry-After holds, dead letters, DNS failures of every kind), die
with work in hand, while the clock moves on.

Why: every gate of the frontier (site, registered domain, server address,
robots.txt, DNS, breaker) takes a host out of the ready set and relies on
something to put it back: a release, the end of a request, a timed set that
a claim looks at. A path that forgets to put a host back does not fail a
request, it silently parks the host for ever, and a finite crawl never ends.
Unit tests check the paths one at a time; this looks for the sequences.

Checked:

1. after every step (``something_will_be_looked_at``): when URLs are queued,
   nothing is leased and no live worker holds a job, some host is in a ready
   set or some partition's timed set (leased, delayed, dwake, iwake, vdue)
   has an entry, due within twice the longest hold the model makes: something
   will be looked at;
2. at the end of every run (``teardown``), the drain: no more admissions, the
   workers still alive finish what they hold, and an ideal worker claims
   everything and completes every job successfully (its downloads take
   ``fetch_ms``, its resolver's answers last ``drain_ttl``), the clock moving
   to the next due time each round. The crawl must finish within a bound (the
   longest hold the model can make, a lease and two fallbacks, plus a little
   per URL and per host), and no host may be left waiting for its own
   fallback at an address with nothing in flight once the drain has lost a
   wake itself, or once every hold, lease, place and lost wake from before
   the drain is over: nothing is lost in the drain, so such a host had its
   wake lost by the frontier. (The fallback is what a wake lost with a dead
   worker costs; a crawl that needs one per request crawls a shared server
   at one request per 15-22 s.)

A failure names its cause when it is one this test knows (an exception class
each, so hypothesis shrinks and reports them apart): ``DomainNeverWoken``
(hosts in a domain's ``:dw`` set, no ``:dwake`` entry), ``GhostInAddressQueue``
(an address's waiting queue headed by a host with nothing queued, which
never comes), ``OwnReservationRefused`` (ipjoin queued a host at the back
though the address's reserved place was its own); else ``Stall``. The message
ends with a dump of every host still holding URLs and the gates around it.

``LIVENESS_EXAMPLES`` / ``LIVENESS_STEPS`` run more (and longer) examples;
``LIVENESS_RANDOM=1`` draws new ones each run instead of the fixed
(derandomized) ones; ``LIVENESS_SHRINK=0`` reports the first failing sequence
as found (shrinking one takes minutes: each example runs a drain);
``LIVENESS_SKIP`` (comma separated) leaves out a known cause to look for the
next: ``robots-dns`` (robots jobs meet no DNS failure), ``lost-robots`` (no
robots job is lost: a dying worker's are finished all the same, none is
given up), ``domains`` (the registered domain's gates are off), ``parks`` (no
host with a server address is ever parked: no NXDOMAIN for them, the
breaker, the robots.txt retries and failed lookups never give up),
``lost-wakes`` (a host waiting for its fallback at an idle address fails the
drain only when a ghost heads the address's queue; the crawl must still end
in time).
"""

from __future__ import annotations

import itertools
import json
import os
import random
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from crawler.frontier.dnsstate import DNSRetry, HostDNS
from crawler.frontier.ipgates import NO_ADDRESS, RESERVED_MS, DnsNote, IpGates, Wake, waiter
from crawler.frontier.values import Breaker, Lease, Release, RobotsRetry, Turn
from tests.frontier_harness import Harness, admission

# ---------------------------------------------------------------- the world

SHARED = "127.0.0.2"
#: Host key -> its server address (None: its name never resolves, SERVFAIL).
#: a1 (two authorities) and a2 share domain x.test; b1, b2 and bad share
#: y.test; a1, a2, b1 and c (domain z.test) share one server address.
HOSTS: dict[str, str | None] = {
    "http://a1.x.test:80": SHARED,
    "https://a1.x.test:443": SHARED,
    "http://a2.x.test:80": SHARED,
    "http://b1.y.test:80": SHARED,
    "http://b2.y.test:80": "127.0.0.3",
    "http://c.z.test:80": SHARED,
    "http://d.w.test:80": "127.0.0.4",
    "http://bad.y.test:80": None,
}
HOST_KEYS = list(HOSTS)
ADDRESSES = sorted({a for a in HOSTS.values() if a})
WORKERS = ["w0", "w1", "w2"]
#: URLs admitted in one run at most (the drain must stay short).
MAX_URLS = 24

DELAY_MS = 400
LEASE_MS = 60_000
ROBOTS_MS = 120_000
FALLBACK_MS = 15_000
BREAKER = Breaker(threshold=2, base_ms=5_000, cap_ms=20_000, max_openings=2)
DNS_RETRY = DNSRetry(base_ms=2_000, cap_ms=10_000, max_attempts=3)
ROBOTS_RETRY = RobotsRetry(base_ms=2_000, cap_ms=10_000, max_attempts=3, stale_max_ms=300_000)

#: Retry delays, Retry-After holds (ms) a step may draw; the first is where
#: hypothesis shrinks to.
HOLDS = [1_000, 100, 5_000, 30_000, 120_000]
#: How long a resolved address is known (the answer's TTL left, ms).
TTLS = [60_000, 1_000, 10_000, 3_600_000]
#: Clock steps (ms).
ADVANCES = [1_000, 100, 5_000, 20_000, 60_000, 180_000, 600_000]
#: What becomes of the job a step handles (each kind reads those it knows;
#: any other is a success). "drop": the worker lets a DNS, W or robots job
#: run out (a Redis error, robots_turn giving up): no live worker drops a page.
#: Successes are drawn more often than any one failure, so that crawls move on.
OUTCOMES = ["ok", "ok", "ok", "ok", "fail", "retry", "dead", "hold", "return", "unreachable",
            "servfail", "timeout", "nxdomain", "drop"]

#: ipscope.py: a name that did not resolve is looked at again after this long.
UNGATED_MS = 60_000
#: ipscope.py: a wait at the address this short is waited in place.
WAIT_IN_PLACE_MS = 250
#: pacing.py: a site's turn further off than this gives the URL back.
DEFER_AFTER_MS = 5_000
#: The longest a host can be held by anything the model does (retry, hold,
#: breaker, DNS and robots backoff, a robots fetch, a lease).
HORIZON_MS = max(*HOLDS, BREAKER.cap_ms, DNS_RETRY.cap_ms, ROBOTS_RETRY.cap_ms, ROBOTS_MS,
                 LEASE_MS, UNGATED_MS)
FALLBACK_MAX_MS = FALLBACK_MS * 3 // 2
#: When the drain has put every hold, lease and lost wake of before it behind.
RECOVERY_MS = HORIZON_MS + LEASE_MS + 2 * FALLBACK_MAX_MS + RESERVED_MS
#: What the drain may take per URL and per host on top (pacing, robots, DNS).
PER_URL_MS = 2_500
PER_HOST_MS = 40_000
DRAIN_ROUNDS = 3_000
#: Things done at one instant of the drain at most (a livelock guard).
INSTANT_STEPS = 300

_NAMESPACES = itertools.count()
CLOCK_START_MS = 1_800_000_000_000


def _skips() -> set[str]:
    return {s.strip() for s in os.environ.get("LIVENESS_SKIP", "").split(",") if s.strip()}


def _fallback_ms() -> int:
    """ipscope.IpScope.fallback_ms: the fallback, spread."""
    return round(FALLBACK_MS * random.uniform(1, 1.5))


def _reason(why: str) -> str:
    return json.dumps({"reason": why, "error": "liveness model"})


@dataclass
class Job:
    """Something a worker holds: a DNS job, a W (joined the hosts parked for an
    address), a robots job or a leased page, and how far it got."""

    kind: str  # "dns", "wait", "robots", "page"
    worker: str
    host: str
    claimed_ms: int
    lease: Lease | None = None
    address: str = ""  # W: the address joined; robots, page: the address taken
    placed: bool = False  # robots, page: holds a place at the address
    turn: Turn | None = None  # the site turn of an earlier pass of the start gate
    ip_turn: int | None = None
    not_before: int = 0  # the drain: waiting in place until then
    fetching: bool = False  # the drain: its download takes time

    def __repr__(self) -> str:
        place = f" at {self.address}" if self.placed else ""
        return f"<{self.kind} {self.host} of {self.worker}{place}>"


class Stall(AssertionError):
    """The frontier stopped handing out work it holds (cause not recognised)."""


class DomainNeverWoken(Stall):
    """Hosts wait in a domain's :dw set and the domain has no :dwake entry."""


class GhostInAddressQueue(Stall):
    """An address's waiting queue is headed by a host with nothing queued: it never
    comes to take its turn, and the hosts behind it wait for ever."""


class OwnReservationRefused(Stall):
    """ipjoin queued a host at the back of the queue though it held the address's
    reserved place itself: the place ran out unused, the wake was lost."""


#: Which cause to name first when several are seen.
_CAUSES: list[type[Stall]] = [DomainNeverWoken, GhostInAddressQueue, OwnReservationRefused]


class LivenessMachine(RuleBasedStateMachine):
    """A small crawl world on one frontier (see the module docstring)."""

    redis_url = ""
    redis_prefix = ""

    def __init__(self) -> None:
        super().__init__()
        self.h: Harness | None = None
        self.jobs: list[Job] = []
        self.generation = dict.fromkeys(WORKERS, 0)
        self.admitted = 0
        self.urls = itertools.count()
        self.clean = True  # False while a step runs: a failed step skips the drain
        #: Joins that queued a host holding a reservation at the address (ms, what).
        self.refused: list[tuple[int, str]] = []
        self.skip = _skips()

    # ------------------------------------------------------------ set-up

    @initialize(ip_concurrency=st.sampled_from([1, 2]),
                domain_concurrency=st.sampled_from([1, 2]),
                drain_ttl=st.sampled_from([30_000, 1_000]),
                fetch_ms=st.sampled_from([100, 1_000]))
    def setup(self, ip_concurrency: int, domain_concurrency: int, drain_ttl: int,
              fetch_ms: int) -> None:
        """The frontier's limits; in the drain, how long resolver answers are known
        (``drain_ttl``: the TTL left when a page's host is parked for its address;
        a DNS job's answer is known 10 s at least, as ipscope.py has it) and how
        long a download takes (``fetch_ms``)."""
        self.drain_ttl, self.fetch_ms = drain_ttl, fetch_ms
        # The claims' jitter and the fallbacks draw from the global random: a
        # printed sequence replays the same (hypothesis restores it after).
        random.seed(0)
        self.namespace = f"{self.redis_prefix}lv{next(_NAMESPACES)}x"
        domains = "domains" not in self.skip
        self.h = Harness(self.redis_url, self.namespace, clock=True, concurrency=2,
                         delay_ms=DELAY_MS, jitter=0.5, lease_ms=LEASE_MS, robots_ms=ROBOTS_MS,
                         domain_concurrency=domain_concurrency if domains else 0,
                         domain_delay_ms=250 if domains else 0,
                         ip_concurrency=ip_concurrency, ip_delay_ms=0,
                         ip_fallback_ms=FALLBACK_MS, dns_job_ms=10_000, claim_sweep_ms=0,
                         reserve_ms=3000)
        # A fixed start: nothing depends on the day the test runs.
        self.run(self.h.client.set(self.h.clock.key, CLOCK_START_MS))
        self.h.clock.start_ms = CLOCK_START_MS
        parks = "parks" not in self.skip
        self.h.frontier.limits.breaker = BREAKER if parks else replace(BREAKER, max_openings=0)
        self.robots_retry = ROBOTS_RETRY if parks else replace(ROBOTS_RETRY, max_attempts=0)
        self.gates = IpGates(self.h.client, self.h.keys, self.h.frontier.limits,
                             self.h.frontier.due)
        self.dns = HostDNS(self.h.frontier, DNS_RETRY)
        # (the name that never resolves is parked in the end whatever is skipped)
        self.gated_dns = self.dns if parks else HostDNS(self.h.frontier,
                                                        replace(DNS_RETRY, max_attempts=0))

    @property
    def harness(self) -> Harness:
        assert self.h is not None
        return self.h

    def run(self, coro: Any) -> Any:
        return self.harness.run(coro)

    def now(self) -> int:
        return self.harness.clock.now_ms()

    def worker_id(self, worker: str) -> str:
        return f"{worker}.{self.generation[worker]}"

    def part(self, host: str) -> int:
        return self.harness.frontier.partition(host)

    # ------------------------------------------------------------ rules

    @precondition(lambda self: self.admitted < MAX_URLS)
    @rule(host=st.sampled_from(HOST_KEYS), n=st.integers(1, 3))
    def admit(self, host: str, n: int) -> None:
        """Links to ``n`` new URLs of ``host`` are found."""
        self.clean = False
        n = min(n, MAX_URLS - self.admitted)
        name = host.split("://")[1].rsplit(":", 1)[0]
        scheme = host.split("://")[0]
        urls = [f"{scheme}://{name}/p{next(self.urls)}" for _ in range(n)]
        self.run(self.harness.frontier.admit([admission(u) for u in urls]))
        self.admitted += n
        self.clean = True

    @rule(worker=st.sampled_from(WORKERS), n=st.sampled_from([2, 1, 4]), answer=st.booleans())
    def claim(self, worker: str, n: int, answer: bool) -> None:
        """A worker with ``n`` free slots claims (``answer``: and its background
        tasks answer the claim's DNS jobs and W at once, successfully)."""
        self.clean = False
        wid = self.worker_id(worker)
        before = len(self.jobs)
        self._claim(wid, n)
        if answer:
            for job in self.jobs[before:]:
                if job.kind in ("dns", "wait"):
                    self._step(job, "ok", HOLDS[0], TTLS[0])
                    self.jobs.remove(job)
        self.clean = True

    @precondition(lambda self: bool(self.jobs))
    @rule(pick=st.integers(0, 7), outcome=st.sampled_from(OUTCOMES),
          ms=st.sampled_from(HOLDS), ttl=st.sampled_from(TTLS), through=st.booleans())
    def handle(self, pick: int, outcome: str, ms: int, ttl: int, through: bool) -> None:
        """A worker takes the next step of one job it holds (``through``: and the
        steps after it that need not wait: a page is started and answered)."""
        self.clean = False
        job = self.jobs[pick % len(self.jobs)]
        status = self._step(job, outcome, ms, ttl)
        while through and status == "next":
            status = self._step(job, outcome, ms, ttl)
        if status == "done":
            self.jobs.remove(job)
        self.clean = True

    @precondition(lambda self: bool(self.jobs))
    @rule(pick=st.integers(0, 2), outcome=st.sampled_from(OUTCOMES),
          ms=st.sampled_from(HOLDS), ttl=st.sampled_from(TTLS))
    def work(self, pick: int, outcome: str, ms: int, ttl: int) -> None:
        """A worker (one of those holding jobs) takes every job it holds as far as
        it goes without waiting, all with one outcome."""
        self.clean = False
        wid = self._busy_worker(pick)
        for job in [j for j in self.jobs if j.worker == wid]:
            status = self._step(job, outcome, ms, ttl)
            while status == "next":
                status = self._step(job, outcome, ms, ttl)
            if status == "done":
                self.jobs.remove(job)
        self.clean = True

    @rule(ms=st.sampled_from(ADVANCES))
    def advance(self, ms: int) -> None:
        """Time passes; the live workers' heartbeats renew their leases."""
        self.clean = False
        self._advance(ms)
        self.clean = True

    @precondition(lambda self: bool(self.jobs))
    @rule(pick=st.integers(0, 2))
    def die(self, pick: int) -> None:
        """A worker holding jobs dies: what it holds runs out (leases, jobs, places
        at addresses)."""
        self.clean = False
        wid = self._busy_worker(pick)
        worker = wid.split(".")[0]
        # (skipping lost robots jobs, the dead worker's are finished all the same)
        kept = ("robots",) if "lost-robots" in self.skip else ()
        self.jobs = [j for j in self.jobs if j.worker != wid or j.kind in kept]
        self.generation[worker] += 1
        self.clean = True

    def _busy_worker(self, pick: int) -> str:
        busy = sorted({j.worker for j in self.jobs})
        return busy[pick % len(busy)]

    # ------------------------------------------------------------ the check after each step

    @invariant()
    def something_will_be_looked_at(self) -> None:
        if self.h is None:
            return
        self.clean = False
        counts = self.run(self.harness.frontier.counts())
        if counts["queued"] > 0 and counts["leased"] == 0 and not self.jobs:
            due = self._earliest_due()
            if due is None:
                self._stall("URLs are queued, nothing is leased, no worker holds a job, and "
                            "no host is ready and no timed set has an entry: nothing will "
                            "ever be looked at")
            wait = due[0] - self.now()
            assert wait <= 2 * HORIZON_MS, (
                f"the next thing to look at ({due[1]}) is {wait} ms away\n" + self._dump())
        self.clean = True

    # ------------------------------------------------------------ the drain

    def teardown(self) -> None:
        if self.h is None:
            return
        try:
            if self.clean:
                self._drain()
        finally:
            self.run(self._delete_namespace())
            self.h.close()
            self.h = None

    async def _delete_namespace(self) -> None:
        client = self.harness.client
        keys = [k async for k in client.scan_iter(match=f"*{self.namespace}*", count=1000)]
        if keys:
            await client.delete(*keys)

    def _drain(self) -> None:
        """An ideal worker finishes the crawl (see the module docstring)."""
        start = self.now()
        counts = self.run(self.harness.frontier.counts())
        live = counts["queued"] + counts["leased"] + counts["delayed"]
        bound = start + RECOVERY_MS + PER_URL_MS * live + PER_HOST_MS * len(HOSTS)
        # Every hold, lease, place and parked host's time from before the drain
        # is over, and then two fallbacks (a wake lost with a dead worker is
        # made up by one): from then on no wake may be lost.
        strict_from = self.run(self._horizon(start)) + 2 * FALLBACK_MAX_MS + RESERVED_MS
        strict_wakes = "lost-wakes" not in self.skip
        refused_before = len(self.refused)
        for _ in range(DRAIN_ROUNDS):
            self._drain_instant()
            counts = self.run(self.harness.frontier.counts())
            if counts["queued"] + counts["leased"] + counts["delayed"] == 0 and not self.jobs:
                return
            due = self._earliest_due()
            now = self.now()
            if due is None:
                self._stall(f"drain, {now - start} ms in: URLs are left and nothing will "
                            "ever be looked at")
            at, what = due
            # (a host refused its own place in the drain: the wake lost is the drain's)
            lost_here = len(self.refused) > refused_before
            if (now >= strict_from or lost_here) and what.startswith("iwake"):
                idle = self._idle_addresses()
                ghosts = idle and any(c is GhostInAddressQueue
                                      for c, _ in self.run(self._diagnose()))
                if idle and (strict_wakes or ghosts):
                    self._stall(
                        f"drain, {now - start} ms in: hosts wait for their own fallback "
                        f"({what}) at idle addresses {idle}: their wake was lost, though "
                        "no worker died or lost anything in the drain")
            target = max(at, now + 50)
            if target > bound:
                self._stall(f"drain, {now - start} ms in: not finished within "
                            f"{bound - start} ms (next: {what})")
            self._renew()
            self.harness.clock.advance(target - now)
        self._stall(f"drain: not finished in {DRAIN_ROUNDS} rounds")

    def _drain_instant(self) -> None:
        """Everything the ideal workers can do without the clock moving."""
        for _ in range(INSTANT_STEPS):
            now = self.now()
            moved = False
            for job in [j for j in self.jobs if j.not_before <= now]:
                if self._ideal(job, self.fetch_ms):
                    self.jobs.remove(job)
                moved = True
            if self._claim("drain", 8):
                moved = True
            if not moved:
                return
        self._stall("drain: busy for ever at one instant")

    def _ideal(self, job: Job, fetch_ms: int = 0) -> bool:
        """Carry a job out successfully as far as it goes now: True when over.
        ``fetch_ms``: a download (page, robots.txt) takes that long once started."""
        while True:
            status = self._step(job, "ok", HOLDS[0], self.drain_ttl)
            if status == "done":
                return True
            if status == "wait":
                return False
            if job.placed and fetch_ms and not job.fetching:
                job.fetching, job.not_before = True, self.now() + fetch_ms
                return False

    # ------------------------------------------------------------ a worker's side

    def _claim(self, worker: str, n: int) -> bool:
        """Claim for ``worker``; True if it got anything to do."""
        # (with as many later URLs: a site's reservation)
        result = self.run(self.harness.frontier.claim(n, worker, later=n))
        at = result.server_ms
        new = [Job("page", worker, lease.host, at, lease=lease) for lease in result.leases]
        new += [Job("robots", worker, host, at) for host in result.robots_jobs]
        new += [Job("dns", worker, host, at) for host in result.dns_jobs]
        new += [Job("wait", worker, host, at, address=addr) for host, addr in result.ip_waits]
        self.jobs += new
        return bool(new)

    def _step(self, job: Job, outcome: str, ms: int, ttl: int) -> str:
        """One step of a job: "done" (over), "next" (go on at once) or "wait"
        (ask again later: a gate said to wait in place)."""
        if job.kind == "dns":
            self._dns_job(job, outcome, ttl)
            return "done"
        if job.kind == "wait":
            if outcome != "drop":
                self._joined(job)
            return "done"
        if job.kind == "robots":
            return self._robots_fetch(job, outcome) if job.placed else \
                self._robots_turn(job, outcome, ttl)
        return self._page_end(job, outcome, ms) if job.placed else \
            self._page_start(job, outcome, ttl)

    def _dns_job(self, job: Job, outcome: str, ttl: int) -> None:
        """ipscope._look_up and _join_and_note for one name."""
        if outcome == "drop":
            return  # the job runs out: the name is handed out again
        address = HOSTS[job.host]
        part = self.part(job.host)
        if address is None and outcome not in ("nxdomain", "timeout"):
            outcome = "servfail"
        if outcome in ("servfail", "timeout", "nxdomain"):
            self._name_failed(job.host, outcome, job=True)
            self.run(self.gates.note(part, [DnsNote(job.host, NO_ADDRESS, UNGATED_MS, True)]))
            return
        assert address is not None
        go, wakes = self._join(address, part, job.host, "its DNS job")
        self.run(self.gates.note(part, [DnsNote(job.host, address, max(ttl, 10_000), go,
                                                _fallback_ms())]))
        self._wake(address, wakes)  # after the note: a woken host is parked

    def _name_failed(self, host: str, kind: str, *, job: bool) -> str:
        """scheduling/dnsoutcomes.DnsOutcomes._host_failed: "park" (the site's URLs are dead
        letters now), or the ms the host is held."""
        if kind == "nxdomain" and "parks" in self.skip and HOSTS[host]:
            kind = "servfail"
        if kind == "nxdomain":
            self.run(self.harness.frontier.park_host(host, _reason("dns-nxdomain"),
                                                     whole_site=True))
            return "park"
        dns = self.dns if HOSTS[host] is None else self.gated_dns
        verdict = self.run(dns.failed(host, job=job, count=kind == "servfail"))
        if verdict.verdict == "park":
            self.run(self.harness.frontier.park_host(host, _reason("dns-failed"),
                                                     whole_site=True))
            return "park"
        return str(verdict.wait_ms if verdict.verdict == "hold" else DNS_RETRY.base_ms)

    def _joined(self, job: Job) -> None:
        """ipscope._joined: queue the host at its address; back at once if it may go,
        and the waiting hosts the address had room for woken."""
        part = self.part(job.host)
        go, wakes = self._join(job.address, part, job.host, "a claim's W")
        back = [Wake(part, job.host, job.claimed_ms)] if go else []
        self._wake(job.address, back + wakes)

    def _join(self, address: str, part: int, host: str, why: str) -> tuple[bool, list[Wake]]:
        """gates.join for one host; notes a host queued though it held a reservation."""
        keys = self.harness.keys
        held = self.run(self.harness.client.zscore(keys.ip_reserved(address),
                                                   waiter(part, host)))
        now = self.now()
        joined = self.run(self.gates.join(address, [(part, host)]))
        (go,) = joined.go
        if not go and held is not None and held > now:
            self.refused.append((now, f"{host} joined {address} ({why}) holding its own "
                                      f"reservation (until +{int(held) - now} ms) and was "
                                      "queued at the back"))
        return bool(go), joined.wakes

    def _ended(self, address: str, member: str) -> None:
        """ipscope._ended: the place is free; wake whom the address has room for."""
        self._wake(address, self.run(self.gates.end(address, [member])))

    def _wake(self, address: str, wakes: list[Wake]) -> None:
        """ipscope._wake: wake them; when some were not parked any more (woken by
        their own time, or gone), the address may have room for the next."""
        for _ in range(3):
            if not wakes:
                return
            if not self.run(self.gates.wake(address, wakes)):
                return
            wakes = self.run(self.gates.end(address))

    def _robots_turn(self, job: Job, outcome: str, ttl: int) -> str:
        """robotsjobs._job up to the fetch: the DNS step, the start gate, the address's gate."""
        host = job.host
        address = HOSTS[host]
        if outcome == "drop" and "lost-robots" not in self.skip:
            return "done"  # given up (robots_turn's deadline, a Redis error): it runs out
        if "robots-dns" not in self.skip:
            if address is None and outcome not in ("nxdomain", "timeout"):
                outcome = "servfail"
            if outcome in ("servfail", "timeout", "nxdomain"):
                self._name_failed(host, outcome, job=True)
                return "done"
        elif address is None:
            return self._robots_fetch(job, "unreachable")  # the fetch fails without the step
        turn = self.run(self.harness.frontier.start_turn(host, job.turn))
        now = self.now()
        late = turn.wait_ms < 0 or now + turn.wait_ms - job.claimed_ms > ROBOTS_MS // 2
        if late and "lost-robots" not in self.skip:
            return "done"  # deferred: the job runs out
        if turn.wait_ms != 0:
            job.not_before = now + max(turn.wait_ms, 0)
            return "wait"
        job.turn = turn
        assert address is not None
        ip = self.run(self.gates.take(address, "R" + host, self.part(host), host,
                                      in_place_ms=WAIT_IN_PLACE_MS))
        if ip.wait_ms == 0:
            job.placed, job.address = True, address
            return "next"
        if 0 < ip.wait_ms <= WAIT_IN_PLACE_MS:
            job.not_before = now + ip.wait_ms
            return "wait"
        wake = ip.wait_ms if ip.wait_ms > 0 else _fallback_ms()
        self.run(self.gates.park_robots_job(self.part(host), host, address, wake, ttl))
        return "done"

    def _robots_fetch(self, job: Job, outcome: str) -> str:
        """RobotsPolicy.resolve, then robots_done (the place at the address is free)."""
        f = self.harness.frontier
        host = job.host
        if outcome in ("unreachable", "fail"):
            stored = self.run(f.store_robots(host, None, 0, 0, 0, 0, 0, self.robots_retry))
            if stored.state == "park":
                self.run(f.park_host(host, _reason("robots-unreachable")))
        elif outcome == "retry":  # rules with a Crawl-delay, kept a minute
            self.run(f.store_robots(host, b"rules", 60_000, 1, DELAY_MS, 1_000, 1_000,
                                    self.robots_retry))
        else:
            self.run(f.store_robots(host, b"rules", 3_600_000, 2, DELAY_MS, 0, DELAY_MS // 2,
                                    self.robots_retry))
        if job.placed:
            self._ended(job.address, "R" + host)
        return "done"

    def _page_start(self, job: Job, outcome: str, ttl: int) -> str:
        """pacing.pass_gate: the name's address, the site's gate, the address's gate."""
        assert job.lease is not None
        host = job.host
        address = HOSTS[host]
        if address is None and outcome not in ("nxdomain", "timeout"):
            outcome = "servfail"
        if outcome in ("servfail", "timeout", "nxdomain"):
            held = self._name_failed(host, outcome, job=False)
            if held == "park":
                self._release(job, "dead", _reason("dns"))
            else:
                self._release(job, "retry", held)
            return "done"
        assert address is not None
        turn = self.run(self.harness.frontier.start_turn(host, job.turn))
        now = self.now()
        if turn.wait_ms < 0:
            self._release(job, "return")
            return "done"
        if turn.wait_ms > DEFER_AFTER_MS:
            self._release(job, "retry", str(turn.wait_ms))
            return "done"
        if turn.wait_ms > 0:
            job.not_before = now + turn.wait_ms
            return "wait"
        job.turn = turn
        ip = self.run(self.gates.take(address, job.lease.token, self.part(host), host,
                                      earlier=job.ip_turn, in_place_ms=WAIT_IN_PLACE_MS))
        if ip.wait_ms == 0:
            job.placed, job.address, job.ip_turn = True, address, ip.turn
            return "next"
        if 0 < ip.wait_ms <= WAIT_IN_PLACE_MS:
            job.not_before = now + ip.wait_ms
            return "wait"
        wake = ip.wait_ms if ip.wait_ms > 0 else _fallback_ms()
        self._release(job, "ipwait", f"{address}\n{wake}\n{ttl}")
        return "done"

    def _page_end(self, job: Job, outcome: str, ms: int) -> str:
        """The answer: the address's place is freed (pacing.leave_address), then
        the lease is released with the verdict."""
        assert job.lease is not None
        self._ended(job.address, job.lease.token)
        if outcome == "fail":
            self._release(job, "retry", str(ms), health="fail")
        elif outcome == "dead":
            self._release(job, "dead", _reason("gone"), health="fail")
        elif outcome == "hold":
            self.run(self.harness.frontier.hold(job.host, ms))
            self._release(job, "retry", str(ms), hold_ms=ms)
        elif outcome == "return":
            self._release(job, "return")
        else:
            self._release(job, "done", health="ok")
        return "done"

    def _release(self, job: Job, op: str, arg: str = "", *, health: str = "",
                 hold_ms: int = 0) -> None:
        """Release a lease; a breaker that opened too often parks its site (sync._park)."""
        assert job.lease is not None
        f = self.harness.frontier
        result = self.run(f.release([Release(job.host, job.lease.fingerprint, op, arg,
                                             hold_ms=hold_ms, health=health)], job.worker))
        for event in result.events:
            if event.event == "park":
                self.run(f.park_host(event.host, _reason("host-unreachable"), whole_site=True))

    def _renew(self) -> None:
        """The live workers' heartbeats."""
        by_worker: dict[str, list[Lease]] = {}
        for job in self.jobs:
            if job.lease is not None:
                by_worker.setdefault(job.worker, []).append(job.lease)
        for worker, leases in by_worker.items():
            self.run(self.harness.frontier.renew(leases, worker))

    def _advance(self, ms: int) -> None:
        while ms > 0:
            step = min(ms, LEASE_MS // 3)
            self._renew()
            self.harness.clock.advance(step)
            ms -= step

    # ------------------------------------------------------------ reading the state

    def _earliest_due(self) -> tuple[int, str] | None:
        """The earliest time something will be looked at, and what: a ready
        host, an entry of a timed set, or a job a worker waits in place for."""
        keys = self.harness.keys
        found: list[tuple[int, str]] = []

        names = ("ready", "leased", "delayed", "dwake", "iwake", "vdue")
        asked = [(f"{keys.prefix(part)}:{name}", name)
                 for part in range(keys.partitions) for name in names]

        async def read() -> list[Any]:
            async with self.harness.client.pipeline(transaction=False) as pipe:
                for key, _ in asked:
                    pipe.zrange(key, 0, 0, withscores=True)
                return list(await pipe.execute())

        for (_, name), first in zip(asked, self.run(read()), strict=True):
            if first:
                member, score = first[0]
                found.append((int(score), f"{name} {member.decode(errors='replace')}"))
        found += [(j.not_before, f"job {j!r}") for j in self.jobs]
        return min(found) if found else None

    async def _horizon(self, now: int) -> int:
        """The latest time anything in the frontier holds or waits for (ms)."""
        client = self.harness.client
        keys = self.harness.keys
        times = [now]

        async def fields(pattern: str, names: tuple[str, ...]) -> None:
            async for key in client.scan_iter(match=pattern, count=1000):
                if await client.type(key) == b"hash":
                    times.extend(float(v) for v in await client.hmget(key, list(names))
                                 if v is not None)

        async def zsets(pattern: str) -> None:
            async for key in client.scan_iter(match=pattern, count=1000):
                if await client.type(key) == b"zset":
                    last = await client.zrange(key, -1, -1, withscores=True)
                    times.extend(score for _, score in last)

        for part in range(keys.partitions):
            prefix = keys.prefix(part)
            await fields(f"{prefix}:g:*", ("w", "bk", "du", "rj", "dj", "t", "s"))
            await fields(f"{prefix}:h:*", ("rw",))
            await fields(f"{prefix}:d:*", ("t", "s"))
            for name in ("leased", "delayed", "dwake", "iwake", "iw:*", "di:*"):
                await zsets(f"{prefix}:{name}")
        for address in ADDRESSES:
            await zsets(keys.ip_in_flight(address))
            await zsets(keys.ip_reserved(address))
        return int(max(t for t in times if t < now + 86_400_000))

    def _idle_addresses(self) -> list[str]:
        """The addresses with hosts parked for them and nothing in flight."""
        keys = self.harness.keys
        now = self.now()
        idle = []
        for address in ADDRESSES:
            parked = sum(self.run(self.harness.client.zcard(keys.ip_parked(p, address)))
                         for p in range(keys.partitions))
            busy = self.run(self.harness.client.zcount(keys.ip_in_flight(address),
                                                       f"({now}", "+inf"))
            if parked and not busy:
                idle.append(address)
        return idle

    def _stall(self, what: str) -> None:
        """Raise the stall, named by its cause when it is one this test knows."""
        causes = self.run(self._diagnose())
        if self.refused:
            causes.append((OwnReservationRefused, "; ".join(
                f"+{at - self.harness.clock.start_ms} ms: {text}"
                for at, text in self.refused[-3:])))
        causes.sort(key=lambda c: _CAUSES.index(c[0]))
        kind = causes[0][0] if causes else Stall
        named = "".join(f"\n  {c.__name__}: {text}" for c, text in causes)
        raise kind(f"{what}{named}\n{self._dump()}")

    async def _diagnose(self) -> list[tuple[type[Stall], str]]:
        """The known causes visible in the frontier now."""
        keys = self.harness.keys
        client = self.harness.client
        found: list[tuple[type[Stall], str]] = []
        for part in range(keys.partitions):
            prefix = keys.prefix(part)
            async for key in client.scan_iter(match=f"{prefix}:dw:*", count=1000):
                dom = key.decode().rsplit(":dw:", 1)[1]
                if await client.zscore(f"{prefix}:dwake", dom) is None:
                    waiting = [m.decode() for m in await client.zrange(key, 0, -1)]
                    di = await client.zrange(f"{prefix}:di:{dom}", 0, -1, withscores=True)
                    found.append((DomainNeverWoken, (
                        f"{waiting} wait in {prefix}:dw:{dom}, no :dwake entry; in flight "
                        f"{[(m.decode(), int(t)) for m, t in di]}")))
        for address in ADDRESSES:
            for entry in await client.zrange(keys.ip_waiting(address), 0, 1):
                part_s, _, host = entry.decode().partition("\n")
                if not await client.zcard(keys.queue(int(part_s), host)):
                    found.append((GhostInAddressQueue, (
                        f"{host} heads {address}'s queue with nothing queued")))
        return found

    def _dump(self) -> str:
        """Every host still holding queued URLs, with the gates around it."""
        return self.run(self._dump_async(self.now()))

    async def _dump_async(self, now: int) -> str:
        keys = self.harness.keys
        client = self.harness.client
        t0 = self.harness.clock.start_ms

        def text(raw: Any) -> Any:
            if isinstance(raw, dict):
                return {text(k): text(v) for k, v in raw.items()}
            if isinstance(raw, list | tuple):
                return [text(x) for x in raw]
            if isinstance(raw, bytes):
                return raw.decode(errors="replace")
            if isinstance(raw, float):
                return int(raw)
            return raw

        async def zset(key: str) -> Any:
            return await client.zrange(key, 0, -1, withscores=True)

        lines = [f"clock {now} (t0 {t0}, +{now - t0} ms)",
                 f"counts {await self.harness.frontier.counts()}",
                 f"jobs held {self.jobs}"]
        for host in HOST_KEYS:
            part = self.part(host)
            queued = await client.zcard(keys.queue(part, host))
            hk = await client.hgetall(keys.host(part, host))
            if not queued and not int(hk.get(b"n", 0)):
                continue
            prefix = keys.prefix(part)
            lines.append(f"host {host} (p{part}): {queued} queued {text(hk)}")
            lines.append(f"  site {text(await client.hgetall(keys.site(part, host)))}")
            parked = [f" iw[{a}] {await client.zscore(keys.ip_parked(part, a), host)}"
                      for a in ADDRESSES]
            lines.append(f"  ready {await client.zscore(keys.ready(part), host)}"
                         f" dw {await client.zscore(keys.domain_waiting(part, host), host)}"
                         + "".join(parked))
            dom = keys.domain(part, host).rsplit(":d:", 1)[1]
            lines.append(
                f"  domain {dom} {text(await client.hgetall(keys.domain(part, host)))} di "
                f"{text(await zset(keys.domain_leases(part, host)))}"
                f" dwake {await client.zscore(f'{prefix}:dwake', dom)}")
        for address in ADDRESSES:
            lines.append(
                f"address {address}: g {text(await client.hgetall(keys.ip_gate(address)))}"
                f" f {text(await zset(keys.ip_in_flight(address)))}"
                f" q {text(await zset(keys.ip_waiting(address)))}"
                f" r {text(await zset(keys.ip_reserved(address)))}")
        for part in range(keys.partitions):
            prefix = keys.prefix(part)
            for name in ("ready", "leased", "delayed", "dwake", "iwake"):
                entries = await zset(f"{prefix}:{name}")
                if entries:
                    lines.append(f"p{part} {name} {text(entries)}")
        return "\n".join(lines)


def make_machine(url: str, prefix: str) -> type[LivenessMachine]:
    """The machine on the test's Redis and key prefix."""

    class Liveness(LivenessMachine):
        redis_url = url
        redis_prefix = prefix

    return Liveness


def _settings() -> settings:
    phases = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target]
    if os.environ.get("LIVENESS_SHRINK", "1") != "0":
        phases.append(Phase.shrink)
    return settings(
        max_examples=int(os.environ.get("LIVENESS_EXAMPLES", "150")),
        stateful_step_count=int(os.environ.get("LIVENESS_STEPS", "40")),
        deadline=None,
        derandomize=os.environ.get("LIVENESS_RANDOM", "") != "1",
        database=None,
        phases=phases,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                               HealthCheck.data_too_large],
    )


def test_a_finite_crawl_always_finishes(redis_url: str, redis_prefix: str) -> None:
    run_state_machine_as_test(make_machine(redis_url, redis_prefix), settings=_settings())
