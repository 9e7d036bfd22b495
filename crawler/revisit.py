"""When a done URL is fetched again, and what it remembers between fetches.

A recurring crawl keeps its frontier (the same ``crawl_id``): with
``FRONTIER_REVISIT_AFTER`` set, a URL that is done becomes due again after
its *interval*, and the refetch tells whether the page changed. An
unchanged page (a ``304 Not Modified``, or the same payload digest) waits
``FRONTIER_REVISIT_FACTOR`` times longer next time, up to
``FRONTIER_REVISIT_MAX``; a changed one ``FACTOR`` times shorter, down to
``FRONTIER_REVISIT_MIN`` - the adaptive schedule of Nutch, in one rule.
"Changed" is the payload, never the headers: a server that stamps a new
``Date`` or cookie on every answer has not changed its page.

What a done URL keeps rides in its frontier record (:mod:`crawler.frontier.
records`) as one short string, ``"v": "INTERVAL DIGEST VALIDATOR"``: the
interval in seconds written in base 36, the first :data:`DIGEST_CHARS` characters of the last
payload's digest (base32 SHA-1 as WARC and CDXJ write it: 50 bits tell a
change, and find the capture in the archive's digest index,
:mod:`crawler.warc.digests`), and one validator to send back: an ``ETag``
as ``E`` + its opaque part (``"x"``) or ``W`` + it (``W/"x"``: the quotes
would cost four bytes of JSON escapes), ``U`` + one that is neither,
verbatim; a ``Last-Modified`` as ``T`` + Unix seconds (when they write back
to the very same IMF-fixdate), else ``M`` + it verbatim. One
validator is enough: a server that gets ``If-None-Match`` ignores
``If-Modified-Since`` (RFC 9110, 13.1.3). Every byte here is kept for every
done URL of a recurring crawl: the field stays under 60 bytes for the usual
ETags.

Pure: no I/O, no Scrapy.
"""

from __future__ import annotations

import email.utils
import re
from dataclasses import dataclass, replace
from typing import Any

#: The record field that holds a URL's revisit state.
FIELD = "v"
#: The flag (``response.flags``) and meta key of a 304 answer to a revisit.
NOT_MODIFIED = "not_modified"
#: How much of a payload digest (base32 SHA-1, 32 characters) a URL keeps.
DIGEST_CHARS = 10


def short_digest(digest: str) -> str:
    """What a URL keeps of a ``sha1:BASE32`` (or bare base32) payload digest."""
    return digest.removeprefix("sha1:")[:DIGEST_CHARS]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([smhdw]?)\s*", re.IGNORECASE)


def parse_duration(value: object, name: str = "duration") -> float:
    """Seconds in ``value``: a number (seconds) or text like ``90``, ``45s``,
    ``30m``, ``12h``, ``7d``, ``2w``. ``ValueError`` names ``name`` otherwise."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _DURATION.fullmatch(str(value if value is not None else ""))
        if not match:
            raise ValueError(f"{name}={value!r} is not a duration "
                             "(seconds, or a number with s, m, h, d or w: 7d, 12h)")
        seconds = float(match.group(1)) * _UNITS[(match.group(2) or "s").lower()]
    if seconds < 0:
        raise ValueError(f"{name}={value!r} must not be negative")
    return seconds


@dataclass(frozen=True, slots=True)
class RevisitState:
    """What a URL remembers from its last fetch."""

    interval: int = 0  # seconds until the next fetch (0: not set yet)
    digest: str = ""  # the last payload's short digest ("": none yet)
    validator: str = ""  # "E"/"W"/"U" + an ETag, "T"/"M" + a Last-Modified (see above)

    @classmethod
    def of_record(cls, data: dict[str, Any]) -> RevisitState | None:
        """The state stored in a decoded record (None: fetched once at most, or a
        field this version cannot read)."""
        raw = data.get(FIELD)
        if not isinstance(raw, str) or not raw:
            return None
        interval, digest, validator = [*raw.split(" ", 2), "", ""][:3]
        try:
            return cls(int(interval, 36), digest, validator)
        except ValueError:
            return None

    def field(self) -> str:
        """The record field's value (validators hold no space before their own:
        an ETag has none, a date is last)."""
        return f"{_base36(self.interval)} {self.digest} {self.validator}".rstrip()

    def conditional_headers(self) -> dict[str, str]:
        """The header that asks the server for the page only if it changed."""
        kind, value = self.validator[:1], self.validator[1:]
        if kind in ("E", "W", "U"):
            tag = {"E": f'"{value}"', "W": f'W/"{value}"', "U": value}[kind]
            return {"If-None-Match": tag}
        if self.validator.startswith("T"):
            return {"If-Modified-Since": email.utils.formatdate(int(self.validator[1:]),
                                                                 usegmt=True)}
        if self.validator.startswith("M"):
            return {"If-Modified-Since": self.validator[1:]}
        return {}


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if not n:
            return out


#: The request headers that make a revisit conditional.
CONDITIONAL_HEADERS = ("If-None-Match", "If-Modified-Since")


def unchanged(old: RevisitState, fetch: Refetch) -> bool:
    """Whether a refetch found the page as it was: a 304, or the same payload digest."""
    return fetch.not_modified or (bool(fetch.digest) and fetch.digest == old.digest)


def not_modified(status: int, request_headers: Any) -> bool:
    """Whether an answer is a 304 to a request made conditional (a 304 to a
    request that asked for nothing of the kind is the server's own affair)."""
    return status == 304 and any(request_headers.get(name) for name in CONDITIONAL_HEADERS)


def validator_of(headers: Any) -> str:
    """The validator to keep from a response's headers (``Headers`` or a dict of
    bytes/str): its ``ETag``, else its ``Last-Modified``, else ""."""
    for name, mark in (("ETag", "E"), ("Last-Modified", "M")):
        value = headers.get(name)
        if isinstance(value, list):
            value = value[0] if value else None
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if value and value.strip():
            return _etag_validator(value.strip()) if mark == "E" else _date_validator(
                value.strip())
    return ""


def _etag_validator(tag: str) -> str:
    """``E`` + the opaque part of ``"x"``, ``W`` + that of ``W/"x"``, else ``U`` + ``tag``."""
    weak = tag.startswith("W/")
    quoted = tag[2:] if weak else tag
    if len(quoted) >= 2 and quoted[0] == quoted[-1] == '"' and '"' not in quoted[1:-1]:
        return ("W" if weak else "E") + quoted[1:-1]
    return "U" + tag


def _date_validator(value: str) -> str:
    """``T`` + Unix seconds when they write back to exactly ``value``, else ``M`` + it."""
    try:
        seconds = int(email.utils.parsedate_to_datetime(value).timestamp())
    except (TypeError, ValueError, OverflowError):
        return "M" + value
    return f"T{seconds}" if email.utils.formatdate(seconds, usegmt=True) == value else "M" + value


@dataclass(frozen=True, slots=True)
class Refetch:
    """What one fetch of a URL found, as the revisit schedule needs it."""

    digest: str = ""  # the payload's short digest ("" when the server said 304)
    validator: str = ""  # the new answer's validator ("" on a 304: keep the old)
    not_modified: bool = False  # the server answered 304 to our conditional


@dataclass(frozen=True, slots=True)
class RevisitPolicy:
    """The crawl's revisit settings, in seconds (``after`` 0: never refetch)."""

    after: float = 0.0
    seeds: float = 0.0  # the interval of seeds (0: ``after``)
    minimum: float = 0.0  # 0: ``after`` / 4
    maximum: float = 0.0  # 0: ``after`` x 8
    factor: float = 1.5
    new_first: bool = True  # a host's new URLs before its revisits

    @property
    def enabled(self) -> bool:
        return self.after > 0

    @property
    def bounds(self) -> tuple[float, float]:
        low = self.minimum or self.after / 4
        high = self.maximum or self.after * 8
        return low, max(low, high)

    def first_interval(self, seed: bool) -> int:
        """The interval of a URL fetched for the first time."""
        return max(1, round(self.seeds if seed and self.seeds else self.after))

    def next_state(self, old: RevisitState | None, fetch: Refetch | None,
                   seed: bool = False) -> RevisitState:
        """The state after a fetch (``fetch`` None: nothing was downloaded, e.g.
        robots.txt disallowed it; the URL keeps what it had)."""
        if old is None or old.interval <= 0:
            old = replace(old or RevisitState(), interval=self.first_interval(seed))
            if fetch is None:
                return old
            return RevisitState(old.interval, fetch.digest, fetch.validator)
        if fetch is None:
            return old
        low, high = self.bounds
        same = unchanged(old, fetch)
        scaled = old.interval * self.factor if same else old.interval / self.factor
        interval = max(1, round(min(max(scaled, low), high)))
        if fetch.not_modified:
            return RevisitState(interval, old.digest, fetch.validator or old.validator)
        return RevisitState(interval, fetch.digest, fetch.validator)
