"""Extension: how late the reactor runs, and when it stalled.

Politeness is decided in Redis but carried out by the reactor: a request
passes the frontier's start gate, and its bytes leave a reactor turn or two
later. When the reactor is busy (a burst of large pages to parse, a freshly
started worker queueing its seeds, cores taken by other processes) "a turn
or two" becomes tenths of a second, and so does every other timer: download
timeouts, lease heartbeats, the WARC writer's hand-offs. An operator needs to
see that, and the chaos soak needs to know *when* it happened to tell a
crawler stall from a slow server.

A timer that should fire every ``LOOPLAG_INTERVAL`` seconds measures how late
it fires. Stats: ``reactor/lag_max`` (seconds, the worst so far) and
``reactor/stalls`` (times it was late by more than ``LOOPLAG_STALL``); a stall
of ``LOOPLAG_LOG`` seconds or more is logged with the wall-clock window it
fell in (the reactor was free at the window's start and ran again at its
end).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import NotConfigured
from twisted.internet import task

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class ReactorLag:
    """Sample the reactor's lateness; count and log its stalls."""

    def __init__(self, crawler: Crawler, interval: float, stall: float, log_over: float) -> None:
        self.stats = crawler.stats
        self.interval = interval
        self.stall = stall
        self.log_over = log_over
        self._loop: task.LoopingCall | None = None
        self._last = 0.0  # monotonic time of the previous tick
        self._last_wall = 0.0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        interval = settings.getfloat("LOOPLAG_INTERVAL")
        if interval <= 0:
            raise NotConfigured("LOOPLAG_INTERVAL is 0")
        ext = cls(crawler, interval, settings.getfloat("LOOPLAG_STALL"),
                  settings.getfloat("LOOPLAG_LOG"))
        crawler.signals.connect(ext.engine_started, signal=signals.engine_started)
        crawler.signals.connect(ext.engine_stopped, signal=signals.engine_stopped)
        return ext

    def engine_started(self) -> None:
        self._last, self._last_wall = time.monotonic(), time.time()
        self.stats.set_value("reactor/lag_max", 0.0)
        self._loop = task.LoopingCall(self.tick)
        self._loop.start(self.interval, now=False)

    def engine_stopped(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    def tick(self) -> None:
        """One timer firing: how much later than due it ran."""
        now, wall = time.monotonic(), time.time()
        late = now - self._last - self.interval
        if late > 0:
            self.stats.max_value("reactor/lag_max", round(late, 3))
            if late >= self.stall:
                self.stats.inc_value("reactor/stalls")
            if late >= self.log_over:
                logger.warning("Reactor stalled %.3f s (free at %.3f, ran again at %.3f)",
                               late, self._last_wall, wall)
        self._last, self._last_wall = now, wall
