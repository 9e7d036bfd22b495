"""How long this worker's claimed requests take to reach the start gate.

A claim is its URL's start turn for a window the worker names
(``lua/claim.lua``): the site's next start is moved that much later, so a
window is politeness paid for in time, and a request that comes after its
window asks the start gate in Redis instead (``middlewares/pacing.py``). The
right window is what this worker's requests take from the claim to the gate:
a few milliseconds on an idle worker, a tenth of a second on a saturated
reactor. This keeps the recent ones and names a high percentile of them.
"""

from __future__ import annotations

import math
from collections import deque

from crawler.frontier.values import START_WINDOW_MS

#: The least window (ms) a pass of the start gate asks for: the time from its
#: answer to the socket (a reactor turn, a connection from the pool).
GATE_LEAST_MS = 50


class StartWindow:
    """The start window (ms) a claim should ask for, from what requests took lately."""

    #: Never shorter (a request takes a reactor turn or two) nor longer (each
    #: paced gap grows by the window).
    LEAST_MS = 10
    MOST_MS = 200

    def __init__(self, *, keep: int = 256, quantile: float = 0.95, every: int = 32) -> None:
        self._ages: deque[float] = deque(maxlen=keep)
        self._quantile = quantile
        self._every = every
        self._since = 0
        self.ms = START_WINDOW_MS

    def observe(self, seconds: float) -> None:
        """A request reached the gate ``seconds`` after its claim was asked."""
        self._ages.append(seconds)
        self._since += 1
        if self._since >= self._every:
            self._since = 0
            ages = sorted(self._ages)
            ms = math.ceil(ages[min(len(ages) - 1, int(self._quantile * len(ages)))] * 1000)
            self.ms = min(max(ms, self.LEAST_MS), self.MOST_MS)

    @property
    def gate_ms(self) -> int:
        """The window a pass of the start gate asks for (``lua/start.lua``)."""
        return max(self.ms, GATE_LEAST_MS)
