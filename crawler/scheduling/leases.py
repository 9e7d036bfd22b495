"""The leases a worker holds, and how each one ends.

A claimed URL's lease is released exactly once, when the engine is done with
the request it became (its response parsed and its links queued, or its
failure handled): ``done``, ``dead`` (a download error), ``retry`` (the same
URL again, delayed) or, on shutdown, ``return``. The components between the
engine and the downloader leave the why in the request's meta
(:mod:`crawler.lease`); :meth:`LeaseTable.release_of` reads it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from scrapy import Request

from crawler.frontier.store import Lease, Limits, Release
from crawler.lease import ERROR_META, LEASE_META, OUTCOME_META, REASON_META, ROBOTS_META

#: Builds the record of a retried request ("" keeps the stored one).
RecordAgain = Callable[[Request, Lease], str]


class LeaseTable:
    """This worker's leases by token, each with the identity of the URL sent."""

    def __init__(self, stats: Any, limits: Limits, record_again: RecordAgain) -> None:
        self.stats = stats
        self.limits = limits
        self.record_again = record_again
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

    def is_retry(self, token: str | None, canonical: str | None) -> bool:
        """Whether an enqueued request is the same URL as the lease it carries."""
        return token is not None and token in self.held and self.held[token][1] == canonical

    def retry(self, request: Request, token: str) -> Release:
        """The lease of a retried request ends as delayed by the host's delay."""
        lease, _ = self.held.pop(token)
        self.transferred.add(token)
        self.stats.inc_value("frontier/leases/retried")
        return Release(lease.host, lease.fingerprint, "retry", str(self.limits.delay_ms),
                       self.record_again(request, lease))

    def finished(self, request: Request) -> Release | None:
        """The release of a request the engine is done with (None: not ours to end)."""
        token = request.meta.get(LEASE_META)
        if token is None:
            return None
        if token in self.transferred:
            self.transferred.discard(token)
            return None
        held = self.held.pop(token, None)
        return None if held is None else self.release_of(request, held[0])

    def return_all(self) -> list[Release]:
        """Every lease still held goes back to its queue (the worker is closing)."""
        returned = [Release(lease.host, lease.fingerprint, "return") for lease in self.leases()]
        self.held.clear()
        return returned

    def release_of(self, request: Request, lease: Lease) -> Release:
        """How a finished request's lease ends (the middlewares left the why in its meta)."""
        meta = request.meta
        robots = meta.get(ROBOTS_META)
        if robots == "denied" or meta.get(REASON_META):
            self.stats.inc_value("frontier/leases/done")
            return Release(lease.host, lease.fingerprint, "done",
                           "robots" if robots == "denied" else str(meta[REASON_META]))
        if robots is not None:  # rules missing: try again later
            self.stats.inc_value("frontier/leases/retried")
            return Release(lease.host, lease.fingerprint, "retry", str(self.limits.lease_ms))
        outcome = meta.get(OUTCOME_META)
        if outcome is not None:
            return self._outcome(request, lease, outcome)
        error = meta.get(ERROR_META)
        if error is not None:
            self.stats.inc_value("frontier/leases/dead")
            reason = json.dumps({"reason": "download-error", "error": error,
                                 "t": round(time.time())})
            return Release(lease.host, lease.fingerprint, "dead", reason)
        self.stats.inc_value("frontier/leases/done")
        return Release(lease.host, lease.fingerprint, "done", health="ok")

    def _outcome(self, request: Request, lease: Lease, outcome: dict[str, Any]) -> Release:
        op = outcome["op"]
        self.stats.inc_value(f"frontier/leases/{'retried' if op == 'retry' else op}")
        return Release(lease.host, lease.fingerprint, op, outcome.get("arg", ""),
                       self.record_again(request, lease) if op == "retry" else "",
                       outcome.get("hold_ms", 0), outcome.get("health", ""))
