"""The frontier's counts, as this worker last read them.

The engine asks whether anything is pending many times a second, and a read
is one HGETALL per partition: the counts are read again at most every
:data:`COUNTS_INTERVAL` seconds, in the background. A read is *current* once
it was made after this worker's last flush, with nothing left to send: only
then may a worker that holds nothing call the crawl idle.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from redis.exceptions import RedisError

from crawler.frontier.store import Frontier
from crawler.scheduling.health import RedisHealth
from crawler.scheduling.tasks import Tasks

#: Seconds between two reads of the frontier's counts.
COUNTS_INTERVAL = 0.5
#: ... while this worker waits for a time a claim named: what the counts
#: tell then (another worker ended the crawl's last URLs) may wait that long,
#: or until that time's claim finds nothing due (the worker waits no more).
#: A read is one command a partition: a wait costs Redis next to nothing.
COUNTS_WAITING_INTERVAL = 15.0


class FrontierCounts:
    """The last counts read, and the reads (see the module docstring)."""

    def __init__(self, store: Frontier, tasks: Tasks, health: RedisHealth, *,
                 epoch: Callable[[], int], settled: Callable[[], bool],
                 after: Callable[[dict[str, int] | None], None]) -> None:
        self.store = store
        self.tasks = tasks
        self.health = health
        #: The sync's flushes so far, and whether it has nothing left to send.
        self.epoch = epoch
        self.settled = settled
        #: Runs after every read (None: it failed).
        self.after = after
        self.last: dict[str, int] | None = None
        self._epoch = -1
        self._reading = False
        self._read_at = 0.0

    def current(self) -> bool:
        """Whether the last read was made after the last flush, nothing left to send."""
        return self._epoch == self.epoch()

    def refresh(self, waiting: bool = False) -> None:
        """Read the counts again, now or once COUNTS_INTERVAL (COUNTS_WAITING_INTERVAL
        while ``waiting``) has passed since the last read."""
        if self.tasks.closing or self._reading:
            return
        self._reading = True
        interval = COUNTS_WAITING_INTERVAL if waiting else COUNTS_INTERVAL
        wait = self._read_at + interval - time.monotonic()
        if wait > 0:
            asyncio.get_event_loop().call_later(wait, self._read_now)
        else:
            self._read_now()

    def _read_now(self) -> None:
        if self.tasks.closing:
            self._reading = False
            return
        self._read_at = time.monotonic()
        self.tasks.spawn(self._read())

    async def _read(self) -> None:
        epoch = self.epoch()
        try:
            self.last = await self.store.counts()
            if self.settled():
                self._epoch = epoch
        except (RedisError, OSError) as exc:
            self.health.trouble(exc)
        finally:
            self._reading = False
        self.after(self.last)
