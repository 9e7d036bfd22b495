"""What a sitemap says about its pages, as pure decisions.

A site's sitemap names the pages it wants crawled, and for each may say how
important it is (``<priority>``, 0.0 to 1.0, 0.5 when absent) and when it
last changed (``<lastmod>``, W3C datetime). A crawl under a budget fetches
the important and the fresh first: :func:`entry_priority` turns both into a
request priority, in the units of a depth level (``DEPTH_PRIORITY=1``) and of
an inlink (``FRONTIER_INLINK_PRIORITY``), so a page the site calls important
goes two levels ahead of one it calls unimportant.

A page's ``lastmod`` also rides with its request (:data:`LASTMOD_META`,
:func:`entry_lastmod`): the frontier keeps it in the URL's record, and when
a sitemap read again says the page changed after the crawl last fetched it,
its revisit is due at once rather than at the end of its interval.

A seed line is a sitemap when its path ends in ``.xml`` or ``.xml.gz``
(:func:`is_sitemap_url`): ``https://example.com/sitemap.xml``,
``/sitemap_index.xml``, ``/news-sitemap.xml.gz``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

#: A page changed this lately is fetched a level sooner; one unchanged for
#: this long a level later.
FRESH = timedelta(days=7)
#: The request meta key of when a page last changed by its sitemap's word
#: (Unix seconds): kept in the frontier's record of the URL ("lm").
LASTMOD_META = "sitemap_lastmod"
STALE = timedelta(days=365)


def is_sitemap_url(url: str) -> bool:
    """Whether a seed URL names a sitemap (its path ends in .xml or .xml.gz)."""
    path = urlsplit(url).path.lower()
    return path.endswith((".xml", ".xml.gz"))


def entry_priority(entry: Mapping[str, str], now: datetime) -> int:
    """The request priority of a sitemap's page: -2 to +2 from its
    ``priority``, one more if its ``lastmod`` is within :data:`FRESH` of
    ``now``, one less if older than :data:`STALE`. Values a site gets wrong
    (not a number, a date that does not parse) count as absent."""
    try:
        weight = min(max(float(entry.get("priority", 0.5)), 0.0), 1.0)
    except ValueError:
        weight = 0.5
    priority = round((weight - 0.5) * 4)
    changed = parse_lastmod(entry.get("lastmod", ""))
    if changed is not None:
        age = now - changed
        if age <= FRESH:
            priority += 1
        elif age >= STALE:
            priority -= 1
    return priority


def entry_lastmod(entry: Mapping[str, str], now: datetime) -> int | None:
    """When a sitemap's page last changed, in Unix seconds (None: not said, or
    not a date). Never later than ``now``: a site that dates its pages in
    the future would otherwise have them fetched again at every reading."""
    changed = parse_lastmod(entry.get("lastmod", ""))
    return None if changed is None else int(min(changed, now).timestamp())


def parse_lastmod(text: str) -> datetime | None:
    """A sitemap's W3C datetime (``2024-05-01``, ``2024-05-01T12:00:00+02:00``,
    ``...Z``) as an aware datetime, or None."""
    text = text.strip()
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
