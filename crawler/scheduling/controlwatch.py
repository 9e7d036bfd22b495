"""An operator's change reaches this worker's reservations within a second.

``scrapy frontier host NAME --pause`` (or ``--delay``, ``--concurrency``)
changes a site's, domain's or address's record in Redis at once, and every
claim from then on obeys it. URLs a worker reserved before the change
(:mod:`.reserved`) would still start on their old turns, for up to
``FRONTIER_RESERVE_SECONDS``. So while the worker holds reservations it
looks at the head of the crawl's control log every half second (one
``LRANGE`` of the newest entries) and gives back the reservations a new
entry concerns: a site's own, or every one for a domain or an address (a
worker does not know which of its sites an address serves). They go back to
their queues and are claimed again under the new limits.

Every operator's action is also said in this worker's log, once, as it
learns of it (``Operator: site a.test: pause (by alice@ops)``): the log of a
crawl that slowed down or stopped says who did it. Without reservations the
head is read every :data:`IDLE_POLL_S` seconds for that alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from crawler.frontier.control import log_entry

logger = logging.getLogger(__name__)

#: How often (s) the control log is read while this worker holds reservations.
POLL_S = 0.5
#: How often (s) it is read otherwise (to log the operators' actions).
IDLE_POLL_S = 5.0
#: Newest entries read at a time (more changes in half a second give back all).
_HEAD = 8


class ControlWatch:
    """Reads the control log's head; calls ``give_back(site or None)`` on news."""

    def __init__(self, client: Any, log_key: str, *, holds: Callable[[], bool],
                 give_back: Callable[[str | None], None]) -> None:
        self.client = client
        self.log_key = log_key
        self.holds = holds
        self.give_back = give_back
        self._seen: bytes | None = None

    async def run(self, closing: Callable[[], bool]) -> None:
        """Until ``closing()``: learn the log's head, then watch it."""
        looked = float("-inf")
        while not closing():
            try:
                if self.holds() or time.monotonic() - looked >= IDLE_POLL_S:
                    looked = time.monotonic()
                    await self.look()
            except (RedisError, OSError):
                pass  # Redis away: the claims meet the same trouble and say so
            await asyncio.sleep(POLL_S)

    async def look(self) -> None:
        """One read of the log's head: say its new entries, and give back what
        they concern."""
        head = await self.client.lrange(self.log_key, 0, _HEAD - 1)
        first, self._seen = self._seen, head[0] if head else b""
        if first is None or not head or head[0] == first:
            return
        new = head if first not in head else head[:head.index(first)]
        entries = [log_entry(raw) for raw in new]
        for entry in reversed(entries):  # (the oldest first)
            _say(entry)
        if not self.holds():
            return
        sites = {_site_of(entry) for entry in entries}
        if None in sites or len(new) == _HEAD:
            self.give_back(None)
        else:
            for site in sites:
                self.give_back(site)


def _site_of(entry: dict[str, Any] | None) -> str | None:
    """The site a control log entry changed (None: a domain, an address, unknown)."""
    if entry is not None and entry.get("scope") == "site":
        return str(entry.get("name"))
    return None


def _say(entry: dict[str, Any] | None) -> None:
    """Log one operator's action (an entry of the control log) at INFO."""
    if entry is None:
        return
    who = f" (by {entry['who']})" if entry.get("who") else ""
    name = entry.get("name", "?")
    where = entry.get("scope", "?") + ("" if name == "*" else f" {name}")  # (*: the crawl)
    logger.info("Operator: %s: %s%s", where, entry.get("change", "?"), who,
                extra={"operator": entry.get("who"), "host": name})
