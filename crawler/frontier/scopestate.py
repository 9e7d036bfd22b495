"""The crawl's scope, shared by every worker through Redis.

Each worker knows its own seeds; a fleet fed partitioned seed files must
still agree on where the crawl may go, or a worker would drop the links to
another worker's sites. So what a seed covers (its registered domain, host
name and SURT prefix: :meth:`crawler.scope.rules.Scope.add_seed`) goes to a
set, and each form new to the set to a log (``lua/scope_add.lua``, one slot:
``{ns/scope}``); every worker reads the log from its own offset, a batch a
second, and widens its scope with what others added. (A link off scope found
before another worker's seeds came is held for a while, not dropped:
crawler/middlewares/scope.py.)
"""

from __future__ import annotations

from typing import Any

from crawler.frontier.keys import Keys
from crawler.frontier.store import script_source

#: Forms read from the log at most per call.
READ_MAX = 10_000


class SharedScope:
    """The scope's seed forms in Redis: add this worker's, read everyone's."""

    def __init__(self, client: Any, keys: Keys) -> None:
        self.client = client
        self.keys = [keys.scope_forms(), keys.scope_log()]
        self._add = client.register_script(script_source("scope_add"))
        #: How many entries of the log this worker has read.
        self.offset = 0

    async def add(self, forms: list[str]) -> int:
        """Add ``forms``; returns how many were new to the crawl."""
        if not forms:
            return 0
        return int(await self._add(keys=self.keys, args=forms))

    async def news(self) -> list[str]:
        """The forms added since the last call (by any worker, this one included)."""
        entries = await self.client.lrange(self.keys[1], self.offset,
                                           self.offset + READ_MAX - 1)
        self.offset += len(entries)
        return [e.decode() if isinstance(e, bytes) else e for e in entries]
