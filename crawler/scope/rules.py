"""Where a crawl may go: its scope, as pure decisions on URLs.

A seed list usually means "these sites", so a scope is made of the seeds:

``domain``  the seeds' registered domains (``docs.example.com`` as a seed
            lets in ``www.example.com`` and ``example.com``, not
            ``example.org``): :func:`crawler.domains.registered_domain`.
``host``    the seeds' host names; ``www.`` in front of a name or not is
            the same name (sites redirect between the two).
``prefix``  each seed's SURT prefix: the seed's host and its path up to the
            last ``/`` (``https://example.com/docs/intro`` covers
            ``/docs/…`` on ``example.com``, over http and https alike).
``any``     the whole web.

Include and exclude rules refine any scope. A rule is ``re:REGEX`` (searched
in the whole URL), a URL (its SURT prefix, as for a seed), a host name (that
host: ``example.com``) or a SURT prefix as written (``com,example)/private/``;
``com,example,`` for every subdomain). An exclude rule wins over everything; an
include rule lets in what the scope would not.

``hops=N``: a link off scope is still fetched when its page is reached in at
most N links from a page in scope; nothing is followed from it beyond that
(Browsertrix's ``extraHops``, Heritrix's ``TransclusionDecideRule``).

SURT forms come from the Internet Archive's ``surt`` library, with its
canonicalisation limited to what names one place: the host in lower case
without ``www.``, the default port dropped; the path as written (case and
trailing slash kept, so ``/docs/`` does not cover ``/docsearch``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import NamedTuple
from urllib.parse import urlsplit

import surt

from crawler.domains import registered_domain

MODES = ("domain", "host", "prefix", "any")

#: The surt library's options: canonicalise the host only (see above).
_SURT_OPTIONS = {
    "with_scheme": False,
    "path_lowercase": False,
    "path_strip_session_id": False,
    "path_strip_trailing_slash_unless_empty": False,
    "query_lowercase": False,
    "query_strip_session_id": False,
    "query_alpha_reorder": False,
}


class ScopeError(ValueError):
    """A scope setting or argument that cannot be used; the message says which."""


def surt_of(url: str) -> str:
    """The URL's SURT form, as scope rules compare it (``com,example)/docs/a``)."""
    return surt.surt(url, **_SURT_OPTIONS)


def surt_prefix(url: str) -> str:
    """The SURT prefix a seed URL covers: its host and its path up to the last ``/``.

    >>> surt_prefix("https://www.example.com/docs/intro?x=1")
    'com,example)/docs/'
    >>> surt_prefix("http://example.com")
    'com,example)/'
    """
    form = surt_of(url).split("?", 1)[0]
    host, _, path = form.partition(")")
    return f"{host}){path[: path.rfind('/') + 1] or '/'}"


def host_name(url: str) -> str:
    """The URL's host name in lower case, without a leading ``www.``."""
    name = (urlsplit(url).hostname or "").rstrip(".")
    return name[4:] if name.startswith("www.") else name


class Rule(NamedTuple):
    """An include or exclude rule: a regular expression or a SURT prefix."""

    text: str
    pattern: re.Pattern[str] | None
    prefix: str

    @classmethod
    def parse(cls, text: str) -> Rule:
        """``re:REGEX``, a URL (its SURT prefix) or a SURT prefix as written."""
        text = text.strip()
        if text.startswith("re:"):
            try:
                return cls(text, re.compile(text[3:]), "")
            except re.error as exc:
                raise ScopeError(
                    f"scope rule {text!r} is not a regular expression: {exc}") from None
        if not text:
            raise ScopeError("a scope rule is empty")
        if "://" in text:
            return cls(text, None, surt_prefix(text))
        if not any(c in text for c in ",)/"):  # a host name: that host
            return cls(text, None, surt_prefix(f"http://{text}/"))
        return cls(text, None, text)

    def matches(self, url: str, form: str) -> bool:
        """Whether the rule covers ``url`` (``form``: its :func:`surt_of`)."""
        if self.pattern is not None:
            return self.pattern.search(url) is not None
        return form.startswith(self.prefix)


@dataclass(frozen=True)
class Rules:
    """A scope's mode, hops and rules: what settings, arguments or an operator
    (``scrapy frontier scope``, for every worker) say; seeds are apart."""

    mode: str = "domain"
    hops: int = 0
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def check(self) -> Rules:
        """These rules, or :class:`ScopeError` saying what is wrong."""
        Scope(mode=self.mode, hops=self.hops, include=parse_rules(self.include),
              exclude=parse_rules(self.exclude))
        return self

    def json(self) -> str:
        return json.dumps({"mode": self.mode, "hops": self.hops,
                           "include": list(self.include), "exclude": list(self.exclude)})

    @classmethod
    def parse(cls, text: str) -> Rules:
        """Rules as :meth:`json` wrote them (:class:`ScopeError` if they are not)."""
        try:
            body = json.loads(text)
            rules = cls(str(body["mode"]), int(body["hops"]),
                        tuple(str(r) for r in body.get("include", ())),
                        tuple(str(r) for r in body.get("exclude", ())))
        except (ValueError, KeyError, TypeError) as exc:
            raise ScopeError(f"scope rules {text[:200]!r} are not readable: {exc}") from None
        return rules.check()

    def describe(self) -> str:
        """``scope=domain, hops=1, include=..., exclude=...`` (what a crawl logs)."""
        parts = [f"scope={self.mode}"]
        if self.hops:
            parts.append(f"hops={self.hops}")
        if self.include:
            parts.append("include=" + " ".join(self.include))
        if self.exclude:
            parts.append("exclude=" + " ".join(self.exclude))
        return ", ".join(parts)


class Verdict(NamedTuple):
    """A scope decision: whether to fetch, why (the rule), and the link's hops off scope."""

    fetch: bool
    rule: str
    hops: int = 0


@dataclass
class Scope:
    """A crawl's scope: its mode, what its seeds cover, its rules and hops."""

    mode: str = "domain"
    hops: int = 0
    include: list[Rule] = field(default_factory=list)
    exclude: list[Rule] = field(default_factory=list)
    domains: set[str] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    prefixes: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ScopeError(f"scope={self.mode!r} is not a scope (use one of {', '.join(MODES)})")
        if self.hops < 0:
            raise ScopeError(f"hops={self.hops} must not be negative")

    def rules(self) -> Rules:
        """The mode, hops and rules in force."""
        return Rules(self.mode, self.hops, tuple(r.text for r in self.include),
                     tuple(r.text for r in self.exclude))

    def use(self, rules: Rules) -> None:
        """Put ``rules`` in force (the seeds' forms stay; :class:`ScopeError`
        if they are bad, and nothing changes)."""
        include, exclude = parse_rules(rules.include), parse_rules(rules.exclude)
        Scope(mode=rules.mode, hops=rules.hops)  # (checks them)
        self.mode, self.hops, self.include, self.exclude = (rules.mode, rules.hops, include,
                                                           exclude)

    def add_seed(self, url: str) -> list[str]:
        """Widen the scope by what seed ``url`` covers; returns its forms
        (``d:DOMAIN``, ``h:HOST``, ``p:PREFIX``: all three are kept, so a later
        change of mode needs no seeds again; other workers add them with
        :meth:`add_form`)."""
        name = host_name(url)
        if not name:
            return []
        forms = [f"d:{registered_domain(name)}", f"h:{name}", f"p:{surt_prefix(url)}"]
        for form in forms:
            self.add_form(form)
        return forms

    def add_form(self, form: str) -> bool:
        """Widen the scope by one form :meth:`add_seed` returned; whether it was
        new here (unknown kinds are skipped)."""
        kind, _, value = form.partition(":")
        where = {"d": self.domains, "h": self.hosts, "p": self.prefixes}.get(kind)
        if where is None or not value or value in where:
            return False
        where.add(value)
        return True

    def decide(self, url: str, page_hops: int = 0) -> Verdict:
        """Whether to fetch ``url``, linked from a page ``page_hops`` links off scope.

        Exclude rules first, then include rules, then the mode; off scope, the
        link is fetched when it is at most ``hops`` links from the scope. The
        URL's SURT form is made only when a prefix needs it (a link's hot path:
        ~25 us each).
        """
        form = surt_of(url) if self._compares_prefixes() else ""
        for rule in self.exclude:
            if rule.matches(url, form):
                return Verdict(False, "exclude")
        if self.covers(url, form) or any(rule.matches(url, form) for rule in self.include):
            return Verdict(True, "in-scope")
        if page_hops < self.hops:
            return Verdict(True, "hop", page_hops + 1)
        return Verdict(False, self.mode)

    def _compares_prefixes(self) -> bool:
        return self.mode == "prefix" or any(
            rule.pattern is None for rule in (*self.exclude, *self.include))

    def covers(self, url: str, form: str | None = None) -> bool:
        """Whether the mode (without rules or hops) lets ``url`` in."""
        if self.mode == "any":
            return True
        if self.mode == "prefix":
            form = form or surt_of(url)
            return any(form.startswith(prefix) for prefix in self.prefixes)
        name = host_name(url)
        if self.mode == "host":
            return name in self.hosts
        return registered_domain(name) in self.domains if name else False


def parse_rules(text: str | list[str] | tuple[str, ...] | None) -> list[Rule]:
    """Rules from a setting or argument: a list, or text with one rule per
    whitespace-separated word (a regular expression spells a space ``\\s``)."""
    if not text:
        return []
    words = text.split() if isinstance(text, str) else [w for t in text for w in str(t).split()]
    return [Rule.parse(word) for word in words]
