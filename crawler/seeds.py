"""Reading seed lists: one URL per line, comments and blanks allowed.

Seed files are written by people and exported from spreadsheets, so they carry
BOMs, CRLF line ends, stray bytes and half-typed URLs. One bad line must never
stop the crawl: it is reported once, with the file and line number, and the
rest is read. Files are read as a stream, so a seed list of millions of lines
costs no memory.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request

from crawler.urls import DEFAULT_STRIPPER, VERBATIM_META, ParamStripper, request_url

logger = logging.getLogger(__name__)

#: Request meta key on the requests of seed lines (:func:`seed_request`), so
#: that a refusal of the URL is reported as a seed's (:mod:`crawler.seedrefusals`).
SEED_META = "broad_seed"

_MAX_LINE_BYTES = 16 * 1024  # a line longer than this is not a URL anyone meant


@dataclass(frozen=True, slots=True)
class Seed:
    """A seed URL in the form it is sent (:func:`crawler.urls.request_url`), with where it
    came from."""

    url: str
    source: str
    line: int


@dataclass(frozen=True, slots=True)
class SeedError:
    """A line that is not a usable seed, and why."""

    source: str
    line: int
    text: str
    reason: str

    def __str__(self) -> str:
        shown = self.text if len(self.text) <= 80 else self.text[:77] + "..."
        return f"{self.source}:{self.line}: {self.reason}: {shown!r}"


def parse_seed_line(
    raw: bytes,
    *,
    source: str,
    line: int,
    add_scheme: bool = False,
    stripper: ParamStripper = DEFAULT_STRIPPER,
) -> Seed | SeedError | None:
    """Parse one line; ``None`` for blank lines and ``#`` comments."""
    if len(raw) > _MAX_LINE_BYTES:
        return SeedError(source, line, raw[:80].decode("utf-8", "replace"), "line too long")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return SeedError(source, line, raw.decode("utf-8", "replace"), "not valid UTF-8")
    text = text.removeprefix("\ufeff").strip()
    if not text or text.startswith("#"):
        return None
    if any(c.isspace() for c in text):
        return SeedError(source, line, text, "more than one field on the line")
    if add_scheme and "://" not in text:
        text = f"http://{text}"
    url = request_url(text, stripper)
    if url is None:
        if "://" not in text:
            reason = "no http:// or https:// scheme"
        elif text.partition("://")[0].lower() in ("http", "https"):
            reason = f"malformed URL ({_why_malformed(text)})"
        else:
            reason = "not an http(s) URL"
        return SeedError(source, line, text, reason)
    return Seed(url, source, line)


def _why_malformed(text: str) -> str:
    """What is wrong with an http(s) URL that :func:`crawler.urls.request_url` refused.

    The WHATWG parser says only that it failed, so :func:`urllib.parse.urlsplit`
    is asked why, in its own words ("Invalid IPv6 URL", "Port out of range 0-65535").
    """
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 -- reading it is the check: a bad port raises
    except ValueError as exc:
        return str(exc)
    if not parts.hostname:
        return "no host name"
    try:
        parts.hostname.encode("idna")
    except UnicodeError:
        return f"bad host name {parts.hostname!r}"
    return "cannot be read as a URL"


def parse_seed_lines(
    lines: Iterable[bytes],
    *,
    source: str,
    add_scheme: bool = False,
    stripper: ParamStripper = DEFAULT_STRIPPER,
) -> Iterator[Seed | SeedError]:
    """Parse seed lines (bytes, as read from a file), skipping blanks and comments."""
    for number, raw in enumerate(lines, start=1):
        parsed = parse_seed_line(
            raw.rstrip(b"\r\n"), source=source, line=number, add_scheme=add_scheme,
            stripper=stripper,
        )
        if parsed is not None:
            yield parsed


def read_seeds(
    path: str,
    *,
    add_scheme: bool = False,
    stripper: ParamStripper = DEFAULT_STRIPPER,
) -> Iterator[Seed | SeedError]:
    """Stream seeds from a file, or from standard input when ``path`` is ``-``."""
    if path == "-":
        yield from parse_seed_lines(
            sys.stdin.buffer, source="<stdin>", add_scheme=add_scheme, stripper=stripper
        )
        return
    with Path(path).open("rb") as handle:
        yield from parse_seed_lines(
            handle, source=path, add_scheme=add_scheme, stripper=stripper
        )


def seed_request(parsed: Seed | SeedError, stats: Any, *,
                 callback: Callable[..., Any] | None = None,
                 errback: Callable[..., Any] | None = None) -> Request | None:
    """The request of one parsed seed line, counted in ``seeds/loaded``; a malformed
    line is reported with its source and number (``seeds/malformed``) and gives None.

    The request is marked (:data:`SEED_META`), so that a refusal of its URL
    is reported to the operator as a seed's.
    """
    if isinstance(parsed, SeedError):
        stats.inc_value("seeds/malformed")
        logger.warning("Skipping seed line %s", parsed, extra={"seed_line": parsed.line})
        return None
    stats.inc_value("seeds/loaded")
    return Request(parsed.url, callback=callback, errback=errback,
                   meta={SEED_META: True, VERBATIM_META: True})
