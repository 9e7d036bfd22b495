"""The links of an HTML page, resolved as a browser resolves them.

Scrapy's ``LinkExtractor`` joins a link to its page with
``urllib.parse.urljoin`` and escapes it with w3lib's ``safe_url_string``:
RFC 3986's rules, which browsers do not follow. A backslash would stay a
path character, ``///x`` would keep an empty host, and ``[`` or ``{`` would
be escaped where a browser keeps them, so the crawler would request URLs no
browser ever asks for. This module reads the ``href`` attributes itself and
resolves each with the WHATWG parser (:func:`crawler.urls.resolve_link`),
against the document's base URL and in the document's encoding, as the HTML
Standard says a browser does.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from scrapy.http import HtmlResponse
from scrapy.utils.url import url_has_any_extension

from crawler.urls import resolve_link

_XHTML = "{http://www.w3.org/1999/xhtml}"


@dataclass(frozen=True, slots=True)
class PageLink:
    """A link of a page: an absolute URL of any scheme, with its fragment."""

    url: str
    nofollow: bool


def base_url(response: HtmlResponse) -> str:
    """The page's base URL: its first ``<base href>`` resolved against the
    page's own URL, or that URL when there is none or it does not parse."""
    for element in _root(response).iter("base", f"{_XHTML}base"):
        href = element.get("href")
        if href is not None:
            return resolve_link(href, response.url, response.encoding) or response.url
    return response.url


class LinkFinder:
    """Finds the ``href`` links of some elements of a page.

    ``deny_extensions`` (without dots, as Scrapy's ``LinkExtractor`` takes
    them) drops links to files of those types.
    """

    def __init__(self, tags: Iterable[str] = ("a", "area"),
                 deny_extensions: Iterable[str] = ()) -> None:
        names = tuple(tags)
        self._tags = names + tuple(f"{_XHTML}{name}" for name in names)
        self._deny = {f".{ext.lstrip('.').lower()}" for ext in deny_extensions}

    def links(self, response: HtmlResponse) -> list[PageLink]:
        """The page's links in document order (a link that does not resolve is skipped)."""
        base = base_url(response)
        return [PageLink(url, "nofollow" in rels)
                for url, rels in self._resolved(response, base, self._tags)]

    def rel_links(self, response: HtmlResponse, rels: set[str]) -> list[str]:
        """The URLs of the page's ``<link>`` elements whose ``rel`` names one of ``rels``."""
        base = base_url(response)
        return [url for url, named in self._resolved(response, base, ("link", f"{_XHTML}link"))
                if named & rels]

    def _resolved(self, response: HtmlResponse, base: str, tags: tuple[str, ...]
                  ) -> Iterator[tuple[str, set[str]]]:
        encoding = response.encoding
        for element in _root(response).iter(*tags):
            href = element.get("href")
            if href is None:
                continue
            url = resolve_link(href, base, encoding)
            if url is None or (self._deny and url_has_any_extension(url, self._deny)):
                continue
            yield url, set((element.get("rel") or "").lower().split())


def _root(response: HtmlResponse) -> Any:  # (lxml's element)
    return response.selector.root
