"""Arguments of the broad spider, which arrive as strings.

``scrapy crawl broad -a name=value`` and scrapyd's ``schedule.json`` (every
field that is not ``project``, ``spider``, ``setting``, ``jobid`` or
``_version``) hand the spider text. This module turns that text into typed
values and refuses what it cannot read with a :class:`SpiderArgumentError`
that names the argument and the value, so a job fails at once with a one-line
reason instead of crawling with a limit it silently ignored.

==========================  =================================================
argument                    meaning
==========================  =================================================
``seeds``                   a readable seed file, or ``-`` (standard input);
                            leave it out to join (or resume) a shared frontier
``part``                    the partition this worker's seeds came from: a
                            non-negative integer, a label for logs and metrics
``sitemaps``                ``1/0``, ``true/false``, ``yes/no``, ``on/off``:
                            follow the sitemaps listed in robots.txt (without
                            it, ``ROBOTS_SITEMAPS`` decides); or sitemap URLs
                            (space-separated) that seed the crawl
``depth_limit``             ``DEPTH_LIMIT`` for this job (``0``: no limit)
``max_pages_per_host``      ``ADMISSION_MAX_PAGES_PER_HOST`` for this job
                            (``0``: no cap)
``crawl_id``                the crawl this job belongs to: the same id continues
                            a crawl, a new one starts afresh (its own frontier
                            namespace; ``FRONTIER_CRAWL_ID``)
``revisit``                 fetch done URLs again after this long: seconds, or
                            ``7d``, ``12h``, ``30m`` (``FRONTIER_REVISIT_AFTER``;
                            ``0``: never)
``revisit_seeds``           the seeds' own interval (``FRONTIER_REVISIT_SEEDS``)
``scope``                   where the crawl may go: ``domain``, ``host``,
                            ``prefix`` or ``any`` (``SCOPE``;
                            crawler/scope/rules.py)
``hops``                    links off scope still fetched this far (``SCOPE_HOPS``)
``include``, ``exclude``    scope rules, space-separated: ``re:REGEX``, a URL
                            or a SURT prefix (``SCOPE_INCLUDE``, ``SCOPE_EXCLUDE``)
==========================  =================================================

An argument the spider does not know is refused, with the one it may have
meant (``allowed_domains``: ``scope`` and ``include`` say where a broad
crawl goes).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scrapy.exceptions import UsageError
from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings

from crawler.frontier.keys import crawl_namespace
from crawler.revisit import parse_duration
from crawler.scope.rules import MODES, ScopeError, parse_rules
from crawler.urls import request_url

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})

#: Arguments that set a setting for the job, and the setting each one sets.
SETTING_OF: dict[str, str] = {
    "depth_limit": "DEPTH_LIMIT",
    "max_pages_per_host": "ADMISSION_MAX_PAGES_PER_HOST",
    "scope": "SCOPE",
    "hops": "SCOPE_HOPS",
    "include": "SCOPE_INCLUDE",
    "exclude": "SCOPE_EXCLUDE",
}

#: The arguments the frontier scheduler reads from the spider in place of a setting.
REVISIT_ARGS: dict[str, str] = {"revisit": "FRONTIER_REVISIT_AFTER",
                                "revisit_seeds": "FRONTIER_REVISIT_SEEDS"}

#: Arguments other crawlers (or Scrapy's own spiders) take, and what says it here.
INSTEAD: dict[str, str] = {
    "allowed_domains": "scope=domain (the seeds' registered domains), scope=host, "
                       "or include=URL",
    "start_urls": "seeds=FILE",
    "max_depth": "depth_limit=N",
    "extra_hops": "hops=N",
}

#: Every argument the broad spider reads.
KNOWN: frozenset[str] = frozenset({"seeds", "part", "sitemaps", "crawl_id", "revisit",
                                   "revisit_seeds", *SETTING_OF})

#: Arguments that others pass and Scrapy keeps as attributes: not typos.
#: (``_job`` is scrapyd's job id; ``name`` is Scrapy's.)
PASSED_THROUGH: frozenset[str] = frozenset({"_job", "name"})


class SpiderArgumentError(UsageError, ValueError):
    """A spider argument that cannot be used; the message names it and its value."""


def to_bool(name: str, value: object) -> bool:
    """``1/0``, ``true/false``, ``yes/no``, ``on/off`` (any case) as a bool."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SpiderArgumentError(
        f"spider argument {name}={value!r} is not a yes/no value "
        "(use 1/0, true/false, yes/no or on/off)")


def to_sitemaps(name: str, value: object) -> bool | tuple[str, ...]:
    """A yes/no value (:func:`to_bool`), or sitemap URLs separated by spaces."""
    text = value if isinstance(value, str) else None
    if text is None or "://" not in text:
        return to_bool(name, value)
    urls = []
    for word in text.split():
        url = request_url(word)
        if url is None:
            raise SpiderArgumentError(
                f"spider argument {name}={value!r}: {word!r} is not an http(s) URL "
                "(give yes/no, or the URLs of sitemaps)")
        urls.append(url)
    return tuple(urls)


def to_count(name: str, value: object) -> int:
    """A non-negative integer written in decimal (``"0"``, ``"25"``)."""
    text = value.strip() if isinstance(value, str) else None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif text is not None and re.fullmatch(r"-?[0-9]+", text):
        number = int(text)
    else:
        raise SpiderArgumentError(
            f"spider argument {name}={value!r} is not a whole number (expected 0, 1, 2, ...)")
    if number < 0:
        raise SpiderArgumentError(f"spider argument {name}={value!r} must not be negative")
    return number


def to_seed_source(name: str, value: object) -> str:
    """``-`` (standard input) or the path of a regular file this process can read."""
    text = str(value)
    if text == "-":
        return text
    if not text.strip():
        raise SpiderArgumentError(
            f"spider argument {name}={value!r} is empty: give a seed file, '-' for standard "
            "input, or leave the argument out to join the shared frontier")
    path = Path(text).expanduser()
    where = f"{name}={text!r}" if path.is_absolute() else f"{name}={text!r} ({path.absolute()})"
    if not path.exists():
        raise SpiderArgumentError(f"spider argument {where}: no such file")
    if not path.is_file():
        raise SpiderArgumentError(f"spider argument {where}: not a regular file")
    if not os.access(path, os.R_OK):
        raise SpiderArgumentError(f"spider argument {where}: not readable by this process")
    return str(path)


def to_crawl_id(name: str, value: object) -> str:
    """A crawl id as :func:`crawler.frontier.keys.crawl_namespace` accepts it."""
    text = str(value).strip()
    try:
        crawl_namespace("%(spider)s", "x", text)
    except ValueError as exc:
        raise SpiderArgumentError(f"spider argument {exc}") from None
    return text


def to_scope(name: str, value: object) -> str:
    """One of the scope modes (:data:`crawler.scope.rules.MODES`), any case."""
    text = str(value).strip().lower()
    if text not in MODES:
        raise SpiderArgumentError(
            f"spider argument {name}={value!r} is not a scope (use one of {', '.join(MODES)})")
    return text


def to_rules(name: str, value: object) -> str:
    """Space-separated scope rules, each readable (:func:`crawler.scope.rules.parse_rules`)."""
    text = str(value).strip()
    try:
        parse_rules(text)
    except ScopeError as exc:
        raise SpiderArgumentError(f"spider argument {name}={value!r}: {exc}") from None
    return text


def to_duration(name: str, value: object) -> float:
    """Seconds, or a number with a unit: ``90``, ``45s``, ``30m``, ``12h``, ``7d``, ``2w``."""
    try:
        return parse_duration(value, name)
    except ValueError as exc:
        raise SpiderArgumentError(f"spider argument {exc}") from None


@dataclass(frozen=True, slots=True)
class BroadArgs:
    """The broad spider's arguments, converted. ``None``: not given."""

    seeds: str | None = None
    part: int | None = None
    sitemaps: bool | None = None
    depth_limit: int | None = None
    max_pages_per_host: int | None = None
    crawl_id: str | None = None
    revisit: float | None = None
    revisit_seeds: float | None = None
    scope: str | None = None
    hops: int | None = None
    include: str | None = None
    exclude: str | None = None
    #: Sitemaps (or sitemap indexes) that seed the crawl (``sitemaps=URL ...``).
    sitemap_urls: tuple[str, ...] = ()

    @classmethod
    def parse(
        cls,
        seeds: object = None,
        part: object = None,
        sitemaps: object = None,
        depth_limit: object = None,
        max_pages_per_host: object = None,
        crawl_id: object = None,
        revisit: object = None,
        revisit_seeds: object = None,
        scope: object = None,
        hops: object = None,
        include: object = None,
        exclude: object = None,
    ) -> BroadArgs:
        """Convert and check the arguments (:class:`SpiderArgumentError` on the first bad one)."""
        maps = None if sitemaps is None else to_sitemaps("sitemaps", sitemaps)
        return cls(
            seeds=None if seeds is None else to_seed_source("seeds", seeds),
            part=None if part is None else to_count("part", part),
            sitemaps=maps if isinstance(maps, bool) else None,
            sitemap_urls=maps if isinstance(maps, tuple) else (),
            depth_limit=None if depth_limit is None else to_count("depth_limit", depth_limit),
            max_pages_per_host=None if max_pages_per_host is None
            else to_count("max_pages_per_host", max_pages_per_host),
            crawl_id=None if crawl_id is None else to_crawl_id("crawl_id", crawl_id),
            revisit=None if revisit is None else to_duration("revisit", revisit),
            revisit_seeds=None if revisit_seeds is None
            else to_duration("revisit_seeds", revisit_seeds),
            scope=None if scope is None else to_scope("scope", scope),
            hops=None if hops is None else to_count("hops", hops),
            include=None if include is None else to_rules("include", include),
            exclude=None if exclude is None else to_rules("exclude", exclude),
        )

    def settings(self) -> dict[str, int | str]:
        """The settings these arguments set, by name (only those given)."""
        given = {name: getattr(self, name) for name in SETTING_OF}
        return {SETTING_OF[name]: value for name, value in given.items() if value is not None}

    def apply(self, settings: BaseSettings) -> None:
        """Set :meth:`settings` on the crawler's settings, at ``spider`` priority.

        They override the project's settings. A different value of the same
        setting given at a higher priority (``-s NAME=VALUE``, scrapyd's
        ``setting=NAME=VALUE``) is a contradiction and an error: one of the two
        would be ignored.
        """
        spider_priority = SETTINGS_PRIORITIES["spider"]
        arg_of = {setting: arg for arg, setting in SETTING_OF.items()}
        for setting, value in self.settings().items():
            if settings.frozen:  # the spider was made after the crawler was configured
                if not _same(settings, setting, value):
                    raise SpiderArgumentError(
                        f"spider argument {arg_of[setting]}={value} comes too late: the "
                        f"crawler's settings are frozen with {setting}={settings.get(setting)}")
                continue
            priority = settings.getpriority(setting) or 0
            if priority > spider_priority and not _same(settings, setting, value):
                where = next((k for k, v in SETTINGS_PRIORITIES.items() if v == priority),
                             str(priority))
                raise SpiderArgumentError(
                    f"spider argument {arg_of[setting]}={value} contradicts "
                    f"{setting}={settings.get(setting)} (set at {where} priority): give one")
            settings.set(setting, value, priority="spider")


def _same(settings: BaseSettings, setting: str, value: int | str) -> bool:
    """Whether the setting holds ``value`` already (a list setting: the same words)."""
    if isinstance(value, int):
        return settings.getint(setting) == value
    current = settings.get(setting)
    if isinstance(current, (list, tuple)):
        current = " ".join(str(word) for word in current)
    return str(current or "").split() == value.split()


def unknown(names: Iterable[str], known: Iterable[str] = KNOWN) -> str | None:
    """A one-line refusal of the first argument the spider does not know, naming
    what to use instead; ``None`` when every one is known."""
    for name in names:
        if name in known or name in PASSED_THROUGH:
            continue
        instead = INSTEAD.get(name) or lookalikes([name], known).get(name)
        hint = f": use {instead}" if instead else f" (known: {', '.join(sorted(known))})"
        return f"spider argument {name} is not an argument of the broad spider{hint}"
    return None


def lookalikes(names: Iterable[str], known: Iterable[str] = KNOWN) -> dict[str, str]:
    """Unknown argument names that look like a typo of a known one, with that one."""
    known = sorted(known)
    found = {}
    for name in names:
        if name in known or name in PASSED_THROUGH:
            continue
        close = difflib.get_close_matches(name.lower().replace("-", "_"), known, n=1, cutoff=0.75)
        if close:
            found[name] = close[0]
    return found


def describe(args: BroadArgs, extra: Mapping[str, Any] | None = None) -> str:
    """``name=value`` of the arguments given, for the log line a job starts with."""
    given = {name: getattr(args, name)
             for name in ("seeds", "part", "sitemaps", "crawl_id", "revisit", "revisit_seeds",
                          *SETTING_OF)}
    shown = [f"{k}={v}" for k, v in given.items() if v is not None]
    if args.sitemap_urls:
        shown.append("sitemaps=" + " ".join(args.sitemap_urls))
    shown += [f"{k}={v!r}" for k, v in sorted((extra or {}).items())]
    return ", ".join(shown) or "none"
