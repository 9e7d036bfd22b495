"""What the real-socket web saw: one record per request, and the questions tests ask of them.

Each record has the arrival time (``time.time()`` when the request head was
complete), the completion time (when the response was fully written; None
while it is still open), scheme, SNI name, Host header, the local address
and port it came in on, the remote address, the raw request-target bytes,
method, User-Agent, and ``in_flight``: how many requests to the same host
name (this one included) were open when it arrived.

"Host" below is the Host header's name without port, so a name's requests
are counted across schemes, ports and addresses (a dual-stack host's IPv4
and IPv6 requests together); "address" is the local address a request came
in on, which shared-hosting names have in common.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any


@dataclass(frozen=True)
class Request:
    """One request as the server saw it."""

    id: int
    conn: int
    arrival: float
    done: float | None
    scheme: str
    sni: str | None
    host_header: str | None
    host: str | None
    local_address: str
    local_port: int
    remote_address: str
    remote_port: int
    target: bytes
    method: str | None  # None: the request line could not be parsed (target = the line)
    version: str | None
    user_agent: str | None
    in_flight: int | None
    status: int | None
    body_bytes: int  # body bytes written
    served_by: str | None  # main name of the host that answered (None: 421 or bad request)
    outcome: str | None
    if_none_match: str | None = None  # the conditional headers it came with
    if_modified_since: str | None = None
    request_head: bytes | None = None  # the head as it arrived, byte for byte
    response_head: bytes | None = None  # the head as the server wrote it

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> Request:
        fields = dict(entry)
        fields["target"] = fields["target"].encode("latin-1")
        for name in ("request_head", "response_head"):
            if fields.get(name) is not None:
                fields[name] = fields[name].encode("latin-1")
        return cls(**fields)


def _max_overlap(requests: Iterable[Request], end_of_time: float) -> int:
    """Most of ``requests`` open at one moment, each open over ``[arrival, done)``;
    one still open counts until ``end_of_time``. One ending exactly when
    another starts does not overlap it."""
    events: list[tuple[float, int]] = []
    for r in requests:
        done = r.done if r.done is not None else end_of_time
        events += [(r.arrival, 1), (max(done, r.arrival), -1)]
    events.sort()  # at equal times -1 sorts first: an end before a start
    best = current = 0
    for _, delta in events:
        current += delta
        best = max(best, current)
    return best


def _gaps(requests: Iterable[Request]) -> list[float]:
    return [b - a for a, b in pairwise(sorted(r.arrival for r in requests))]


class Ledger:
    """Queries over the records, for politeness and correctness checks."""

    def __init__(self, entries: Iterable[Mapping[str, Any] | Request]) -> None:
        self.requests: list[Request] = [
            e if isinstance(e, Request) else Request.from_entry(e) for e in entries]

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[Request]:
        return iter(self.requests)

    def where(self, test: Callable[[Request], bool]) -> list[Request]:
        return [r for r in self.requests if test(r)]

    def hosts(self) -> set[str]:
        return {r.host for r in self.requests if r.host is not None}

    def for_host(self, name: str) -> list[Request]:
        """Requests whose Host header named ``name``, any scheme, port or address, by arrival."""
        name = name.lower().rstrip(".")
        return sorted(self.where(lambda r: r.host == name), key=lambda r: r.arrival)

    def at_address(self, address: str) -> list[Request]:
        """Requests that came in on local ``address``, any name or scheme, by arrival."""
        return sorted(self.where(lambda r: r.local_address == address), key=lambda r: r.arrival)

    def targets(self, name: str) -> list[bytes]:
        """The raw request-targets sent to ``name``, in arrival order."""
        return [r.target for r in self.for_host(name)]

    def count(self, name: str, target: bytes | str) -> int:
        """Requests for exactly ``target`` (str: its UTF-8 bytes) on ``name``."""
        raw = target if isinstance(target, bytes) else target.encode("utf-8")
        return sum(1 for r in self.for_host(name) if r.target == raw)

    def latest_time(self) -> float:
        """The latest arrival or completion anywhere in the ledger."""
        times = [r.arrival for r in self.requests]
        times += [r.done for r in self.requests if r.done is not None]
        return max(times, default=0.0)

    def max_in_flight(self, name: str) -> int:
        """Most requests to host ``name`` open at the same moment."""
        return _max_overlap(self.for_host(name), self.latest_time())

    def for_domain(self, domain: str) -> list[Request]:
        """Requests to ``domain`` and every name under it, by arrival."""
        return sorted(self.where(lambda r: r.host is not None
                                 and (r.host == domain or r.host.endswith("." + domain))),
                      key=lambda r: r.arrival)

    def max_in_flight_in_domain(self, domain: str) -> int:
        """Most requests to ``domain`` and the names under it open at the same moment."""
        return _max_overlap(self.for_domain(domain), self.latest_time())

    def gaps_in_domain(self, domain: str) -> list[float]:
        """Times between consecutive arrivals at ``domain`` and the names under it."""
        return _gaps(self.for_domain(domain))

    def max_in_flight_at(self, address: str) -> int:
        """Most requests open at the same moment on local ``address``."""
        return _max_overlap(self.at_address(address), self.latest_time())

    def gaps(self, name: str) -> list[float]:
        """Times between consecutive request arrivals at host ``name`` (all schemes)."""
        return _gaps(self.for_host(name))

    def min_gap(self, name: str) -> float | None:
        """Smallest time between consecutive arrivals at ``name``; None below two requests."""
        return min(self.gaps(name), default=None)

    def gaps_at(self, address: str) -> list[float]:
        """Times between consecutive arrivals on local ``address`` (all names, schemes)."""
        return _gaps(self.at_address(address))

    def min_gap_at(self, address: str) -> float | None:
        return min(self.gaps_at(address), default=None)
