"""Seeds fed through a Redis list, scrapy-redis style, without losing any.

Producers push seed lines onto ``REDIS_START_URLS_KEY`` (scrapy-redis's
setting; ``broad:start_urls`` for the broad spider)::

    redis-cli RPUSH broad:start_urls https://example.com/ https://example.org/

and every worker sharing the frontier takes them in batches. scrapy-redis
pops destructively, so a worker killed between the pop and the enqueue loses
the batch. Here one script pops the batch *and* notes it under the worker's
id in ``{KEY}:taken`` (the hash tag puts both keys in one Redis Cluster
slot); the note is removed only once the batch's URLs are admitted to the
frontier. A worker that comes back with the same id is handed its batch
again, and the batch of a worker that stopped sending heartbeats goes back
to the head of the list for the others. Admitting a URL twice is harmless
(the frontier deduplicates), losing one is not.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from redis.asyncio import Redis

from crawler.frontier.keys import seeds_taken_key
from crawler.frontier.workers import is_alive

logger = logging.getLogger(__name__)

# Pop up to N items and note them as this worker's batch; an unacknowledged
# batch of the same worker is handed out again first.
# KEYS[1] the list, KEYS[2] the taken hash; ARGV[1] worker id, ARGV[2] N.
_TAKE = """
local prev = redis.call('HGET', KEYS[2], ARGV[1])
if prev then return prev end
local items = redis.call('LPOP', KEYS[1], ARGV[2])
if not items then return false end
local batch = cjson.encode(items)
redis.call('HSET', KEYS[2], ARGV[1], batch)
return batch
"""

# Put the batches of the given workers back at the head of the list, in order.
# KEYS[1] the list, KEYS[2] the taken hash; ARGV: worker ids. Returns items moved.
_GIVE_BACK = """
local moved = 0
for _, worker in ipairs(ARGV) do
  local batch = redis.call('HGET', KEYS[2], worker)
  if batch then
    local items = cjson.decode(batch)
    for i = #items, 1, -1 do redis.call('LPUSH', KEYS[1], items[i]) end
    redis.call('HDEL', KEYS[2], worker)
    moved = moved + #items
  end
end
return moved
"""


def decode_batch(raw: bytes | str) -> list[bytes] | None:
    """The seed lines of a taken batch (a JSON list of the list's items, as the
    take script writes it); None when it is not one."""
    try:
        items = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(items, list):
        return None
    return [line.encode("utf-8", "replace") for item in items
            for line in str(item).splitlines()]


class SeedFeed:
    """One worker's end of a shared Redis list of seed lines."""

    def __init__(self, client: Redis, key: str, worker: str, batch_size: int = 100) -> None:
        self.client = client
        self.key = key
        self.taken = seeds_taken_key(key)
        self.worker = worker
        self.batch_size = max(1, batch_size)
        self._take = client.register_script(_TAKE)
        self._give_back = client.register_script(_GIVE_BACK)
        self.holding = False

    @classmethod
    def from_settings(cls, client: Redis, settings: Any, spider_name: str, worker: str
                      ) -> SeedFeed | None:
        """The feed ``REDIS_START_URLS_KEY`` names (None: no such key set)."""
        key = settings.get("REDIS_START_URLS_KEY") or ""
        if not key:
            return None
        return cls(client, key % {"name": spider_name}, worker,
                   settings.getint("REDIS_START_URLS_BATCH_SIZE", 100))

    async def take(self) -> list[bytes]:
        """The next batch of seed lines (empty when the list is empty)."""
        raw = await self._take(keys=[self.key, self.taken], args=[self.worker, self.batch_size])
        if not raw:
            return []
        lines = decode_batch(raw)
        if lines is None:  # planted, or garbled: handing it out again would loop for ever
            logger.warning("Seed feed: a batch in %s is not one a worker wrote; dropped",
                           self.taken)
            await self.client.hdel(self.taken, self.worker)
            return []
        self.holding = True
        return lines

    async def ack(self) -> None:
        """The batch is admitted: forget it."""
        await self.client.hdel(self.taken, self.worker)
        self.holding = False

    async def give_back(self) -> int:
        """Return this worker's unacknowledged batch to the list (a clean stop)."""
        moved = int(await self._give_back(keys=[self.key, self.taken], args=[self.worker]))
        self.holding = False
        return moved

    async def adopt_orphans(self, workers_key: str, lease_seconds: float) -> int:
        """Return the batches of workers that are gone (:mod:`crawler.frontier.workers`;
        ``lease_seconds`` judges heartbeats that do not state their lease)."""
        holders = [h.decode() for h in await self.client.hkeys(self.taken)]
        others = [h for h in holders if h != self.worker]
        if not others:
            return 0
        beats = await self.client.hmget(workers_key, others)
        now = time.time()
        gone = [w for w, beat in zip(others, beats, strict=True)
                if not is_alive(beat, now, lease_seconds)]
        if not gone:
            return 0
        moved = int(await self._give_back(keys=[self.key, self.taken], args=gone))
        if moved:
            logger.warning("Seed feed: %d seed line(s) taken by gone worker(s) %s are back in %s",
                           moved, ", ".join(gone), self.key)
        return moved
