"""A bench-only extension: how late the reactor runs, on either side of a comparison.

The project's own ``ReactorLag`` keeps only the worst lateness; a benchmark
comparing it with a vanilla spider needs the same probe on both sides and the
whole distribution. A timer due every ``BENCH_LAG_INTERVAL`` seconds (10 ms)
notes how late it fired; at close the percentiles go to ``BENCH_LAG_FILE``
(JSON). Loaded with ``-s EXTENSIONS={"bench.lagprobe.LagProbe": 0}``; it uses
nothing of the project, so the vanilla spider stays vanilla.
"""

from __future__ import annotations

import json
import time
from typing import Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from twisted.internet import task


class LagProbe:
    def __init__(self, path: str, interval: float) -> None:
        self.path = path
        self.interval = interval
        self.late: list[float] = []
        self._due = 0.0
        self._call = task.LoopingCall(self._tick)

    @classmethod
    def from_crawler(cls, crawler: Any) -> LagProbe:
        path = crawler.settings.get("BENCH_LAG_FILE")
        if not path:
            raise NotConfigured
        probe = cls(path, crawler.settings.getfloat("BENCH_LAG_INTERVAL", 0.01))
        crawler.signals.connect(probe.opened, signal=signals.spider_opened)
        crawler.signals.connect(probe.closed, signal=signals.spider_closed)
        return probe

    def opened(self, spider: Any) -> None:
        self._due = time.monotonic()
        self._call.start(self.interval, now=True)

    def _tick(self) -> None:
        now = time.monotonic()
        self.late.append(max(0.0, now - self._due))
        self._due = now + self.interval

    def closed(self, spider: Any, reason: str) -> None:
        if self._call.running:
            self._call.stop()
        late = sorted(self.late) or [0.0]

        def pct(p: float) -> float:
            return late[min(len(late) - 1, int(p * len(late)))]

        with open(self.path, "w", encoding="utf-8") as out:
            json.dump({"samples": len(late), "p50": pct(0.5), "p99": pct(0.99),
                       "max": late[-1]}, out)
