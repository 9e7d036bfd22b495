"""The web-platform-tests URL suite, crawled: links are requested as a browser requests them.

Each case of ``urltestdata.json`` (read from ``../shared/urls/``, never
copied here) becomes one ``<a href>`` on a page served at the case's base
URL, and a real ``scrapy crawl broad`` crawls those pages through a proxy
that is every server itself (:mod:`tests.url_suite_web`) and keeps each
request target exactly as received. The test then compares the targets with
the suite's results:

- a case whose result is an http(s) URL: exactly that URL is requested, less
  its fragment and user info (which a browser does not send either);
- a case the suite calls a failure, or whose result has another scheme: it
  causes no request at all.

A case without a base is a failure only for want of one; on a page, an input
with no scheme of its own would resolve against the page, so only inputs that
name a scheme are put on a page: ``http:`` ones on an https page and the rest
on an http page, where a browser reads them as absolute.

Left out, and counted: inputs that an HTML page cannot carry unchanged (NUL,
which the HTML parser replaces with U+FFFD; lone surrogates, which no
encoding holds). Other C0 controls are written as they are: the HTML parser
keeps them in an attribute's value, as browsers do.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections import defaultdict
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.crawl_runner import run_crawl
from tests.url_suite_web import SuiteWeb

pytestmark = pytest.mark.crawl

_SUITE = Path(os.environ.get(
    "URLTESTDATA", Path(__file__).resolve().parents[2] / "shared" / "urls" / "urltestdata.json"))
_HTTP = ("http:", "https:")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_LEADING = "".join(chr(c) for c in range(0x21))  # what the URL parser strips first
#: Pages for scheme-bearing inputs without a base (see the module's docstring).
_REJECT_HTTP, _REJECT_HTTPS = "http://reject.test/page", "https://reject.test/page"


def _sendable(text: str) -> bool:
    """Whether an HTML attribute carries ``text`` as it is."""
    return not any(c == "\0" or 0xD800 <= ord(c) <= 0xDFFF for c in text)


def _sent(href: str) -> str:
    """What a browser requests for a parsed http(s) URL (the suite's ``href``, or a
    base): no fragment, no user info, a path of at least ``/``."""
    parts = urlsplit(href.partition("#")[0])
    return parts._replace(netloc=parts.netloc.rpartition("@")[2], path=parts.path or "/").geturl()


class Plan:
    """The pages to serve and the requests a browser would make from them."""

    def __init__(self, cases: list[dict[str, str]]) -> None:
        self.links: dict[str, list[str]] = defaultdict(list)  # page URL -> hrefs
        self.expected: dict[str, list[str]] = defaultdict(list)  # target -> inputs
        self.silent: list[str] = []  # inputs that must cause no request
        self.left_out: list[str] = []
        for case in cases:
            self._add(case)
        # An empty query is sent as it is (a browser keeps the "?"); the
        # suite's one case of it is its page's own URL plus "?", which the
        # crawler's identity takes for the page (below), so here is one alone.
        self.links[_REJECT_HTTP].append("/alone?")
        self.expected["http://reject.test/alone?"].append("/alone?")

    def _add(self, case: dict[str, str]) -> None:
        given = case["input"]
        base = case.get("base")
        if base is None:
            if not case.get("failure") or not _SCHEME.match(given.lstrip(_LEADING)):
                return  # (resolved against no base: not a page's link)
            schemeless = given.lstrip(_LEADING)[:5].lower()
            page = _REJECT_HTTPS if schemeless == "http:" else _REJECT_HTTP
        elif base.startswith(_HTTP):
            page = _sent(base)
        else:
            return  # a base no crawler fetches a page from
        if not _sendable(given):
            self.left_out.append(given)
            return
        self.links[page].append(given)
        if case.get("failure") or not case["href"].startswith(_HTTP):
            self.silent.append(given)
        else:
            self.expected[_sent(case["href"])].append(given)

    def pages(self) -> dict[str, bytes]:
        return {url: _page(hrefs) for url, hrefs in self.links.items()}


def _page(hrefs: list[str]) -> bytes:
    anchors = "".join(f'<a href="{html.escape(h, quote=True)}">{i}</a>\n'
                      for i, h in enumerate(hrefs))
    return f"<!doctype html>\n<meta charset=utf-8>\n<title>links</title>\n{anchors}".encode()


@pytest.mark.skipif(not _SUITE.is_file(), reason=f"no URL test suite at {_SUITE}")
def test_the_url_suite_s_links_are_requested_as_a_browser_requests_them(tmp_path: Path) -> None:
    cases = [c for c in json.loads(_SUITE.read_text(encoding="utf-8")) if isinstance(c, dict)]
    plan = Plan(cases)
    resolving = sum(len(inputs) for inputs in plan.expected.values())
    assert resolving >= 100 and len(plan.silent) >= 60, (resolving, len(plan.silent))
    assert len(plan.left_out) <= 12, plan.left_out
    pages = plan.pages()
    with SuiteWeb(pages, tmp_path / "ca") as web:
        result = run_crawl(
            web.url, sorted(pages), tmp_path / "crawl",
            settings={
                # Every request goes to the proxy, which answers it itself: the
                # suite's hosts (private literals, names without a dot) are
                # fetched, and nothing leaves loopback.
                "ADDRESS_GUARD_ENABLED": False,
                "SCOPE": "any", "DEPTH_LIMIT": 1, "DOWNLOAD_DELAY": 0.02,
                "LOG_LEVEL": "INFO", "CLOSESPIDER_TIMEOUT": 150, "PROMETHEUS_ENABLED": False,
            },
            env={"https_proxy": web.url, "HTTPS_PROXY": web.url}, timeout=200)
        targets = [t for t in web.targets if not urlsplit(t).path.endswith("/robots.txt")]
    assert result.returncode == 0, result.log[-3000:]
    missing = {t: plan.expected[t] for t in plan.expected if t not in targets}
    # The identity stays the crawler's: a page and its URL with an empty query
    # are one page (as Heritrix's canonicalisation has it), fetched once.
    one_page = {t for t in missing if t.endswith("?") and t[:-1] in targets}
    assert len(one_page) <= 2
    missing = {t: given for t, given in missing.items() if t not in one_page}
    assert missing == {}, f"{len(missing)} browser requests not made"
    bogus = sorted(set(targets) - set(plan.expected) - set(pages))
    assert bogus == [], f"{len(bogus)} requests no browser makes"
    assert set(pages) <= set(targets)
    twice = sorted(t for t in set(targets) if targets.count(t) > 1)
    assert twice == []
