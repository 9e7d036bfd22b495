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
from collections import Counter
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

# Calendar-like: a year followed by a month, as path segments (``/2031/05``)
# or as a date (``2031-05``, ``2031-05-01``, ``20310501``) anywhere in the path
# or query. A bare four-digit number (``/products/1850``) is not enough.
_CALENDAR = re.compile(
    r"(?<![0-9])(1[89][0-9]{2}|2[01][0-9]{2})"
    r"(?:/|-|_|%2F)?(0?[1-9]|1[0-2])(?:(?:/|-|_|%2F)?(?:0?[1-9]|[12][0-9]|3[01]))?(?![0-9])"
)
_YEAR_PARAM = re.compile(r"(?:^|&)(?:year|yr|y)=(1[89][0-9]{2}|2[01][0-9]{2})(?:&|$)", re.I)


@dataclass(frozen=True, slots=True)
class TrapRules:
    """Heuristics for URLs that only exist because a page generates them.

    ``max_segments``: more path segments than this is a trap (real sites
    rarely nest deeper than a dozen). ``max_segment_repeats``: the same
    segment more than this many times (``/a/b/a/b/a/b``) is a relative-link
    loop. A four-digit year outside ``[now - years_past, now + years_future]``
    in the path or query is an endless calendar; archives inside the window
    are still crawled, and the per-host page cap bounds the rest.
    ``max_query_params``: session and filter combinatorics.
    A value of 0 switches a rule off.
    """

    max_segments: int = 24
    max_segment_repeats: int = 2
    years_past: int = 25
    years_future: int = 2
    max_query_params: int = 16

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
        if self.max_segment_repeats and _most_repeats(segments) > self.max_segment_repeats:
            return "trap-repeated-segment"
        if self.max_query_params and parts.query.count("&") + 1 > self.max_query_params:
            return "trap-many-params"
        if self.years_past or self.years_future:
            now = year if year is not None else dt.datetime.now(dt.UTC).year
            if _year_out_of_window(parts.path, parts.query, now, self):
                return "trap-calendar"
        return None


def _most_repeats(segments: list[str]) -> int:
    return Counter(segments).most_common(1)[0][1] if segments else 0


def _calendar_years(path: str, query: str) -> list[int]:
    years = [int(m.group(1)) for m in _CALENDAR.finditer(path)]
    years += [int(m.group(1)) for m in _CALENDAR.finditer(query)]
    years += [int(y) for y in _YEAR_PARAM.findall(query)]
    return years


def _year_out_of_window(path: str, query: str, now: int, rules: TrapRules) -> bool:
    low = now - rules.years_past if rules.years_past else 0
    high = now + rules.years_future if rules.years_future else 10_000
    return any(not low <= y <= high for y in _calendar_years(path, query))
