"""What a host's learned rules say about one of its URLs.

The frontier keeps, per host, the query parameters learned to be noise and
the URL patterns refused as traps (``lua/learn.lua``); a worker holds a copy
(:mod:`.worker`) and asks it here, for new links (before they are admitted)
and for queued ones (before their request goes out).
"""

from __future__ import annotations

from dataclasses import dataclass

from crawler.learning.traps import url_pattern
from crawler.learning.variants import has_any, identity_key, without

#: The reasons a URL ends without a request, as the frontier records them.
VARIANT = "duplicate-variant"
TRAP = "trap-pattern"


@dataclass(frozen=True, slots=True)
class SiteRules:
    """A host's learned rules: ``noise`` parameters, refused ``patterns``."""

    noise: frozenset[str] = frozenset()
    patterns: frozenset[str] = frozenset()
    #: Identities (keys) fetched only as a spelling with a noise parameter.
    fetched: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, noise: str | bytes | None, patterns: str | bytes | None,
              fetched: str | bytes | None = None) -> SiteRules:
        """From the stored form: names and keys space-separated, patterns one per line."""
        return cls(frozenset(_text(noise).split()),
                   frozenset(p for p in _text(patterns).split("\n") if p),
                   frozenset(_text(fetched).split()))

    def __bool__(self) -> bool:
        return bool(self.noise or self.patterns)

    def trap(self, canon: str) -> str | None:
        """The refused pattern ``canon`` belongs to, if any."""
        if not self.patterns:
            return None
        pattern = url_pattern(canon)
        return pattern if pattern in self.patterns else None

    def fetched_as_variant(self, canon: str) -> bool:
        """Whether ``canon`` was fetched already, spelled with a noise parameter."""
        return bool(self.fetched) and identity_key(canon) in self.fetched

    def variant_of(self, canon: str) -> str | None:
        """``canon`` without its noise parameters, if it has any."""
        if not has_any(canon, self.noise):
            return None
        return without(canon, self.noise)


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
