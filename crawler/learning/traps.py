"""A URL's shape, and a page's sketch: what trap detection compares.

Generated URLs (a calendar's next day, a session id minted on every page, the
combinations of a faceted search) share a shape: the same path with numbers,
dates or ids changing, the same query names with other values. Their pages
look alike. A catalogue's ``/product/{n}`` shares the shape too, but its
pages differ: so the shape alone proves nothing, and :func:`url_pattern` only
groups pages whose text :func:`sketch` then compares (``lua/learn.lua``
counts the alike ones per host and pattern).

The sketch is a 64-bit SimHash (the ``simhash`` package) of the page's word
pairs: near-duplicate texts are a few bits apart, unrelated ones about 32.
"""

from __future__ import annotations

import hashlib
import re
from itertools import pairwise
from urllib.parse import urlsplit

from simhash import Simhash

#: Placeholders a pattern puts where a URL's variable parts were.
NUMBER, ID = "{n}", "{id}"

_DIGITS = re.compile(r"[0-9]+")
# An id: hex of 8 or more, or a long token mixing letters and digits.
_ID = re.compile(r"(?:[0-9a-f]{8,}|(?=[A-Za-z_-]*[0-9])[A-Za-z0-9_-]{16,})", re.I)
_TAG = re.compile(rb"<(script|style)\b.*?</\1\s*>|<[^>]*>", re.S | re.I)
_WORD = re.compile(r"\w+")
#: Words of a page that go into its sketch: enough for any template.
MAX_WORDS = 2000
#: A page with fewer words has no sketch: near-empty pages (a script's shell,
#: a page of links) look alike whatever they are, so they prove no trap.
MIN_WORDS = 50


def url_pattern(canon: str) -> str | None:
    """The shape of a canonical URL's path and query, or ``None`` when the
    URL has no variable part (a fixed path such as ``/about`` is one page).

    ``/events/2026/12/03`` → ``/events/{n}/{n}/{n}``; ``/s/3fa2b1c09d8e/page/2``
    → ``/s/{id}/page/{n}``; any query → ``?*`` after the path's shape, so
    every combination of a faceted search is one pattern.
    """
    parts = urlsplit(canon)
    segments = [_segment_shape(s) for s in parts.path.split("/")]
    path = "/".join(segments)
    variable = parts.query != "" or any(NUMBER in s or s == ID for s in segments)
    if not variable:
        return None
    return f"{path}?*" if parts.query else path


def _segment_shape(segment: str) -> str:
    if _ID.fullmatch(segment):
        return ID
    return _DIGITS.sub(NUMBER, segment)


def page_text(body: bytes) -> str:
    """The words of an HTML page, tags, scripts and styles left out."""
    text = _TAG.sub(b" ", body).decode("utf-8", "replace")
    return " ".join(_WORD.findall(text)[:MAX_WORDS])


def page_sketch(body: bytes) -> str | None:
    """:func:`sketch` of an HTML page's text; None under :data:`MIN_WORDS` words."""
    text = page_text(body)
    return sketch(text) if len(text.split()) >= MIN_WORDS else None


def sketch(text: str) -> str:
    """The 64-bit SimHash of ``text``'s word pairs, as 16 hex characters.

    Numbers count as one word: the pages a generator makes differ in their
    numbers (a calendar's dates, a listing's counts), a catalogue's in their
    words."""
    words = _DIGITS.sub("#", text.lower()).split()
    features = [f"{a} {b}" for a, b in pairwise(words)] or words
    return f"{Simhash(features, hashfunc=_hash64).value:016x}"


def distance(a: str, b: str) -> int:
    """Bits that differ between two sketches."""
    return (int(a, 16) ^ int(b, 16)).bit_count()


def _hash64(feature: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(feature, digest_size=8).digest(), "big")
