"""RFC 9309 robots.txt rules: spec cases, prepare(), classify(), delays, a real corpus, fuzz."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protego import Protego

from crawler.robots.rules import MAX_ROBOTS_BYTES, Rules, classify, prepare

AGENT = "BroadCrawl"  # the project's ROBOTSTXT_USER_AGENT
CORPUS = Path(__file__).parent / "robots_corpus"


def rules_of(text: str | bytes, agent: str = AGENT) -> Rules:
    body = text.encode("utf-8") if isinstance(text, str) else text
    return Rules.parse(prepare(body), agent)


def allowed(text: str | bytes, path: str, agent: str = AGENT) -> bool:
    return rules_of(text, agent).allowed(f"https://example.com{path}")


# --- RFC 9309 section 2.2: groups and rules ------------------------------------------------

RFC_CASES = [
    # 2.2.1: the group is found by product token, case-insensitively.
    ("2.2.1-case-insensitive-agent", "User-agent: bROADcRAWL\nDisallow: /p", "/p", False),
    ("2.2.1-token-with-version", "User-agent: BroadCrawl/1.0\nDisallow: /p", "/p", False),
    ("2.2.1-substring-is-no-match", "User-agent: broad\nDisallow: /p", "/p", True),
    ("2.2.1-longer-token-is-no-match", "User-agent: BroadCrawlPlus\nDisallow: /p", "/p", True),
    (
        "2.2.1-agents-share-a-group",
        "User-agent: other\nUser-agent: BroadCrawl\nDisallow: /p",
        "/p",
        False,
    ),
    (
        "2.2.1-merge-groups-first",
        "User-agent: BroadCrawl\nDisallow: /a\n\nUser-agent: other\nDisallow: /x\n\n"
        "User-agent: broadcrawl\nDisallow: /b",
        "/a",
        False,
    ),
    (
        "2.2.1-merge-groups-second",
        "User-agent: BroadCrawl\nDisallow: /a\n\nUser-agent: other\nDisallow: /x\n\n"
        "User-agent: broadcrawl\nDisallow: /b",
        "/b",
        False,
    ),
    (
        "2.2.1-merge-groups-not-others",
        "User-agent: BroadCrawl\nDisallow: /a\n\nUser-agent: other\nDisallow: /x\n\n"
        "User-agent: broadcrawl\nDisallow: /b",
        "/x",
        True,
    ),
    (
        "2.2.1-star-fallback",
        "User-agent: other\nDisallow: /\n\nUser-agent: *\nDisallow: /s",
        "/s",
        False,
    ),
    (
        "2.2.1-star-fallback-not-others",
        "User-agent: other\nDisallow: /\n\nUser-agent: *\nDisallow: /s",
        "/o",
        True,
    ),
    (
        "2.2.1-own-group-beats-star",
        "User-agent: *\nDisallow: /\n\nUser-agent: BroadCrawl\nDisallow: /p",
        "/q",
        True,
    ),
    (
        "2.2.1-empty-own-group-allows-all",
        "User-agent: *\nDisallow: /\n\nUser-agent: BroadCrawl\n",
        "/q",
        True,
    ),
    ("2.2.1-no-matching-group", "User-agent: other\nDisallow: /", "/q", True),
    ("2.2.1-rule-before-any-agent", "Disallow: /p\nUser-agent: *\nDisallow: /q", "/p", True),
    # 2.2.2: the longest match wins, Allow wins a tie; paths are case-sensitive.
    ("2.2.2-longest-match-allow", "User-agent: *\nDisallow: /a\nAllow: /a/b", "/a/b/c", True),
    ("2.2.2-longest-match-disallow", "User-agent: *\nAllow: /a\nDisallow: /a/b", "/a/b", False),
    ("2.2.2-longest-match-not-order", "User-agent: *\nAllow: /a/b\nDisallow: /a", "/a/c", False),
    ("2.2.2-allow-wins-tie", "User-agent: *\nDisallow: /p\nAllow: /p", "/p", True),
    ("2.2.2-empty-disallow", "User-agent: *\nDisallow:", "/p", True),
    ("2.2.2-case-sensitive-path", "User-agent: *\nDisallow: /Private", "/private", True),
    ("2.2.2-query-is-matched", "User-agent: *\nDisallow: /p?q=", "/p?q=1", False),
    ("2.2.2-query-needed", "User-agent: *\nDisallow: /p?q=", "/p", True),
    ("2.2.2-robots-txt-implicitly-allowed", "User-agent: *\nDisallow: /", "/robots.txt", True),
    # 2.2.2: percent-encoding is normalised on both sides.
    (
        "2.2.2-utf8-rule-encoded-url",
        "User-agent: *\nDisallow: /foo/bar/\u30c4",
        "/foo/bar/%E3%83%84",
        False,
    ),
    (
        "2.2.2-encoded-rule-utf8-url",
        "User-agent: *\nDisallow: /foo/bar/%E3%83%84",
        "/foo/bar/\u30c4",
        False,
    ),
    (
        "2.2.2-unreserved-decoded",
        "User-agent: *\nDisallow: /foo/bar/baz",
        "/foo/bar/%62%61%7A",
        False,
    ),
    ("2.2.2-encoding-case-insensitive", "User-agent: *\nDisallow: /%7ejoe", "/~joe/a", False),
    ("2.2.2-slash-stays-encoded", "User-agent: *\nDisallow: /a%2Fb", "/a/b", True),
    # 2.2.3: "*" is any sequence, a final "$" anchors.
    ("2.2.3-dollar-end", "User-agent: *\nDisallow: /p$", "/p", False),
    ("2.2.3-dollar-end-no-prefix", "User-agent: *\nDisallow: /p$", "/p/x", True),
    ("2.2.3-star-wildcard", "User-agent: *\nDisallow: /*.php", "/a/b.php?x=1", False),
    ("2.2.3-star-in-middle", "User-agent: *\nDisallow: /a/*/c", "/a/b/c", False),
    ("2.2.3-star-and-dollar", "User-agent: *\nDisallow: /*.gif$", "/a.gif", False),
    ("2.2.3-star-and-dollar-query", "User-agent: *\nDisallow: /*.gif$", "/a.gif?x", True),
    ("2.2.3-rule-without-slash", "User-agent: *\nDisallow: *.gif$", "/x/a.gif", False),
    # 2.2.4: lines that are not rules are ignored, they do not end a group.
    (
        "2.2.4-unknown-line-inside-group",
        "User-agent: BroadCrawl\nInvalid-Unknown-Line: x\nUser-agent: other\nDisallow: /p",
        "/p",
        False,
    ),
    (
        "2.2.4-unknown-line-between-rules",
        "User-agent: *\nDisallow: /a\nClean-param: utm\nDisallow: /b",
        "/b",
        False,
    ),
    (
        "2.2.4-line-without-colon-inside-group",
        "User-agent: BroadCrawl\nnonsense here\nUser-agent: other\nDisallow: /p",
        "/p",
        False,
    ),
    (
        "2.2.4-comments",
        "# header\nUser-agent: BroadCrawl # us\n# between\nDisallow: /p # private",
        "/p",
        False,
    ),
    ("2.2.4-hash-starts-comment", "User-agent: *\nDisallow: /q#frag", "/q", False),
    ("2.2.4-blank-lines-keep-group", "User-agent: BroadCrawl\n\n\nDisallow: /p", "/p", False),
    ("2.2.4-misspelt-field", "User-agent: *\nDissallow: /p", "/p", False),
    ("2.2.4-missing-colon", "User-agent: *\nDisallow /p", "/p", False),
    ("2.2.4-field-case", "USER-AGENT: *\nDISALLOW: /p", "/p", False),
    # 2.2: lines end at CR, LF or CRLF, and nowhere else.
    ("2.2-cr-line-ends", "User-agent: *\rDisallow: /p\r", "/p", False),
    ("2.2-crlf-line-ends", "User-agent: *\r\nDisallow: /p\r\n", "/p", False),
    ("2.2-form-feed-is-no-line-end", "User-agent: *\nDisallow: /a\fb", "/a", True),
    ("2.2-nel-is-no-line-end", "User-agent: *\nDisallow: /a\x85b", "/a", True),
]


@pytest.mark.parametrize(
    ("text", "path", "expected"),
    [case[1:] for case in RFC_CASES],
    ids=[case[0] for case in RFC_CASES],
)
def test_rfc9309_matching(text: str, path: str, expected: bool) -> None:
    assert allowed(text, path) is expected


# RFC 9309 5.1 and 5.2, with the outcomes the RFC describes.
RFC_5_1 = """\
User-Agent: *
Disallow: *.gif$
Disallow: /example/
Allow: /publications/

User-Agent: foobot
Disallow:/
Allow:/example/page.html
Allow:/example/allowed.gif

User-Agent: barbot
User-Agent: bazbot
Disallow: /example/page.html

User-Agent: quxbot

EOF
"""
RFC_5_2 = """\
User-Agent: foobot
Allow: /example/page/
Disallow: /example/page/disallowed.gif
"""


@pytest.mark.parametrize(
    ("text", "agent", "path", "expected"),
    [
        pytest.param(RFC_5_1, "foobot", "/example/page.html", True, id="5.1-foobot-page"),
        pytest.param(RFC_5_1, "foobot", "/example/allowed.gif", True, id="5.1-foobot-gif"),
        pytest.param(RFC_5_1, "foobot", "/example/other.html", False, id="5.1-foobot-other"),
        pytest.param(RFC_5_1, "foobot", "/publications/", False, id="5.1-foobot-publications"),
        pytest.param(RFC_5_1, "barbot", "/example/page.html", False, id="5.1-barbot-page"),
        pytest.param(RFC_5_1, "bazbot", "/example/page.html", False, id="5.1-bazbot-page"),
        pytest.param(RFC_5_1, "barbot", "/example/other.gif", True, id="5.1-barbot-gif"),
        pytest.param(RFC_5_1, "quxbot", "/example/page.html", True, id="5.1-quxbot-page"),
        pytest.param(RFC_5_1, "quxbot", "/a.gif", True, id="5.1-quxbot-gif"),
        pytest.param(RFC_5_1, "otherbot", "/example/page.html", False, id="5.1-star-example"),
        pytest.param(RFC_5_1, "otherbot", "/a/b.gif", False, id="5.1-star-gif"),
        pytest.param(
            RFC_5_1, "otherbot", "/publications/a.gif", True, id="5.1-star-longest-allow-beats-gif"
        ),
        pytest.param(RFC_5_1, "otherbot", "/publications/p.html", True, id="5.1-star-allowed"),
        pytest.param(RFC_5_2, "foobot", "/example/page/", True, id="5.2-allowed"),
        pytest.param(RFC_5_2, "foobot", "/example/page/other.html", True, id="5.2-allowed-below"),
        pytest.param(
            RFC_5_2, "foobot", "/example/page/disallowed.gif", False, id="5.2-longest-disallow"
        ),
    ],
)
def test_rfc9309_section5_examples(text: str, agent: str, path: str, expected: bool) -> None:
    assert allowed(text, path, agent) is expected


def test_fields_match_protegos_list() -> None:
    """prepare() keeps exactly the fields Protego knows; fails if a Protego upgrade adds one."""
    from protego import _protego

    from crawler.robots import rules

    assert set(rules._FIELDS) == _protego._ALL_DIRECTIVES


# --- prepare() -----------------------------------------------------------------------------


def test_prepare_keeps_known_fields_only() -> None:
    body = (
        b"# comment\r\nUser-agent: BroadCrawl  # us\r\n\r\nInvalid-Unknown-Line: x\r\n"
        b"Disallow:/a\r\nuser agent other\rSitemap https://e.com/s.xml\nnot a field\n"
        b"Clean-param: ref /x\n"
    )
    assert prepare(body) == (
        "user-agent: BroadCrawl\ndisallow: /a\nuser-agent: other\nsitemap: https://e.com/s.xml\n"
    )


def test_prepare_strips_bom() -> None:
    body = b"\xef\xbb\xbfUser-agent: *\nDisallow: /p\n"
    assert prepare(body).startswith("user-agent: *")
    assert not allowed(body, "/p")


@pytest.mark.parametrize("start", [b"\xef\xbb\xbf", b"\xef\xbb", b"\xef", b""])
def test_a_partial_byte_order_mark_is_skipped_too(start: bytes) -> None:
    """(google/robotstxt's ID_UTF8ByteOrderMarkIsSkipped)"""
    body = start + b"User-agent: *\nDisallow: /p\n"
    assert prepare(body) == "user-agent: *\ndisallow: /p\n"
    assert not allowed(body, "/p") and allowed(body, "/q")


def test_a_broken_byte_order_mark_spoils_its_own_line_only() -> None:
    body = b"\xef\x11\xbfUser-agent: *\nDisallow: /p\nUser-agent: *\nDisallow: /q\n"
    assert prepare(body) == "disallow: /p\nuser-agent: *\ndisallow: /q\n"
    assert allowed(body, "/p")  # (a rule before any user-agent line belongs to no group)
    assert not allowed(body, "/q")


def test_a_byte_order_mark_inside_the_file_is_not_skipped() -> None:
    body = b"User-agent: *\n\xef\xbb\xbfDisallow: /p\nDisallow: /q\n"
    assert allowed(body, "/p") and not allowed(body, "/q")


@pytest.mark.parametrize(
    "body",
    [
        b"# caf\xe9 cr\xe8me\nUser-agent: *\nDisallow: /p\n",
        b"User-agent: *\nDisallow: /caf\xe9\nDisallow: /p\n",
        b"User-agent: *\nDisallow: /p\nAllow: /\xff\xfe\n",
    ],
    ids=["latin1-in-comment", "latin1-in-path", "garbage-bytes"],
)
def test_prepare_decodes_leniently(body: bytes) -> None:
    assert not allowed(body, "/p")
    assert allowed(body, "/q")


def test_prepare_reads_first_500_kib_only() -> None:
    head = b"User-agent: *\nDisallow: /early\n"
    filler = b"# " + b"x" * 98 + b"\n"
    body = head + filler * (MAX_ROBOTS_BYTES // len(filler)) + b"Disallow: /late\n"
    assert len(body) > MAX_ROBOTS_BYTES
    rules = rules_of(body)
    assert not rules.allowed("https://example.com/early")
    assert rules.allowed("https://example.com/late")


CUT_AT = len(b"User-agent: *\nDisallow: /abc\nDisallow: /de")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"User-agent: *\nDisallow: /abc\nDisallow: /defgh\n", "user-agent: *\ndisallow: /abc\n"),
        (
            b"User-agent: *\nDisallow: /abc\nDisallow: /de\n",
            "user-agent: *\ndisallow: /abc\ndisallow: /de\n",
        ),
        (
            b"User-agent: *\r\nDisallow: /abc\r\nDisallow: /de\r\n",
            "user-agent: *\ndisallow: /abc\n",
        ),
        (b"Disallow: /" + b"x" * 100, "disallow: /" + "x" * (CUT_AT - 11) + "\n"),
    ],
    ids=["half-line-dropped", "limit-on-line-end", "crlf-half-line-dropped", "no-line-end-at-all"],
)
def test_prepare_cuts_at_last_complete_line(body: bytes, expected: str) -> None:
    assert prepare(body, max_bytes=CUT_AT) == expected


def test_prepare_cut_never_parses_half_a_rule() -> None:
    body = b"User-agent: *\nDisallow: /x\nDisallow: /private-area\n"
    rules = Rules.parse(prepare(body, max_bytes=len(body) - 10), AGENT)
    assert rules.allowed("https://example.com/p")  # not "Disallow: /p" from "/private-..."
    assert not rules.allowed("https://example.com/x")


def test_prepare_html_body_gives_no_rules() -> None:
    html = (
        b"<!DOCTYPE html>\n<html><head><title>Not Found</title>\n"
        b'<meta name="robots" content="noindex">\n<style>a{color:red}</style></head>\n'
        b'<body><a href="http://example.com/x">Disallow: this</a></body></html>\n'
    )
    assert prepare(html) == ""
    assert allowed(html, "/anything")


@pytest.mark.parametrize("body", [b"", b"\xef\xbb\xbf", b"\n\r\n\r", b"\x00" * 100])
def test_prepare_empty_like_bodies(body: bytes) -> None:
    assert prepare(body) == ""
    assert allowed(body, "/p")


# --- classify() ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param(200, "rules", id="2.3.1.1-200-rules"),
        pytest.param(204, "rules", id="2.3.1.1-204-empty-rules"),
        pytest.param(301, "unavailable", id="2.3.1.2-301-redirects-exhausted"),
        pytest.param(304, "unavailable", id="2.3.1.2-304-unexpected-redirect-class"),
        pytest.param(400, "unavailable", id="2.3.1.3-400-unavailable"),
        pytest.param(401, "unavailable", id="2.3.1.3-401-unavailable"),
        pytest.param(403, "unavailable", id="2.3.1.3-403-unavailable"),
        pytest.param(404, "unavailable", id="2.3.1.3-404-unavailable"),
        pytest.param(410, "unavailable", id="2.3.1.3-410-unavailable"),
        pytest.param(429, "unreachable", id="2.3.1.4-429-treated-as-5xx"),
        pytest.param(500, "unreachable", id="2.3.1.4-500-unreachable"),
        pytest.param(503, "unreachable", id="2.3.1.4-503-unreachable"),
        pytest.param(599, "unreachable", id="2.3.1.4-599-unreachable"),
        pytest.param(None, "unreachable", id="2.3.1.4-network-error"),
        pytest.param(100, "unreachable", id="unexpected-1xx"),
        pytest.param(600, "unreachable", id="unexpected-not-http"),
    ],
)
def test_classify(status: int | None, expected: str) -> None:
    assert classify(status) == expected


def test_allow_all_and_disallow_all() -> None:
    allow, deny = Rules.allow_all(), Rules.disallow_all()
    assert allow.allowed("https://example.com/x")
    assert not allow.disallows_everything
    assert not deny.allowed("https://example.com/x")
    assert deny.allowed("https://example.com/robots.txt")  # RFC 9309 2.2.2
    assert deny.disallows_everything
    assert (allow.delay, deny.delay, allow.sitemaps, deny.sitemaps) == (None, None, [], [])
    # A file that disallows everything is rules, not "unreachable".
    assert not rules_of("User-agent: *\nDisallow: /").disallows_everything


# --- Crawl-delay, Request-rate, Sitemap ----------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "crawl_delay", "interval", "delay"),
    [
        ("Crawl-delay: 2", 2.0, None, 2.0),
        ("Crawl-delay: 0.5", 0.5, None, 0.5),
        ("Request-rate: 1/5", None, 5.0, 5.0),
        ("Request-rate: 1/10s", None, 10.0, 10.0),
        ("Request-rate: 3/1m", None, 20.0, 20.0),
        ("Request-rate: 2/1", None, 0.5, 0.5),
        ("Request-rate: 1/5 # one page every 5 seconds", None, 5.0, 5.0),
        ("Crawl-delay: 2\nRequest-rate: 1/5", 2.0, 5.0, 5.0),
        ("Crawl-delay: 10\nRequest-rate: 1/5", 10.0, 5.0, 10.0),
        ("Crawl-delay: soon\nRequest-rate: often", None, None, None),
        ("Crawl-delay: -1\nRequest-rate: 0/5", None, None, None),
        ("Crawl-delay: nan\nRequest-rate: 1/0", None, None, None),
        ("Crawl-delay: inf", None, None, None),
        ("Disallow: /p", None, None, None),
    ],
)
def test_delays(
    lines: str, crawl_delay: float | None, interval: float | None, delay: float | None
) -> None:
    rules = rules_of(f"User-agent: *\n{lines}\n")
    assert (rules.crawl_delay, rules.request_interval, rules.delay) == (
        crawl_delay,
        interval,
        delay,
    )


def test_delays_come_from_our_group_only() -> None:
    text = (
        "User-agent: Googlebot\nCrawl-delay: 30\nRequest-rate: 1/60\n\n"
        "User-agent: *\nCrawl-delay: 1\n\n"
        "User-agent: BroadCrawl\nCrawl-delay: 4\n"
    )
    assert rules_of(text).delay == 4.0
    assert rules_of(text, "Googlebot").delay == 60.0
    assert rules_of(text, "otherbot").delay == 1.0
    assert rules_of("User-agent: other\nCrawl-delay: 9\n").delay is None


def test_sitemaps_from_anywhere_in_order_without_repeats() -> None:
    text = (
        "Sitemap: https://e.com/a.xml\nUser-agent: other\nSitemap: https://e.com/b.xml\n"
        "Disallow: /\nsitemap https://e.com/c.xml\nSitemap: https://e.com/a.xml\nSitemap:\n"
    )
    expected = ["https://e.com/a.xml", "https://e.com/b.xml", "https://e.com/c.xml"]
    assert rules_of(text).sitemaps == expected
    rules = rules_of(text)
    rules.sitemaps.append("x")  # a copy: the rules stay as they were
    assert rules.sitemaps == expected


# --- allowed() never raises ----------------------------------------------------------------

ODD_URLS = [
    "https://example.com/",
    "https://example.com/p?q=1#frag",
    "http://[::1/p",
    "http://[::1]/p",
    "http://h:99999/p",
    "http://h/p\x00",
    "",
    "not a url",
    "/p",
    "//evil/p",
    "http:///p",
    "https://example.com/" + "a" * 10_000,
    "https://example.com/%",
    "https://example.com/%zz",
    "https://example.com/\ud800",
    "https://example.com/\u30c4$",
    "https://[/robots.txt",
]


@pytest.mark.parametrize("url", ODD_URLS)
def test_allowed_never_raises(url: str) -> None:
    for rules in (
        rules_of("User-agent: *\nDisallow: /p\nAllow: /*$\nDisallow: /*%"),
        Rules.allow_all(),
        Rules.disallow_all(),
    ):
        assert isinstance(rules.allowed(url), bool)


def test_malformed_authority_judged_by_path() -> None:
    rules = rules_of("User-agent: *\nDisallow: /p")
    assert not rules.allowed("http://[::1/p")
    assert rules.allowed("http://[::1/q")
    assert Rules.disallow_all().allowed("http://[::1/robots.txt")


# --- Real-world corpus (tests/robots_corpus, sources in SOURCES.md) ------------------------

CORPUS_FILES = sorted(CORPUS.glob("*.txt"))


def test_corpus_is_there() -> None:
    assert len(CORPUS_FILES) >= 25


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.stem)
@pytest.mark.parametrize("agent", [AGENT, "Googlebot"])
def test_corpus_parses(path: Path, agent: str) -> None:
    rules = Rules.parse(prepare(path.read_bytes()), agent)
    for url in ("https://example.com/", "https://example.com/search?q=a", "http://[::1/x"):
        assert isinstance(rules.allowed(url), bool)
    assert rules.delay is None or (math.isfinite(rules.delay) and rules.delay >= 0)


@pytest.mark.parametrize(
    ("name", "agent", "path", "expected"),
    [
        ("arxiv", AGENT, "/abs/2101.00001", True),
        ("arxiv", AGENT, "/search/?query=x", False),
        ("arxiv", "Googlebot", "/user/login", False),
        ("github", AGENT, "/gist/abc", False),
        ("github", AGENT, "/someone/repo/tree/main/src", False),
        ("github", AGENT, "/someone/repo", True),
        ("github", AGENT, "/search", False),
        ("github", AGENT, "/search/code", True),
        ("google", AGENT, "/search?q=robots", False),
        ("google", AGENT, "/search/about", True),
        ("google", AGENT, "/maps/", True),
        ("google", AGENT, "/maps/x", False),
        ("wordpress-org", AGENT, "/wp-admin/options.php", False),
        ("wordpress-org", AGENT, "/wp-admin/admin-ajax.php", True),
        ("wordpress-org", AGENT, "/search/x", False),
        ("wordpress-org", AGENT, "/plugins/search/seo", False),
        ("wordpress-org", AGENT, "/plugins/akismet/", True),
        ("dblp", AGENT, "/search/", True),
        ("dblp", AGENT, "/search/publ?q=x", False),
        ("dblp", AGENT, "/db/conf/www/index.html", True),
        ("ok-ru", AGENT, "/dk?st.cmd=userMain", False),
        ("ok-ru", AGENT, "/profile/123", True),
        ("104-com-tw", AGENT, "/", True),
        ("104-com-tw", AGENT, "/job/7abc", True),
        ("104-com-tw", AGENT, "/somewhere", False),
        ("albawabhnews", AGENT, "/reporter/x", True),  # its rules belong to no user-agent
        ("2345-com", AGENT, "/?2345org", True),  # only a Baiduspider group
        ("2345-com", "Baiduspider", "/?2345org", False),
        ("pearlline-pl", AGENT, "/environment/cache/images/a.png", True),
        ("pearlline-pl", AGENT, "/environment/x", False),
        ("theguardian", AGENT, "/search?q=x", False),
        ("theguardian", AGENT, "/world/2024/jan/01/story", True),
        ("theguardian", "ClaudeBot", "/world/2024/jan/01/story", False),  # 37 agents, 1 group
        ("ogrzewanieco-pl", "Bingbot", "/", False),
        ("platinumfitness-pl", "bingbot", "/application/x", True),  # its group has no rules
        ("1plus1-ua", AGENT, "/index.php", False),
        ("1plus1-ua", AGENT, "/image/cache/a.jpg", True),
    ],
)
def test_corpus_facts(name: str, agent: str, path: str, expected: bool) -> None:
    rules = Rules.parse(prepare((CORPUS / f"{name}.txt").read_bytes()), agent)
    assert rules.allowed(f"https://example.com{path}") is expected


@pytest.mark.parametrize(
    ("name", "agent", "crawl_delay", "interval"),
    [
        ("arxiv", AGENT, 15.0, None),
        ("arxiv", "Googlebot", None, None),
        ("aut-ac-ir", AGENT, 50.0, None),
        ("dblp", AGENT, 1.0, None),
        ("jianshu", "Googlebot", 10.0, 0.5),
        ("jianshu", AGENT, None, None),
        ("pearlline-pl", AGENT, 30.0, 1.0),  # three "*" groups merged; the last delay wins
        ("104-com-tw", "GPTBot", 10.0, None),
        ("github", "GPTBot", 1.0, None),
        ("ogrzewanieco-pl", AGENT, 10.0, None),
        ("platinumfitness-pl", "msnbot", 1.0, None),
    ],
)
def test_corpus_delays(
    name: str, agent: str, crawl_delay: float | None, interval: float | None
) -> None:
    rules = Rules.parse(prepare((CORPUS / f"{name}.txt").read_bytes()), agent)
    assert (rules.crawl_delay, rules.request_interval) == (crawl_delay, interval)


def test_corpus_sitemaps() -> None:
    def sitemaps(name: str) -> list[str]:
        return Rules.parse(prepare((CORPUS / f"{name}.txt").read_bytes()), AGENT).sitemaps

    assert sitemaps("google") == ["https://www.google.com/sitemap.xml"]
    assert len(sitemaps("ok-ru")) == 17
    assert sitemaps("bgp-he-net")[0] == "http://bgp.he.net/sitemap.dns1"
    assert len(sitemaps("wordpress-org")) == 9


# --- Fuzz ------------------------------------------------------------------------------------

FUZZ_URLS = [
    "https://example.com/",
    "https://example.com/a/b.php?x=1",
    "https://example.com/robots.txt",
    "https://example.com/%E3%83%84$",
    "http://[::1/p",
]
FIELDS = [
    "User-agent",
    "user-agent",
    "User agent",
    "useragent",
    "Disallow",
    "dissallow",
    "Allow",
    "Crawl-delay",
    "Request-rate",
    "Visit-time",
    "Sitemap",
    "Host",
    "Clean-param",
    "Invalid-Unknown-Line",
    "",
    " ",
    "#",
    "Noindex",
]
AGENTS = ["*", "BroadCrawl", "broadcrawl/2.0", "broad", "Googlebot", "", "Broad*", "* x"]
PATH_PARTS = [*"/ab*$%?=&#:.-_~ \t\u30c4\xe9", "%2F", "%E3", "\x85", "\f", "\u2028"]
values = st.one_of(
    st.sampled_from(AGENTS),
    st.lists(st.sampled_from(PATH_PARTS), max_size=20).map("".join),
    st.sampled_from(["5", "1/5", "3/1m", "0.5", "-1", "nan", "0600-0800", "1e400"]),
)
lines = st.builds(
    lambda field, sep, value: f"{field}{sep}{value}",
    st.sampled_from(FIELDS),
    st.sampled_from([": ", ":", " ", ""]),
    values,
)
robots_like = st.builds(
    lambda ls, end: end.join(ls).encode("utf-8"),
    st.lists(lines, max_size=40),
    st.sampled_from(["\n", "\r\n", "\r", "\n\n"]),
)
FUZZ = settings(max_examples=200, deadline=1000, suppress_health_check=[HealthCheck.too_slow])


def _exercise(body: bytes) -> None:
    text = prepare(body)
    for agent in (AGENT, "Googlebot"):
        rules = Rules.parse(text, agent)
        for url in FUZZ_URLS:
            assert isinstance(rules.allowed(url), bool)
        assert rules.delay is None or rules.delay >= 0
        assert isinstance(rules.sitemaps, list)


@FUZZ
@given(st.binary(max_size=4096))
def test_fuzz_arbitrary_bytes(body: bytes) -> None:
    _exercise(body)


@FUZZ
@given(robots_like)
def test_fuzz_robots_like(body: bytes) -> None:
    _exercise(body)


@FUZZ
@given(st.binary(max_size=300), st.integers(min_value=-5, max_value=400))
def test_fuzz_truncation(body: bytes, limit: int) -> None:
    text = prepare(body, max_bytes=limit)
    assert isinstance(text, str)
    # A kept line grows by at most ": " and "\n"; a 2-3 byte line break by its escape.
    assert len(text) <= 3 * max(limit, 0) + 2


# Where Protego is right (only "*" groups, only fields it knows, plain line ends),
# the rules here must say exactly what Protego says.
SAFE_PARTS = [*"/ab*$%?=&.-_~", "%2F", "%E3%83%84", "\u30c4", "index.html"]
safe_text = st.lists(st.sampled_from(SAFE_PARTS), max_size=8).map("".join)
safe_lines = st.one_of(
    st.just("User-agent: *"),
    st.builds("Disallow: {}".format, safe_text),
    st.builds("Allow: {}".format, safe_text),
    st.builds("Crawl-delay: {}".format, st.sampled_from(["1", "2.5", "x"])),
)
paths = safe_text.map(lambda p: "https://example.com/" + p)


@FUZZ
@given(st.lists(safe_lines, max_size=25), st.lists(paths, min_size=1, max_size=5))
def test_same_answers_as_protego_where_protego_is_right(lines: list[str], urls: list[str]) -> None:
    text = "\n".join(lines)
    ours, theirs = rules_of(text), Protego.parse(text)
    for url in urls:
        assert ours.allowed(url) == theirs.can_fetch(url, AGENT), url
    assert ours.crawl_delay == theirs.crawl_delay(AGENT)
