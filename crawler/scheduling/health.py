"""Whether the frontier's Redis answers, as this worker last saw it."""

from __future__ import annotations

import logging
import time
from typing import Any

logger = logging.getLogger("crawler.scheduling.scheduler")


class RedisHealth:
    """One warning when Redis goes away and one when it is back, however many
    calls fail in between; every failed call counts in ``frontier/redis_errors``."""

    def __init__(self, stats: Any) -> None:
        self.stats = stats
        self.down_since: float | None = None

    def trouble(self, exc: Exception) -> None:
        self.stats.inc_value("frontier/redis_errors")
        if self.down_since is None:
            self.down_since = time.monotonic()
            logger.warning("Frontier: Redis unreachable (%s); waiting for it", exc)

    def ok(self) -> None:
        if self.down_since is not None:
            down = time.monotonic() - self.down_since
            logger.warning("Frontier: Redis is back after %.1f s", down)
            self.down_since = None
