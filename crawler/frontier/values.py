"""What the frontier's operations take and give: admissions, leases, releases,
their results, and the limits the scripts are called with.

Plain values, no I/O: :mod:`crawler.frontier.store` sends them to the
scripts and makes them of the answers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

#: A claim is a claimed URL's pass of the start gate when the worker starts
#: the URL within this many ms of asking for it (``lua/claim.lua``): the
#: claim moved its site's next start past that window. The worker names its
#: own (``scheduling/startwindow.py``: what its requests take to get from the
#: claim to the gate); this is the first claim's.
START_WINDOW_MS = 50
#: A Lease's offset when it starts after the one before it ended (claim.lua).
SERIAL = -1


@dataclass(frozen=True, slots=True)
class Admission:
    """One URL to admit: canonical URL, its host key, fingerprint and record
    (an empty record: a link to a URL its worker offered already, counted as
    an inlink only: ``lua/admit.lua``)."""

    url: str
    host: str
    fingerprint: bytes
    record: str
    priority: int = 0
    host_config: str = ""  # "concurrency:delay_ms" for hosts with their own limits


@dataclass(frozen=True, slots=True)
class Lease:
    """A claimed URL: the worker must release it exactly once."""

    host: str
    fingerprint: bytes
    record: str
    robots_version: int = 0  # of the host's robots rules when claimed
    #: The site's and the domain's start turns the claim took (0: none): the
    #: URL has passed the start gate if it starts within START_WINDOW_MS.
    turns: tuple[int, int] = (0, 0)
    #: When it starts, in ms after the claim (a reservation's later URLs;
    #: SERIAL: after the one before it ended, paced by its worker).
    offset_ms: int = 0
    #: The latest it may start on the claim's turn, ms after the claim (later,
    #: it asks the start gate; 0 in a serial reservation: its worker paces it).
    latest_ms: int = START_WINDOW_MS
    #: The site's delay in force and its floor (a Crawl-delay), ms: how the
    #: worker paces a serial reservation.
    pacing: tuple[int, int] = (0, 0)

    @property
    def token(self) -> str:
        return self.fingerprint.hex()


@dataclass(frozen=True, slots=True)
class Release:
    """What became of a lease: done, refused, return, retry (after delay_ms) or dead.

    ``hold_ms`` pushes back the host's next-allowed time for every worker
    (the server asked us to back off); ``health`` ("fail", "ok" or "") feeds
    the host's circuit breaker.
    """

    host: str
    fingerprint: bytes
    op: str
    arg: str = ""
    record: str = ""  # a new record (retry, revisit) or "" to keep the old one
    hold_ms: int = 0
    health: str = ""
    fetch_ms: int = 0  # how long the answer took (adaptive pacing; 0: no answer)
    revisit_ms: int = 0  # done, and due again this long from now (0: never)
    size: int = 0  # the bytes its answers brought (the site's byte budget)
    unsent: bool = False  # refused before its download: it cost its site nothing


class BreakerEvent(NamedTuple):
    """A host's breaker changed: "open" (for ``ms``), "close" or "park"."""

    event: str
    host: str
    ms: int


#: The start gate's wait when the request's lease is no longer its worker's.
LEASE_LOST = -2


class Turn(NamedTuple):
    """The start gate's answer: wait ``wait_ms`` first, or start now (0) and own
    ``turn`` at the site's gate and ``domain_turn`` at the domain's (0: none)."""

    wait_ms: int
    turn: int = 0
    domain_turn: int = 0


class ReleaseResult(NamedTuple):
    released: int
    stale: int
    events: tuple[BreakerEvent, ...] = ()


@dataclass(frozen=True, slots=True)
class Breaker:
    """Per-host circuit breaker parameters, in ms (release.lua)."""

    threshold: int = 5  # consecutive failures that open it
    base_ms: int = 30_000  # first cool-down, doubled at each opening
    cap_ms: int = 3_600_000
    max_openings: int = 6  # then the host is parked (0: never)


@dataclass(slots=True)
class ClaimResult:
    leases: list[Lease]
    server_ms: int
    next_ready_ms: int | None  # earliest time something may become claimable
    robots_jobs: list[str] = field(default_factory=list)  # hosts whose robots.txt to fetch
    #: Hosts that joined those parked for their server address: (host, address).
    ip_waits: list[tuple[str, str]] = field(default_factory=list)
    #: Hosts whose server address to look up before their first claim.
    dns_jobs: list[str] = field(default_factory=list)
    #: Hosts whose site (or domain) spent a budget: (host, what was spent).
    budget_jobs: list[tuple[str, BudgetSpent]] = field(default_factory=list)
    #: Script calls made (0: no partition had anything due).
    calls: int = 0


def _inlink_boost(value: Any, budgets: Budgets) -> int:
    """FRONTIER_INLINK_PRIORITY: "auto" (on under a page budget, where the
    order decides which pages are fetched at all), a boolean, or the priority
    one inlink is worth."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return int(bool(budgets.host_pages or budgets.domain_pages))
    if isinstance(value, bool):
        return int(value)
    text = str(value).strip().lower()
    if text in ("true", "yes", "on"):
        return 1
    if text in ("false", "no", "off", "", "none"):
        return 0
    try:
        boost = int(text)
    except ValueError:
        raise ValueError(f"FRONTIER_INLINK_PRIORITY={value!r}: use auto, true, false or a "
                         "whole number (the priority one inlink adds)") from None
    if boost < 0:
        raise ValueError(f"FRONTIER_INLINK_PRIORITY={value!r} must not be negative")
    return boost


class BudgetSpent(NamedTuple):
    """Which budget a site ran out of: whose ("site" or "domain"), what
    ("pages", "bytes" or "seconds") and its limit (ms for seconds)."""

    whose: str
    what: str
    limit: int

    @classmethod
    def parse(cls, text: str) -> BudgetSpent:
        whose, what, limit = text.split()
        return cls(whose, what, int(limit))

    def describe(self) -> str:
        """For people: "the site's 100 pages", "the domain's 60 s"."""
        if self.what == "seconds":
            amount = f"{self.limit / 1000:g} s"
        else:
            amount = f"{self.limit:,} {self.what}"
        return f"the {self.whose}'s {amount}"


@dataclass(frozen=True, slots=True)
class RobotsRetry:
    """How a host whose robots.txt is unreachable is retried, in ms."""

    base_ms: int = 60_000
    cap_ms: int = 3_600_000
    max_attempts: int = 8  # then its queued URLs are parked as dead letters (0: never)
    stale_max_ms: int = 30 * 86_400_000  # a last good copy serves this long at most


@dataclass(frozen=True, slots=True)
class RobotsOutcome:
    """What robots.lua made of a fetch: rules, stale, unreachable or park."""

    state: str
    attempts: int
    version: int


@dataclass(slots=True)
class AdmitResult:
    added: int = 0
    duplicates: int = 0
    refused: int = 0  # over the site's count of admitted URLs (ADMISSION_MAX_PAGES_PER_HOST)
    blocked: int = 0  # the host was dropped
    parked: int = 0  # the host is parked: dead letters at once
    spent: int = 0  # its site or domain spent a budget (BUDGET_*)
    #: Done URLs whose revisit a newer sitemap lastmod brought forward.
    forward: int = 0


@dataclass(frozen=True, slots=True)
class Budgets:
    """What each site (host name) and each registered domain may spend in a
    crawl: URLs fetched, bytes received and ms since its first claim (0: no
    limit). See ``budget_left`` in lua/common.lua."""

    host_pages: int = 0
    host_bytes: int = 0
    host_ms: int = 0
    domain_pages: int = 0
    domain_bytes: int = 0
    domain_ms: int = 0

    @classmethod
    def from_settings(cls, s: Any) -> Budgets:
        """The ``BUDGET_*`` settings; a negative one is a mistake said at once."""
        values = {}
        for scope in ("HOST", "DOMAIN"):
            pages = s.getint(f"BUDGET_{scope}_PAGES", 0)
            size = s.getint(f"BUDGET_{scope}_BYTES", 0)
            seconds = s.getfloat(f"BUDGET_{scope}_SECONDS", 0)
            for name, value in ((f"BUDGET_{scope}_PAGES", pages), (f"BUDGET_{scope}_BYTES", size),
                                (f"BUDGET_{scope}_SECONDS", seconds)):
                if value < 0:
                    raise ValueError(f"{name} must be 0 (no limit) or more, not {value}")
            low = scope.lower()
            values |= {f"{low}_pages": pages, f"{low}_bytes": size,
                       f"{low}_ms": round(seconds * 1000)}
        return cls(**values)

    @property
    def domain_on(self) -> bool:
        return bool(self.domain_pages or self.domain_bytes or self.domain_ms)

    def script_args(self) -> dict[str, int]:
        """As ``lua/claim.lua`` reads them (its limits' ``budget``)."""
        return asdict(self)


@dataclass(slots=True)
class Limits:
    """Per-host defaults and the crawl's budgets, in the units the scripts use."""

    concurrency: int = 4
    delay_ms: int = 1000
    jitter: float = 0.5
    #: URLs a site may have admitted at most (ADMISSION_MAX_PAGES_PER_HOST; 0: no cap).
    admit_max: int = 0
    lease_ms: int = 60_000
    move_max: int = 500
    robots_ms: int = 0  # 0: robots.txt not obeyed; else a robots fetch's lease
    #: The registered domain's gates (0: that limit off; both 0: the scope off).
    domain_concurrency: int = 0
    domain_delay_ms: int = 0
    #: Adaptive pacing: a site waits this many times its last answer's time
    #: after it (0: off), at most adaptive_max_ms.
    adaptive_factor: float = 0.0
    adaptive_max_ms: int = 30_000
    #: The IP scope's gates (both 0: off), and how long a host parked for its
    #: address waits at most for a wake before it is looked at again.
    ip_concurrency: int = 0
    ip_delay_ms: int = 0
    ip_fallback_ms: int = 15_000
    #: How long a DNS job (the IP scope's look at a site's address) may take
    #: before its host is handed out again.
    dns_job_ms: int = 10_000
    #: DNS jobs one claim hands out at most (per partition).
    dns_job_max: int = 32
    #: A host's new URLs are claimed before its revisits (FRONTIER_REVISIT_NEW_FIRST).
    revisit_new_first: bool = True
    #: Every partition is asked again at least this often, whatever the last
    #: claims said (partitiondue.py; FRONTIER_CLAIM_SWEEP). 0: at every claim.
    claim_sweep_ms: int = 30_000
    #: A claimed URL started this soon after its claim needs no start gate.
    start_window_ms: int = START_WINDOW_MS
    #: How far ahead a claim reserves a site's next URLs (0: one per claim).
    reserve_ms: int = 0
    breaker: Breaker = field(default_factory=Breaker)
    budgets: Budgets = field(default_factory=Budgets)
    #: Each inlink found raises a queued URL by this much priority (0: off;
    #: FRONTIER_INLINK_PRIORITY, on by default under a page budget).
    inlink_boost: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, s: Any) -> Limits:
        """The frontier's per-host limits and lease times, from the crawl's settings."""
        return cls(
            concurrency=s.getint("CONCURRENT_REQUESTS_PER_DOMAIN"),
            delay_ms=round(s.getfloat("DOWNLOAD_DELAY") * 1000),
            jitter=s.getfloat("DOWNLOAD_DELAY_JITTER", 0.5),
            admit_max=s.getint("ADMISSION_MAX_PAGES_PER_HOST", 0),
            lease_ms=round(s.getfloat("FRONTIER_LEASE_SECONDS", 60) * 1000),
            domain_concurrency=s.getint("FRONTIER_DOMAIN_CONCURRENCY", 0),
            domain_delay_ms=round(s.getfloat("FRONTIER_DOMAIN_DELAY", 0) * 1000),
            adaptive_factor=s.getfloat("FRONTIER_ADAPTIVE_FACTOR", 0.0),
            adaptive_max_ms=round(s.getfloat("FRONTIER_ADAPTIVE_MAX_DELAY", 30.0) * 1000),
            ip_concurrency=s.getint("FRONTIER_IP_CONCURRENCY", 0),
            ip_delay_ms=round(s.getfloat("FRONTIER_IP_DELAY", 0) * 1000),
            claim_sweep_ms=round(s.getfloat("FRONTIER_CLAIM_SWEEP", 30.0) * 1000),
            reserve_ms=round(s.getfloat("FRONTIER_RESERVE_SECONDS", 0) * 1000),
            breaker=Breaker(
                threshold=s.getint("BREAKER_THRESHOLD", 5),
                base_ms=round(s.getfloat("BREAKER_COOLDOWN", 30.0) * 1000),
                cap_ms=round(s.getfloat("BREAKER_COOLDOWN_MAX", 3600.0) * 1000),
                max_openings=s.getint("BREAKER_MAX_OPENINGS", 6),
            ),
            budgets=(budgets := Budgets.from_settings(s)),
            inlink_boost=_inlink_boost(s.get("FRONTIER_INLINK_PRIORITY", "auto"), budgets),
        )

    def adaptive_delay_ms(self, fetch_s: float | None) -> float:
        """The wait after an answer that took ``fetch_s`` that adaptive pacing asks
        for (``lua/release.lua``'s: the factor times it, capped; 0: off)."""
        if self.adaptive_factor <= 0 or not fetch_s:
            return 0.0
        return min(self.adaptive_factor * fetch_s * 1000, self.adaptive_max_ms)
