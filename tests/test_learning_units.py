"""Units of learned URL equivalence and trap patterns (crawler/learning/): pure
decisions, no Redis (the storage side is tests/test_learning_store.py)."""

from __future__ import annotations

import itertools
import random
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crawler.admission import is_dated
from crawler.learning.rules import SiteRules
from crawler.learning.traps import MAX_WORDS, distance, page_sketch, page_text, sketch, url_pattern
from crawler.learning.variants import (
    DROPS,
    OTHER,
    SELF,
    CanonicalSays,
    PageEvidence,
    canonical_says,
    has_any,
    identity_key,
    page_evidence,
    param_names,
    payload_digest,
    without,
)
from crawler.learning.worker import observations
from crawler.urls import canonical_url

HEX8 = re.compile(r"[0-9a-f]{8}")
HEX16 = re.compile(r"[0-9a-f]{16}")


def canon(url: str) -> str:
    result = canonical_url(url)
    assert result is not None
    return result


def words(seed: int, n: int) -> list[str]:
    """``n`` words drawn from a seeded pseudo-word list (the same every run)."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou")
                     for _ in range(rng.randint(2, 4))) for _ in range(3000)]
    return [rng.choice(vocab) for _ in range(n)]


#: One template's 120 words, the same on every page that uses it.
TEMPLATE = " ".join(words(1, 120))


def event_page(day: int) -> bytes:
    """A calendar page: the template's words and one sentence with the date."""
    return (f"<html><head><title>Events</title><style>p {{ color: red }}</style>"
            f"<script>var day = {day};</script></head><body><p>{TEMPLATE}</p>"
            f"<p>The events of 2026-03-{day:02d} are below</p></body></html>").encode()


# ------------------------------------------------------------------ identities


def test_identity_key_is_a_short_stable_name() -> None:
    key = identity_key("http://a.test/p/3")
    assert HEX8.fullmatch(key)
    assert key == identity_key("http://a.test/p/3")
    assert key != identity_key("http://a.test/p/3?ref=x")
    assert identity_key("http://a.test/\udcff") == identity_key("http://a.test/\udcff")


def test_payload_digest_is_16_hex_and_tells_bodies_apart() -> None:
    assert HEX8.fullmatch(payload_digest(b"abc"))
    assert payload_digest(b"abc") == payload_digest(b"abc")
    assert payload_digest(b"abc") != payload_digest(b"abd")
    assert HEX8.fullmatch(payload_digest(b""))


@pytest.mark.parametrize(("url", "names"), [
    ("http://a.test/p", ()),
    ("http://a.test/p?", ()),
    ("http://a.test/p?a=1&b=2&a=3", ("a", "b")),
    ("http://a.test/p?z=1&a=2", ("z", "a")),  # in their order, not sorted
    ("http://a.test/p?r%65f=1&flag", ("ref", "flag")),  # decoded; a name without value
    ("http://a.test/p?a+b=1", ("a b",)),
    ("http://a.test/p?&&x=1&", ("x",)),
])
def test_param_names(url: str, names: tuple[str, ...]) -> None:
    assert param_names(url) == names


# ---------------------------------------------------------------- without


@pytest.mark.parametrize(("url", "names", "expected"), [
    # the others keep their order and spelling
    ("http://a.test/p?z=%41&ref=1&a=b+c", ["ref"], "http://a.test/p?z=%41&a=b+c"),
    ("http://a.test/p?b=2&ref=1&a=1&ref=2", ["ref"], "http://a.test/p?b=2&a=1"),  # every one
    ("http://a.test/p?ref=1", ["ref"], "http://a.test/p"),  # no "?" left behind
    ("http://a.test/p?ref=1&utm=2&x=3", ["ref", "utm"], "http://a.test/p?x=3"),
    ("http://a.test/p?r%65f=1&x=3", ["ref"], "http://a.test/p?x=3"),  # the name decoded
    ("http://a.test/p?refx=1&xref=2", ["ref"], "http://a.test/p?refx=1&xref=2"),
    ("http://a.test/p?flag&x=1", ["flag"], "http://a.test/p?x=1"),
    ("http://a.test/p", ["ref"], "http://a.test/p"),
    ("http://a.test/p?x=1", [], "http://a.test/p?x=1"),
    # fragments stay, after the query or in its place
    ("http://a.test/p?ref=1&x=2#top", ["ref"], "http://a.test/p?x=2#top"),
    ("http://a.test/p?ref=1#top", ["ref"], "http://a.test/p#top"),
    ("http://a.test/p?ref=1#", ["ref"], "http://a.test/p#"),
    ("http://a.test/p#top", ["ref"], "http://a.test/p#top"),
    ("http://a.test/p?x=1#a?ref=2", ["ref"], "http://a.test/p?x=1#a?ref=2"),
])
def test_without(url: str, names: list[str], expected: str) -> None:
    assert without(url, names) == expected


def test_without_leaves_a_question_mark_in_a_fragment_alone() -> None:
    assert without("http://a.test/p#sec?ref=1", ["ref"]) == "http://a.test/p#sec?ref=1"


def test_without_keeps_a_canonical_url_canonical() -> None:
    url = canon("http://a.test/p?z=1&ref=2&a=3")
    assert without(url, ["ref"]) == canon(without(url, ["ref"])) == "http://a.test/p?a=3&z=1"


def test_has_any() -> None:
    assert has_any("http://a.test/p?a=1&ref=2", frozenset({"ref"}))
    assert not has_any("http://a.test/p?a=1", frozenset({"ref"}))
    assert not has_any("http://a.test/p?a=1", frozenset())
    assert not has_any("http://a.test/ref", frozenset({"ref"}))
    assert has_any("http://a.test/p?r%65f", frozenset({"ref"}))


# ------------------------------------------------------------ canonical links


def says(page: str, declared: str | None) -> CanonicalSays | None:
    return canonical_says(canon(page), canon(declared) if declared else None)


def test_no_canonical_link_says_nothing() -> None:
    assert says("http://a.test/p?ref=1", None) is None
    assert canonical_says("http://a.test/p", "") is None


def test_a_canonical_link_to_itself_keeps_all_its_params() -> None:
    assert says("http://a.test/p", "http://a.test/p") == CanonicalSays(SELF)
    assert says("http://a.test/list?cat=2&sort=up", "http://a.test/list?sort=up&cat=2") == (
        CanonicalSays(SELF, kept=("cat", "sort")))


def test_a_canonical_link_that_drops_a_param() -> None:
    assert says("http://a.test/p/3?ref=x", "http://a.test/p/3") == CanonicalSays(DROPS, ("ref",))
    assert says("http://a.test/p/3?utm=1&ref=x&id=3", "http://a.test/p/3?id=3") == (
        CanonicalSays(DROPS, dropped=("ref", "utm"), kept=("id",)))


def test_a_canonical_link_that_keeps_one_value_of_a_repeated_param() -> None:
    # a=1 kept, a=2 gone: "a" matters (kept), it is not dropped
    assert says("http://a.test/p?a=1&a=2", "http://a.test/p?a=1") == (
        CanonicalSays(DROPS, dropped=(), kept=("a",)))


@pytest.mark.parametrize("declared", [
    "http://a.test/other",  # another path
    "http://b.test/p/3",  # another host
    "https://a.test/p/3",  # another scheme
    "http://a.test:8080/p/3",  # another port
    "http://a.test/p/3?ref=x&page=2",  # adds a param
    "http://a.test/p/3?ref=y",  # changes a value
])
def test_a_canonical_link_to_another_page(declared: str) -> None:
    said = says("http://a.test/p/3?ref=x", declared)
    assert said == CanonicalSays(OTHER, target=identity_key(canon(declared)))


def test_page_evidence() -> None:
    page = canon("http://a.test/p/3?ref=x&id=3")
    evidence = page_evidence(page, b"<p>three</p>", canon("http://a.test/p/3?id=3"))
    assert evidence == PageEvidence(
        identity_key(page), payload_digest(b"<p>three</p>"),
        CanonicalSays(DROPS, ("ref",), ("id",)),
        (("id", identity_key("http://a.test/p/3?ref=x")),
         ("ref", identity_key("http://a.test/p/3?id=3"))))
    assert page_evidence("http://a.test/p", b"", None).variants == ()


# ---------------------------------------------------------------- patterns


@pytest.mark.parametrize(("url", "pattern"), [
    ("http://a.test/events/2026/12/03", "/events/{n}/{n}/{n}"),
    ("http://a.test/product/12", "/product/{n}"),
    ("http://a.test/p-12.html", "/p-{n}.html"),
    ("http://a.test/day/2026-03-15/", "/day/{n}-{n}-{n}/"),
    ("http://a.test/s/3fa2b1c09d8e/page/2", "/s/{id}/page/{n}"),
    ("http://a.test/s/3FA2B1C09D8E/about", "/s/{id}/about"),
    ("http://a.test/s/AbCdEfGh12345678xyz/x", "/s/{id}/x"),  # a long mixed token
    ("http://a.test/search?q=x&page=2", "/search?*"),
    ("http://a.test/search?zzz=1", "/search?*"),  # every query is one pattern
    ("http://a.test/?page=1", "/?*"),
    ("http://a.test/list/3?sort=up", "/list/{n}?*"),
    ("http://a.test/about", None),
    ("http://a.test/", None),
    ("http://a.test/a/b/", None),
    ("http://a.test/u/a-long-slug-without-any-digit", None),
])
def test_url_pattern(url: str, pattern: str | None) -> None:
    assert url_pattern(canon(url)) == pattern


def test_url_patterns_group_pages_of_one_shape() -> None:
    days = {url_pattern(f"http://a.test/events/2026/{m}/{d}") for m in (1, 12) for d in (3, 30)}
    assert days == {"/events/{n}/{n}/{n}"}
    sessions = {url_pattern(f"http://a.test/s/{sid}/page/1")
                for sid in ("3fa2b1c09d8e", "00000000ffff1234", "AbCdEfGh12345678xyz")}
    assert sessions == {"/s/{id}/page/{n}"}


# ---------------------------------------------------------------- sketches


def test_page_text_leaves_tags_scripts_and_styles_out() -> None:
    body = (b"<html><head><SCRIPT type='x'>var secret = 1;</SCRIPT>"
            b"<style>p { color: red }</style></head>"
            b"<body><p class='x'>Hello, <b>world</b>!</p>\xff</body></html>")
    assert page_text(body) == "Hello world"
    assert page_text(b"") == ""
    many = " ".join(["w"] * (MAX_WORDS + 50)).encode()
    assert len(page_text(many).split()) == MAX_WORDS


#: Pieces a page's bytes are drawn from: markup, ASCII word and non-word
#: characters, UTF-8 letters and punctuation (é, a closing quote, no-break space, Arabic
#: digit three), bytes that are not UTF-8 and a cut-off sequence.
_PIECES = [b"a", b"Z", b"_", b"9", b" ", b",", b"-", b"<", b">", b"\n", b"\x1c", b"<p>",
           b"<script>x y</script>", b"<style>", b"</style>", b"\xc3\xa9", b"\xe2\x80\x99",
           b"\xc2\xa0", b"\xd9\xa3", b"\xff", b"\xe2\x80"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=60).map(b"".join))
@example("<p>Ça coûte 3 €, l\u2019été</p>".encode())
def test_page_text_is_the_words_a_regular_expression_finds(body: bytes) -> None:
    # page_text splits with a byte table for speed; the definition it must
    # keep is this one.
    text = re.sub(rb"<(script|style)\b.*?</\1\s*>|<[^>]*>", b" ", body, flags=re.S | re.I)
    words = re.findall(r"\w+", text.decode("utf-8", "replace"))
    assert page_text(body) == " ".join(words[:MAX_WORDS])


def test_sketch_is_16_hex_and_ignores_case() -> None:
    assert HEX16.fullmatch(sketch("one two three"))
    assert sketch("One Two Three") == sketch("one two three")
    assert HEX16.fullmatch(sketch("one"))  # a single word still has a sketch
    assert sketch("") == "0" * 16


def test_pages_that_differ_in_their_numbers_only_have_one_sketch() -> None:
    sketches = [sketch(page_text(event_page(day))) for day in range(1, 21)]
    assert len(set(sketches)) == 1  # a calendar's days: numbers are one word


def test_near_identical_pages_are_within_distance_8() -> None:
    base = words(7, 120)
    texts = [" ".join([*base, "today", word, "happens"]) for word in words(8, 20)]
    sketches = [sketch(text) for text in texts]
    assert len(set(sketches)) > 1  # the changed word is in the sketch...
    assert max(distance(sketches[0], s) for s in sketches) <= 8  # ...but changes little


def test_unrelated_pages_are_far_apart() -> None:
    texts = [" ".join(words(seed, 150)) for seed in range(100, 120)]
    sketches = [sketch(text) for text in texts]
    assert min(distance(a, b) for a, b in itertools.combinations(sketches, 2)) > 16


def test_word_order_and_every_word_count() -> None:
    # Word pairs, not a bag of words: the same words in another order differ...
    assert sketch("alpha beta gamma delta") != sketch("delta gamma beta alpha")
    # ...and a word repeated far apart hashes alike wherever it stands.
    assert sketch("x1 alpha beta") == sketch("x22 alpha beta")
    assert sketch("alpha 7 beta") != sketch("alpha beta 7")
    # Long and non-ASCII words are words like any other.
    long_word = "w" * 3000
    assert sketch(f"{long_word} é2026 ünïcode") == sketch(f"{long_word} É7 ÜNÏCODE")
    assert sketch(f"{long_word} a") != sketch(f"{long_word}w a")


def test_distance() -> None:
    assert distance("0" * 16, "0" * 16) == 0
    assert distance("0" * 16, "f" * 16) == 64
    assert distance("8000000000000001", "0000000000000000") == 2
    a, b = sketch("one two three"), sketch("four five six")
    assert distance(a, b) == distance(b, a)


# ------------------------------------------------------------------- rules


def test_site_rules_parse_the_stored_form() -> None:
    rules = SiteRules.parse(b"ref utm", b"/events/{n}/{n}/{n}\n/s/{id}/page/{n}", b"k1 k2")
    assert rules == SiteRules(frozenset({"ref", "utm"}),
                              frozenset({"/events/{n}/{n}/{n}", "/s/{id}/page/{n}"}),
                              frozenset({"k1", "k2"}))
    assert SiteRules.parse("ref", "", None) == SiteRules(frozenset({"ref"}))
    assert SiteRules.parse(None, None) == SiteRules()
    assert not SiteRules.parse(None, None, None)
    assert not SiteRules.parse(b"", b"", b"k1")  # fetched alone decides nothing
    assert SiteRules.parse(b"", b"/x/{n}")


def test_site_rules_verdicts() -> None:
    fetched = identity_key("http://a.test/p/1")
    rules = SiteRules.parse("ref utm", "/events/{n}/{n}/{n}", fetched)
    assert rules.trap("http://a.test/events/2026/3/15") == "/events/{n}/{n}/{n}"
    assert rules.trap("http://a.test/events/2026/3") is None
    assert rules.trap("http://a.test/about") is None
    assert rules.variant_of("http://a.test/p/2?a=1&ref=x&utm=y") == "http://a.test/p/2?a=1"
    assert rules.variant_of("http://a.test/p/2?ref=x") == "http://a.test/p/2"
    assert rules.variant_of("http://a.test/p/2?a=1") is None
    assert rules.variant_of("http://a.test/p/2") is None
    assert rules.fetched_as_variant("http://a.test/p/1")
    assert not rules.fetched_as_variant("http://a.test/p/2")
    empty = SiteRules()
    assert empty.trap("http://a.test/events/2026/3/15") is None
    assert empty.variant_of("http://a.test/p?ref=1") is None
    assert not empty.fetched_as_variant("http://a.test/p/1")


# ------------------------------------------------------------ observations


def test_observations_of_a_page_whose_canonical_drops_a_param() -> None:
    page, clean = "http://a.test/p/3?ref=x", "http://a.test/p/3"
    body = b"<p>three</p>"
    key, base, digest = identity_key(page), identity_key(clean), payload_digest(body)
    ops = observations(page_evidence(page, body, clean), None, None)
    assert ops == [("D", key, digest), ("C", "d", ""), ("N", "ref", base),
                   ("V", "ref", f"{base} {digest}")]


def test_observations_with_a_pattern_end_with_its_sketch() -> None:
    page = "http://a.test/p/3?ref=x"
    ops = observations(page_evidence(page, b"x", None), "/p/{n}?*", "00ff00ff00ff00ff")
    assert ops[-1] == ("T", "/p/{n}?*", "00ff00ff00ff00ff")
    assert [op[0] for op in ops] == ["D", "V", "T"]  # no canonical link: no C
    # a pattern without a sketch (or the reverse) is no T
    assert [op[0] for op in observations(page_evidence(page, b"x", None), "/p", None)] == [
        "D", "V"]


def test_observations_of_a_page_that_keeps_its_params() -> None:
    page = canon("http://a.test/list?sort=up&cat=2")
    evidence = page_evidence(page, b"list", page)
    ops = observations(evidence, None, None)
    assert ops[0] == ("D", evidence.key, evidence.digest)
    assert ops[1:4] == [("C", "s", ""), ("K", "cat", ""), ("K", "sort", "")]
    assert [op[0] for op in ops[4:]] == ["V", "V"]


def test_observations_of_a_page_that_drops_one_param_and_keeps_another() -> None:
    page, clean = canon("http://a.test/p?id=3&ref=x"), canon("http://a.test/p?id=3")
    ops = observations(page_evidence(page, b"b", clean), None, None)
    assert ("K", "id", "") in ops
    assert ("N", "ref", identity_key(clean)) in ops
    assert [op[:2] for op in ops if op[0] == "V"] == [("V", "id"), ("V", "ref")]


def test_observations_of_a_page_naming_another_page_say_nothing_of_its_params() -> None:
    page, other = "http://a.test/p/3?ref=x", "http://a.test/"
    ops = observations(page_evidence(page, b"b", other), None, None)
    assert ops[1] == ("C", "o", f"{identity_key(other)} {identity_key(page)}")
    assert {op[0] for op in ops} == {"C", "V", "D"}  # no K, no N


def test_every_observation_is_three_strings() -> None:
    page = canon("http://a.test/p/3?ref=x&a=1")
    ops = observations(page_evidence(page, b"b", canon("http://a.test/p/3?a=1")),
                       url_pattern(page), sketch("b"))
    assert all(len(op) == 3 and all(isinstance(v, str) for v in op) for op in ops)
    assert all(" " not in op[1] for op in ops)  # the Lua side splits values on spaces


def test_a_page_of_few_words_has_no_sketch() -> None:
    # a script's shell or a page of links: alike whatever it is, so no trap evidence
    assert page_sketch(b"<html><title>page 7</title><a href='/8'>next</a></html>") is None
    body = ("<p>" + " ".join(words(3, 60)) + "</p>").encode()
    assert page_sketch(body) == sketch(page_text(body))


def test_a_small_page_at_a_dated_url_is_sketched_and_a_calendar_s_days_are_alike() -> None:
    def day(text: str) -> bytes:
        return f"<html><title>{text}</title><a href='/x'>next</a></html>".encode()

    one, other = page_sketch(day("6 December 2026"), dated=True), page_sketch(
        day("7 December 2026"), dated=True)
    assert one is not None and one == other  # numbers aside, the same words
    real = [page_sketch(day(caption), dated=True) for caption in (
        "Harbour at dawn, fishing boats", "Snow on the old bridge", "Market day, spices")]
    assert all(s is not None and distance(s, one) > 8 for s in real)
    assert all(distance(a, b) > 8 for a, b in itertools.combinations(real, 2))


@pytest.mark.parametrize(("url", "dated"), [
    ("http://a.test/cal/2026/12/06", True), ("http://a.test/2026-12", True),
    ("http://a.test/events?year=2026", True), ("http://a.test/e?date=20261206", True),
    ("http://a.test/pub/18204", False), ("http://a.test/issue?bpo=18011", False),
    ("http://a.test/product/2026", False),
])
def test_is_dated_sees_a_date_by_its_shape_or_name_only(url: str, dated: bool) -> None:
    assert is_dated(url) is dated
