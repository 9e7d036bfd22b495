"""An operator's change of the crawl's budgets reaches this worker within a second.

``scrapy frontier budget`` writes the budgets every worker is to use
(:mod:`crawler.frontier.budgetstate`); this task reads that key once a
second and puts what it finds in force for the next claim (the claims and
releases read ``Limits.budgets`` each time), or the worker's own settings
when the key is gone. One ``GET`` a second; Redis away, the budgets stay as
they were.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from crawler.frontier.budgetstate import parse_budgets
from crawler.frontier.values import Budgets, Limits

logger = logging.getLogger(__name__)

#: How often (s) the budgets key is read.
POLL_S = 1.0


class BudgetWatch:
    """Keeps ``limits.budgets`` what the operator (or the settings) say."""

    def __init__(self, client: Any, key: str, limits: Limits) -> None:
        self.client = client
        self.key = key
        self.limits = limits
        self.own: Budgets = limits.budgets
        self._raw: bytes | None = None

    async def run(self, closing: Callable[[], bool]) -> None:
        while not closing():
            # (Redis away: the claims meet the same trouble and say so)
            with contextlib.suppress(RedisError, OSError):
                await self.look()
            await asyncio.sleep(POLL_S)

    async def look(self) -> None:
        """One read: the budgets in force from now on."""
        raw = await self.client.get(self.key)
        if raw == self._raw:
            return
        self._raw = raw
        wanted = parse_budgets(raw) or self.own
        if wanted != self.limits.budgets:
            self.limits.budgets = wanted
            logger.info("Budgets: %s (%s)", describe(wanted),
                        "changed for every worker by scrapy frontier budget" if raw
                        else "this worker's settings again")


def describe(budgets: Budgets) -> str:
    """``host: 100 pages, 5,000,000 bytes; domain: none`` (for logs and the command)."""
    def one(pages: int, size: int, ms: int) -> str:
        said = [f"{pages:,} pages"] if pages else []
        said += [f"{size:,} bytes"] if size else []
        said += [f"{ms / 1000:g} s"] if ms else []
        return ", ".join(said) or "no limit"
    return (f"each host {one(budgets.host_pages, budgets.host_bytes, budgets.host_ms)}; "
            f"each domain {one(budgets.domain_pages, budgets.domain_bytes, budgets.domain_ms)}")
