"""The leases a worker holds, and how each one ends.

A claimed URL's lease is released exactly once, when the engine is done with
the request it became (its response parsed and its links queued, or its
failure handled): ``done``, ``dead``, ``retry`` (the same URL again, delayed)
or ``return``. The components between the engine and the downloader decide
through the request's :class:`crawler.lease.Ticket`; :meth:`LeaseTable.finished`
carries out its verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scrapy import Request

from crawler.frontier.store import Lease, Limits, Release
from crawler.lease import Ticket, Verdict, ticket_of
from crawler.scheduling.revisits import Revisits

#: Builds the record of a retried request ("" keeps the stored one).
RecordAgain = Callable[[Request, Lease], str]


class LeaseTable:
    """This worker's leases by token, each with the identity of the URL sent."""

    def __init__(self, stats: Any, limits: Limits, record_again: RecordAgain) -> None:
        self.stats = stats
        self.limits = limits
        self.record_again = record_again
        #: The revisit schedule (None: a done URL is never fetched again).
        self.revisits: Revisits | None = None
        self.held: dict[str, tuple[Lease, str | None]] = {}
        # Tokens whose lease already ended as a retry: the request that
        # retried them still reaches the engine's end once.
        self.transferred: set[str] = set()

    def __len__(self) -> int:
        return len(self.held)

    def add(self, lease: Lease, canonical: str | None) -> None:
        self.held[lease.token] = (lease, canonical)

    def host_of(self, token: str) -> str | None:
        """The host key of a lease this worker holds."""
        held = self.held.get(token)
        return held[0].host if held else None

    def leases(self) -> list[Lease]:
        return [lease for lease, _ in self.held.values()]

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

    def finished(self, request: Request) -> Release | None:
        """The release of a request the engine is done with (None: not ours to end)."""
        ticket = ticket_of(request.meta)
        if ticket is None:
            return None
        if ticket.token in self.transferred:
            self.transferred.discard(ticket.token)
            return None
        held = self.held.pop(ticket.token, None)
        return None if held is None else self.release_of(request, held[0], ticket)

    def return_all(self) -> list[Release]:
        """Every lease still held goes back to its queue (the worker is closing)."""
        returned = [Release(lease.host, lease.fingerprint, "return") for lease in self.leases()]
        self.held.clear()
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
        return Release(lease.host, lease.fingerprint, op, verdict.arg, record,
                       verdict.hold_ms, verdict.health,
                       round(latency * 1000) if isinstance(latency, float | int) else 0,
                       revisit_ms)
