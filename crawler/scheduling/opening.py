"""Opening a worker's frontier: who the worker is, reaching Redis, the layout.

A worker started while Redis restarts (a scrapyd job, a supervisor) waits for
it rather than dying at once, and a worker whose partitioning disagrees with
the frontier's stored layout refuses to start: it would read and write other
keys than the workers already crawling.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError
from scrapy.exceptions import NotConfigured
from scrapy.utils.project import data_path

from crawler.frontier.connection import ConnectError
from crawler.frontier.keys import Keys, layout_json, older_layout
from crawler.redaction import one_line, safe_url, url_password
from crawler.scheduling.health import refused_credentials

logger = logging.getLogger("crawler.scheduling.scheduler")


#: The finish reason of a crawl whose frontier could not be opened; ``scrapy
#: crawl`` exits with 1 on it (crawler/commands/crawl.py).
FRONTIER_UNAVAILABLE = "frontier_unavailable"
#: Where a worker's Redis URL comes from, for messages that say what to check.
URL_SOURCES = "REDIS_URL, REDIS_URL_FILE or $BROADCRAWL_REDIS_URL"


class FrontierUnavailable(ConnectError):
    """The frontier's Redis did not answer when the worker started, or refused it."""


def worker_identity(settings: Any) -> str:
    """``FRONTIER_WORKER_ID``, else ``hostname:pid``: unique per live process."""
    return settings.get("FRONTIER_WORKER_ID") or f"{socket.gethostname()}:{os.getpid()}"


def embedded_folder(jobdir: str | None, spider_name: str, create: bool = True) -> Path:
    """Where a crawl without ``REDIS_URL`` keeps its embedded Redis: in its JOBDIR,
    else in the project's data folder, one per spider (made unless ``create`` is off)."""
    if jobdir:
        return Path(jobdir) / "frontier"
    return Path(data_path(f"frontier/{spider_name}", createdir=create))


async def wait_for_redis(client: Any, url: str, wait_s: float) -> None:
    """Ping until Redis answers, for up to ``wait_s`` (``FRONTIER_CONNECT_WAIT``).

    A refused user or password ends the wait at once: a Redis that restarts
    comes back, a wrong password does not.
    """
    deadline = time.monotonic() + wait_s
    pause, warned = 0.2, False
    secret = url_password(url)
    while True:
        try:
            await client.ping()
        except (RedisError, OSError) as exc:
            said = one_line(exc, secret).rstrip(".")
            if refused_credentials(exc):
                raise FrontierUnavailable(
                    f"Redis at {safe_url(url)} refused this worker's credentials ({said}): "
                    f"check the user and password in {URL_SOURCES}") from None
            if time.monotonic() + pause > deadline:
                raise FrontierUnavailable(
                    f"Redis at {safe_url(url)} did not answer for {wait_s:.0f} s "
                    f"(FRONTIER_CONNECT_WAIT): {said}; check that it runs and that this "
                    f"machine reaches it, and the URL in {URL_SOURCES}") from None
            if not warned:
                logger.warning("Frontier: Redis at %s unreachable (%s); waiting up to %.0f s",
                               safe_url(url), one_line(exc, secret), wait_s)
                warned = True
            await asyncio.sleep(pause)
            pause = min(pause * 2, 5.0)
            continue
        if warned:
            logger.warning("Frontier: Redis at %s answers", safe_url(url))
        return


async def check_layout(client: Any, keys: Keys) -> None:
    """All workers of a frontier must agree on its partitioning (the first one
    to open it stores its own)."""
    meta_key = keys.layout()
    layout = layout_json(keys.partitions, keys.seen_buckets)
    await client.set(meta_key, layout, nx=True)
    stored = (await client.get(meta_key) or b"").decode()
    if stored == layout:
        return
    older = older_layout(stored)
    if older is not None:
        raise NotConfigured(f"frontier {keys.namespace}: {older} (stored layout {stored})")
    raise NotConfigured(
        f"frontier {keys.namespace} was created with {stored}; this worker has {layout}")
