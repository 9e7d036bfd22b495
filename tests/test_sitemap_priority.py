"""What a sitemap entry is worth (crawler/sitemaps.py): pure decisions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from crawler.sitemaps import entry_lastmod, entry_priority, is_sitemap_url, parse_lastmod

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("entry", "priority"), [
    ({}, 0), ({"priority": "0.5"}, 0), ({"priority": "1.0"}, 2), ({"priority": "0.0"}, -2),
    ({"priority": "0.8"}, 1), ({"priority": "7"}, 2), ({"priority": "high"}, 0),
    ({"lastmod": "2026-12-01"}, 1), ({"lastmod": "2026-12-05T10:00:00+02:00"}, 1),
    ({"lastmod": "2025-06-01T00:00:00Z"}, -1), ({"lastmod": "2026-10-01"}, 0),
    ({"lastmod": "yesterday"}, 0), ({"priority": "1.0", "lastmod": "2026-12-06"}, 3),
])
def test_a_pages_priority_is_its_sitemaps_word_and_its_freshness(
        entry: dict[str, str], priority: int) -> None:
    assert entry_priority(entry, NOW) == priority


@pytest.mark.parametrize(("entry", "seconds"), [
    ({}, None), ({"lastmod": "yesterday"}, None),
    ({"lastmod": "2026-12-01"}, int(datetime(2026, 12, 1, tzinfo=UTC).timestamp())),
    ({"lastmod": "2026-12-05T10:00:00+02:00"},
     int(datetime(2026, 12, 5, 8, tzinfo=UTC).timestamp())),
    ({"lastmod": "2031-01-01"}, int(NOW.timestamp())),  # (a date to come: now)
])
def test_a_pages_lastmod_is_kept_in_seconds_and_never_later_than_now(
        entry: dict[str, str], seconds: int | None) -> None:
    assert entry_lastmod(entry, NOW) == seconds


def test_sitemap_seeds_are_told_by_their_path() -> None:
    assert is_sitemap_url("https://example.com/sitemap.xml")
    assert is_sitemap_url("https://example.com/news/Sitemap-1.XML.gz")
    assert not is_sitemap_url("https://example.com/sitemap")
    assert not is_sitemap_url("https://example.com/page.html?f=a.xml")
    assert parse_lastmod("2026-12-01") == datetime(2026, 12, 1, tzinfo=UTC)
    assert parse_lastmod("") is None
