"""Pure analysis of the server's request ledger (a list of dicts).

Entries look like ``{"id", "host", "path", "method", "arrival", "done",
"status", "bytes", "outcome", "conn", "user_agent", "client"}``; ``done`` is None while
a request is still open (e.g. a hang the client has not given up on).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from itertools import pairwise
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model import Web

Entry = Mapping[str, Any]

ROBOTS_PATH = "/robots.txt"
ROBOTS_HOP_PREFIX = "/robots-hop/"


def is_robots_path(path: str) -> bool:
    """robots.txt itself or a hop of a robots redirect chain."""
    path = path.split("?", 1)[0]
    return path == ROBOTS_PATH or path.startswith(ROBOTS_HOP_PREFIX)


class Ledger:
    """Queries over ledger entries, for politeness and correctness checks."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.entries: list[Entry] = list(entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    def hosts(self) -> set[str]:
        return {e["host"] for e in self.entries}

    def for_host(self, host: str) -> list[Entry]:
        return [e for e in self.entries if e["host"] == host]

    def count(self, host: str, path: str) -> int:
        """Requests for exactly ``path`` (as received) on ``host``."""
        return sum(1 for e in self.entries if e["host"] == host and e["path"] == path)

    def page_requests(self, host: str) -> list[Entry]:
        """Requests to ``host`` other than robots.txt (and its redirect hops), by arrival."""
        return sorted((e for e in self.for_host(host) if not is_robots_path(e["path"])),
                      key=lambda e: e["arrival"])

    def robots_fetches(self, host: str) -> list[Entry]:
        return [e for e in self.for_host(host) if e["path"] == ROBOTS_PATH]

    def pages(self, web: Web) -> Counter[tuple[str, str]]:
        """Fetch count per page identity, robots requests excluded."""
        return Counter(
            web.page_identity(e["host"], e["path"])
            for e in self.entries
            if not is_robots_path(e["path"])
        )

    def latest_time(self) -> float:
        """The latest arrival or completion time anywhere in the ledger."""
        times = [e["arrival"] for e in self.entries]
        times += [e["done"] for e in self.entries if e["done"] is not None]
        return max(times, default=0.0)

    def max_in_flight(self, host: str) -> int:
        """Most requests to ``host`` open at the same moment.

        A request is open over ``[arrival, done)``; still-open ones count
        until ``latest_time()``.  A request ending exactly when another
        starts does not overlap it.
        """
        end_of_time = self.latest_time()
        events: list[tuple[float, int]] = []
        for e in self.for_host(host):
            done = e["done"] if e["done"] is not None else end_of_time
            events.append((e["arrival"], 1))
            events.append((max(done, e["arrival"]), -1))
        events.sort()  # at equal times -1 sorts first: end before start
        best = current = 0
        for _, delta in events:
            current += delta
            best = max(best, current)
        return best

    def gaps(self, host: str, *, pages_only: bool = False) -> list[float]:
        """Times between successive arrivals at ``host`` (robots.txt fetches
        left out with ``pages_only``)."""
        arrivals = sorted(e["arrival"] for e in self.for_host(host)
                          if not (pages_only and is_robots_path(e["path"])))
        return [b - a for a, b in pairwise(arrivals)]

    def min_gap(self, host: str, *, pages_only: bool = False) -> float | None:
        """Smallest time between successive arrivals at ``host``."""
        return min(self.gaps(host, pages_only=pages_only), default=None)

    def disallowed_fetches(self, web: Web, user_agent: str = "*") -> list[Entry]:
        """Requests robots.txt (model ground truth) did not allow."""
        return [
            e
            for e in self.entries
            if not is_robots_path(e["path"])
            and web.host(e["host"]) is not None
            and not web.allowed(e["host"], web.page_identity(e["host"], e["path"])[1], user_agent)
        ]
