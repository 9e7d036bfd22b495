"""How a crawl was started, kept with its frontier, and given to every later run.

A crawl outlives its runs: it is stopped and resumed, joined by more workers,
scheduled again by scrapyd. Heritrix keeps a job's configuration with the job
for this reason; here the first worker to open a crawl stores the values of
the settings that define it (:data:`CRAWL_SETTINGS`: what it crawls, where it
may connect, how politely) in the crawl's record (``CRAWL.config``, JSON).

Every later ``scrapy crawl`` (:mod:`crawler.commands.crawl`) and ``scrapy
frontier`` command reads them back before anything is built
(:func:`adopt`), at :data:`STORED_PRIORITY`: above the project's settings, so
that the crawl keeps the values it was started with whatever the project or
scrapyd's deployment now says, and below a spider argument and ``-s``, so
that a value given explicitly wins. Each difference is said in one line, and
an explicit one is stored for the runs after (the worker stores the names
:func:`adopt` reports changed, :data:`CHANGED_SETTING`). A worker that was
not started by ``scrapy crawl`` (a script's ``CrawlerProcess``) stores the
crawl's configuration if it is the first, and otherwise warns of each value
it runs with that differs from the stored one (:func:`differences`).

Per-run settings are not part of it: logs, feeds, ``JOBDIR``, the Redis, the
worker's id, ``CLOSESPIDER_*`` limits of one run, the DNS servers of a machine.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from crawler.frontier.keys import Keys
from crawler.frontier.schema import CRAWL

#: The settings that define a crawl (the spider arguments ``scope``, ``hops``,
#: ``include``, ``exclude``, ``depth_limit``, ``max_pages_per_host``,
#: ``revisit`` and ``revisit_seeds`` set some of them).
CRAWL_SETTINGS: Final = (
    # what it crawls
    "SCOPE", "SCOPE_HOPS", "SCOPE_INCLUDE", "SCOPE_EXCLUDE", "DEPTH_LIMIT",
    "ADMISSION_MAX_PAGES_PER_HOST",
    "BUDGET_HOST_PAGES", "BUDGET_HOST_BYTES", "BUDGET_HOST_SECONDS",
    "BUDGET_DOMAIN_PAGES", "BUDGET_DOMAIN_BYTES", "BUDGET_DOMAIN_SECONDS",
    "FRONTIER_REVISIT_AFTER", "FRONTIER_REVISIT_SEEDS",
    # where it may connect
    "ADDRESS_GUARD_ENABLED", "ADDRESS_GUARD_ALLOW", "ADDRESS_GUARD_ALLOW_RESOLVED",
    "ADDRESS_GUARD_ALLOW_HOSTS",
    # how politely
    "ROBOTSTXT_OBEY", "DOWNLOAD_DELAY", "CONCURRENT_REQUESTS_PER_DOMAIN",
    "FRONTIER_DOMAIN_CONCURRENCY", "FRONTIER_DOMAIN_DELAY",
    "FRONTIER_IP_CONCURRENCY", "FRONTIER_IP_DELAY",
)
#: The priority of a stored value: above the project's settings (20), below a
#: spider argument (30) and the command line (40).
STORED_PRIORITY: Final = 25
#: The lowest priority of a value given explicitly (a spider argument).
EXPLICIT_PRIORITY: Final = 30
#: Set by ``scrapy crawl`` for the worker: the crawl settings this run gives
#: explicitly with another value than the stored one, which it stores.
CHANGED_SETTING: Final = "FRONTIER_CRAWL_CHANGED"


@dataclass(frozen=True, slots=True)
class Adopted:
    """What :func:`adopt` did: a line per difference, and the names changed."""

    lines: list[str]
    changed: list[str]


def read(client: Any, keys: Keys) -> dict[str, Any] | None:
    """The crawl's stored configuration (a blocking client), None if it has none."""
    return decode(client.hget(keys.crawl(), CRAWL.config))


async def aread(client: Any, keys: Keys) -> dict[str, Any] | None:
    """:func:`read` on an asyncio client."""
    return decode(await client.hget(keys.crawl(), CRAWL.config))


def decode(raw: bytes | str | None) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        stored = json.loads(raw)
    except ValueError:
        return None
    return stored if isinstance(stored, dict) else None


def effective(settings: Any, spider: Any = None) -> dict[str, Any]:
    """The crawl settings a worker runs with (the spider's revisit arguments
    included, which it reads before the settings)."""
    config = {name: _plain(settings.get(name)) for name in CRAWL_SETTINGS}
    for name, arg in (("FRONTIER_REVISIT_AFTER", "revisit"),
                      ("FRONTIER_REVISIT_SEEDS", "revisit_seeds")):
        value = getattr(spider, arg, None)
        if value is not None:
            config[name] = value
    return config


async def store(client: Any, keys: Keys, config: Mapping[str, Any],
                changed: Iterable[str] = ()) -> dict[str, Any]:
    """Store ``config`` if the crawl has none yet, else the ``changed`` names of
    it (and the names the stored one lacks: settings that became crawl settings
    since); the configuration stored now."""
    key = keys.crawl()
    if await client.hsetnx(key, CRAWL.config, json.dumps(dict(config), sort_keys=True)):
        return dict(config)
    stored = await aread(client, keys) or {}
    names = [name for name in config if name in set(changed) or name not in stored]
    if names:
        stored.update({name: config[name] for name in names})
        await client.hset(key, CRAWL.config, json.dumps(stored, sort_keys=True))
    return stored


def adopt(settings: Any, stored: Mapping[str, Any], given: Mapping[str, Any],
          crawl: str) -> Adopted:
    """Put the ``stored`` values in ``settings`` (not frozen) at :data:`STORED_PRIORITY`.

    ``given``: crawl settings the spider's arguments give, by name; they and
    the settings given at :data:`EXPLICIT_PRIORITY` or above win, and are
    reported changed when they differ from the stored value.
    """
    lines, changed, kept = [], [], []
    for name in CRAWL_SETTINGS:
        if name not in stored:
            continue
        value = stored[name]
        explicit = name in given or (settings.getpriority(name) or 0) >= EXPLICIT_PRIORITY
        current = given[name] if name in given else settings.get(name)
        if explicit:
            if not same(current, value):
                changed.append(name)
                lines.append(f"Crawl {crawl} was started with {name}={show(value)}; this run "
                             f"gives {show(current)}, which applies and is kept for the next runs")
            continue
        if not same(current, value):
            kept.append(f"{name}={show(value)} (the project's: {show(current)})")
        settings.set(name, value, priority=STORED_PRIORITY)
    if kept:
        lines.append(f"Crawl {crawl} keeps what it was started with: {', '.join(kept)}; "
                     "-s NAME=VALUE (or the spider argument) changes one")
    return Adopted(lines, changed)


def differences(stored: Mapping[str, Any], config: Mapping[str, Any],
                changed: Iterable[str] = ()) -> list[str]:
    """``NAME=RUN (stored: VALUE)`` for each crawl setting a worker runs with
    that is not the stored one and that it was not told it changed."""
    skip = set(changed)
    return [f"{name}={show(config[name])} (the crawl's: {show(stored[name])})"
            for name in CRAWL_SETTINGS
            if name in stored and name in config and name not in skip
            and not same(config[name], stored[name])]


def described(stored: Mapping[str, Any]) -> str:
    """The stored values that say something (not empty, not off), for status lines."""
    return ", ".join(f"{name}={show(stored[name])}" for name in CRAWL_SETTINGS
                     if name in stored and _norm(stored[name]) not in ("", "0"))


def show(value: Any) -> str:
    """A value as ``-s`` would give it: a list as comma-separated words."""
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return "" if value is None else str(value)


def same(a: Any, b: Any) -> bool:
    """Whether two values of a setting mean the same (``"1.0"`` and 1, ``"a,b"``
    and ``["a", "b"]``, ``"True"`` and True)."""
    return _norm(a) == _norm(b)


def _norm(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, list | tuple):
        words = [str(v).strip() for v in value]
    else:
        text = "" if value is None else str(value).strip()
        if text.lower() in ("true", "false"):
            return "1" if text.lower() == "true" else "0"
        words = text.replace(",", " ").split()
    if len(words) == 1:
        try:
            number = float(words[0])
        except ValueError:
            return words[0]
        return str(int(number)) if number.is_integer() else repr(number)
    return " ".join(words)


def _plain(value: Any) -> Any:
    """A setting's value as JSON can keep it."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return str(value)
