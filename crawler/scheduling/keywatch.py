"""A key an operator's command writes, read by each worker once a second.

The crawl-wide changes an operator makes between runs of ``scrapy frontier``
(budgets, site rules) live in one key each; every worker reads it once a
second and acts when its value changed (one ``GET`` a second each). Redis
away, nothing changes: the claims meet the same trouble and say so.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

#: How often (s) the key is read.
POLL_S = 1.0


class KeyWatch:
    """Reads ``key`` once a second; :meth:`changed` hears each new value (None: gone)."""

    def __init__(self, client: Any, key: str) -> None:
        self.client = client
        self.key = key
        self._raw: bytes | None = None

    async def run(self, closing: Callable[[], bool]) -> None:
        while not closing():
            with contextlib.suppress(RedisError, OSError):
                await self.look()
            await asyncio.sleep(POLL_S)

    async def look(self) -> None:
        """One read; :meth:`changed` when the value is not the last one seen."""
        raw = await self.client.get(self.key)
        if raw != self._raw:
            self._raw = raw
            self.changed(raw)

    def changed(self, raw: bytes | None) -> None:
        raise NotImplementedError
