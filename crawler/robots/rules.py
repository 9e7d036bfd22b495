"""What a robots.txt allows, per RFC 9309, for one product token. Pure: no I/O.

The fetch (redirects, retries, the 24 h cache) lives elsewhere; it hands this
module a status and a body. :func:`classify` says how the status is treated,
:func:`prepare` turns the body into text, :meth:`Rules.parse` turns the text
into the :class:`Rules` of our product token.

Protego does the parsing and the matching: longest match, ``Allow`` winning a
tie, ``*`` and ``$``, percent-encoding, ``/robots.txt`` always allowed,
Crawl-delay and Request-rate. This module only feeds it, and works around the
places where Protego 0.7.0 deviates from RFC 9309:

- **Unknown lines end a group** (2.2.4 says they are ignored). In Protego a
  line with an unknown field between two ``User-agent`` lines ends the group,
  so the first agent gets no rules. :func:`prepare` drops every line Protego
  would not read as a field it knows (and comments and blank lines), and
  :meth:`Rules.parse` ignores such lines when it groups.
- **User-agent matching by substring** (2.2.1 matches the product token). In
  Protego ``User-agent: broad`` binds ``BroadCrawl``. :meth:`Rules.parse`
  picks the groups itself, by product token compared case-insensitively (the
  value's leading letters, ``_`` and ``-``, as Google reads it), merges them
  (2.2.1), falls back to ``*``, and gives Protego that one merged group.
- **Extra line breaks** (2.2: a line ends at CR, LF or CRLF). Protego splits
  with ``str.splitlines()``, which also breaks at VT, FF, FS, GS, RS, NEL, LS
  and PS. Those are percent-encoded where they stand, which is how Protego
  compares paths and URLs anyway.
- **A final ``$`` also read literally** (2.2.3: it only anchors). Protego's
  ``Disallow: /a$`` also disallows URLs starting with ``/a$``. Not fixed: only
  a URL with a literal ``$`` at that point is affected, and it errs toward not
  fetching.

Kept from Protego because Google reads robots.txt the same way: misspelt
fields (``Dissallow``), ``User agent`` with a space, a missing colon
(``Disallow /x``), and ``Allow: /index.html`` also allowing ``/``.
A ``User-agent`` line that follows a Crawl-delay, Request-rate or Visit-time
line starts a new group, as after an Allow or Disallow line; Sitemap and Host
lines belong to no group. When merged groups give several Crawl-delay values,
the last one wins (Protego's choice).

How a fetch outcome is treated (RFC 9309 2.3.1). "unavailable" allows
everything, "unreachable" disallows everything:

==============================  ===============  ==========================================
status                          outcome          why
==============================  ===============  ==========================================
2xx                             ``rules``        2.3.1.1: parse the body
3xx (redirects exhausted: more  ``unavailable``  2.3.1.2 allows it after five redirects;
than five, a loop, or no                         the fetcher follows redirects, so a 3xx
Location)                                        here is one it gave up on. A conditional
                                                 fetch handles 304 itself (keeps the rules)
4xx but 429, incl. 401 and 403  ``unavailable``  2.3.1.3 says every 4xx; Google agrees
429                             ``unreachable``  the server asks us to slow down; Google
                                                 and others treat it like a 5xx
5xx                             ``unreachable``  2.3.1.4
``None`` (timeout, DNS,         ``unreachable``  2.3.1.4: network errors
refused, reset)
anything else (1xx, not an      ``unreachable``  when in doubt, do not crawl
HTTP status)
==============================  ===============  ==========================================
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Final, Literal
from urllib.parse import urlsplit

from protego import Protego

#: RFC 9309 2.5: a crawler must parse at least the first 500 KiB.
MAX_ROBOTS_BYTES: int = 500 * 1024

#: What :func:`classify` returns.
Outcome = Literal["rules", "unavailable", "unreachable"]

_BOM = b"\xef\xbb\xbf"
_LINE_ENDS = (b"\n", b"\r")

# Field names as Protego 0.7.0 spells them (protego/_protego.py), each mapped to
# one canonical name. A test checks this against Protego's own set.
_FIELDS: Final[dict[str, str]] = {
    **dict.fromkeys(("user-agent", "useragent", "user agent"), "user-agent"),
    **dict.fromkeys(
        ("disallow", "dissallow", "dissalow", "disalow", "diasllow", "disallaw"), "disallow"
    ),
    "allow": "allow",
    **dict.fromkeys(("sitemap", "sitemaps", "site-map"), "sitemap"),
    **dict.fromkeys(("crawl-delay", "crawl delay"), "crawl-delay"),
    **dict.fromkeys(("request-rate", "request rate"), "request-rate"),
    **dict.fromkeys(("visit-time", "visit time"), "visit-time"),
    "host": "host",
}
_MAX_FIELD_WORDS = 2  # "user agent", "crawl delay", ...

# str.splitlines() also breaks lines at these; RFC 9309 only at CR and LF.
# Protego percent-encodes paths and URLs before comparing them, so writing the
# escape in place changes nothing else.
_INLINE_BREAKS = str.maketrans(
    {c: "".join(f"%{b:02X}" for b in c.encode()) for c in "\v\f\x1c\x1d\x1e\x85\u2028\u2029"}
)

_PRODUCT_TOKEN = re.compile(r"[A-Za-z_-]*")
_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*")

# The one group handed to Protego is written for "*", so any query matches it.
_GROUP = "*"


def prepare(body: bytes, max_bytes: int = MAX_ROBOTS_BYTES) -> str:
    """The text of a fetched robots.txt body, ready for :meth:`Rules.parse` or Protego.

    Only the first ``max_bytes`` are read (RFC 9309 2.5), cut after the last
    complete line so that a half line is not read as a rule; a bigger file is
    never rejected. The body is decoded as UTF-8 with odd bytes replaced, so one
    Latin-1 byte in a comment does not turn the file into "no rules". What comes
    out holds one ``field: value`` line per line Protego reads as a field it
    knows, and nothing else (see the module docstring for why). Never raises;
    linear in the input.
    """
    body = bytes(body)
    if len(body) > max_bytes:
        body = _truncate(body, max(max_bytes, 0))
    text = _without_bom(body).decode("utf-8", errors="replace")
    return "".join(f"{field}: {value}\n" for field, value in _directives(text))


def _without_bom(body: bytes) -> bytes:
    """``body`` without its UTF-8 byte-order mark, or as much of one as it starts
    with (``EF BB``, ``EF``): a file cut or mangled there still has its rules,
    as Google's parser reads it. A byte that breaks the mark ends it, and the
    rest of that line is read as it is."""
    n = 0
    while n < len(_BOM) and body[n:n + 1] == _BOM[n:n + 1]:
        n += 1
    return body[n:]


def _truncate(body: bytes, limit: int) -> bytes:
    """The first ``limit`` bytes, less a trailing partial line if there is a whole one."""
    if body[limit : limit + 1] in _LINE_ENDS:
        return body[:limit]
    head = body[:limit]
    end = max(head.rfind(b"\n"), head.rfind(b"\r"))
    return head[: end + 1] if end >= 0 else head


def _directives(text: str) -> Iterator[tuple[str, str]]:
    """(canonical field, value) for each line Protego reads as a known field."""
    for line in text.translate(_INLINE_BREAKS).splitlines():
        directive = _directive(line)
        if directive is not None:
            yield directive


def _directive(line: str) -> tuple[str, str] | None:
    """The field and value of one line, read as Protego's ``_extract_directive`` reads it.

    ``None`` for comments, blank lines and fields Protego does not know. The
    steps mirror Protego's so that a line we keep is one Protego would use.
    """
    line = line.partition("#")[0].strip()
    if not line:
        return None
    name, colon, raw_value = line.partition(":")
    if colon:
        field = _FIELDS.get(name.strip().lower())
        if field is not None:
            return field, raw_value.strip()
        if not raw_value or raw_value[0].isspace():
            return None  # "Unknown-Field: value"
    # No colon, or one inside the value ("Sitemap https://..."): Protego tries
    # "<field> <value>" with a field of one or two words.
    words = line.split()
    for count in range(1, _MAX_FIELD_WORDS + 1):
        field = _FIELDS.get(" ".join(words[:count]).lower())
        if field is not None:
            return field, " ".join(words[count:])
    return None


def _product_token(value: str) -> str:
    """The product token of a User-agent value, lower-cased; ``*`` for the catch-all.

    RFC 9309 2.2.1: a token is letters, ``_`` and ``-``; Google reads
    ``Googlebot/2.1`` as ``googlebot``, and so do we.
    """
    value = value.strip()
    if value[:1] == "*" and not value[1:2].strip():
        return "*"
    match = _PRODUCT_TOKEN.match(value)
    return match.group().lower() if match else ""


class Rules:
    """Parsed rules for one product token (immutable once built).

    Only what our token needs is kept: one Protego parser holding the rules of
    our group (or of ``*``), the two delays and the sitemaps; a file's groups for
    other crawlers are dropped, since many hosts are cached at once.
    """

    __slots__ = ("_crawl_delay", "_deny_all", "_parser", "_request_interval", "_sitemaps")

    def __init__(
        self,
        parser: Protego | None = None,
        *,
        deny_all: bool = False,
        crawl_delay: float | None = None,
        request_interval: float | None = None,
        sitemaps: tuple[str, ...] = (),
    ) -> None:
        self._parser = parser
        self._deny_all = deny_all
        self._crawl_delay = crawl_delay
        self._request_interval = request_interval
        self._sitemaps = sitemaps

    @classmethod
    def parse(cls, text: str, agent: str) -> Rules:
        """The rules of robots.txt ``text`` (the output of :func:`prepare`) for ``agent``.

        ``agent`` is our product token (e.g. ``BroadCrawl``). The groups naming
        it are merged (RFC 9309 2.2.1); if there are none, the ``*`` groups are;
        if there are none either, everything is allowed.
        """
        token = _product_token(agent) or agent.strip().lower()
        # Text not from prepare() may hold lone surrogates (bytes decoded with
        # surrogateescape); Protego's quoting raises on them: replace them.
        text = text.encode("utf-8", "replace").decode("utf-8")
        lines, sitemaps = _select(_directives(text), token)
        if not lines:
            return cls(sitemaps=sitemaps)
        body = "".join(f"{field}: {value}\n" for field, value in lines)
        parser = Protego.parse(f"user-agent: {_GROUP}\n{body}")
        rate = parser.request_rate(_GROUP)
        has_rules = any(field in ("allow", "disallow") for field, _ in lines)
        return cls(
            parser if has_rules else None,
            crawl_delay=parser.crawl_delay(_GROUP),
            request_interval=rate.seconds / rate.requests if rate else None,
            sitemaps=sitemaps,
        )

    @classmethod
    def allow_all(cls) -> Rules:
        """Rules for a robots.txt that is "unavailable" (RFC 9309 2.3.1.3): crawl anything."""
        return _ALLOW_ALL

    @classmethod
    def disallow_all(cls) -> Rules:
        """Rules for a robots.txt that is "unreachable" (RFC 9309 2.3.1.4): crawl nothing."""
        return _DISALLOW_ALL

    def allowed(self, url: str) -> bool:
        """Whether ``url`` (absolute) may be fetched. ``/robots.txt`` always may.

        Cheap (it runs for every page request) and never raises: a URL that
        ``urlsplit`` rejects is judged by its path as best we can, and one we
        cannot read at all is refused.
        """
        try:
            if self._parser is not None:
                return _can_fetch(self._parser, url)
            return not self._deny_all or _path(url) == "/robots.txt"
        except Exception:  # a hostile URL must never break the crawl
            return False

    @property
    def crawl_delay(self) -> float | None:
        """Seconds between requests from the group's Crawl-delay; ``None`` if absent or invalid."""
        return self._crawl_delay

    @property
    def request_interval(self) -> float | None:
        """Seconds per request implied by Request-rate (``1/5`` -> 5.0); ``None`` if absent."""
        return self._request_interval

    @property
    def delay(self) -> float | None:
        """The larger of :attr:`crawl_delay` and :attr:`request_interval`, or ``None``.

        Both say how far apart requests must be; a site that gives both means both.
        """
        given = [d for d in (self._crawl_delay, self._request_interval) if d is not None]
        return max(given) if given else None

    @property
    def sitemaps(self) -> list[str]:
        """Sitemap URLs listed anywhere in the file, in order, without repeats."""
        return list(self._sitemaps)

    @property
    def disallows_everything(self) -> bool:
        """True only for :meth:`disallow_all` (not for a file that says ``Disallow: /``)."""
        return self._deny_all

    def __repr__(self) -> str:
        if self._deny_all:
            return "Rules.disallow_all()"
        return (
            f"Rules(rules={self._parser is not None}, delay={self.delay}, "
            f"sitemaps={len(self._sitemaps)})"
        )


_ALLOW_ALL = Rules()
_DISALLOW_ALL = Rules(deny_all=True)


def _select(
    directives: Iterable[tuple[str, str]], token: str
) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    """The member lines of the groups that apply to ``token``, and all Sitemap URLs.

    A group is a run of User-agent lines and the lines that follow up to the
    next User-agent line after a non-User-agent line, as Protego groups them.
    Lines with an empty value are dropped, as Protego drops them (an empty
    ``Disallow:`` allows everything).
    """
    ours: list[tuple[str, str]] = []
    star: list[tuple[str, str]] = []
    sitemaps: dict[str, None] = {}
    named_us = in_agents = for_us = for_star = False
    for field, value in directives:
        if field in ("sitemap", "host"):
            if field == "sitemap" and value:
                sitemaps[value] = None
            continue
        if field == "user-agent":
            if not in_agents:
                in_agents, for_us, for_star = True, False, False
            name = _product_token(value)
            if name and name == token:
                named_us = for_us = True
            elif name == "*":
                for_star = True
            continue
        in_agents = False
        if value and for_us:
            ours.append((field, value))
        if value and for_star:
            star.append((field, value))
    return (ours if named_us else star), tuple(sitemaps)


def _can_fetch(parser: Protego, url: str) -> bool:
    try:
        return parser.can_fetch(url, _GROUP)
    except ValueError:
        # urlsplit rejects the authority (a stray "[", a bad port): rules only
        # look at the path, so put a plain authority in its place.
        return parser.can_fetch(f"http://_{_path(url)}", _GROUP)


def _path(url: str) -> str:
    """The path of ``url``, found without ``urlsplit`` if that rejects it."""
    try:
        return urlsplit(url).path
    except ValueError:
        match = _AUTHORITY.match(url)
        rest = url[match.end() :] if match else url
        path = re.split(r"[?#]", rest, maxsplit=1)[0]
        return path if path.startswith("/") else f"/{path}"


def classify(status: int | None) -> Outcome:
    """How a robots.txt fetch outcome is treated (RFC 9309 2.3.1; table in the module docstring).

    ``"rules"``: parse the body. ``"unavailable"``: allow everything.
    ``"unreachable"``: disallow everything.
    """
    if status is None:
        return "unreachable"
    if 200 <= status < 300:
        return "rules"
    if 300 <= status < 400:
        return "unavailable"
    if 400 <= status < 500 and status != 429:
        return "unavailable"
    return "unreachable"
