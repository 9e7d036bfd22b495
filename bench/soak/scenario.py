"""What the soak crawls and what it does to the crawl: the web, the settings, the chaos.

Two sizes share every rule: ``FULL`` (``python -m bench.soak``, about 5 to 10
minutes on 2 cores) and ``SHORT`` (``tests/test_soak.py`` in CI, about 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.simweb.model import MIXES

#: The crawler's robots.txt user agent (``crawler.settings.ROBOTSTXT_USER_AGENT``).
USER_AGENT = "BroadCrawl"

#: Every misbehaviour the simulated web has, a little more often than in its
#: "default" mix (each robots and page failure mode ~1.5 % of hosts, so a
#: 2,000-host web has ~30 of each); 1-3 MiB "large" pages stay rare (they
#: cost the two cores more than they prove).
_DEFAULT = MIXES["default"]
SOAK_MIX: dict[str, float] = {
    **{f"robots:{mode}": w for mode, w in _DEFAULT["robots"].items()},
    **{f"robots:{mode}": 0.018 for mode in ("error-500", "error-503", "timeout",
                                            "redirect-3", "redirect-loop", "too-many")},
    **{f"page:{mode}": w for mode, w in _DEFAULT["page"].items()},
    **{f"page:{mode}": 0.018 for mode in ("rate-limited-seconds", "rate-limited-date",
                                          "unavailable", "hang", "reset", "trickle",
                                          "trap-calendar", "trap-repeat", "huge")},
    "page:large": 0.003,
}

#: Pages per host at most: the trap hosts (endless calendars, ``a/b/a/b``
#: paths with session ids) stop there; no well-behaved host has more than 45.
HOST_CAP = 60

#: The workers' settings. Failures are made to resolve in seconds rather than
#: the production defaults' hours (a robots.txt that stays unreachable is
#: retried for ~3 h, a breaker cools down for 30 s and up), so the crawl ends
#: inside the soak; the politeness rules are the production ones.
WORKER_SETTINGS: dict[str, Any] = {
    "DOWNLOAD_DELAY": 0.5,
    "CONCURRENT_REQUESTS": 96,
    "DEPTH_LIMIT": 0,
    "ADMISSION_MAX_PAGES_PER_HOST": HOST_CAP,
    "DOWNLOAD_TIMEOUT": 25,  # a trickled page takes ~20 s and must arrive
    "DOWNLOAD_CONNECT_TIMEOUT": 5,
    "ROBOTS_TIMEOUT": 5,
    "ROBOTS_RETRY_BASE": 2,
    "ROBOTS_UNREACHABLE_MAX_ATTEMPTS": 2,
    "RETRY_BACKOFF_BASE": 0.5,
    "BREAKER_THRESHOLD": 3,
    "BREAKER_COOLDOWN": 3,
    "BREAKER_MAX_OPENINGS": 1,
    "FRONTIER_LEASE_SECONDS": 10,  # a killed worker's URLs come back after 10 s
    "PROMETHEUS_ENABLED": False,  # three workers, and tests in parallel: no ports
    "LOG_LEVEL": "INFO",
    "LOOPLAG_LOG": 0.1,  # log every reactor stall of 0.1 s or more, with when it was
}


@dataclass(frozen=True)
class Chaos:
    """When the driver strikes, in seconds from the first worker's start.

    Nothing is struck once the frontier is empty (the crawl is ending anyway),
    so a fast machine may see fewer events than planned; the table says how
    many happened.
    """

    kill_every: float  # SIGKILL a random worker this often...
    first_kill: float  # ...starting here
    restart_after: float  # a killed worker is started again this much later
    term_at: float  # SIGTERM another worker (it is restarted once it has exited)
    redis_restart_at: float  # stop Redis (SIGTERM: it writes its append-only file)...
    redis_down_for: float  # ...and start it again on the same files after this long
    max_kills: int
    #: SIGSTOP another worker here (None: never) and SIGCONT it this much later:
    #: its leases run out meanwhile, and what it held must not start after.
    stop_at: float | None = None
    stop_for: float = 20.0
    #: Start one more worker here (None: never), with the first one's seeds.
    join_at: float | None = None


@dataclass(frozen=True)
class Scenario:
    """One soak: a web, three workers on one Redis, and a chaos plan."""

    name: str
    hosts: int
    chaos: Chaos
    timeout: float  # the whole crawl must end within this many seconds
    seed: int = 9
    workers: int = 3
    internal_every: int = 97  # every Nth host links to internal addresses
    #: Seconds between a trickled answer's 40 pieces (DOWNLOAD_TIMEOUT must cover 40 x it).
    trickle_interval: float = 0.5
    settings: dict[str, Any] = field(default_factory=lambda: dict(WORKER_SETTINGS))

    def pins(self) -> dict[int, str]:
        """Hosts whose pages also link to loopback/private/link-local addresses."""
        return {i: "robots:allow-all,internal-links"
                for i in range(self.internal_every // 2, self.hosts, self.internal_every)}


FULL = Scenario(
    "full", hosts=2000, timeout=600,
    chaos=Chaos(kill_every=35, first_kill=20, restart_after=3, term_at=45,
                redis_restart_at=70, redis_down_for=3, max_kills=6),
)
#: The short soak's tail is its slowest hosts (trickled pages, hung hosts
#: waiting out DOWNLOAD_TIMEOUT), not its host count: trickling twice as fast
#: lets the timeout halve too, and the crawl ends in about half the time.
SHORT = Scenario(
    "short", hosts=240, timeout=240,
    chaos=Chaos(kill_every=20, first_kill=8, restart_after=2, term_at=14,
                redis_restart_at=22, redis_down_for=2, max_kills=2),
    trickle_interval=0.25,
    settings={**WORKER_SETTINGS, "DOWNLOAD_TIMEOUT": 14},
)
SCENARIOS = {s.name: s for s in (FULL, SHORT)}
