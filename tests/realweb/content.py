"""Turning a :class:`~tests.realweb.spec.Page` into the bytes of one answer.

Rendering happens at serve time because URLs depend on the layout: an
absolute link (or redirect) to one of the web's own hosts, written without a
port, gets the web's port for that scheme when it is not the default one, so
the same spec works on 80/443 (as root) and on high ports. Everything else in
an href is left exactly as written: relative links, links with an explicit
port, links to names outside the web.
"""

from __future__ import annotations

import email.utils
import html
import re
from dataclasses import dataclass

from .layout import Layout
from .spec import Page
from .wire import Head

HTML = "text/html; charset=utf-8"

_ORIGIN = re.compile(r"^(https?)://([^/?#:@\[\]{}]+)(?=[/?#{]|$)", re.IGNORECASE)


@dataclass(frozen=True)
class Answer:
    """Status, headers (values may be raw bytes) and body of one response."""

    status: int
    headers: tuple[tuple[str, str | bytes], ...]
    body: bytes
    verbatim: bytes = b""  # header lines sent as they are (Page.verbatim)


def complete_url(href: str, layout: Layout) -> str:
    """``href`` with the port put in, if it is an absolute http(s) URL to a web host."""
    match = _ORIGIN.match(href)
    if match is None or not layout.knows(match.group(2)):
        return href
    scheme, name = match.group(1).lower(), match.group(2)
    port = layout.port(scheme)
    if port == {"http": 80, "https": 443}[scheme]:
        return href
    return f"{match.group(1)}://{name}:{port}{href[match.end():]}"


def links_html(page: Page, layout: Layout) -> bytes:
    """An HTML document with one anchor per link, hrefs escaped for an attribute."""
    items = "".join(
        f'<li><a href="{html.escape(complete_url(href, layout), quote=True)}">'
        f"{html.escape(href)}</a></li>\n" for href in page.links)
    title = html.escape(page.title)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>"
            f"</head>\n<body><h1>{title}</h1>\n<ul>\n{items}</ul></body></html>\n"
            ).encode()


def fit(body: bytes, size: int | None) -> bytes:
    """``body`` padded with spaces or cut to exactly ``size`` bytes (unchanged if None)."""
    if size is None:
        return body
    return body[:size] if len(body) >= size else body + b" " * (size - len(body))


def render(page: Page, layout: Layout, *, host: str, target: bytes) -> Answer:
    """The answer to ``target`` on ``host`` (the requested name) for ``page``."""
    headers: list[tuple[str, str | bytes]] = []
    if page.redirect is not None:
        location = complete_url(page.redirect.replace("{host}", host), layout)
        headers.append(("Location", location.encode("utf-8").replace(b"{target}", target)))
        body = b"redirecting\n"
        content_type = page.content_type or "text/plain"
    elif page.links:
        body, content_type = links_html(page, layout), page.content_type or HTML
    else:
        body, content_type = bytes(page.body or b""), page.content_type or HTML
    headers.insert(0, ("Content-Type", content_type))
    headers.extend(page.headers.items())
    return Answer(page.status, tuple(headers), fit(body, page.size), page.verbatim)


def not_found() -> Answer:
    return Answer(404, (("Content-Type", "text/plain"),), b"not found\n")


def misdirected(host: str | None, address: str) -> Answer:
    """421: this address does not serve that name (RFC 9110 15.5.20)."""
    text = f"{host or '(no Host)'} is not served on {address}\n"
    return Answer(421, (("Content-Type", "text/plain"),), text.encode("utf-8", "replace"))


def not_modified(page: Page, head: Head) -> Answer | None:
    """A 304 when the request's validators match the page's (RFC 9110 13.1), else None.

    ``If-None-Match`` (weak comparison, ``*`` matches any) wins over
    ``If-Modified-Since``, which only counts without it; only 200 pages with
    an ``ETag`` / ``Last-Modified`` header of their own are ever not modified.
    """
    headers = {k.lower(): v for k, v in page.headers.items()}
    etag, modified = headers.get("etag"), headers.get("last-modified")
    if page.status != 200 or not (etag or modified):
        return None
    match, since = head.header("if-none-match"), head.header("if-modified-since")
    if match is not None:
        fresh = etag is not None and _weak_match(match, etag)
    else:
        fresh = since is not None and modified is not None and _not_after(modified, since)
    if not fresh:
        return None
    kept = tuple((k, v) for k, v in page.headers.items() if k.lower() in ("etag", "last-modified"))
    return Answer(304, kept, b"")


def _weak_match(field: str, etag: str) -> bool:
    tags = [t.strip() for t in field.split(",")]
    return "*" in tags or etag.removeprefix("W/") in [t.removeprefix("W/") for t in tags]


def _not_after(modified: str, since: str) -> bool:
    try:
        return email.utils.parsedate_to_datetime(modified) <= email.utils.parsedate_to_datetime(
            since)
    except (TypeError, ValueError):
        return False
