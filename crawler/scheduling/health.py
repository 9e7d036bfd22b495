"""Whether the frontier's Redis answers, as this worker last saw it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError

from crawler.redaction import one_line

logger = logging.getLogger("crawler.scheduling.scheduler")

#: What the operator checks when Redis refuses a command to the worker's user.
ACL_HINT = "the worker's Redis user lacks it: compare its ACL with `scrapy acl worker`"


def refused_credentials(exc: BaseException) -> bool:
    """Whether Redis said no to the user or password: no wait will change that."""
    if isinstance(exc, AuthenticationError):
        return True
    text = str(exc)
    return isinstance(exc, ResponseError) and text.startswith(("NOAUTH", "WRONGPASS"))


def refusal(exc: BaseException) -> str | None:
    """What to check when Redis refuses this worker rather than failing to
    answer (a wrong password, a command or key its ACL does not allow); None
    for a failure that waiting may cure."""
    if isinstance(exc, NoPermissionError):
        return ACL_HINT
    if refused_credentials(exc):
        return "the user and password it was given are refused"
    return None


#: Seconds after Redis came back within which a new failure is the same outage
#: (a Cluster failover: other nodes answer while the failed master's replica
#: takes over), logged no more.
SETTLE_SECONDS = 10.0


class RedisHealth:
    """One warning when Redis goes away and one when it is back, however many
    calls fail in between; every failed call counts in ``frontier/redis_errors``.

    When Redis is back, ``on_back`` runs (the admissions a failover may have
    lost are sent again); it is told whether this is a new outage or more of
    the last one. A refusal is not an outage: Redis answers, and says no. It is
    logged once, as an error, and ``on_refused`` ends the crawl (a worker that
    may not write its releases would lease URLs it can never give back).
    """

    def __init__(self, stats: Any, on_refused: Callable[[], None] | None = None,
                 on_back: Callable[[bool], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stats = stats
        self.on_refused = on_refused
        self.on_back = on_back
        self.clock = clock
        self.down_since: float | None = None
        self.back_at: float | None = None
        self._outage_start = 0.0
        self.refused: str | None = None

    def trouble(self, exc: Exception) -> None:
        self.stats.inc_value("frontier/redis_errors")
        hint = refusal(exc)
        if hint is not None:
            if self.refused is None:
                self.refused = one_line(exc)
                logger.error("Frontier: Redis refused this worker: %s; %s. Stopping the crawl",
                             self.refused.rstrip("."), hint)
                if self.on_refused is not None:
                    self.on_refused()
            return
        if self.refused is not None:
            return  # the crawl is ending: a call cut short by its close is no outage
        if self.down_since is None:
            self.down_since = self.clock()
            if not self._settling():
                self._outage_start = self.down_since
                logger.warning("Frontier: Redis unreachable (%s); waiting for it", exc)

    def ok(self) -> None:
        if self.down_since is None:
            return
        again = self._settling()
        self.down_since, self.back_at = None, self.clock()
        if not again:
            logger.warning("Frontier: Redis is back after %.1f s",
                           self.back_at - self._outage_start)
        if self.on_back is not None:
            self.on_back(again)

    def _settling(self) -> bool:
        """Whether Redis came back less than :data:`SETTLE_SECONDS` ago."""
        return self.back_at is not None and self.clock() - self.back_at < SETTLE_SECONDS
