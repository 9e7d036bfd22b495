"""The ticket a frontier request carries: its lease, and the word on how it ends.

The frontier scheduler puts a :class:`Ticket` in the meta of every request
it makes from a claimed URL (under :data:`TICKET_META`, the only meta key
the frontier uses). The components between the engine and the downloader
(robots, retry, DNS, the address guard, the start gate, the download-error
note) decide through the ticket's verbs; when the engine is done with the
request, the scheduler asks :meth:`Ticket.ending` and turns the answer into
the lease's release (:class:`crawler.scheduling.leases.LeaseTable`).

The ticket lives here, below every component that uses it, so that none
imports another (or the scheduler) to end a lease. Copies of a request
(Scrapy's redirects, a spider passing ``meta`` on) share the ticket object;
the scheduler takes it off a copy when the copy is enqueued, so only the
request that was claimed ends the lease.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from crawler.deadletter import DeadReason
from crawler.revisit import Refetch, RevisitState

#: The request meta key that holds a frontier request's :class:`Ticket`.
TICKET_META = "_frontier"
#: The request meta key that holds the :class:`GatePass` of a request the
#: frontier gated without a lease (a robots.txt fetch).
GATE_PASS_META = "_frontier_gate"


@dataclass(slots=True, eq=False)
class GatePass:
    """A pass of a site's start gate by a request that holds no lease (a
    robots.txt fetch, run as a frontier job): like a ticket's turn, it stands
    until ``start_by`` (monotonic), and a request that reaches its socket
    later passes the gate again, naming ``turn`` (the frontier's ``Turn``).
    ``turn`` None: nothing gated it (no delay anywhere), it never goes stale."""

    host: str
    turn: tuple[int, int, int] | None = None
    start_by: float = 0.0


class AddressPlace(NamedTuple):
    """A place at a server address's gate (the IP scope): the address, the turn
    the request got there (0: no delay in force), the gate's member for the
    place, when (monotonic) the gate granted it, and whether at most half the
    address's places were taken then (the place may be kept a moment for the
    worker's next request there: ``scheduling/ipplaces.py``)."""

    address: str
    turn: int
    member: str
    granted: float
    spare: bool = False


@dataclass(frozen=True, slots=True)
class Verdict:
    """How a lease ends: ``done`` (fetched), ``refused`` (not fetched, for good:
    ``arg`` is the reason), ``retry`` (``arg``: the delay in ms), ``dead``
    (``arg``: the DeadReason JSON), ``return`` (back to its queue, as if never
    claimed) or ``ipwait`` (back to its queue, its host parked until its
    server address has room; ``arg``: ``ADDRESS\\nwake ms\\nknown ms``).

    ``hold_ms`` pushes the host's next-allowed time back for every worker;
    ``health`` ("ok", "fail" or "" for no news) feeds its circuit breaker;
    ``unsent`` says that nothing was sent (a refusal before the download): it
    cost its server nothing, nor its site's page budget.
    """

    op: str
    arg: str = ""
    hold_ms: int = 0
    health: str = ""
    unsent: bool = False


#: A request that ran its course with no word from anyone.
FETCHED = Verdict("done", health="ok")


@dataclass(slots=True, eq=False)
class Ticket:
    """One claimed URL's lease, as the request made from it carries it."""

    token: str  # the lease's token (the claimed URL's fingerprint, hex)
    robots_version: int = 0  # of the host's robots rules when the URL was claimed
    #: When the claim that leased it was asked (monotonic): its start turn's
    #: window counts from then.
    claimed: float = field(default_factory=time.monotonic)
    #: The latest moment (monotonic) the request may be sent on the start turn
    #: it holds (its claim's, or a pass of the start gate): later, it passes
    #: the gate again (the handler asks, once the connection is ready).
    start_by: float | None = None
    #: When its bytes were written (monotonic; None: not sent).
    sent: float | None = None
    #: Claimed ahead of its turn (a reservation's later URL): it waited for
    #: its turn in its worker, not for its claim.
    ahead: bool = False
    #: A URL of a reservation spaced by offsets: the last moment any of its
    #: URLs may start (monotonic), and the least gap between two of them (s).
    #: Late past its own turn but before this, it may still start on its
    #: worker's word (its site is the worker's until then).
    deadline: float | None = None
    least_s: float = 0.0
    #: When the next URL of its reservation is due (None: it is the last).
    next_due: float | None = None
    #: The turns (the frontier's ``Turn``: site and domain gate times, Redis
    #: ms) that pass set: a stale turn's second pass names them, and starts at
    #: once if no other request of the site or domain started since.
    gate_turn: tuple[int, int, int] | None = None
    #: The place at its server address's gate (the IP scope) the request
    #: holds; given back (or kept for the worker's next request there) when
    #: the download ends.
    ip_turn: AddressPlace | None = None
    #: What the URL remembers from its last fetch (None: its first fetch, or
    #: revisits are off); the conditional request is made from it.
    revisit: RevisitState | None = None
    #: What this fetch found (payload digest, validator, a 304), for the revisit
    #: schedule; None when nothing was downloaded.
    refetch: Refetch | None = None
    verdict: Verdict | None = None
    #: The type name of the download error the request met, if any.
    error: str | None = None
    #: The bytes of the bodies its answers brought, redirects included (its
    #: site's byte budget).
    size: int = 0
    #: The archive's promises for the answers to this request (its redirect
    #: hops included): Deferreds the WARC writer fires with where each record
    #: went, or with the exception that kept it out. A page counts as done
    #: only once every one of them has come true (see
    #: :mod:`crawler.scheduling.leases`).
    records: list[Any] = field(default_factory=list)
    #: An answer came (its head and body): the URL was fetched.
    answered: bool = False
    #: What an ``IgnoreRequest`` that no component explained said (None: none).
    ignored: str | None = None
    #: The verdict is final (a refusal, a block, a cut download): no later word changes it.
    _final: bool = False

    # -- verbs, one per way a policy can end the lease ----------------------------

    def refuse(self, reason: str) -> None:
        """Not fetched, for good, and never sent: robots.txt disallows it, or a
        rule the crawl learned (a trap, a duplicate variant). The frontier
        counts it by ``reason`` (``scrapy frontier refused``), never as done.

        A refusal is final: what other components say about the request
        afterwards (the exception it raised passing through them) does not
        change it.
        """
        self._settle(Verdict("refused", reason, unsent=True))

    def block(self, why: DeadReason) -> None:
        """Not fetched, and never sent, for a reason that the crawl's settings
        or the world may change (the address guard): a dead letter that
        ``scrapy frontier requeue --reason`` brings back. Final, as
        :meth:`refuse`."""
        self._settle(Verdict("dead", why.json(), unsent=True))

    def done(self, health: str = "") -> None:
        """Done: the answer is the spider's; ``health`` is the server's news."""
        self._decide(Verdict("done", health=health))

    def retry_after(self, ms: int, *, health: str = "", hold_ms: int = 0) -> None:
        """The same URL again in ``ms``, optionally holding its whole host."""
        self._decide(Verdict("retry", str(ms), hold_ms, health))

    def dead(self, why: DeadReason, *, health: str = "", hold_ms: int = 0) -> None:
        """A dead letter: the operator sees ``why`` and may requeue it."""
        self._decide(Verdict("dead", why.json(), hold_ms, health))

    def give_back(self) -> None:
        """Back to its queue untouched, as if it had never been claimed."""
        self._decide(Verdict("return"))

    def abandon(self) -> None:
        """Back to its queue untouched, for good: the crawl closed while it was in
        flight and its download was cut. No attempt is counted, and what other
        components say of the exception it raised does not change it."""
        self._settle(Verdict("return"))

    def wait_for_address(self, address: str, wake_ms: int, known_ms: int) -> None:
        """Back to its queue, its host parked until ``address`` (its server, known
        for ``known_ms`` more) has room, or ``wake_ms`` at the latest."""
        self._decide(Verdict("ipwait", f"{address}\n{wake_ms}\n{known_ms}"))

    def fetched(self, refetch: Refetch) -> None:
        """Note what the answer was (its digest and validator, or not modified)."""
        self.refetch = refetch

    def archiving(self, record: Any) -> None:
        """Note a record the archive promised to write (a Deferred of its outcome)."""
        self.records.append(record)

    def received(self, size: int) -> None:
        """Note an answer's body of ``size`` bytes, as it came off the wire."""
        self.answered = True
        self.size += size

    def failed(self, error: str) -> None:
        """Note a download error; without another verdict the URL dies of it."""
        self.error = error

    def ignored_by(self, message: str) -> None:
        """Note an ``IgnoreRequest``: without a verdict (a component of Scrapy's,
        or a user's, that knows nothing of tickets) and without an answer, the
        URL was not fetched, and dies of it with the message."""
        self.ignored = message

    # -- the scheduler's side ----------------------------------------------------

    def ending(self) -> Verdict:
        """How the lease ends, once the engine is done with the request."""
        if self.verdict is not None:
            return self.verdict
        if self.error is not None:
            return Verdict("dead", DeadReason.now("download-error", self.error).json())
        if self.ignored is not None and not self.answered:
            return Verdict("dead", DeadReason.now("ignored", self.ignored).json(),
                           unsent=self.sent is None)
        return FETCHED

    def _decide(self, verdict: Verdict) -> None:
        if not self._final:
            self.verdict = verdict

    def _settle(self, verdict: Verdict) -> None:
        self.verdict = verdict
        self._final = True


def ticket_of(meta: dict[str, object]) -> Ticket | None:
    """The ticket in a request's meta (None: the request is not from the frontier)."""
    ticket = meta.get(TICKET_META)
    return ticket if isinstance(ticket, Ticket) else None
