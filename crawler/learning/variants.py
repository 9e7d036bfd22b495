"""Evidence that a query parameter is noise on a host, and URLs without it.

A site's pages say which spellings of their URL are one page in two ways,
and :func:`page_evidence` reads both from one fetched page:

- **Its canonical link.** A page fetched at ``/p/3?ref=x`` that declares
  ``<link rel="canonical" href="/p/3">`` says ``ref`` does not matter; one
  fetched at ``/list?cat=2`` whose canonical keeps ``cat`` says ``cat`` does.
- **Its payload.** Two URLs that differ only in ``P`` and return the same
  bytes say ``P`` is noise; different bytes say it is not.

Deciding needs evidence from several pages (``lua/learn.lua``); this module
only turns one page into the observations the frontier weighs. Identities are
the crawl's canonical URLs (:func:`crawler.urls.canonical_url`), whose query
is sorted, so removing a parameter keeps the identity canonical.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote_plus, urlsplit

#: How a page's canonical link relates to the page's own identity.
SELF, DROPS, OTHER = "s", "d", "o"


@dataclass(frozen=True, slots=True)
class CanonicalSays:
    """What one page's canonical link says: ``relation`` (:data:`SELF`, the
    page itself; :data:`DROPS`, the page without ``dropped``; :data:`OTHER`,
    another page, ``target``), and the parameters it ``kept``."""

    relation: str
    dropped: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    target: str = ""


@dataclass(frozen=True, slots=True)
class PageEvidence:
    """What one fetched page tells about its host's parameters.

    ``key`` names the page's identity; ``variants`` the identity without
    each of its parameters (``(name, key)``), to compare payloads with the
    page fetched there, if any.
    """

    key: str
    digest: str
    canonical: CanonicalSays | None
    variants: tuple[tuple[str, str], ...] = field(default=())


def identity_key(canon: str) -> str:
    """A short, stable name for an identity within its host (8 hex characters:
    a host keeps at most ``LEARN_MAX_FIELDS`` of them, where two of 2^32 meet
    once in thousands of hosts, and then only blur one comparison)."""
    return hashlib.blake2b(canon.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()


def payload_digest(body: bytes) -> str:
    """The payload's digest for comparing two answers (8 hex characters: the
    frontier keeps one per page, and a false match is one in 2^32)."""
    return hashlib.blake2b(body, digest_size=4).hexdigest()


def param_names(canon: str) -> tuple[str, ...]:
    """The distinct parameter names of a canonical URL's query, in order."""
    query = urlsplit(canon).query
    if not query:
        return ()
    names = dict.fromkeys(_name(pair) for pair in query.split("&") if pair)
    return tuple(names)


def without(url: str, names: Iterable[str]) -> str:
    """``url`` with every parameter named in ``names`` removed; the rest kept
    in their order and spelling (a canonical URL stays canonical, a URL to
    send stays as the page linked it)."""
    drop = frozenset(names)
    url, hash_, fragment = url.partition("#")
    base, sep, query = url.partition("?")
    tail = f"#{fragment}" if hash_ else ""
    if not sep:
        return f"{base}{tail}"
    kept = [pair for pair in query.split("&") if pair and _name(pair) not in drop]
    return f"{base}?{'&'.join(kept)}{tail}" if kept else f"{base}{tail}"


def has_any(canon: str, names: frozenset[str]) -> bool:
    """Whether the canonical URL carries one of ``names``."""
    return bool(names) and "?" in canon and not names.isdisjoint(param_names(canon))


def canonical_says(canon: str, declared: str | None) -> CanonicalSays | None:
    """What the canonical link ``declared`` (already a canonical URL) says
    about the page fetched at ``canon``; ``None`` without one."""
    if not declared:
        return None
    if declared == canon:
        return CanonicalSays(SELF, kept=param_names(canon))
    own, other = urlsplit(canon), urlsplit(declared)
    if (own.scheme, own.netloc, own.path) != (other.scheme, other.netloc, other.path):
        return CanonicalSays(OTHER, target=identity_key(declared))
    own_pairs, declared_pairs = _pairs(own.query), _pairs(other.query)
    if not declared_pairs <= own_pairs:  # it adds or changes a value: another page
        return CanonicalSays(OTHER, target=identity_key(declared))
    dropped = {_name(p) for p in own_pairs - declared_pairs}
    kept = {_name(p) for p in declared_pairs}
    return CanonicalSays(DROPS, tuple(sorted(dropped - kept)), tuple(sorted(kept)))


def page_evidence(canon: str, body: bytes, declared: str | None) -> PageEvidence:
    """The observations one fetched page gives (see the module's docstring)."""
    names = param_names(canon)
    variants = tuple((name, identity_key(without(canon, (name,)))) for name in names)
    return PageEvidence(identity_key(canon), payload_digest(body),
                        canonical_says(canon, declared), variants)


def _pairs(query: str) -> set[str]:
    return {pair for pair in query.split("&") if pair}


def _name(pair: str) -> str:
    return unquote_plus(pair.split("=", 1)[0])
