"""A crawl's scope as pure decisions (crawler/scope/rules.py): modes, rules, hops."""

from __future__ import annotations

import pytest

from crawler.scope.rules import (
    Rule,
    Rules,
    Scope,
    ScopeError,
    Verdict,
    host_name,
    parse_rules,
    surt_of,
    surt_prefix,
)


@pytest.mark.parametrize(("url", "prefix"), [
    ("https://example.com/docs/intro", "com,example)/docs/"),
    ("https://www.Example.com/docs/", "com,example)/docs/"),
    ("http://example.com", "com,example)/"),
    ("http://example.com/a?x=/y/", "com,example)/"),
    ("http://example.com:8080/p/q", "com,example:8080)/p/"),
    ("http://127.0.0.5/x/", "5,0,0,127)/x/"),
])
def test_a_seeds_surt_prefix_is_its_host_and_path_to_the_last_slash(url: str,
                                                                   prefix: str) -> None:
    assert surt_prefix(url) == prefix


def test_surt_forms_keep_the_paths_case_and_slashes() -> None:
    assert surt_of("https://EXAMPLE.com:443/Docs/") == "com,example)/Docs/"
    assert surt_of("http://example.com/a?b=2&a=1") == "com,example)/a?b=2&a=1"


def _scope(mode: str, *seeds: str, **kw: object) -> Scope:
    scope = Scope(mode, **kw)  # type: ignore[arg-type]
    for seed in seeds:
        scope.add_seed(seed)
    return scope


@pytest.mark.parametrize(("mode", "url", "fetch"), [
    ("domain", "https://docs.example.com/a", True),
    ("domain", "http://example.com/", True),
    ("domain", "https://shop.example.com/", True),
    ("domain", "https://example.org/", False),
    ("domain", "https://example.com.evil.test/", False),
    ("host", "https://docs.example.com/a", True),
    ("host", "https://www.docs.example.com/a", True),
    ("host", "http://docs.example.com:8080/a", True),
    ("host", "https://example.com/", False),
    ("prefix", "https://docs.example.com/guide/x", True),
    ("prefix", "http://docs.example.com/guide/", True),
    ("prefix", "https://docs.example.com/guidebook", False),
    ("prefix", "https://docs.example.com/", False),
    ("any", "https://anything.test/", True),
])
def test_each_mode_covers_what_its_seeds_do(mode: str, url: str, fetch: bool) -> None:
    scope = _scope(mode, "https://docs.example.com/guide/start")
    verdict = scope.decide(url)
    assert verdict.fetch is fetch
    assert verdict.rule == ("in-scope" if fetch else mode)


def test_a_name_under_a_multi_label_suffix_is_one_domain() -> None:
    scope = _scope("domain", "https://www.example.co.uk/")
    assert scope.decide("https://img.example.co.uk/").fetch
    assert not scope.decide("https://other.co.uk/").fetch


def test_exclude_wins_and_include_lets_in() -> None:
    scope = _scope("domain", "https://example.com/",
                   include=parse_rules("re:^https://cdn\\.test/ https://partner.test/shared/"),
                   exclude=parse_rules("com,example)/private/ re:\\.pdf$"))
    assert scope.decide("https://example.com/private/x") == Verdict(False, "exclude")
    assert scope.decide("https://example.com/doc.pdf") == Verdict(False, "exclude")
    assert scope.decide("https://cdn.test/lib.js") == Verdict(True, "in-scope")
    assert scope.decide("https://partner.test/shared/a") == Verdict(True, "in-scope")
    assert scope.decide("https://partner.test/other") == Verdict(False, "domain")
    assert scope.decide("https://example.com/public") == Verdict(True, "in-scope")


def test_hops_fetch_off_scope_pages_that_far_from_the_scope_and_no_further() -> None:
    scope = _scope("domain", "https://example.com/", hops=2)
    assert scope.decide("https://example.com/a", 0) == Verdict(True, "in-scope", 0)
    assert scope.decide("https://off.test/", 0) == Verdict(True, "hop", 1)
    assert scope.decide("https://off.test/b", 1) == Verdict(True, "hop", 2)
    assert scope.decide("https://off.test/c", 2) == Verdict(False, "domain")
    # a link back into the scope from a page off it is in scope again
    assert scope.decide("https://example.com/b", 2) == Verdict(True, "in-scope", 0)


def test_without_hops_an_off_scope_link_is_dropped() -> None:
    assert _scope("host", "https://a.test/").decide("https://b.test/") == Verdict(False, "host")


def test_bad_scopes_and_rules_say_what_is_wrong() -> None:
    with pytest.raises(ScopeError, match="'site' is not a scope"):
        Scope("site")
    with pytest.raises(ScopeError, match="must not be negative"):
        Scope("domain", hops=-1)
    with pytest.raises(ScopeError, match="not a regular expression"):
        Rule.parse("re:[")


def test_rules_come_from_text_or_lists() -> None:
    assert [r.text for r in parse_rules("re:a  com,x)/ ")] == ["re:a", "com,x)/"]
    assert [r.prefix for r in parse_rules(["https://x.test/a/b", "com,y)/"])] == [
        "test,x)/a/", "com,y)/"]
    assert parse_rules("") == [] and parse_rules(None) == []


def test_host_names_drop_www_and_ports() -> None:
    assert host_name("https://WWW.Example.com:8443/x") == "example.com"
    assert host_name("mailto:someone@example.com") == ""


def test_a_rule_that_is_a_host_name_is_that_host_and_a_surt_comma_its_subdomains() -> None:
    (host,) = parse_rules("www.Partner.test")
    assert host.prefix == "test,partner)/"
    assert host.matches("https://partner.test/a", surt_of("https://partner.test/a"))
    assert not host.matches("https://img.partner.test/", surt_of("https://img.partner.test/"))
    (subs,) = parse_rules("test,partner,")
    assert subs.matches("https://img.partner.test/", surt_of("https://img.partner.test/"))


def test_rules_round_trip_and_are_put_in_force_whole() -> None:
    rules = Rules("host", 1, ("re:/keep/",), ("example.com",))
    assert Rules.parse(rules.json()) == rules
    assert rules.describe() == "scope=host, hops=1, include=re:/keep/, exclude=example.com"
    scope = _scope("domain", "https://example.com/")
    scope.use(Rules("any", 0, (), ("re:\\.pdf$",)))
    assert scope.decide("https://other.test/") == Verdict(True, "in-scope")
    assert scope.decide("https://other.test/a.pdf") == Verdict(False, "exclude")
    with pytest.raises(ScopeError):
        scope.use(Rules("nowhere"))
    assert scope.rules() == Rules("any", 0, (), ("re:\\.pdf$",))  # unchanged by the bad one
    with pytest.raises(ScopeError, match="not readable"):
        Rules.parse('{"mode": "host"}')
