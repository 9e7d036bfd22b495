"""This worker's refusals, handed to the frontier once a second
(:mod:`crawler.frontier.refusals`).

Refusing a link costs no Redis call: it is counted here, with the newest few
URLs of each reason, and a background task adds them to the frontier's in
one round trip a second, and once more when the worker closes. What Redis
did not take stays here for the next round: a refusal is never lost to an
outage.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from crawler.frontier import refusals
from crawler.frontier.keys import Keys

#: Seconds between two hand-overs.
EVERY_S = 1.0


class RefusalNotes:
    """Refusals counted since the last hand-over, and their newest examples."""

    def __init__(self, client: Any, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        self.counts: Counter[str] = Counter()
        self.examples: dict[str, deque[str]] = {}

    def note(self, reason: str, url: str) -> None:
        """A link refused before the frontier: counted here, and an example."""
        self.counts[reason] += 1
        self.example(reason, url)

    def example(self, reason: str, url: str) -> None:
        """An example of ``reason`` alone (a URL refused at its lease: the
        frontier's release counts it, atomically with its end)."""
        kept = self.examples.get(reason)
        if kept is None:
            kept = self.examples[reason] = deque(maxlen=refusals.EXAMPLES)
        kept.append(url)

    async def run(self, closing: Callable[[], bool]) -> None:
        """Hand over once a second until ``closing()``."""
        while not closing():
            await asyncio.sleep(EVERY_S)
            await self.flush()

    async def flush(self) -> bool:
        """Hand what was counted to the frontier (False: Redis did not take it;
        it is kept for the next try)."""
        if not self.counts and not self.examples:
            return True
        counts, self.counts = self.counts, Counter()
        examples, self.examples = self.examples, {}
        try:
            await refusals.note(self.client, self.keys, counts,
                                {reason: list(urls) for reason, urls in examples.items()})
        except (RedisError, OSError):
            self.counts.update(counts)
            for reason, urls in examples.items():  # (those noted meanwhile are newer)
                urls.extend(self.examples.get(reason, ()))
                self.examples[reason] = urls
            return False
        return True
