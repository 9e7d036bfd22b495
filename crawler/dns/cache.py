"""The crawl resolver's answer cache: by name, for a clamped TTL, least recently used first out."""

from __future__ import annotations

import time
from collections import OrderedDict

from crawler.dns.answers import Answer


class AnswerCache:
    """Answers by name for their TTL (clamped), the ``size`` most recently used.

    A floor, because a broad crawl asks for each of its hosts' names again and
    again and some names come with TTLs of a few seconds; a ceiling, because a
    crawl runs for days and a host that moved should be followed within it.
    Answers without a TTL (the system's resolver) are kept for the floor.
    """

    def __init__(self, size: int, min_ttl: float, max_ttl: float) -> None:
        self.size = size
        self.min_ttl = min_ttl
        self.max_ttl = max(max_ttl, min_ttl)
        self._entries: OrderedDict[str, tuple[float, tuple[str, ...]]] = OrderedDict()

    def get(self, name: str) -> tuple[str, ...] | None:
        entry = self._entries.get(name)
        if entry is None:
            return None
        if entry[0] <= time.monotonic():
            del self._entries[name]
            return None
        self._entries.move_to_end(name)
        return entry[1]

    def remaining(self, name: str) -> float:
        """Seconds the answer for ``name`` is kept still (0: none cached)."""
        entry = self._entries.get(name)
        return max(entry[0] - time.monotonic(), 0.0) if entry is not None else 0.0

    def put(self, name: str, answer: Answer) -> None:
        ttl = self.min_ttl if answer.ttl is None else answer.ttl
        ttl = min(max(ttl, self.min_ttl), self.max_ttl)
        if self.size <= 0 or ttl <= 0:
            return
        self._entries[name] = (time.monotonic() + ttl, answer.addresses)
        self._entries.move_to_end(name)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


__all__ = ["AnswerCache"]
