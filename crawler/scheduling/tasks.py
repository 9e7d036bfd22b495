"""The background tasks of a worker's frontier, and their end when it closes.

Everything that talks to Redis off the engine's synchronous calls runs as a
task spawned here. Closing cancels them, except a *flush*: a task that holds
leases only its answer names (a claim under way, a batch of releases), which
is let finish so that the close can give them back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class Tasks:
    """A worker's background tasks (see the module docstring)."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._flushes: set[asyncio.Task[Any]] = set()
        #: True once the worker closes: nothing new is started after that.
        self.closing = False

    def spawn(self, coro: Coroutine[Any, Any, Any], *, flush: bool = False) -> None:
        """Run ``coro`` in the background; :meth:`close` cancels it unless ``flush``."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if flush:
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)

    async def close(self, timeout: float = 30.0) -> None:
        """Cancel every task but the flushes, and wait ``timeout`` s at most for those."""
        self.closing = True
        flushes = set(self._flushes)
        for task in list(self._tasks):
            if task not in flushes:
                task.cancel()
        if flushes:
            await asyncio.wait(flushes, timeout=timeout)
