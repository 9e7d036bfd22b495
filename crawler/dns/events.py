"""Lookup events: what the crawl resolver reports, and the process-wide hub it reports to."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LookupEvent:
    """One lookup: its name, result (:data:`~crawler.dns.failures.RESULTS`, or
    "cached" for a cache hit), time and rounds."""

    name: str
    result: str
    seconds: float
    rounds: int = 1  # 2: an NXDOMAIN or no-address answer was asked again
    refused: int = 0  # addresses the address guard dropped


class LookupRecorder:
    """The process's lookups, for whoever counts them (each crawl's DNS middleware).

    The resolver exists before any crawl and outlives it, so it cannot hold a
    crawl's stats; crawls subscribe here instead. A listener that raises is
    logged, never breaks a lookup.
    """

    def __init__(self) -> None:
        self._listeners: list[Callable[[LookupEvent], None]] = []

    def subscribe(self, listener: Callable[[LookupEvent], None]) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[LookupEvent], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def record(self, event: LookupEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                logger.exception("DNS: a lookup listener failed")


#: The process-wide recorder the crawl resolver reports to.
RECORDER = LookupRecorder()


__all__ = ["RECORDER", "LookupEvent", "LookupRecorder"]
