"""The one canonical form of a URL, used for dedup, robots and politeness.

Every component that compares URLs (the dupefilter, the frontier, the robots
policy, per-host pacing) must agree on what "the same URL" and "the same host"
mean, or dedup leaks and politeness is split across aliases of one host. This
module is that agreement.

The canonical form is w3lib's ``canonicalize_url`` (safe percent-encoding,
sorted query, dot segments resolved, IPv6 normalised) plus what a crawler
needs on top of it:

- scheme and host lower-cased, host IDNA-encoded, a trailing dot removed;
- the default port of the scheme dropped (``http://a:80/`` is ``http://a/``);
- user info dropped (credentials never reach the frontier or the logs);
- the fragment dropped (it never reaches the server);
- tracking parameters removed (:data:`DEFAULT_STRIP_PARAMS`, configurable).

Only ``http`` and ``https`` URLs have a canonical form; anything else
(``mailto:``, garbage, a URL without a host) gives ``None``. The functions here
never raise on any input string: a crawler reads URLs from hostile pages.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

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
    """Return the canonical form of an http(s) URL, or ``None`` if it has none.

    Idempotent: ``canonical_url(canonical_url(u)) == canonical_url(u)``.
    """
    try:
        return _canonical(url, stripper)
    except (ValueError, UnicodeError, TypeError):
        # urlsplit rejects bad ports and brackets, IDNA rejects odd labels:
        # such a string is not a URL we can fetch.
        return None


def _canonical(url: str, stripper: ParamStripper) -> str | None:
    if not isinstance(url, str) or len(url) > _MAX_URL_CHARS:
        return None
    url = _WS.sub("", url.strip())
    scheme, _, rest = url.partition(":")
    scheme = scheme.lower()
    if scheme not in _DEFAULT_PORTS or not rest.startswith("//"):
        return None
    canon = canonicalize_url(f"{scheme}:{rest}")
    # One more pass: w3lib's output is safe, but a second encoding pass can
    # still change it for odd inputs (e.g. "%" followed by non-hex).
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
    """Lower-case host without a trailing dot; ``None`` if nothing is left."""
    if not hostname:
        return None
    host = hostname.lower().rstrip(".")
    if not host or not host.isascii() or ".." in host:
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
