"""The last hour of a crawl, as the console samples it, and its small charts.

The frontier keeps counts, not their history; Prometheus keeps history but
may not be there. The console samples the counts itself (one pipelined
round trip, as the metrics' reporter does) every few seconds and keeps an
hour of them in memory: enough for a chart of pages a second, queue depth
and dead letters a minute. The history starts when the console does.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

#: Seconds of history kept.
SPAN_S = 3600.0


@dataclass(frozen=True, slots=True)
class Sample:
    """The frontier's counts at one moment."""

    at: float  # Unix seconds
    done: int
    queued: int
    dead: int


class History:
    """Samples of the last :data:`SPAN_S` seconds; safe to share between threads."""

    def __init__(self, span_s: float = SPAN_S) -> None:
        self.span_s = span_s
        self._samples: deque[Sample] = deque()
        self._lock = threading.Lock()

    def add(self, counts: dict[str, int], at: float | None = None) -> None:
        sample = Sample(time.time() if at is None else at, counts.get("done", 0),
                        counts.get("queued", 0), counts.get("dead", 0))
        with self._lock:
            self._samples.append(sample)
            while self._samples and self._samples[0].at < sample.at - self.span_s:
                self._samples.popleft()

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)

    def series(self) -> dict[str, list[tuple[float, float]]]:
        """``pages_per_s``, ``queued`` and ``dead_per_min``: (time, value) points."""
        samples = self.samples()
        rates: dict[str, list[tuple[float, float]]] = {"pages_per_s": [], "dead_per_min": []}
        for before, after in itertools.pairwise(samples):
            span = after.at - before.at
            if span <= 0:
                continue
            rates["pages_per_s"].append((after.at, max(after.done - before.done, 0) / span))
            rates["dead_per_min"].append((after.at,
                                          max(after.dead - before.dead, 0) * 60 / span))
        return {"pages_per_s": rates["pages_per_s"],
                "queued": [(s.at, float(s.queued)) for s in samples],
                "dead_per_min": rates["dead_per_min"]}

    def as_dict(self) -> dict[str, Any]:
        return {name: [[round(t, 1), round(v, 3)] for t, v in points]
                for name, points in self.series().items()}


def sparkline(points: Sequence[tuple[float, float]], width: int = 240, height: int = 48,
              label: str = "") -> str:
    """A small SVG line chart of ``points`` (time, value), its last value as a title.

    Inline SVG, drawn on the server: no script, nothing to build, and it prints.
    """
    if len(points) < 2:
        return (f'<svg class="spark" width="{width}" height="{height}" role="img" '
                f'aria-label="{escape(label)}: not enough samples yet">'
                f'<text x="4" y="{height // 2}">collecting…</text></svg>')
    t0, t1 = points[0][0], points[-1][0]
    top = max(v for _, v in points) or 1.0
    span = (t1 - t0) or 1.0
    coords = " ".join(
        f"{(t - t0) / span * (width - 2) + 1:.1f},{height - 1 - v / top * (height - 2):.1f}"
        for t, v in points)
    last = points[-1][1]
    return (f'<svg class="spark" width="{width}" height="{height}" role="img" '
            f'aria-label="{escape(label)}: now {last:.3g}, at most {top:.3g}">'
            f'<polyline fill="none" stroke="currentColor" stroke-width="1.5" '
            f'points="{coords}"/></svg>')
