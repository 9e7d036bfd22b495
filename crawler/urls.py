"""The two forms of a URL: the one sent, and the one that is its identity.

A crawler needs two answers about every URL it finds, and they are not the
same:

- **What to send** (:func:`request_url`): the link as a browser would request
  it, by the WHATWG URL Standard (the ``ada`` parser, through ``ada-url``):
  scheme and host lower-cased, the host IDNA-encoded (an IPv4 address in any
  of its spellings written as four decimals, IPv6 compressed), the default
  port dropped, backslashes read as slashes, dot segments resolved, the
  fragment and any user info removed, and exactly the characters a browser
  percent-encodes encoded. Nothing is reordered or decoded: ``/list?b=2&a=1``
  is sent as it was linked, ``?page`` stays ``?page`` and an empty query
  ``?`` stays. Servers that sign the query, depend on parameter order or tell
  ``?a`` from ``?a=`` get what a browser would send them, and robots.txt
  rules are matched against this form (what the server sees).
- **What it is** (:func:`canonical_url`): w3lib's ``canonicalize_url`` of
  the sent form (safe percent-encoding, sorted query, dot segments resolved, IPv6 normalised) plus
  what a crawler needs on top of it: host lower-cased, IDNA-encoded, a
  trailing dot removed; the default port dropped; user info and fragment
  dropped. Every component that asks "have we seen this page?" uses it: the
  frontier's dedup and fingerprints, the per-host page budget, the WARC digest
  index. w3lib documents ``canonicalize_url`` as a form for comparing URLs,
  not for requesting them, and that is how it is used here.

Tracking parameters (:data:`DEFAULT_STRIP_PARAMS`, configurable) leave both
forms: by definition they never change the page served, so sending them only
reports a crawler's visit as a campaign click in the site owner's analytics,
and a session id copied from a stranger's link would put the crawler inside
that stranger's session. The parameters around them are kept as they were,
in their order and spelling.

Only ``http`` and ``https`` URLs have these forms; anything else (``mailto:``,
garbage, a URL without a host) gives ``None``. The functions here never raise
on any input string: a crawler reads URLs from hostile pages.
"""

from __future__ import annotations

import codecs
import hashlib
import re
from collections.abc import Iterable
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import ada_url
from w3lib.url import canonicalize_url

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

#: Query parameters that only track where a click came from, or which session
#: it belonged to. They never change the page served, so URLs differing only in
#: them are one page. Patterns are
#: shell-style globs matched case-insensitively against the parameter name.
#: Setting: ``URL_STRIP_PARAMS`` (replace the list) / ``URL_STRIP_PARAMS_EXTRA`` (add).
DEFAULT_STRIP_PARAMS: tuple[str, ...] = (
    "utm_*",  # Google Analytics campaign tags (utm_source, utm_medium, ...)
    "gclid",  # Google Ads click id
    "gclsrc",
    "dclid",  # DoubleClick click id
    "gbraid",  # Google Ads iOS click ids
    "wbraid",
    "fbclid",  # Facebook click id
    "msclkid",  # Microsoft Ads click id
    "yclid",  # Yandex click id
    "twclid",  # Twitter/X click id
    "ttclid",  # TikTok click id
    "li_fat_id",  # LinkedIn
    "igshid",  # Instagram share id
    "mc_cid",  # Mailchimp campaign / email ids
    "mc_eid",
    "_ga",  # Google Analytics cross-domain linker
    "_gl",
    "_hsenc",  # HubSpot
    "_hsmi",
    "mkt_tok",  # Marketo
    "oly_anon_id",  # Omeda
    "oly_enc_id",
    "vero_id",  # Vero
    "srsltid",  # Google Merchant Center
    # Session ids: every visit mints a new one, so they turn one page into
    # endless URLs (Heritrix strips the same ones). "sid" alone is left out:
    # too many sites use it for a story or site id.
    "jsessionid",
    "phpsessid",
    "aspsessionid*",
    "sessionid",
    "session_id",
    "sessid",
    "cfid",
    "cftoken",
)

#: Request meta that has Scrapy send a request's URL as it is given (Scrapy's
#: ``verbatim_url``). Every URL the crawler requests is already its sent form
#: (:func:`request_url`), which ``scrapy.Request`` would otherwise escape
#: again with w3lib's ``safe_url_string``, where a browser does not.
VERBATIM_META = "verbatim_url"

_DEFAULT_PORTS = {"http": 80, "https": 443}
_MAX_URL_CHARS = 64 * 1024  # longer strings are not URLs a crawler should fetch
_WS = re.compile(r"[\t\n\r]")  # browsers drop these anywhere in a URL
_BAD_HOST_CHARS = frozenset(" /\\@?#%<>^|{}`\"'[]")


class ParamStripper:
    """Decides which query parameters are tracking noise.

    Exact names are looked up in a set; only real glob patterns pay for
    ``fnmatch``. Results are cached because a broad crawl sees the same few
    hundred parameter names millions of times.
    """

    def __init__(self, patterns: Iterable[str] = DEFAULT_STRIP_PARAMS) -> None:
        self.patterns = tuple(p.lower() for p in patterns)
        self._exact = frozenset(p for p in self.patterns if not _is_glob(p))
        self._globs = tuple(p for p in self.patterns if _is_glob(p))
        self.matches = lru_cache(maxsize=4096)(self._matches)

    def _matches(self, name: str) -> bool:
        name = name.lower()
        return name in self._exact or any(fnmatchcase(name, g) for g in self._globs)

    def strip(self, query: str) -> str:
        """Remove tracking parameters from an already canonical query string."""
        if not query or not self.patterns:
            return query
        kept = [pair for pair in query.split("&") if not self.matches(pair.split("=", 1)[0])]
        return "&".join(kept)


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


DEFAULT_STRIPPER = ParamStripper()


def canonical_url(url: str, stripper: ParamStripper = DEFAULT_STRIPPER) -> str | None:
    """Return the canonical form (the identity) of an http(s) URL, or ``None`` if it has none.

    Idempotent: ``canonical_url(canonical_url(u)) == canonical_url(u)``, and
    the sent form names the same page: ``canonical_url(request_url(u)) ==
    canonical_url(u)``. Cached, because a site's navigation links come back on
    every one of its pages.
    """
    forms = url_forms(url, stripper)
    return None if forms is None else forms[1]


def request_url(url: str, stripper: ParamStripper = DEFAULT_STRIPPER) -> str | None:
    """The form of an http(s) URL to send, as a browser would (see the module's docstring).

    ``None`` exactly when :func:`canonical_url` gives ``None``. Idempotent.
    """
    forms = url_forms(url, stripper)
    return None if forms is None else forms[0]


def url_forms(url: str, stripper: ParamStripper = DEFAULT_STRIPPER
              ) -> tuple[str, str] | None:
    """``(request_url(url), canonical_url(url))``, or ``None`` if ``url`` has neither."""
    if not isinstance(url, str) or len(url) > _MAX_URL_CHARS:
        return None
    return _forms_cached(url, stripper)


@lru_cache(maxsize=2048)
def _forms_cached(url: str, stripper: ParamStripper) -> tuple[str, str] | None:
    sent = _sent(url, stripper)
    if sent is None:
        return None
    try:
        canon = _canonical(sent, stripper)
    except (ValueError, UnicodeError, TypeError):
        # What a browser parses that w3lib cannot (a bracketed host it reads
        # otherwise): no identity, so not crawled.
        return None
    if canon is None:
        return None
    # Both forms start with one origin (the identity's: a host's trailing dot
    # dropped), so that a frontier record can store the sent form without it.
    return canon[:_path_start(canon)] + sent[_path_start(sent):], canon


def _sent(url: str, stripper: ParamStripper) -> str | None:
    """The WHATWG form of an absolute http(s) URL without fragment and
    tracking parameters; ``None`` for anything else."""
    try:
        href = ada_url.normalize_url(url)
    except ValueError:  # what a browser rejects
        return None
    if not href.startswith(("http://", "https://")):
        return None
    href = href.partition("#")[0]  # a "#" left in a WHATWG href starts the fragment
    rest, mark, query = href[_path_start(href):].partition("?")
    if query:
        query = stripper.strip(query)
        mark = "?" if query else ""
    return f"{href[:_path_start(href)]}{rest}{mark}{query}"


def _path_start(url: str) -> int:
    """Where the path of a WHATWG http(s) URL starts (it always has one)."""
    return url.index("/", url.index("//") + 2)


def resolve_link(href: str, base: str, encoding: str = "utf-8") -> str | None:
    """Resolve a link against its document's base URL, as a browser does.

    ``encoding`` is the document's: a browser percent-encodes the non-ASCII
    characters of a link's query in it (a page in ``cp1251`` links
    ``?q=д`` as ``?q=%E4``), and the path always in UTF-8. The result is
    absolute, of any scheme, with its fragment; ``None`` if a browser could
    not resolve it.
    """
    if not href.isascii() and _legacy(encoding):
        href = _encode_query(href, encoding)
    try:
        return ada_url.join_url(base, href)
    except ValueError:
        return None


@lru_cache(maxsize=64)
def _legacy(encoding: str) -> bool:
    """Whether URLs of a document in ``encoding`` have queries not in UTF-8 (the
    URL Standard uses UTF-8 for UTF-8 and UTF-16 documents)."""
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        return False
    return name not in {"utf-8", "utf-16", "utf-16-le", "utf-16-be"}


def _encode_query(href: str, encoding: str) -> str:
    """``href`` with the non-ASCII characters of its query percent-encoded in
    ``encoding``; one it cannot encode as its HTML character reference, as
    the URL Standard says."""
    href = _WS.sub("", href)
    end = href.find("#")
    end = len(href) if end < 0 else end
    start = href.find("?", 0, end)  # (a "?" in the fragment starts no query)
    if start < 0:
        return href
    query = "".join(c if c.isascii() else _percent(c, encoding) for c in href[start:end])
    return f"{href[:start]}{query}{href[end:]}"


def _percent(char: str, encoding: str) -> str:
    data = char.encode(encoding, errors="xmlcharrefreplace")
    return "".join(f"%{b:02X}" if b > 0x7F or b in b"&#;" else chr(b) for b in data)


def _canonical(sent: str, stripper: ParamStripper) -> str | None:
    scheme = sent.partition(":")[0]
    canon = canonicalize_url(sent)
    # One more pass: w3lib's output is safe, but a second encoding pass can
    # still change it for odd inputs (e.g. "%" followed by non-hex). An output
    # with no "%" is already a fixed point (checked on the URL test suite's
    # inputs and random strings of every URL-special character).
    if "%" in canon:
        canon = canonicalize_url(canon)
    parts = urlsplit(canon)
    host = _clean_host(parts.hostname)
    if not host:
        return None
    port = parts.port
    netloc = _netloc(host, None if port == _DEFAULT_PORTS[scheme] else port)
    query = stripper.strip(parts.query)
    path = parts.path or "/"
    return f"{scheme}://{netloc}{path}{'?' + query if query else ''}"


def _clean_host(hostname: str | None) -> str | None:
    """Lower-case host without its trailing dot; ``None`` if no DNS name is left
    (an empty label)."""
    if not hostname:
        return None
    host = hostname.lower().removesuffix(".")  # the root's label: one name
    if not host or not host.isascii() or ".." in host or host.endswith("."):
        return None
    if not _BAD_HOST_CHARS.isdisjoint(host):
        return None
    if ":" in host and not host.replace(":", "").replace(".", "").isalnum():
        return None
    return host


def _netloc(host: str, port: int | None) -> str:
    bracketed = f"[{host}]" if ":" in host else host
    return bracketed if port is None else f"{bracketed}:{port}"


def host_key(url: str) -> str | None:
    """The politeness and robots authority of a URL: ``scheme://host:port``.

    RFC 9309 scopes a robots.txt to one scheme, host and port, so that is the
    unit for robots, pacing, concurrency and breakers. The port is always
    written, so ``http://a/`` and ``http://a:80/`` share one key.
    """
    canon = canonical_url(url)
    return None if canon is None else canonical_host_key(canon)


def canonical_host_key(canon: str) -> str:
    """:func:`host_key` of a URL already in canonical form, without redoing it."""
    parts = urlsplit(canon)
    port = parts.port or _DEFAULT_PORTS[parts.scheme]
    return f"{parts.scheme}://{_netloc(parts.hostname or '', port)}"


def host_origin(host: str) -> str:
    """The origin a canonical URL of ``host`` (a host key) starts with.

    Canonical URLs leave the default port out, host keys always write it:
    ``http://a.test:80`` -> ``http://a.test``.
    """
    scheme, _, netloc = host.partition("://")
    default = f":{_DEFAULT_PORTS.get(scheme, 0)}"
    return f"{scheme}://{netloc.removesuffix(default)}"


def url_fingerprint(canonical: str) -> bytes:
    """A stable 16-byte digest of a canonical URL (same on every machine).

    BLAKE2b is fast and keyed by nothing process-local (unlike ``hash()``), so
    workers on different machines agree. 128 bits keep accidental collisions
    negligible for billions of URLs while halving Redis memory against SHA-1 hex.
    """
    return hashlib.blake2b(canonical.encode("utf-8"), digest_size=16).digest()


def stripper_from_settings(settings: object) -> ParamStripper:
    """Build the tracking-parameter stripper from ``URL_STRIP_PARAMS[_EXTRA]``."""
    getlist = settings.getlist  # type: ignore[attr-defined]
    patterns = list(getlist("URL_STRIP_PARAMS", list(DEFAULT_STRIP_PARAMS)))
    patterns += getlist("URL_STRIP_PARAMS_EXTRA", [])
    return ParamStripper(patterns)


class CanonicalRequestFingerprinter:
    """Scrapy ``REQUEST_FINGERPRINTER_CLASS`` keyed on the canonical URL.

    Scrapy's dupefilter then treats ``/a?utm_source=x`` and ``/a#top`` as
    ``/a``, exactly as the frontier does. Non-GET requests also hash the
    method and body, as Scrapy's own fingerprinter does.
    """

    def __init__(self, stripper: ParamStripper = DEFAULT_STRIPPER) -> None:
        self.stripper = stripper

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CanonicalRequestFingerprinter:
        return cls(stripper_from_settings(crawler.settings))

    def fingerprint(self, request: Request) -> bytes:
        canon = canonical_url(request.url, self.stripper) or request.url
        if request.method == "GET":
            return url_fingerprint(canon)
        material = b"\0".join((request.method.encode(), canon.encode(), request.body))
        return hashlib.blake2b(material, digest_size=16).digest()
