"""The leases a worker holds, and how each one ends.

A claimed URL's lease is released exactly once, when the engine is done with
the request it became (its response parsed and its links queued, or its
failure handled): ``done``, ``dead``, ``retry`` (the same URL again, delayed)
or ``return``. The components between the engine and the downloader decide
through the request's :class:`crawler.lease.Ticket`; :meth:`LeaseTable.finished`
carries out its verdict.

A page is done only once the archive wrote its records: a request whose
ticket carries the archive's promises (:meth:`crawler.lease.Ticket.archiving`)
keeps its lease (renewed by the heartbeat, given back if the worker closes)
until every promise has come true. A record that could not be written turns
``done`` or ``dead`` into a plain delayed retry (:data:`UNARCHIVED_RETRY_MS`,
the host's health untouched, its retries not counted): the page is fetched
again, by this worker once its disk has room or by another one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scrapy import Request
from twisted.python.failure import Failure

from crawler.deadletter import DeadReason
from crawler.frontier.values import Lease, Limits, Release
from crawler.lease import Ticket, Verdict, ticket_of
from crawler.scheduling.revisits import Revisits

#: Builds the record of a retried request ("" keeps the stored one).
RecordAgain = Callable[[Request, Lease], str]
#: Sends a release (the scheduler's batching sync).
Send = Callable[[Release], None]
#: How long a page whose records could not be written waits before it is
#: fetched again: long enough for the disk guard to have paused this worker
#: (it looks every second), short enough that a finite crawl waits for it
#: (well within FRONTIER_HELD_WAIT) and a worker with room takes it soon.
UNARCHIVED_RETRY_MS = 5_000


class LeaseTable:
    """This worker's leases by token, each with the identity of the URL sent."""

    def __init__(self, stats: Any, limits: Limits, record_again: RecordAgain,
                 note_refused: Callable[[str, str], None] | None = None) -> None:
        self.stats = stats
        self.limits = limits
        self.record_again = record_again
        #: Told (reason, URL) of each URL refused at its lease, for the
        #: frontier's examples (``scrapy frontier refused``).
        self.note_refused = note_refused
        #: The revisit schedule (None: a done URL is never fetched again).
        self.revisits: Revisits | None = None
        self.held: dict[str, tuple[Lease, str | None]] = {}
        #: Leases of requests the engine is done with, waiting for the archive.
        self.archiving: dict[str, Lease] = {}
        # Tokens whose lease already ended as a retry: the request that
        # retried them still reaches the engine's end once.
        self.transferred: set[str] = set()

    def __len__(self) -> int:
        return len(self.held) + len(self.archiving)

    def add(self, lease: Lease, canonical: str | None) -> None:
        self.held[lease.token] = (lease, canonical)

    def host_of(self, token: str) -> str | None:
        """The host key of a lease this worker holds."""
        lease = self.lease_of(token)
        return lease.host if lease else None

    def lease_of(self, token: str) -> Lease | None:
        """A lease this worker holds, by its token."""
        held = self.held.get(token)
        return held[0] if held else None

    def leases(self) -> list[Lease]:
        return [lease for lease, _ in self.held.values()] + list(self.archiving.values())

    def is_retry(self, token: str, canonical: str | None) -> bool:
        """Whether an enqueued request is the same URL as the lease it carries."""
        return token in self.held and self.held[token][1] == canonical

    def retry(self, request: Request, token: str) -> Release:
        """The lease of a retried request ends as delayed by the host's delay."""
        lease, _ = self.held.pop(token)
        self.transferred.add(token)
        self.stats.inc_value("frontier/leases/retried")
        return Release(lease.host, lease.fingerprint, "retry", str(self.limits.delay_ms),
                       self.record_again(request, lease))

    def finished(self, request: Request, send: Send) -> None:
        """Send the release of a request the engine is done with, once the
        archive has its records (nothing: not ours to end)."""
        ticket = ticket_of(request.meta)
        if ticket is None:
            return
        if ticket.token in self.transferred:
            self.transferred.discard(ticket.token)
            return
        held = self.held.pop(ticket.token, None)
        if held is None:
            return
        if not ticket.records:
            send(self.release_of(request, held[0], ticket))
            return
        self.archiving[ticket.token] = held[0]
        outcomes: list[Any] = []

        def one(outcome: Any) -> Any:
            outcomes.append(outcome)
            if len(outcomes) == len(ticket.records):
                self._archived(outcomes, request, ticket, send)
            return outcome

        # Runs at once for a record written already (the usual case: the WARC
        # pipeline waited for the page's record before the engine let the
        # request go). Not a DeferredList: this is every page's path.
        for record in ticket.records:
            record.addBoth(one)

    def _archived(self, outcomes: list[Any], request: Request, ticket: Ticket,
                  send: Send) -> None:
        lease = self.archiving.pop(ticket.token, None)
        if lease is None:  # given back meanwhile: the worker is closing
            return
        unwritten = any(isinstance(outcome, BaseException | Failure) for outcome in outcomes)
        if unwritten and ticket.ending().op in ("done", "dead"):
            self.stats.inc_value("frontier/leases/unarchived")
            send(Release(lease.host, lease.fingerprint, "retry", str(UNARCHIVED_RETRY_MS)))
            return
        send(self.release_of(request, lease, ticket))

    def give_back(self, tokens: list[str]) -> list[Release]:
        """The leases of claimed requests not started yet go back to their queues."""
        returned = []
        for token in tokens:
            held = self.held.pop(token, None)
            if held is not None:
                returned.append(Release(held[0].host, held[0].fingerprint, "return"))
        self.stats.inc_value("frontier/leases/returned", len(returned))
        return returned

    def return_all(self) -> list[Release]:
        """Every lease still held goes back to its queue (the worker is closing)."""
        returned = [Release(lease.host, lease.fingerprint, "return") for lease in self.leases()]
        self.held.clear()
        self.archiving.clear()
        return returned

    def release_of(self, request: Request, lease: Lease, ticket: Ticket) -> Release:
        """The release that carries out a finished request's verdict."""
        verdict: Verdict = ticket.ending()
        op = verdict.op
        self.stats.inc_value(f"frontier/leases/{'retried' if op == 'retry' else op}")
        latency = request.meta.get("download_latency")  # set when the answer's head came
        record, revisit_ms = "", 0
        if op == "retry":
            record = self.record_again(request, lease)
        elif op == "done" and self.revisits is not None:
            record, revisit_ms = self.revisits.release(lease.record, ticket)
        if op == "dead":
            self.stats.inc_value(f"frontier/dead/{DeadReason.parse(verdict.arg).reason}")
        elif op == "refused" and self.note_refused is not None:
            # (counted by its own stats: robots/denied, learned/dropped/...)
            self.note_refused(verdict.arg, request.url)
        return Release(lease.host, lease.fingerprint, op, verdict.arg, record,
                       verdict.hold_ms, verdict.health,
                       round(latency * 1000) if isinstance(latency, float | int) else 0,
                       revisit_ms, ticket.size, verdict.unsent)
