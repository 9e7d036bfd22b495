"""Wakes from other workers: a partition's next turn brought closer.

A worker that found nothing due in a partition waits for the time the claim
named (:mod:`crawler.frontier.partitiondue`) and asks that partition nothing
meanwhile. What another worker does there (a link admitted, a lease ended,
a robots.txt stored, an address's hosts woken) may make a host due sooner:
the script that did it publishes "PART AT_MS" on the crawl's wake channel
when some worker waits for later than that (``wake_sleepers`` in
``lua/common.lua``), and every worker hears it here and claims then. So a
waiting worker costs Redis nothing for its claims: no poll, one subscribed
connection.

A subscription that breaks may have lost a message: once it is back, every
partition is asked again at the next claim, as at a sweep.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from redis.exceptions import NoPermissionError, RedisError, ResponseError

from crawler.frontier.partitiondue import PartitionDue

logger = logging.getLogger(__name__)

#: How long (s) one wait for a message lasts: the loop's look at ``closing``.
LISTEN_S = 1.0
#: How long (s) to wait before subscribing again after the connection broke.
RETRY_S = 1.0


class PartitionWakes:
    """Listens on the wake channel; ``wake(at_ms)`` is told when to claim."""

    def __init__(self, client: Any, channel: str, due: PartitionDue,
                 wake: Callable[[int], None], stats: Any = None) -> None:
        self.client = client
        self.channel = channel
        self.due = due
        #: Claim no later than this server time (ms).
        self.wake = wake
        self.stats = stats

    async def run(self, closing: Callable[[], bool]) -> None:
        first = True
        while not closing():
            try:
                await self._listen(closing, again=not first)
            except (NoPermissionError, ResponseError) as exc:  # an ACL without the channel
                logger.warning("Frontier: Redis refuses the wake channel %s (%s): what other "
                               "workers make due is found at the sweep (FRONTIER_CLAIM_SWEEP); "
                               "scrapy acl worker prints a rule that allows it",
                               self.channel, exc)
                return
            except (RedisError, OSError) as exc:
                logger.debug("Frontier: the wake channel broke (%s); subscribing again", exc)
            first = False
            if not closing():
                await asyncio.sleep(RETRY_S)

    async def _listen(self, closing: Callable[[], bool], *, again: bool) -> None:
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(self.channel)
            if again:  # messages may have been lost meanwhile: ask every partition
                self.due.touch(*range(len(self.due)))
                self.wake(self.due.now())
            while not closing():
                message = await pubsub.get_message(timeout=LISTEN_S)
                if message is not None:
                    self.heard_message(message.get("data"))
        finally:
            await pubsub.aclose()

    def heard_message(self, data: Any) -> None:
        """One message, "PART AT_MS" (anything else is ignored)."""
        try:
            part, at_ms = (int(x) for x in bytes(data).split())
        except (TypeError, ValueError):
            return
        if not 0 <= part < len(self.due):
            return
        woke = self.due.woken(part, at_ms)
        if self.stats is not None:  # (heard, and brought a partition's turn closer)
            self.stats.inc_value("frontier/wakes/heard")
            if woke:
                self.stats.inc_value("frontier/wakes/woke")
        if woke:
            self.wake(at_ms)


__all__ = ["PartitionWakes"]
