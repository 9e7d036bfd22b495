"""Workers' heartbeats, and the one rule that says whether a worker is alive.

Each worker writes a :class:`Heartbeat` under its id in ``ns:workers``
(:meth:`crawler.frontier.keys.Keys.workers`) every :func:`beat_interval`,
a third of its lease, when it also renews its leases. Everything that asks
whether a worker is still there reads it with :meth:`Heartbeat.parse` and
judges it with :meth:`Heartbeat.alive`: ``scrapy frontier status`` and
``crawls`` (and ``delete``, which refuses a crawl with live workers), the
metrics' reporter election, and a seed feed taking back a gone worker's batch.

The rule: **a worker is alive while its last beat is younger than three beat
intervals (one lease), and never less than** :data:`ALIVE_FLOOR_SECONDS`.
Three missed beats is what an operator reads as "gone", and it is also when
the worker's unrenewed leases run out and its URLs go to other workers. The
floor keeps very short leases (tests, a few seconds) from flapping: beats are
late by a reactor stall or a slow Redis, and ``seen`` is the worker's clock
compared with the reader's.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any, Final

#: Heartbeats per lease: each renews the worker's leases, so two may fail in a row.
BEATS_PER_LEASE: Final = 3
#: Beats missed before a worker counts as gone.
MISSED_BEATS: Final = 3
#: However short the lease, a worker silent for less than this is alive.
ALIVE_FLOOR_SECONDS: Final = 10.0
#: The beat interval has a floor too: tiny leases must not hammer Redis.
MIN_BEAT_SECONDS: Final = 0.2
#: FRONTIER_LEASE_SECONDS's default, for a beat that does not say its lease.
DEFAULT_LEASE_SECONDS: Final = 60.0


def beat_interval(lease_seconds: float) -> float:
    """Seconds between a worker's heartbeats: a third of its lease."""
    return max(lease_seconds / BEATS_PER_LEASE, MIN_BEAT_SECONDS)


def alive_window(lease_seconds: float) -> float:
    """How long a worker may stay silent and still be alive (see the module docstring)."""
    return max(MISSED_BEATS * beat_interval(lease_seconds), ALIVE_FLOOR_SECONDS)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """What a worker says about itself in ``ns:workers`` (a JSON object)."""

    seen: float  # epoch seconds on the worker's clock
    held: int | None = None  # leases it holds
    pid: int | None = None
    host: str | None = None  # the machine
    lease: float | None = None  # its FRONTIER_LEASE_SECONDS; None from older workers
    #: Answers a second it received since its previous beat (None: not yet known).
    rate: float | None = None
    #: Why it claims nothing now (its disk is full, say); None: it claims.
    paused: str | None = None

    def to_json(self) -> str:
        """The wire form; fields that are ``None`` are left out."""
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None})

    @classmethod
    def parse(cls, raw: bytes | str | None) -> Heartbeat | None:
        """A stored heartbeat, or ``None`` if it is missing or unreadable (no ``seen``).

        Optional fields of the wrong type read as ``None``: one odd field must
        not hide a worker from the operator.
        """
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            seen = float(data["seen"])
        except (ValueError, KeyError, TypeError):
            return None
        if not math.isfinite(seen):
            return None
        host, paused = data.get("host"), data.get("paused")
        lease = _number(data.get("lease"))
        rate = _number(data.get("rate"))
        return cls(seen, _int(data.get("held")), _int(data.get("pid")),
                   host if isinstance(host, str) else None,
                   lease if lease is not None and lease > 0 else None,
                   rate if rate is not None and rate >= 0 else None,
                   paused if isinstance(paused, str) and paused else None)

    def age(self, now: float) -> float:
        """Seconds since the beat (0 if the worker's clock is ahead of ``now``)."""
        return max(0.0, now - self.seen)

    def alive(self, now: float, lease_seconds: float = DEFAULT_LEASE_SECONDS) -> bool:
        """Whether the worker is alive at ``now``: judged by the lease the beat states,
        else by ``lease_seconds`` (the reader's FRONTIER_LEASE_SECONDS)."""
        return self.age(now) < alive_window(self.lease or lease_seconds)


def is_alive(raw: bytes | str | None, now: float,
             lease_seconds: float = DEFAULT_LEASE_SECONDS) -> bool:
    """Whether a stored heartbeat says its worker is alive (unreadable: not alive)."""
    beat = Heartbeat.parse(raw)
    return beat is not None and beat.alive(now, lease_seconds)


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
