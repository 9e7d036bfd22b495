"""Admissions sent again after Redis was away: what a failover may have lost.

Redis replicates asynchronously: a master that dies can take with it the
writes it acknowledged in its last moments, before its replica had them, and
the replica promoted in its place never saw them. A lost claim or release
costs a refetch (the URL is queued again, or its lease runs out); a lost
admission would cost the URL itself, because the page that found it is done
and nobody offers it again.

So a worker keeps what it admitted during the last ``FRONTIER_REPLAY_SECONDS``
and, when Redis answers again after failing, admits it again. Admitting is
idempotent (the seen set is written in the same script as the queue, so
both survive or neither does): what survived counts as a duplicate, what was
lost is queued again. The price is the memory of a few seconds of links,
and one more batch per outage instead of a ``WAIT`` on every write.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from crawler.frontier.values import Admission


class ReplayWindow:
    """The admissions sent in the last ``seconds`` (at most ``limit`` of them)."""

    def __init__(self, seconds: float, limit: int = 50_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.limit = limit
        self.clock = clock
        self._sent: deque[tuple[float, list[Admission]]] = deque()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def sent(self, admissions: list[Admission]) -> None:
        """``admissions`` are in Redis, as far as the master said."""
        if self.seconds <= 0 or not admissions:
            return
        now = self.clock()
        self._sent.append((now, admissions))
        self._count += len(admissions)
        self._trim(now)

    def take(self) -> list[Admission]:
        """Everything in the window, oldest first; the window is empty afterwards."""
        self._trim(self.clock())
        taken = [a for _, batch in self._sent for a in batch]
        self._sent.clear()
        self._count = 0
        return taken

    def _trim(self, now: float) -> None:
        oldest = now - self.seconds
        while self._sent and (self._sent[0][0] < oldest or self._count > self.limit):
            self._count -= len(self._sent.popleft()[1])
