"""Every worker's tally of a crawl's downloads, kept in the frontier for its reports.

A worker saves its tallies (:class:`crawler.reports.tally.Tally`, as JSON,
zlib-compressed) when it closes, under its id in ``NS:reports``:
``{"total": ..., "run": ..., "started": ..., "ended": ...}``, the total of
every run of that worker id (a later run of the crawl adds to it) and its
latest run alone (what a recurring crawl's week changed). While it runs, a
worker also saves its current run's tally every half minute under
:func:`live_field` (``ID (running)``), replaced by its total when it closes: a
report read during the crawl counts what every worker did so far. A report
reads them all, so it covers every worker, on any machine.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from typing import Any

from crawler.frontier.keys import Keys


def pack(tally: dict[str, Any]) -> bytes:
    return zlib.compress(json.dumps(tally, separators=(",", ":")).encode(), 6)


def unpack(raw: bytes) -> dict[str, Any] | None:
    """A saved tally, or None for what no worker of this build saved."""
    try:
        data = json.loads(zlib.decompress(raw))
    except (zlib.error, ValueError):
        return None
    return data if isinstance(data, dict) else None


async def saved(client: Any, keys: Keys, worker: str) -> dict[str, Any] | None:
    """What ``worker`` saved before (an earlier run of the crawl), if anything."""
    raw = await client.hget(keys.reports(), worker)
    return None if raw is None else unpack(raw)


def live_field(worker: str) -> str:
    """Where a running worker keeps the tally of its current run."""
    return f"{worker} (running)"


async def save_live(client: Any, keys: Keys, worker: str, tally: dict[str, Any]) -> None:
    """A running worker's tally of its current run so far (its total and its run
    alike), encoded on a thread: ``tally`` is a copy (``Tally.as_dict``), up to
    tens of thousands of hosts, and the crawl goes on meanwhile."""
    blob = await asyncio.to_thread(pack, tally)
    await client.hset(keys.reports(), live_field(worker), blob)


async def save(client: Any, keys: Keys, worker: str, tally: dict[str, Any]) -> None:
    """A closing worker's tallies, in place of its live one."""
    async with client.pipeline(transaction=False) as pipe:
        pipe.hset(keys.reports(), worker, pack(tally))
        pipe.hdel(keys.reports(), live_field(worker))
        await pipe.execute()


def read_all(client: Any, keys: Keys) -> dict[str, dict[str, Any]]:
    """Every worker's saved tally, by worker id (a blocking client)."""
    out = {}
    for worker, raw in client.hgetall(keys.reports()).items():
        data = unpack(raw)
        if data is not None:
            out[worker.decode("utf-8", "replace")] = data
    return out
