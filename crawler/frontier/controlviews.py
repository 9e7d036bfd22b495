"""What ``scrapy frontier host NAME`` shows of a site, its domain and its server
address (:mod:`crawler.frontier.control` fills them in from the records)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(slots=True)
class Authority:
    """One scheme and port of the site: its queue and its robots.txt."""

    host: str
    queued: int
    robots: str  # "known", "fetching", "unreachable", "none" (not fetched yet)
    robots_fetched_ago_s: float | None
    robots_version: int
    blocked: str | None  # "dropped", "parked: REASON" or None
    #: What its pages taught (:mod:`crawler.frontier.sitefacts`): noise
    #: parameters, trap patterns, the evidence per parameter.
    learned: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Gate:
    """The limits of a site or a domain, each with where it comes from."""

    concurrency: int
    concurrency_from: str
    delay_s: float
    delay_from: str
    paused: bool = False
    in_flight: int = 0
    next_claim_in_s: float = 0.0
    next_start_in_s: float = 0.0


@dataclass(slots=True)
class Spend:
    """What a site or a domain spent of its budget, and its limits (0: none)."""

    pages: int
    bytes: int
    seconds: float  # since its first URL was claimed
    pages_limit: int
    bytes_limit: int
    seconds_limit: float
    limits_from: str  # "setting BUDGET_HOST_*", "operator", ...

    @property
    def spent(self) -> str | None:
        """Which budget is spent ("pages", "bytes", "seconds"), if any
        (``budget_left`` in lua/common.lua)."""
        if self.pages_limit and self.pages >= self.pages_limit:
            return "pages"
        if self.bytes_limit and self.bytes >= self.bytes_limit:
            return "bytes"
        if self.seconds_limit and self.seconds >= self.seconds_limit:
            return "seconds"
        return None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "spent": self.spent}


@dataclass(slots=True)
class HostView:
    """Everything ``scrapy frontier host NAME`` shows."""

    site: str
    domain: str
    partition: int
    authorities: list[Authority]
    delayed: int
    dead: int
    site_gate: Gate
    domain_gate: Gate
    domain_waiting_hosts: int
    crawl_delay_floor_s: float
    held_for_s: float  # a hold (Retry-After, 429 / 503, breaker) still running
    breaker: str  # "closed", "open", "half-open (probing)", "parked"
    breaker_openings: int
    dns_failures: int
    address: AddressView | None = None  # the server address, once the frontier knows it
    log: list[dict[str, Any]] = field(default_factory=list)
    #: What the site and its domain spent of their budgets (BUDGET_*).
    budget: Spend | None = None
    domain_budget: Spend | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["budget"] = self.budget.as_dict() if self.budget else None
        out["domain_budget"] = self.domain_budget.as_dict() if self.domain_budget else None
        return out


@dataclass(slots=True)
class AddressView:
    """A server address's gate (the IP scope), as ``scrapy frontier host`` shows it."""

    address: str
    gate: Gate
    waiting_hosts: int  # in the address's queue, for room
    known_for_s: float | None = None  # how long the site is known to point here
    log: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
