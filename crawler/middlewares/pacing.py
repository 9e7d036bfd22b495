"""Downloader middleware: the frontier's last gate before a request is sent.

The frontier spaces a host's claims by its delay, and a claim is its URL's
start turn: ``lua/claim.lua`` moves the site's (and domain's) next start past
a window in which the worker sends the URL (the worker's own,
:mod:`crawler.scheduling.startwindow`). Between a
claim and the moment bytes leave, a URL can wait in its worker (a busy
reactor, the robots.txt middleware), and different workers wait differently;
a request that comes here after its window asks the frontier's start gate
(``lua/start.lua``, one small script) whether the host may be contacted now,
and waits the few milliseconds it is told when not. In the normal case its
turn still stands and Redis is not asked.

Then, with the IP scope on (``FRONTIER_IP_CONCURRENCY`` / ``_DELAY``), it
takes the gate of the server address the request will connect to, shared by
every name on that server (:mod:`crawler.scheduling.ipscope`), and gives the
address its place back when the download ends (``process_response`` /
``process_exception``: this middleware is the first to see both). A request
the address has no room for goes back to its queue with its host parked for
the address: it holds no download slot while the server is busy with others.

Three cases never go out early:

- the host was held after its URL was claimed (a 429 or 503 with
  Retry-After, a breaker that opened): a wait longer than a few seconds
  gives the URL back to the frontier, delayed until the host may be
  contacted, instead of holding a download slot all that time;
- an operator paused the host or its domain (``scrapy frontier host NAME
  --pause``): the URL goes back to its queue at once;
- Redis does not answer: the request waits for it (the claims were paced, but
  two URLs of one host claimed together are only kept apart here) and, if
  Redis stays away longer than a lease, goes back to the head of its queue.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NoReturn, TypeVar

from redis.exceptions import RedisError
from scrapy.exceptions import IgnoreRequest

from crawler.frontier.ipgates import PAUSED
from crawler.frontier.values import LEASE_LOST
from crawler.lease import GATE_PASS_META, AddressPlace, GatePass, Ticket, ticket_of
from crawler.scheduling.ipscope import WAIT_IN_PLACE_MS
from crawler.scheduling.startwindow import GATE_LEAST_MS
from crawler.scheduling.worker import frontier_of

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from crawler.frontier.values import Turn
    from crawler.scheduling.ipscope import IpScope, ServerAddress
    from crawler.scheduling.worker import WorkerFrontier

T = TypeVar("T")

#: A wait longer than this gives the URL back to the frontier (delayed) rather
#: than keeping its download slot.
DEFER_AFTER_S = 5.0
_REDIS_RETRY_S = (0.1, 2.0)  # first and longest pause while Redis does not answer
#: The least time a request may take from passing ``lua/start.lua`` to the
#: download handler; one that takes longer than this (or the worker's start
#: window, if longer) passes it again: its turn at the host is stale (a
#: stalled reactor). (A turn lasts the window its claim or pass asked for:
#: the gate spaced the next start by that much more.)
STALE_AFTER_S = GATE_LEAST_MS / 1000


class FrontierPacingMiddleware:
    """Space the starts of requests to one host across all workers."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierPacingMiddleware:
        return cls(crawler)

    async def process_request(self, request: Request) -> None:
        await pass_gate(self.crawler, request)

    def process_response(self, request: Request, response: Response) -> Response:
        leave_address(self.crawler, request)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        leave_address(self.crawler, request)


async def pass_gate(crawler: Crawler, request: Request) -> None:
    """:func:`gate` of the crawl's frontier (none: nothing to wait for), or
    :func:`gate_again` for a request that holds a gate pass and no lease."""
    frontier = frontier_of(crawler)
    if frontier is None:
        return
    gate_pass = _gate_pass_of(request)
    if gate_pass is not None:
        await gate_again(frontier, gate_pass)
    else:
        await gate(frontier, request)


def _gate_pass_of(request: Request) -> GatePass | None:
    return request.meta.get(GATE_PASS_META)


async def gate_again(frontier: WorkerFrontier, gate_pass: GatePass) -> None:
    """Return once a request that passed its site's gate without a lease (a
    robots.txt fetch: ``scheduling/robotsjobs.py``) may still start: at once
    while its pass stands, else after passing the gate again. (It is spaced
    from the site's and domain's other requests like a page; an operator's
    pause met here fails the fetch, which the frontier retries later.)"""
    if gate_pass.turn is None or time.monotonic() <= gate_pass.start_by:
        return

    def refuse(wait_ms: int) -> None:
        if wait_ms < 0:
            raise IgnoreRequest(f"not started: {gate_pass.host} paused by an operator")

    gate_pass.turn, gate_pass.start_by = await _wait_for_turn(
        frontier, lambda window_ms: frontier.store.start_turn(
            gate_pass.host, gate_pass.turn, window_ms=window_ms), refuse)


async def _wait_for_turn(frontier: WorkerFrontier, ask: Callable[[int], Awaitable[Turn]],
                         refuse: Callable[[int], None]) -> tuple[Turn, float]:
    """Ask the start gate (``ask(window_ms)``, ``lua/start.lua``) until it says
    now; any other answer goes to ``refuse`` first, which raises to stop
    waiting. The turn, and until when (monotonic) it stands: the window is
    the time it may take to reach the socket, asked for like a claim's, and
    counts from the question (a stall while the answer was on its way makes
    the turn stale too)."""
    window_ms = frontier.claims.window.gate_ms
    while True:
        asked = time.monotonic()
        turn = await ask(window_ms)
        if turn.wait_ms == 0:
            return turn, asked + window_ms / 1000
        refuse(turn.wait_ms)
        frontier.stats.inc_value("frontier/pacing/waits")
        await asyncio.sleep(turn.wait_ms / 1000)


async def gate(frontier: WorkerFrontier, request: Request) -> None:
    """Return once ``request`` may start now (or raise IgnoreRequest, giving its URL back).

    The site's and domain's gate first (it may say to wait), then the server
    address's (the IP scope), the last moment before the connection: a turn
    taken there is not left to age while the site's gate is waited out.
    """
    ticket = ticket_of(request.meta)
    if ticket is None:
        return
    host = frontier.host_of(ticket.token)
    if host is None:
        return
    server = None
    if frontier.ips is not None and not request.meta.get("proxy"):  # a proxy connects
        # Looked up first: a slow lookup between a gate and the send would
        # send the request late on its turn. A failed one is the request's
        # (the DNS step).
        server = await frontier.ips.address_of(host)
    started = time.monotonic()
    while True:
        # The claim was the request's first pass of the site's and domain's
        # gate: asked again only once that pass is stale (else no delay
        # anywhere: the gate could only say "now").
        if _fresh(ticket) or await _own_turn(frontier, ticket, host):
            pass
        elif frontier.may_gate or ticket.start_by is not None:
            await _site_gate(frontier, ticket, host)
        if frontier.ips is None or server is None:
            return
        patient = time.monotonic() - started < DEFER_AFTER_S
        wait_ms = await _address_gate(frontier, frontier.ips, ticket, server, host,
                                      WAIT_IN_PLACE_MS if patient else 0,
                                      site_gated=frontier.may_gate)
        if wait_ms == 0:
            return
        await asyncio.sleep(wait_ms / 1000)


async def _own_turn(frontier: WorkerFrontier, ticket: Ticket, host: str) -> bool:
    """A reserved URL late past its own turn: may it still start on its worker's
    word? Its site is this worker's until its reservation ends (no other
    worker starts it before), so it goes if it keeps the least gap to the
    site's last start here and to the next URL of its reservation's turn
    (which may be on its way already), waiting a little for the first if
    need be; else it asks the start gate."""
    if ticket.deadline is None:
        return False
    claims = frontier.claims
    now = time.monotonic()
    last = claims.last_sent.get(host)
    if last is not None and now < last + ticket.least_s:
        if last + ticket.least_s > ticket.deadline:
            return False
        await asyncio.sleep(last + ticket.least_s - now)
        now = time.monotonic()
    by = ticket.deadline
    if ticket.next_due is not None:
        by = min(by, ticket.next_due - ticket.least_s)
    if now >= by:
        return False
    ticket.start_by = by
    return True


async def _site_gate(frontier: WorkerFrontier, ticket: Ticket, host: str) -> None:
    """Wait for the site's and the domain's gate (``lua/start.lua``)."""
    lease = (bytes.fromhex(ticket.token), frontier.worker)

    def refuse(wait_ms: int) -> None:
        if wait_ms == LEASE_LOST:
            _give_back(frontier, ticket, "lease_lost",
                       "its lease ran out while this worker stood still")
        if wait_ms < 0:
            _give_back(frontier, ticket, "paused", "host paused by an operator")
        if wait_ms > DEFER_AFTER_S * 1000:
            _give_back(frontier, ticket, "held", "host held", wait_ms)

    ticket.gate_turn, ticket.start_by = await _wait_for_turn(
        frontier, lambda window_ms: _redis(frontier, ticket, lambda: frontier.store.start_turn(
            host, ticket.gate_turn, lease, window_ms)), refuse)


async def _address_gate(frontier: WorkerFrontier, ips: IpScope, ticket: Ticket,
                        server: ServerAddress,
                        host: str, in_place_ms: int, *, site_gated: bool) -> int:
    """Take the server address's gate: 0 (start now), or ms to wait in place.

    An address with no room (full, paused by an operator, or its turn further
    off than ``in_place_ms``) gets the URL back with its host parked for it:
    the request holds no download slot while it waits.
    """
    earlier = None
    member = ticket.token
    held = ticket.ip_turn
    if held is not None and held.address != server.address:  # the name moved since
        _free_address(frontier, ticket)
    elif held is not None:
        earlier, member = held.turn, held.member
    else:
        kept = ips.kept_place(server.address)
        if kept is not None:  # (the gate counts it in flight still)
            ticket.ip_turn = kept
            if not site_gated:
                ticket.start_by = time.monotonic() + STALE_AFTER_S
            return 0
    asked = time.monotonic()
    turn = await _redis(frontier, ticket, lambda: ips.take(
        server, member, host, earlier=earlier, in_place_ms=in_place_ms))
    if turn.wait_ms == 0:
        ticket.ip_turn = AddressPlace(server.address, turn.turn, member, asked, turn.spare)
        if not site_gated:  # else the site's turn, taken first, is the older one
            ticket.start_by = asked + STALE_AFTER_S
        return 0
    if 0 < turn.wait_ms <= in_place_ms:
        return turn.wait_ms
    _free_address(frontier, ticket)
    frontier.stats.inc_value("frontier/pacing/given_back/"
                            + ("ip_paused" if turn.wait_ms == PAUSED else "ip"))
    ticket.wait_for_address(server.address, ips.wake_ms(turn), server.known_ms)
    raise IgnoreRequest(f"not started: its server {server.address} has no room now")


def leave_address(crawler: Crawler, request: Request) -> None:
    """The request is done with its server address: its place there is free."""
    ticket = ticket_of(request.meta)
    frontier = frontier_of(crawler)
    if ticket is not None and frontier is not None:
        _free_address(frontier, ticket)


def _free_address(frontier: WorkerFrontier, ticket: Ticket) -> None:
    if ticket.ip_turn is None or frontier.ips is None:
        return
    place, ticket.ip_turn = ticket.ip_turn, None
    frontier.ips.free(place)


async def _redis(frontier: WorkerFrontier, ticket: Ticket,
                 ask: Callable[[], Awaitable[T]]) -> T:
    """``ask()``, waiting for Redis while it does not answer; a wait longer than a
    lease gives the URL back to the head of its queue."""
    redis_wait = 0.0
    pause = _REDIS_RETRY_S[0]
    while True:
        try:
            return await ask()
        except (RedisError, OSError):
            if redis_wait >= frontier.limits.lease_ms / 1000:
                _give_back(frontier, ticket, "redis", "Redis unreachable")
            frontier.stats.inc_value("frontier/pacing/redis_waits")
            await asyncio.sleep(pause)
            redis_wait += pause
            pause = min(pause * 2, _REDIS_RETRY_S[1])


def note_time_to_socket(crawler: Crawler, request: Request) -> None:
    """``request`` is about to be written: how long it took from its claim tells
    the claims how long a start turn to ask for (``scheduling/startwindow.py``)."""
    ticket = ticket_of(request.meta)
    frontier = frontier_of(crawler)
    if ticket is not None and frontier is not None and not ticket.ahead:
        # (what a claim takes to reach the socket)
        frontier.claims.window.observe(time.monotonic() - ticket.claimed)


def note_sent(crawler: Crawler, request: Request) -> None:
    """``request`` is written now: the next of its host's reservation, and a
    chain's next URL, count their gaps from this."""
    ticket = ticket_of(request.meta)
    frontier = frontier_of(crawler)
    gate_pass = _gate_pass_of(request)
    if frontier is not None and gate_pass is not None:
        frontier.claims.started(gate_pass.host, time.monotonic())
    if ticket is not None and frontier is not None:
        ticket.sent = time.monotonic()
        host = frontier.host_of(ticket.token)
        if host is not None:
            frontier.claims.started(host, ticket.sent)


def turn_is_stale(request: Request) -> bool:
    """Whether the start turn ``request`` holds ran out (``Ticket.start_by``).

    Between the gate and the socket a worker's reactor can stall (a burst of
    parsing, a freshly started worker loading its seeds, a starved CPU) for
    tenths of a second, long enough for its request to leave right before
    another worker's on-time request to the same host. The
    download handler asks this once the connection is ready, the last moment
    before the request's bytes are written, and a stale turn passes the gate
    again (:func:`pass_gate`).
    """
    gate_pass = _gate_pass_of(request)
    if gate_pass is not None:
        return gate_pass.turn is not None and time.monotonic() > gate_pass.start_by
    ticket = ticket_of(request.meta)
    return ticket is not None and ticket.start_by is not None and not _fresh(ticket)


def _fresh(ticket: Ticket) -> bool:
    """Whether the request's last pass of the gate (its claim, or ``lua/start.lua``)
    still stands."""
    return ticket.start_by is not None and time.monotonic() <= ticket.start_by


def give_back_stale(crawler: Crawler, request: Request) -> NoReturn:
    """A request whose turn went stale after every pass of the gate (a reactor
    stalling again and again) goes back to its queue rather than out late."""
    if _gate_pass_of(request) is not None:  # (a robots.txt fetch: tried again later)
        raise IgnoreRequest("not started: its turn went stale again and again")
    ticket = ticket_of(request.meta)
    frontier = frontier_of(crawler)
    # (only a request the frontier gated has a turn to go stale)
    assert ticket is not None and frontier is not None
    _give_back(frontier, ticket, "stale", "its turn went stale again and again")


def _give_back(frontier: WorkerFrontier, ticket: Ticket, stat: str, why: str,
               delay_ms: int | None = None) -> NoReturn:
    """End the lease without a download: delayed by ``delay_ms``, or back to its queue."""
    frontier.stats.inc_value(f"frontier/pacing/given_back/{stat}")
    _free_address(frontier, ticket)
    if delay_ms is None:
        ticket.give_back()
    else:
        ticket.retry_after(delay_ms)
    raise IgnoreRequest(f"not started: {why}")
