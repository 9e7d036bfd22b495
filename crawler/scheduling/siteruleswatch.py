"""Site rules an operator loads reach this worker within a second.

``scrapy frontier rules FILE`` stores the file's text under
``ns:siterules``; this task reads that key once a second and, when it
changed, hands the worker's intake the new rules (:mod:`crawler.siterules`):
sites new to the frontier get them when their first URL is admitted (the
command itself applied them to the sites already there). Gone again, the
worker's own ``SITE_RULES`` apply. One ``GET`` a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from crawler.siterules import SiteRule, SiteRuleError, SiteRules, read_rules

logger = logging.getLogger(__name__)

#: How often (s) the key is read.
POLL_S = 1.0


class SiteRulesWatch:
    """Calls ``use(rules)`` with what the operator loaded (or this worker's own)."""

    def __init__(self, client: Any, key: str, own: SiteRules,
                 use: Callable[[SiteRules], None]) -> None:
        self.client = client
        self.key = key
        self.own = own
        self.use = use
        self._raw: bytes | None = None

    async def run(self, closing: Callable[[], bool]) -> None:
        while not closing():
            # (Redis away: the claims meet the same trouble and say so)
            with contextlib.suppress(RedisError, OSError):
                await self.look()
            await asyncio.sleep(POLL_S)

    async def look(self) -> None:
        raw = await self.client.get(self.key)
        if raw == self._raw:
            return
        self._raw = raw
        if not raw:
            self.use(self.own)
            logger.info("Site rules: this worker's own again (%d)", len(self.own))
            return
        parsed = list(read_rules(raw.decode("utf-8", "replace").splitlines(),
                                 "scrapy frontier rules"))
        rules = SiteRules(r for r in parsed if isinstance(r, SiteRule))
        bad = sum(1 for r in parsed if isinstance(r, SiteRuleError))
        self.use(rules)
        logger.info("Site rules: %d loaded by scrapy frontier rules, for sites new to the "
                    "frontier%s", len(rules), f" ({bad} bad line(s) skipped)" if bad else "")
