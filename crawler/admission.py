"""Which discovered URLs deserve a place in the crawl.

A broad crawl finds far more URLs than it can or should fetch: calendars that
link to next month forever, relative links that grow ``/a/b/a/b/...``, hosts
with millions of pages. These rules are plain functions of a URL so that the
frontier's intake (:mod:`crawler.scheduling.intake`) and the spider
middleware used with Scrapy's own scheduler apply exactly the same
decisions, and tests need no crawl.

Depth and URL length are left to Scrapy's own ``DEPTH_LIMIT`` and
``URLLENGTH_LIMIT``, which every Scrapy user already knows.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

# A date by its shape: a four-digit year and a month (and a day), with a
# separator between them (``/2031/05``, ``2031-05-01``, ``2031_05``), in the
# path or starting a parameter's value. A number alone is never a date, however it
# reads (``/pub/18204``, ``?bpo=18011``, ``Q190512``, ``tt1853728``): real
# sites number their issues, items and records that way.
_YEAR = r"(1[89][0-9]{2}|2[01][0-9]{2})"
_SEP = r"(?:/|-|_|%2F)"
_DATE = re.compile(
    rf"(?<![0-9]){_YEAR}{_SEP}(?:0?[1-9]|1[0-2])(?:{_SEP}(?:0?[1-9]|[12][0-9]|3[01]))?(?![0-9])",
    re.I)
# ...or by its name: a parameter named for a year holds a year, one named for
# a date a year and month run together (``?year=2090``, ``?date=20310501``).
_YEAR_NAMES = frozenset({"year", "yr", "y"})
_DATE_NAMES = frozenset({"date", "day", "month", "dt", "d", "ym", "ymd", "from", "to", "since",
                         "until", "start", "end"})
_YEAR_VALUE = re.compile(_YEAR)
_COMPACT_DATE = re.compile(rf"{_YEAR}(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])?")


@dataclass(frozen=True, slots=True)
class TrapRules:
    """Heuristics for URLs that only exist because a page generates them.

    ``max_segments``: more path segments than this is a trap (real sites
    rarely nest deeper than a dozen). ``max_segment_repeats``: a run of
    segments repeated in a row more than this many times (``/a/b/a/b/a/b``)
    is a relative-link loop growing the path (a part of a run counts: at
    ``/a/b/a/b/a`` it has grown past two); a directory named again
    further on (``/django/django/blob/main/django/``) is not. A date (by its
    shape or its parameter's name, see ``_DATE``) outside
    ``[now - years_past, now + years_future]`` is an endless calendar;
    archives inside the window are still crawled (35 years: back to the
    web's beginning), and the per-host page cap bounds the rest.
    ``max_query_params``: session and filter combinatorics (real search
    forms send 20 and more).
    A value of 0 switches a rule off.
    """

    max_segments: int = 24
    max_segment_repeats: int = 2
    years_past: int = 35
    years_future: int = 2
    max_query_params: int = 32

    @classmethod
    def from_settings(cls, settings: Any) -> TrapRules:
        """Read the ``ADMISSION_TRAP_*`` settings, falling back to the defaults."""
        default = cls()
        prefix = "ADMISSION_TRAP_"
        return cls(
            **{
                name: settings.getint(prefix + name.upper(), getattr(default, name))
                for name in cls.__dataclass_fields__
            }
        )

    def check(self, url: str, *, year: int | None = None) -> str | None:
        """Return the name of the trap rule ``url`` breaks, or ``None``."""
        parts = urlsplit(url)
        segments = [s for s in parts.path.split("/") if s]
        if self.max_segments and len(segments) > self.max_segments:
            return "trap-deep-path"
        if self.max_segment_repeats and _longest_run(segments) > self.max_segment_repeats:
            return "trap-repeated-segment"
        if self.max_query_params and parts.query.count("&") + 1 > self.max_query_params:
            return "trap-many-params"
        if self.years_past or self.years_future:
            now = year if year is not None else dt.datetime.now(dt.UTC).year
            if _year_out_of_window(parts.path, parts.query, now, self):
                return "trap-calendar"
        return None


def _longest_run(segments: list[str]) -> float:
    """The most times a run of segments repeats in a row, a part of one counted
    as a part (``a/b/a/b/a/b``: 3, ``a/b/a/b/a``: 2.5, ``x/x``: 2, ``a/x/a``: 1).
    Paths are short (``max_segments`` is checked first)."""
    best = min(len(segments), 1)
    for period in range(1, len(segments) // 2 + 1):
        streak = 0  # segments in a row equal to the one a period before
        for i in range(period, len(segments)):
            streak = streak + 1 if segments[i] == segments[i - period] else 0
            best = max(best, (streak + period) / period)
    return best


def is_dated(url: str) -> bool:
    """Whether a URL names a date, by its shape or a parameter's name (see
    ``_DATE``): a calendar's day or month, a dated archive's."""
    parts = urlsplit(url)
    return bool(_calendar_years(parts.path, parts.query))


def _calendar_years(path: str, query: str) -> list[int]:
    """The years of the dates in a URL's path and query (see ``_DATE``)."""
    years = [int(m.group(1)) for m in _DATE.finditer(path)]
    for name, value in parse_qsl(query, keep_blank_values=True):
        if m := _DATE.match(value):  # (a value that is a date, not text that quotes one)
            years.append(int(m.group(1)))
        name = name.lower()
        named = (_YEAR_VALUE if name in _YEAR_NAMES
                 else _COMPACT_DATE if name in _DATE_NAMES else None)
        if named is not None and (m := named.fullmatch(value)):
            years.append(int(m.group(1)))
    return years


def _year_out_of_window(path: str, query: str, now: int, rules: TrapRules) -> bool:
    low = now - rules.years_past if rules.years_past else 0
    high = now + rules.years_future if rules.years_future else 10_000
    return any(not low <= y <= high for y in _calendar_years(path, query))
