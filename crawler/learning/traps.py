"""A URL's shape, and a page's sketch: what trap detection compares.

Generated URLs (a calendar's next day, a session id minted on every page, the
combinations of a faceted search) share a shape: the same path with numbers,
dates or ids changing, the same query names with other values. Their pages
look alike. A catalogue's ``/product/{n}`` shares the shape too, but its
pages differ: so the shape alone proves nothing, and :func:`url_pattern` only
groups pages whose text :func:`sketch` then compares (``lua/learn.lua``
counts the alike ones per host and pattern).

The sketch is a 64-bit SimHash of the page's word pairs: near-duplicate
texts are a few bits apart, unrelated ones about 32. It is computed here
rather than by the ``simhash`` package, whose loop over features (a hash
call and a conversion each, in Python) cost more than parsing the page: each
word is hashed by one C call (CRC-32), a pair's hash mixes its two words'
(splitmix64's finaliser, in numpy), and the bit counts are one array sum.
Every step works on the whole page at once, in C: this runs on every page
with a variable URL, on the reactor thread.
"""

from __future__ import annotations

import re
import zlib
from urllib.parse import urlsplit

import numpy as np

#: Placeholders a pattern puts where a URL's variable parts were.
NUMBER, ID = "{n}", "{id}"

_DIGITS = re.compile(r"[0-9]+")
# An id: hex of 8 or more, or a long token mixing letters and digits.
_ID = re.compile(r"(?:[0-9a-f]{8,}|(?=[A-Za-z_-]*[0-9])[A-Za-z0-9_-]{16,})", re.I)
_TAG = re.compile(rb"<(script|style)\b.*?</\1\s*>|<[^>]*>", re.S | re.I)
_WORD = re.compile(r"\w+")
#: ASCII bytes that are not ``\w`` become spaces; every other byte stays.
_ASCII_NON_WORD_TO_SPACE = bytes(
    b if b >= 0x80 or re.fullmatch(r"\w", chr(b)) else 0x20 for b in range(256))
#: Words of a page that go into its sketch: enough for any template.
MAX_WORDS = 2000
#: A page with fewer words has no sketch: near-empty pages (a script's shell,
#: a page of links) look alike whatever they are, so they prove no trap. A
#: page at a dated URL is sketched however small: there the URL says what it
#: is, a calendar's day or month, and an endless calendar's near-empty pages
#: say the same words but for their numbers, where a small real page of an
#: archive (a photo's caption, a day's one post) says its own.
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
    """The words of an HTML page (runs of ``\\w``), tags, scripts and styles
    left out, at most :data:`MAX_WORDS`.

    A regular expression scanning the text for words cost as much as the rest
    of the sketch; a byte table turns ASCII's non-word characters into spaces
    and ``split`` does the rest in C. Only the pieces holding non-ASCII
    characters, whose word characters a byte table cannot know, go through
    the expression."""
    text = _TAG.sub(b" ", body).translate(_ASCII_NON_WORD_TO_SPACE)
    pieces = text.decode("utf-8", "replace").split()
    if not text.isascii():
        pieces = [word for piece in pieces
                  for word in ((piece,) if piece.isascii() else _WORD.findall(piece))]
    return " ".join(pieces[:MAX_WORDS])


def page_sketch(body: bytes, *, dated: bool = False) -> str | None:
    """:func:`sketch` of an HTML page's text; None under :data:`MIN_WORDS`
    words, unless the page's URL is ``dated``."""
    words = page_text(body).split()
    return _sketch(words) if dated or len(words) >= MIN_WORDS else None


def sketch(text: str) -> str:
    """The 64-bit SimHash of ``text``'s word pairs, as 16 hex characters.

    Numbers count as one word: the pages a generator makes differ in their
    numbers (a calendar's dates, a listing's counts), a catalogue's in their
    words."""
    return _sketch(text.split())


def _sketch(words: list[str]) -> str:
    if not words:
        return "0" * 16
    hashes = _word_hashes(words)
    features = _finalise(hashes[:-1] * _GOLDEN ^ hashes[1:]) if len(words) > 1 else hashes
    bits = np.unpackbits(features.astype(">u8").view(np.uint8)).reshape(-1, 64)
    majority = bits.sum(axis=0, dtype=np.int64) * 2 > len(features)
    return np.packbits(majority).tobytes().hex()


def distance(a: str, b: str) -> int:
    """Bits that differ between two sketches."""
    return (int(a, 16) ^ int(b, 16)).bit_count()


def _word_hashes(words: list[str]) -> np.ndarray:
    """A 64-bit hash of each word, lower-cased, every run of digits one mark:
    the word's CRC-32 spread over 64 bits by the finaliser."""
    data = np.frombuffer(" ".join(words).lower().translate(_DIGIT_TO_MARK).encode(), np.uint8)
    mark = data == _MARK
    # A run of marks is one mark ("x1" and "x22" are alike): the text of a
    # page full of numbers has thousands of runs, too many for bytes.replace.
    blob = data[np.concatenate(([True], ~(mark[1:] & mark[:-1])))].tobytes()
    return _finalise(np.array(list(map(zlib.crc32, blob.split())), dtype=np.uint64))


_GOLDEN, _M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), \
    np.uint64(0x94D049BB133111EB)


_MARK = ord("#")
_DIGIT_TO_MARK = str.maketrans("0123456789", "#" * 10)


def _finalise(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit moves about half the output bits.
    A pair of words is hashed as ``finalise(first * golden ^ second)``, so "a b"
    and "b a" differ."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))
