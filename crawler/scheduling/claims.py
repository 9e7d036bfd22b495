"""Claimed URLs, waiting in a small local buffer for the engine to take them.

The buffer is sized to the free download slots: a URL claimed but not
started holds its host's slot in Redis for every worker, so a worker claims
only what it can start now. A claim also reserves the same sites' next URLs,
due later (:mod:`.reserved`): they wait apart and join the buffer on their
turn. When no host is due, the claim says when the next one is and a timer
wakes the worker then; what another worker makes due sooner is a message
on the wake channel (:mod:`.wakes`), not a poll.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError
from scrapy import Request

from crawler.deadletter import DeadReason
from crawler.frontier.keys import domain_of, site_of
from crawler.frontier.records import RecordError
from crawler.frontier.store import Frontier
from crawler.frontier.values import SERIAL, ClaimResult, Lease, Release
from crawler.lease import TICKET_META, Ticket, ticket_of
from crawler.scheduling.health import RedisHealth
from crawler.scheduling.leases import LeaseTable
from crawler.scheduling.reserved import Reserved
from crawler.scheduling.startwindow import StartWindow
from crawler.scheduling.tasks import Tasks

logger = logging.getLogger("crawler.scheduling.scheduler")

#: Reserved URLs a worker keeps at most, per download slot: beyond that it
#: claims only what it starts now.
RESERVED_PER_SLOT = 16
#: The longest a claim's timer waits (s). Waking costs no Redis command (the
#: claim asks only the partitions whose time came: partitiondue.py); what
#: other workers make due sooner comes as a message (wakes.py).
WAKE_MAX_S = 5.0


@dataclass
class ClaimHooks:
    """What the claims ask of the rest of the worker."""

    #: The requests made of a lease (raises RecordError), and their URLs'
    #: canonical forms.
    to_request: Callable[[Lease], Request]
    canonical: Callable[[str], str | None]
    #: Download slots taken outside the buffer (downloads, robots.txt jobs).
    busy: Callable[[], int]
    #: Why this worker claims nothing now ("": it claims).
    paused: Callable[[], str]
    #: Claimed requests taken out before they started: their leases go back.
    give_back: Callable[[list[Request]], None]
    #: The site's claimed requests not started yet go back.
    give_back_site: Callable[[str], None]
    release: Callable[[Release], None]
    #: What else a claim handed out (robots.txt, DNS and address jobs).
    jobs: Callable[[ClaimResult], None]
    #: Have the engine ask for requests now.
    wake: Callable[[], None]
    #: Nothing queued is due nor delayed: read the frontier's counts.
    drained: Callable[[], None]


class Claims:
    """The buffer of claimed requests and the claims that fill it."""

    def __init__(self, store: Frontier, worker: str, concurrency: int, leases: LeaseTable,
                 stats: Any, health: RedisHealth, tasks: Tasks, hooks: ClaimHooks) -> None:
        self.store = store
        self.worker = worker
        self.concurrency = concurrency
        self.leases = leases
        self.stats = stats
        self.health = health
        self.tasks = tasks
        self.hooks = hooks
        self.limits = store.limits
        self.buffer: deque[Request] = deque()
        self.claiming = False
        # False once a claim found nothing due and nothing pending: claiming
        # again is pointless until something is admitted, released or due.
        self.claimable = True
        self._wakeup: asyncio.TimerHandle | None = None
        #: The start turn's window each claim asks for (what requests take
        #: from the claim to the socket: the download handler tells it).
        self.window = StartWindow()
        #: When a request of each host was last written (monotonic).
        self.last_sent: dict[str, float] = {}
        #: Claimed URLs whose turn is later (a site's reservation).
        self.reserved = Reserved(self._turns_came, self.limits, hooks.give_back, domain_of)

    def __len__(self) -> int:
        """Claimed requests not started: in the buffer or reserved."""
        return len(self.buffer) + len(self.reserved)

    def pop(self) -> Request | None:
        """The next claimed request for the engine; claims more when running low."""
        if self.reserved:
            self.buffer.extend(self.reserved.due())
        if not self.buffer:
            self.want()
            return None
        request = self.buffer.popleft()
        if len(self.buffer) < self.concurrency // 4:
            self.want()
        return request

    def take_unstarted(self, which: Callable[[Request], bool] | None = None) -> list[Request]:
        """Take out the claimed requests not started yet (or those ``which`` picks):
        their leases are for the caller to give back."""
        if which is None:
            taken = list(self.buffer)
            self.buffer.clear()
        else:
            taken = [request for request in self.buffer if which(request)]
            if taken:
                self.buffer = deque(r for r in self.buffer if not which(r))
        return taken + self.reserved.take(which)

    def ended(self, request: Request) -> None:
        """The engine is done with ``request``: a serial reservation's next URL
        becomes due (:meth:`Reserved.ended`), or goes back with the rest of
        its site's when the request held its host, parked it for its server
        address or slowed it down. (A request given back alone, its turn gone
        stale, leaves the others be.)"""
        ticket = ticket_of(request.meta)
        lease = ticket and self.leases.lease_of(ticket.token)
        if ticket is None or lease is None:
            return
        verdict = ticket.ending()
        fetch_s = request.meta.get("download_latency")
        if verdict.op == "ipwait" or verdict.hold_ms > 0 or self._slowed(lease, fetch_s):
            self.hooks.give_back_site(site_of(lease.host))
            return
        over = self.reserved.ended(lease.host, ticket.token, ticket.sent, fetch_s,
                                   self.window.ms / 1000)
        if over:
            self.hooks.give_back(over)

    def _slowed(self, lease: Lease, fetch_s: float | None) -> bool:
        """Whether this answer asks its site's next request to wait longer than
        its reservation waits (adaptive pacing, ``lua/release.lua``: the next
        start no sooner than FRONTIER_ADAPTIVE_FACTOR times the answer's time
        after its end, capped at FRONTIER_ADAPTIVE_MAX_DELAY), so that the
        reservation no longer stands. (A chain waits so already:
        :meth:`Reserved.ended`.)"""
        wait_ms = self.limits.adaptive_delay_ms(fetch_s)
        if wait_ms <= lease.pacing[0]:
            return False
        after = self.reserved.next_due(lease.host)
        return after is not None and after < time.monotonic() + wait_ms / 1000

    def _turns_came(self, requests: list[Request]) -> None:
        self.buffer.extend(requests)
        self.hooks.wake()

    def want(self) -> None:
        """Claim as many URLs as there are free download slots (one claim at a time)."""
        if self.claiming or self.tasks.closing or not self.claimable or self.hooks.paused():
            return
        free = self.concurrency - self.hooks.busy() - len(self.buffer)
        if free > 0:
            self.claiming = True
            # A claim under way when the worker closes is let finish: its
            # script has leased the URLs, and only its answer says which, so
            # that the close can give them back instead of leaving them to
            # run out their lease.
            self.tasks.spawn(self._claim(free), flush=True)

    async def _claim(self, n: int) -> None:
        asked = time.monotonic()  # the claims' start turns count from no later than this
        window_ms = self.window.ms
        later = RESERVED_PER_SLOT * self.concurrency - len(self.reserved)
        try:
            result = await self.store.claim(n, self.worker, window_ms, max(later, 0))
        except (RedisError, OSError) as exc:
            self.health.trouble(exc)
            self.claiming = False
            self.wake_in(1.0)
            return
        self.health.ok()
        self.claiming = False
        if result.calls:  # (script calls; empty: claims that asked and got nothing)
            self.stats.inc_value("frontier/claims/calls", result.calls)
            if not (result.leases or result.robots_jobs or result.ip_waits or result.dns_jobs
                    or result.budget_jobs):
                self.stats.inc_value("frontier/claims/empty")
        heads: dict[str, str] = {}  # a serial reservation's first URL, by host
        chains: dict[str, tuple[list[Request], tuple[int, int]]] = {}
        turns = _own_turns(result.leases, asked)
        for lease in result.leases:
            try:
                request = self.hooks.to_request(lease)
            except RecordError as exc:
                self._bad_record(lease, exc)
                continue
            due = asked + lease.offset_ms / 1000
            request.meta[TICKET_META] = self._ticket(lease, asked, due, turns)
            self.leases.add(lease, self.hooks.canonical(request.url))
            if lease.offset_ms == SERIAL:
                chains.setdefault(lease.host, ([], lease.pacing))[0].append(request)
            elif lease.offset_ms > 0:
                self.reserved.add(due, request, lease.host)
            else:
                heads[lease.host] = lease.token
                self.buffer.append(request)
        for host, (chain, (delay_ms, floor_ms)) in chains.items():
            if host not in heads:  # its first was a bad record: the next goes now
                heads[host] = ticket_of(chain[0].meta).token  # type: ignore[union-attr]
                self.buffer.append(chain.pop(0))
            if chain:
                self.reserved.chain(host, heads[host], chain, delay_ms, floor_ms,
                                    asked + self.limits.reserve_ms / 1000)
        self.hooks.jobs(result)
        if result.leases or result.robots_jobs:
            self.stats.inc_value("frontier/leases/claimed", len(result.leases))
            self.hooks.wake()
        elif result.next_ready_ms is not None:
            # Nothing due: no claim until then (or until something is admitted,
            # released or woken), however often the engine asks.
            self.claimable = False
            self.wake_in((result.next_ready_ms - result.server_ms) / 1000)
        else:  # nothing due, nothing delayed: no claim until something changes
            self.claimable = False
            self.hooks.drained()

    def _ticket(self, lease: Lease, asked: float, due: float,
                turns: dict[str, tuple[float, float, float | None]]) -> Ticket:
        """A claimed URL's ticket: when it may start and must have started, its
        gate turns, its revisit state."""
        ticket = Ticket(lease.token, lease.robots_version, claimed=due,
                        start_by=asked + lease.latest_ms / 1000,
                        gate_turn=(0, *lease.turns), ahead=lease.offset_ms != 0)
        if lease.token in turns:
            ticket.deadline, ticket.least_s, ticket.next_due = turns[lease.token]
        if self.leases.revisits is not None:
            ticket.revisit = self.leases.revisits.state_of(lease.record)
        return ticket

    def started(self, host: str, at: float) -> None:
        """A request of ``host`` was written at ``at`` (monotonic)."""
        self.last_sent[host] = at
        if len(self.last_sent) > 4 * RESERVED_PER_SLOT * self.concurrency:
            self.last_sent.clear()  # (only a reservation's own spacing needs them)

    def _bad_record(self, lease: Lease, error: RecordError) -> None:
        """A queue entry this worker did not write (or cannot read): a dead letter
        with reason ``bad-record``, never a request."""
        self.stats.inc_value("frontier/bad_records")
        logger.warning("Frontier: a queued record of %s is not one a worker writes (%s); it "
                       "is a dead letter (scrapy frontier dead --reason bad-record)",
                       lease.host, error)
        self.hooks.release(Release(lease.host, lease.fingerprint, "dead",
                                   DeadReason.now("bad-record", str(error)).json()))

    def changed(self) -> None:
        """Something this worker did (an admission, a release, a job's end) may
        have made URLs claimable: the next :meth:`want` claims."""
        self.claimable = True

    def now(self) -> None:
        """URLs may be claimable now (a host woken, a job ended): claim at once."""
        self.claimable = True
        self.want()

    def maybe_claimable(self) -> None:
        """URLs are queued somewhere (another worker may have admitted them):
        claim again, unless a claim already said when the next one is due
        (its timer claims then, within a second)."""
        if self._wakeup is None:
            self.claimable = True

    @property
    def waiting(self) -> bool:
        """Whether this worker waits for a time a claim named (nothing due now)."""
        return self._wakeup is not None and not self.claimable

    def due_in_ms(self) -> float | None:
        """How soon (ms) a partition said its next thing is due, while this worker
        waits for it (None: it does not wait, or knows no such time)."""
        soonest = self.store.due.soonest_ms() if self.waiting else None
        return None if soonest is None else max(soonest - self.store.due.now(), 0.0)

    def wake_in(self, seconds: float) -> None:
        """Claim again in ``seconds`` (between 5 ms and WAKE_MAX_S)."""
        if self.tasks.closing:
            return
        self._cancel_wakeup()
        delay = min(max(seconds, 0.005), WAKE_MAX_S)
        self._wakeup = asyncio.get_event_loop().call_later(delay, self._on_wakeup)

    def wake_at(self, server_ms: int) -> None:
        """Something is due at ``server_ms`` (the server's clock; another worker
        said so on the wake channel): claim then, or sooner if a timer says so."""
        if self.tasks.closing:
            return
        seconds = (server_ms - self.store.due.now()) / 1000
        if seconds <= 0.005:
            self._cancel_wakeup()
            self._on_wakeup()
            return
        loop = asyncio.get_event_loop()
        if self._wakeup is None or self._wakeup.when() > loop.time() + seconds:
            self.wake_in(seconds)

    def cancel(self) -> None:
        """No more timers (the worker closes)."""
        self.reserved.cancel()
        self._cancel_wakeup()

    def _cancel_wakeup(self) -> None:
        if self._wakeup:
            self._wakeup.cancel()
            self._wakeup = None

    def _on_wakeup(self) -> None:
        self._wakeup = None
        self.claimable = True
        self.want()
        self.hooks.wake()


def _own_turns(leases: list[Lease], asked: float
               ) -> dict[str, tuple[float, float, float | None]]:
    """For each URL of a reservation spaced by offsets (several URLs of one host,
    in offset order, as ``lua/claim.lua`` gives them), by token: when the
    reservation ends (the latest its last URL may start), the least gap
    between two of its starts (its first URL's latest is that gap before the
    second one's offset) and when its next URL is due (None: the last), in
    seconds (``middlewares/pacing.py``: a late one's own turn)."""
    by_host: dict[str, list[Lease]] = {}
    for lease in leases:
        if lease.offset_ms >= 0:
            by_host.setdefault(lease.host, []).append(lease)
    turns: dict[str, tuple[float, float, float | None]] = {}
    for group in by_host.values():
        if len(group) < 2:
            continue
        least = (group[1].offset_ms - group[0].latest_ms) / 1000
        deadline = asked + group[-1].latest_ms / 1000
        for this, after in zip(group, [*group[1:], None], strict=True):
            turns[this.token] = (deadline, least,
                                 None if after is None else asked + after.offset_ms / 1000)
    return turns
