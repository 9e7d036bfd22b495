"""Per-site rules keyed by SURT prefix (crawler/siterules.py): pure decisions."""

from __future__ import annotations

import pytest

from crawler.siterules import (
    SiteRule,
    SiteRuleError,
    SiteRules,
    SiteSettings,
    parse_rule,
    read_rules,
    site_prefix,
)


@pytest.mark.parametrize(("site", "prefix"), [
    ("example.com", "com,example)"), ("www.Example.com", "com,example)"),
    ("https://docs.example.org:443/x", "org,example,docs)"),
    ("com,example,", "com,example,"), ("COM,Example)", "com,example)"),
])
def test_a_rules_site_is_a_host_a_url_or_a_surt_prefix(site: str, prefix: str) -> None:
    assert site_prefix(site) == prefix


def test_the_longest_prefix_that_sets_a_field_wins() -> None:
    rules = SiteRules(r for r in read_rules([
        '{"site": "com,example,", "delay": 2, "budget_pages": 500}',
        '{"site": "forum.example.com", "delay": 5, "concurrency": 1}',
        '{"site": "example.com", "scope": "include"}',
    ]) if isinstance(r, SiteRule))
    assert rules.for_host("forum.example.com") == SiteSettings(
        delay=5.0, concurrency=1, budget_pages=500)
    assert rules.for_host("img.example.com") == SiteSettings(delay=2.0, budget_pages=500)
    assert rules.for_host("example.com") == SiteSettings(scope="include")
    assert not rules.for_host("example.org")
    assert rules.scope_rules("include") == ["com,example)"]


def test_bad_lines_are_reported_with_their_numbers_and_the_rest_still_apply() -> None:
    lines = ["# a comment", "", '{"site": "a.test", "delay": 1}', "not json",
             '{"delay": 1}', '{"site": "b.test", "speed": 3}', '{"site": "c.test", "delay": -1}',
             '{"site": "d.test", "concurrency": 0}', '{"site": "e.test", "scope": "maybe"}',
             '{"site": "f.test", "budget_pages": 2.5}', '{"site": "g.test", "budget_pages": 7}']
    parsed = list(read_rules(lines, "rules.jsonl"))
    errors = [str(p) for p in parsed if isinstance(p, SiteRuleError)]
    assert [e.split(":")[1] for e in errors] == ["4", "5", "6", "7", "8", "9", "10"]
    assert "rules.jsonl:6: unknown field(s) speed" in errors[2]
    assert [p.text for p in parsed if isinstance(p, SiteRule)] == ["a.test", "g.test"]
    assert parse_rule('{"site": "a.test", "budget_seconds": 90}').settings.budget_seconds == 90.0
