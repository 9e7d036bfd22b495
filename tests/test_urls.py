"""The two URL forms (sent and canonical): examples, properties, and the Scrapy fingerprinter."""

from __future__ import annotations

import json
import os
import string
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scrapy import Request
from scrapy.utils.test import get_crawler

from crawler.urls import (
    CanonicalRequestFingerprinter,
    ParamStripper,
    canonical_url,
    host_key,
    request_url,
    resolve_link,
    url_fingerprint,
    url_forms,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("HTTP://Example.COM/a", "http://example.com/a"),
        ("http://example.com:80/a", "http://example.com/a"),
        ("https://example.com:443/a", "https://example.com/a"),
        ("https://example.com:8443/a", "https://example.com:8443/a"),
        ("http://example.com", "http://example.com/"),
        ("http://example.com/a#frag", "http://example.com/a"),
        ("http://example.com/a/./b/../c", "http://example.com/a/c"),
        ("http://example.com/?b=2&a=1", "http://example.com/?a=1&b=2"),
        ("http://example.com/?utm_source=x&a=1&UTM_Medium=y", "http://example.com/?a=1"),
        ("http://example.com/p?gclid=1&fbclid=2&msclkid=3", "http://example.com/p"),
        ("http://bücher.de/", "http://xn--bcher-kva.de/"),
        ("http://example.com./", "http://example.com/"),
        ("http://user:secret@example.com/", "http://example.com/"),
        ("http://[0:0::1]:80/", "http://[::1]/"),
        ("  http://example.com/a b  ", "http://example.com/a%20b"),
        ("http://exa\nmple.com/", "http://example.com/"),
        # A browser reads the slashes after a special scheme loosely.
        ("http:///x", "http://x/"),
        ("http:/example.com/", "http://example.com/"),
        ("http:\\\\example.com\\a", "http://example.com/a"),
    ],
)
def test_canonical_examples(raw: str, expected: str) -> None:
    assert canonical_url(raw) == expected


@pytest.mark.parametrize(
    "raw",
    ["mailto:a@b.c", "javascript:void(0)", "ftp://example.com/", "http://", "http:///",
     "http://a:99999/", "http://exa mple.com/", "", "/relative/path", "http://exa%mple.com/",
     "http://[::1/"],
)
def test_not_crawlable_gives_none(raw: str) -> None:
    assert canonical_url(raw) is None


def test_strip_params_configurable() -> None:
    stripper = ParamStripper(["sid", "ref_*"])
    url = "http://e.com/?sid=1&ref_x=2&utm_source=3&q=4"
    assert canonical_url(url, stripper) == "http://e.com/?q=4&utm_source=3"
    assert canonical_url(url, ParamStripper([])) == "http://e.com/?q=4&ref_x=2&sid=1&utm_source=3"


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("http://Example.com/a", "http://example.com:80"),
        ("http://example.com:80/b", "http://example.com:80"),
        ("https://example.com/", "https://example.com:443"),
        ("http://example.com:8080/", "http://example.com:8080"),
        ("http://[::1]/", "http://[::1]:80"),
        ("mailto:x@y", None),
    ],
)
def test_host_key_is_the_robots_authority(raw: str, key: str | None) -> None:
    assert host_key(raw) == key


def test_fingerprint_is_stable_and_distinguishes() -> None:
    a = url_fingerprint("http://example.com/")
    assert a == url_fingerprint("http://example.com/")
    assert len(a) == 16
    assert a != url_fingerprint("http://example.com/a")
    # Pinned value: must not change across machines, processes or releases,
    # or a frontier shared by workers stops deduplicating.
    assert a.hex() == "9aba6a18c5a5d94534a3b99c485d4547"


def test_scrapy_fingerprinter_uses_canonical_form() -> None:
    crawler = get_crawler(settings_dict={
        "REQUEST_FINGERPRINTER_CLASS": "crawler.urls.CanonicalRequestFingerprinter",
    })
    fp = crawler.request_fingerprinter
    assert isinstance(fp, CanonicalRequestFingerprinter)
    base = fp.fingerprint(Request("http://example.com/a?x=1"))
    assert fp.fingerprint(Request("HTTP://EXAMPLE.com:80/a?utm_source=z&x=1#f")) == base
    assert fp.fingerprint(Request("http://example.com/a?x=2")) != base
    assert fp.fingerprint(Request("http://example.com/a?x=1", method="POST")) != base


_url_chars = st.text(
    alphabet=st.sampled_from(list("aAzZ09-._~:/?#[]@!$&'()*+,;=% ü\t\\<>\"{}|^`\x00é中")),
    max_size=60,
)
_urlish = st.builds(
    lambda scheme, host, rest: f"{scheme}://{host}{rest}",
    st.sampled_from(["http", "https", "HTTP", "HtTpS", "ftp", "http:", ""]),
    st.text(alphabet=st.sampled_from(list("abcXYZ019.-:[]@ü%")), max_size=20),
    _url_chars,
)


@settings(max_examples=600, deadline=None)
@given(st.one_of(st.text(max_size=80), _urlish))
@example("http://a/%")
@example("http://a/%25%")
@example("http://a/?%=%")
@example("http://a/b/../../..")
@example("http://a:0/")
@example("http://[::ffff:1.2.3.4]/")
def test_canonical_never_raises_and_is_idempotent(raw: str) -> None:
    canon = canonical_url(raw)
    if canon is None:
        return
    assert canon.isascii()
    assert canon.startswith(("http://", "https://"))
    assert "#" not in canon
    assert canonical_url(canon) == canon
    assert host_key(canon) == host_key(raw)


@settings(max_examples=300, deadline=None)
@given(_urlish)
def test_host_key_never_raises(raw: str) -> None:
    key = host_key(raw)
    assert key is None or key.count(":") >= 2


# --- the form that is sent ----------------------------------------------------

@pytest.mark.parametrize(
    ("linked", "sent"),
    [
        # What a browser sends: nothing reordered, nothing decoded.
        ("http://example.com/list?b=2&a=1", "http://example.com/list?b=2&a=1"),
        ("http://example.com/search?page", "http://example.com/search?page"),
        ("http://example.com/go?next=/a/b?c=1", "http://example.com/go?next=/a/b?c=1"),
        ("http://example.com/a?x=%41&y=%2F", "http://example.com/a?x=%41&y=%2F"),
        ("http://example.com/%7Efoo/%2F", "http://example.com/%7Efoo/%2F"),
        ("http://example.com/a?q=a+b", "http://example.com/a?q=a+b"),
        ("http://example.com/a?b&a=", "http://example.com/a?b&a="),
        # What a browser's URL parser does change.
        ("HTTP://ExAmple.COM:80/a", "http://example.com/a"),
        ("https://example.com:443/a", "https://example.com/a"),
        ("https://example.com:8443/a", "https://example.com:8443/a"),
        ("http://example.com", "http://example.com/"),
        ("http://example.com/a#frag", "http://example.com/a"),
        ("http://example.com/a/./b/../c", "http://example.com/a/c"),
        ("http://example.com/a/%2E%2e/b", "http://example.com/b"),
        ("http://example.com/../../x", "http://example.com/x"),
        ("http://example.com/a/..", "http://example.com/"),
        ("http://example.com/a b", "http://example.com/a%20b"),
        ("http://example.com/a\\b", "http://example.com/a/b"),
        ("http://example.com/caf\u00e9?q=\u00fc", "http://example.com/caf%C3%A9?q=%C3%BC"),
        ("http://b\u00fccher.example/", "http://xn--bcher-kva.example/"),
        ("http://[0:0::1]:80/x", "http://[::1]/x"),
        ("http://user:secret@example.com/a", "http://example.com/a"),
        ("http://example.com/a\t\nb", "http://example.com/ab"),
        # Tracking parameters leave, the rest keeps its order and spelling.
        ("http://example.com/a?z=1&utm_source=x&b=2", "http://example.com/a?z=1&b=2"),
        ("http://example.com/a?utm_source=x", "http://example.com/a"),
    ],
)
def test_request_url_is_what_a_browser_sends(linked: str, sent: str) -> None:
    assert request_url(linked) == sent
    assert request_url(sent) == sent
    # One page, whichever form it is given in.
    assert canonical_url(sent) == canonical_url(linked)


def test_the_two_forms_differ_where_the_issue_says() -> None:
    """The identity sorts and encodes; the sent form does not."""
    assert url_forms("http://example.com/list?b=2&a=1") == (
        "http://example.com/list?b=2&a=1", "http://example.com/list?a=1&b=2")
    assert url_forms("http://example.com/search?page") == (
        "http://example.com/search?page", "http://example.com/search?page=")
    assert url_forms("http://example.com/go?next=/a/b?c=1") == (
        "http://example.com/go?next=/a/b?c=1", "http://example.com/go?next=%2Fa%2Fb%3Fc%3D1")


@pytest.mark.parametrize("url", ["mailto:a@b.c", "ftp://a.b/", "http://", "http:///", "", "//a/b"])
def test_no_sent_form_without_an_identity(url: str) -> None:
    assert request_url(url) is None and canonical_url(url) is None and url_forms(url) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", ".", "..", "%2e", "%2E.", "", "x.y", "%41"]),
                max_size=8))
def test_sent_form_is_stable_and_names_the_same_page(segments: list[str]) -> None:
    url = "http://example.com/" + "/".join(segments) + "?b=1&a"
    sent = request_url(url)
    assert sent is not None and request_url(sent) == sent
    assert canonical_url(sent) == canonical_url(url)
    assert sent.endswith("?b=1&a")


# -- the WHATWG URL Standard, as the web-platform-tests suite states it.

#: The web-platform-tests URL suite, kept next to the project (not copied into it).
_URL_SUITE = Path(os.environ.get(
    "URLTESTDATA", Path(__file__).resolve().parents[2] / "shared" / "urls" / "urltestdata.json"))
_needs_suite = pytest.mark.skipif(not _URL_SUITE.is_file(),
                                  reason=f"no URL test suite at {_URL_SUITE}")
_SPECIALS = "%/?#&=;:@!$'()*+,.-_~[]{}|\\^`\"<> \u00e9\u4e2d"
_ORIGINS = ("http://a.com/", "https://B.org:8080/x/", "http://h", "http://u:p@h/",
            "http://[::1]:80/", "http://xn--e1a.com/", "https://h/?a=b&")


def _suite() -> list[dict[str, str]]:
    return [case for case in json.loads(_URL_SUITE.read_text()) if isinstance(case, dict)]


def _browser_sends(href: str) -> str:
    """What a browser requests for a parsed URL: no fragment, no user info."""
    parts = urlsplit(href)
    host = parts.netloc.rpartition("@")[2]
    return href.partition("#")[0].replace(parts.netloc, host, 1)


@_needs_suite
def test_links_resolve_as_the_url_suite_says() -> None:
    """Every case of the suite with a base: an http(s) result is what is sent
    (less fragment and user info), a failure or another scheme sends nothing."""
    cases = [case for case in _suite() if case.get("base")]
    assert len(cases) > 300
    for case in cases:
        resolved = resolve_link(case["input"], case["base"])
        sent = None if resolved is None else request_url(resolved, ParamStripper(()))
        if case.get("failure"):
            assert resolved is None, case
        elif case["href"].startswith(("http:", "https:")):
            assert sent == _browser_sends(case["href"]), case
        else:
            assert sent is None, case


@pytest.mark.parametrize(
    ("host", "parsed"),
    [
        # IPv4 in every spelling a browser accepts: one address.
        ("0x7f.1", "127.0.0.1"), ("2130706433", "127.0.0.1"), ("017700000001", "127.0.0.1"),
        ("127.1", "127.0.0.1"), ("192.168.257", "192.168.1.1"), ("0xc0.0250.01", "192.168.0.1"),
        ("10.0.0.1.", "10.0.0.1"),
        # IPv6 compressed, IPv4-mapped tail rewritten.
        ("[0:0:0:0:0:0:0:1]", "[::1]"), ("[::ffff:192.168.0.1]", "[::ffff:c0a8:1]"),
        ("[2001:DB8::0:1]", "[2001:db8::1]"),
        # IDNA (UTS 46, not transitional: "ß" stays itself).
        ("B\u00dcCHER.de", "xn--bcher-kva.de"), ("fa\u00df.de", "xn--fa-hia.de"),
        ("\uff21.com", "a.com"), ("xn--bcher-kva.DE", "xn--bcher-kva.de"),
        ("\u0441\u0430\u0439\u0442.\u0440\u0444", "xn--80aswg.xn--p1ai"),
    ],
)
def test_hosts_are_parsed_as_a_browser_parses_them(host: str, parsed: str) -> None:
    assert request_url(f"http://{host}/x") == f"http://{parsed}/x"


@pytest.mark.parametrize(
    "host", ["1.2.3.4.5", "0x100000000", "256.256.256.256", "[::1::]", "[1:2:3:4:5:6:7:8:9]",
             "a..b", "a.b..", "a b", "a%20b", "a<b", "[::1"])
def test_hosts_a_browser_rejects_or_dns_cannot_name_have_no_forms(host: str) -> None:
    """The last two are a browser's, but no name has an empty label."""
    assert url_forms(f"http://{host}/x") is None


@pytest.mark.parametrize(
    ("href", "encoding", "sent"),
    [
        ("/s?q=\u0434", "cp1251", "http://h.test/s?q=%E4"),
        ("/\u0434?q=\u0434", "koi8-r", "http://h.test/%D0%B4?q=%C4"),
        ("/s?q=\u4e2d", "latin-1", "http://h.test/s?q=%26%2320013%3B"),
        ("/s?q=\u0434#\u0434", "cp1251", "http://h.test/s?q=%E4"),
        ("/s?q=\u0434", "utf-8", "http://h.test/s?q=%D0%B4"),
        ("/s?q=\u0434", "utf-16", "http://h.test/s?q=%D0%B4"),
        ("/s?q=\u0434", "no-such-codec", "http://h.test/s?q=%D0%B4"),
    ],
)
def test_a_link_s_query_is_encoded_in_its_page_s_encoding(href: str, encoding: str,
                                                          sent: str) -> None:
    assert request_url(resolve_link(href, "http://h.test/p", encoding) or "") == sent


def test_a_fragment_is_utf_8_whatever_the_page_s_encoding() -> None:
    assert resolve_link("/s?q=\u0434#\u0434?\u0434", "http://h.test/", "cp1251") == (
        "http://h.test/s?q=%E4#%D0%B4?%D0%B4")
    assert resolve_link("/s#?q=\u0434", "http://h.test/", "cp1251") == (
        "http://h.test/s#?q=%D0%B4")


def _fixed_points(url: str) -> None:
    forms = url_forms(url)
    if forms is None:
        return
    sent, canon = forms
    assert url_forms(sent) == (sent, canon), url
    assert canonical_url(canon) == canon, url
    assert sent.isascii() and canon.isascii(), url


@_needs_suite
def test_both_forms_are_fixed_points_on_the_url_test_suite() -> None:
    urls = sorted({case[key] for case in _suite() for key in ("input", "href", "base")
                   if case.get(key)})
    assert len(urls) > 500
    for url in urls:
        _fixed_points(url)


_strings = st.builds(lambda origin, rest: origin + rest, st.sampled_from(_ORIGINS),
                     st.text(alphabet=st.sampled_from(string.ascii_letters + string.digits
                                                      + _SPECIALS), max_size=24))


@settings(max_examples=3000, deadline=None)
@given(_strings)
def test_both_forms_are_fixed_points_on_strings_of_every_special_character(url: str) -> None:
    _fixed_points(url)
