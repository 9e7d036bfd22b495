"""Reserved URLs: claimed for a turn later than now, kept until it comes.

A claim reserves a site's next URLs (``lua/claim.lua``, ``FRONTIER_RESERVE_SECONDS``):
the first starts at once, each next one at its offset after the claim, spaced
by the site's delay as successive claims would have spaced them. They wait
here rather than in the engine, where each would hold a download slot for
seconds, and move to the claims' buffer when their turn comes; a timer wakes
the engine then. The frontier counts them in flight for their site meanwhile,
so no other worker claims it; what takes them back early (a hold, a breaker,
an operator's change, a pause) gives their leases back to their queues.

A site that takes one request at a time (a robots.txt Crawl-delay, adaptive
pacing, a concurrency of 1) is paced from the end of each answer: its
reservation is a chain, each next URL due once the one before ended, its
delay (jittered) after that one's start and its floor or adaptive delay
after its end, whichever is later. Only its worker knows either moment.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from scrapy import Request

from crawler.frontier.values import Limits
from crawler.lease import ticket_of

#: A turn this close (s) counts as come: the timer's own granularity.
_EARLY_S = 0.002
#: A chain whose request under way never ended (s after the reservation's end)
#: is given back: its next URL must not wait in this worker for ever.
CHAIN_GRACE_S = 60.0


@dataclass(slots=True)
class _Chain:
    """A serial reservation's URLs after the one under way (``current``, a token)."""

    current: str
    waiting: deque[Request]
    delay_ms: int
    floor_ms: int
    until: float  # the reservation's end (monotonic): nothing starts after it


class Reserved:
    """Requests waiting for their start turn, earliest first."""

    def __init__(self, on_due: Callable[[list[Request]], None], limits: Limits,
                 on_stale: Callable[[list[Request]], None],
                 group_of: Callable[[str], str] = str) -> None:
        self._heap: list[tuple[float, int, Request, str]] = []  # due, order, request, host
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._on_due = on_due
        self._on_stale = on_stale
        self._limits = limits
        self._chains: dict[str, _Chain] = {}  # by host key
        self._chained = 0
        self._hosts: dict[str, list[float]] = {}  # the due times waiting, by host
        #: The hosts that hold URLs here, by their group (their registered
        #: domain: a domain's reservation spans its hosts).
        self._group_of = group_of
        self._groups: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._heap) + self._chained

    def chain(self, host: str, current: str, requests: list[Request], delay_ms: int,
              floor_ms: int, until: float) -> None:
        """Keep ``requests`` (a serial reservation of ``host``, over at ``until``)
        for after ``current``."""
        chain = _Chain(current, deque(requests), delay_ms, floor_ms, until)
        self._chains[host] = chain
        self._entered(host)
        self._chained += len(requests)
        asyncio.get_event_loop().call_later(
            max(until - time.monotonic(), 0) + CHAIN_GRACE_S, self._expire, host, chain)

    def _expire(self, host: str, chain: _Chain) -> None:
        """The backstop: a chain still waiting long after its end is given back."""
        if self._chains.get(host) is chain:
            del self._chains[host]
            self._left(host)
            self._chained -= len(chain.waiting)
            self._on_stale(list(chain.waiting))

    def holds_group(self, group: str) -> bool:
        """Whether URLs of any host of ``group`` (``group_of``) wait here."""
        return group in self._groups

    def _entered(self, host: str) -> None:
        self._groups.setdefault(self._group_of(host), set()).add(host)

    def _left(self, host: str) -> None:
        """``host`` may hold nothing here any more: out of its group if so."""
        if host in self._hosts or host in self._chains:
            return
        group = self._group_of(host)
        hosts = self._groups.get(group)
        if hosts is not None:
            hosts.discard(host)
            if not hosts:
                del self._groups[group]

    def ended(self, host: str, token: str, started: float | None, fetch_s: float | None,
              window_s: float) -> list[Request]:
        """The request ``token`` of ``host`` is over (``started``: when it was sent,
        monotonic; ``fetch_s``: how long its answer took): if it heads a chain,
        its next URL is due the site's delay after its start and its floor (or
        adaptive delay) after now, whichever is later. Returns the chain's
        URLs taken out because that is past the reservation's end (slow
        answers): their leases are the caller's to give back."""
        chain = self._chains.get(host)
        if chain is None or chain.current != token:
            return []
        now = time.monotonic()
        due = now + self._after_end(chain.floor_ms, fetch_s)
        if started is not None:
            due = max(due, started + self._jittered(chain.delay_ms) / 1000)
        if due > chain.until:
            del self._chains[host]
            self._left(host)
            self._chained -= len(chain.waiting)
            return list(chain.waiting)
        request = chain.waiting.popleft()
        self._chained -= 1
        if not chain.waiting:
            del self._chains[host]  # (add below keeps the host in its group)
        ticket = ticket_of(request.meta)
        if ticket is not None:
            chain.current = ticket.token
            # (another site of its domain may start once the reservation is
            # over: later than that, it asks the start gate)
            ticket.claimed, ticket.start_by = due, max(due + window_s, chain.until)
        self.add(due, request, host)
        return []

    def _after_end(self, floor_ms: int, fetch_s: float | None) -> float:
        """The wait after an answer: the floor, or the adaptive delay (release.lua's)."""
        return max(floor_ms, self._limits.adaptive_delay_ms(fetch_s)) / 1000

    def _jittered(self, delay_ms: int) -> float:
        jitter = self._limits.jitter
        return delay_ms * random.uniform(1 - jitter, 1 + jitter)

    def add(self, due: float, request: Request, host: str) -> None:
        """Keep ``request`` (of ``host``) until ``due`` (monotonic seconds)."""
        first = self._heap[0][0] if self._heap else None
        heapq.heappush(self._heap, (due, next(self._seq), request, host))
        self._hosts.setdefault(host, []).append(due)
        self._entered(host)
        if first is None or due < first:
            self._arm()

    def next_due(self, host: str) -> float | None:
        """When the next request of ``host`` waiting here is due (None: none waits)."""
        times = self._hosts.get(host)
        return min(times) if times else None

    def _out(self, due: float, request: Request, host: str) -> Request:
        """Forget ``request`` (of ``host``, due at ``due``) in the index by host."""
        times = self._hosts[host]
        times.remove(due)
        if not times:
            del self._hosts[host]
            self._left(host)
        return request

    def due(self) -> list[Request]:
        """The requests whose turn came, taken out, earliest first."""
        now = time.monotonic() + _EARLY_S
        out = []
        while self._heap and self._heap[0][0] <= now:
            due, _, request, host = heapq.heappop(self._heap)
            out.append(self._out(due, request, host))
        return out

    def take(self, which: Callable[[Request], bool] | None = None) -> list[Request]:
        """Take out every request (or those ``which`` picks) before its turn."""
        taken = [entry for entry in self._heap if which is None or which(entry[2])]
        if taken:
            self._heap = [] if which is None else [e for e in self._heap if not which(e[2])]
            heapq.heapify(self._heap)
        out = [self._out(due, request, host) for due, _, request, host in taken]
        for host, chain in list(self._chains.items()):
            picked = [r for r in chain.waiting if which is None or which(r)]
            if picked:
                gone = set(map(id, picked))
                chain.waiting = deque(r for r in chain.waiting if id(r) not in gone)
                self._chained -= len(picked)
                out += picked
            if not chain.waiting:
                del self._chains[host]
                self._left(host)
        self._arm()
        return out

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        self.cancel()
        if self._heap:
            wait = max(self._heap[0][0] - time.monotonic(), 0.0)
            self._timer = asyncio.get_event_loop().call_later(wait, self._fire)

    def _fire(self) -> None:
        self._timer = None
        ready = self.due()
        self._arm()
        if ready:
            self._on_due(ready)
