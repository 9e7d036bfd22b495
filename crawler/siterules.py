"""Per-site settings from a file of rules keyed by SURT prefix (Heritrix's "sheets").

An operator who knows some sites wants them crawled their own way: this
forum slowly and one request at a time, that documentation site whole,
this media host for a thousand pages at most. ``SITE_RULES`` names a file
of JSON lines, one rule each (``#`` lines and blank lines are skipped)::

    {"site": "example.com", "delay": 2, "concurrency": 1}
    {"site": "com,example,", "budget_pages": 500}
    {"site": "https://docs.example.org/", "budget_pages": 0, "scope": "include"}

``site`` names the hosts a rule is for: a host name or a URL (that host,
with or without ``www.``), or a SURT prefix as written (``com,example,``:
every subdomain of example.com; ``com,example)``: example.com itself). The
rest are optional: ``delay`` (seconds) and ``concurrency`` (what
``DOWNLOAD_DELAY`` and ``CONCURRENT_REQUESTS_PER_DOMAIN`` are for other
sites), ``budget_pages``, ``budget_bytes``, ``budget_seconds`` (a site's own
budget, 0: none, over ``BUDGET_HOST_*``), and ``scope`` (``include``: the
site is in the crawl's scope whatever its mode; ``exclude``: it is not).
When several rules match a host, each field comes from the longest prefix
that sets it.

A line that is not such a rule is reported with its number and skipped; the
others still apply.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields

from scrapy.exceptions import UsageError

from crawler.scope.rules import surt_of

logger = logging.getLogger(__name__)

#: The fields a rule may set, and their types.
FIELDS: dict[str, type] = {"delay": float, "concurrency": int, "budget_pages": int,
                           "budget_bytes": int, "budget_seconds": float, "scope": str}
SCOPES = ("include", "exclude")


class SiteRuleError(ValueError):
    """A line of a rules file that cannot be used; the message says why."""


@dataclass(frozen=True)
class SiteSettings:
    """What a rule (or the rules together) say of a host (None: not set)."""

    delay: float | None = None
    concurrency: int | None = None
    budget_pages: int | None = None
    budget_bytes: int | None = None
    budget_seconds: float | None = None
    scope: str | None = None

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))


@dataclass(frozen=True)
class SiteRule:
    """What one line of the file says, for the hosts under ``prefix``."""

    prefix: str
    text: str  # the site as written
    settings: SiteSettings


def site_prefix(text: str) -> str:
    """The SURT prefix a rule's ``site`` names (see the module docstring)."""
    text = text.strip()
    if not text:
        raise SiteRuleError("its site is empty")
    if "://" in text:
        return _host_part(surt_of(text))
    if any(c in text for c in ",)"):
        return text.lower()
    if "/" in text or " " in text:
        raise SiteRuleError(f"site {text!r} is neither a host name, a URL nor a SURT prefix")
    return host_form(text)


def host_form(host: str) -> str:
    """A host name's SURT form, as prefixes are compared (``com,example)``)."""
    return _host_part(surt_of(f"http://{host}/"))


def _host_part(form: str) -> str:
    """The host of a SURT form, with its closing parenthesis."""
    return form.split(")", 1)[0] + ")"


def parse_rule(line: str) -> SiteRule:
    """One line of the file (:class:`SiteRuleError` saying what is wrong)."""
    try:
        body = json.loads(line)
    except ValueError as exc:
        raise SiteRuleError(f"not a JSON object: {exc}") from None
    if not isinstance(body, dict) or not isinstance(body.get("site"), str):
        raise SiteRuleError('a rule is a JSON object with a "site"')
    unknown = sorted(set(body) - {"site", *FIELDS})
    if unknown:
        raise SiteRuleError(f"unknown field(s) {', '.join(unknown)} (known: site, "
                            f"{', '.join(FIELDS)})")
    values = {}
    for name, kind in FIELDS.items():
        if name not in body:
            continue
        value = body[name]
        if kind is str:
            if value not in SCOPES:
                raise SiteRuleError(f'"{name}" is include or exclude, not {value!r}')
        elif isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise SiteRuleError(f'"{name}" is a number, 0 or more, not {value!r}')
        elif kind is int and value != int(value):
            raise SiteRuleError(f'"{name}" is a whole number, not {value!r}')
        elif name == "concurrency" and value < 1:
            raise SiteRuleError('"concurrency" is 1 or more')
        values[name] = kind(value)
    return SiteRule(site_prefix(body["site"]), body["site"], SiteSettings(**values))


def read_rules(lines: Iterable[str], source: str = "SITE_RULES"
               ) -> Iterator[SiteRule | SiteRuleError]:
    """Each line's rule, or an error naming ``source`` and the line's number."""
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            yield parse_rule(text)
        except SiteRuleError as exc:
            yield SiteRuleError(f"{source}:{number}: {exc}")


class SiteRules:
    """The rules of a file, looked up by host."""

    def __init__(self, rules: Iterable[SiteRule] = ()) -> None:
        # shorter prefixes first: a longer one's fields win
        self.rules = sorted(rules, key=lambda r: len(r.prefix))
        self._cache: dict[str, SiteSettings] = {}

    def __bool__(self) -> bool:
        return bool(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def for_host(self, host: str) -> SiteSettings:
        """What the rules say of host name ``host`` (memoised: hosts recur)."""
        found = self._cache.get(host)
        if found is None:
            form = host_form(host)
            merged: dict[str, object] = {}
            for rule in self.rules:
                if form.startswith(rule.prefix):
                    merged |= {name: getattr(rule.settings, name) for name in FIELDS
                               if getattr(rule.settings, name) is not None}
            found = SiteSettings(**merged)  # type: ignore[arg-type]
            if len(self._cache) < 100_000:
                self._cache[host] = found
        return found

    def scope_rules(self, which: str) -> list[str]:
        """The SURT prefixes the rules include in (or exclude from) the scope."""
        return [rule.prefix for rule in self.rules if rule.settings.scope == which]


_LOADED: dict[str, tuple[float, SiteRules]] = {}


def load_site_rules(path: str | None) -> SiteRules:
    """The rules of the file ``path`` (None or "": none). Each bad line is
    logged with its number and skipped; a file that cannot be read is a
    :class:`~scrapy.exceptions.UsageError` (the crawl stops with one line).
    Read once per process while the file is unchanged."""
    if not path:
        return SiteRules()
    try:
        mtime = os.stat(path).st_mtime
        cached = _LOADED.get(path)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        with open(path, encoding="utf-8") as lines:
            parsed = list(read_rules(lines, path))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"SITE_RULES={path!r} cannot be read: {exc}") from None
    for bad in parsed:
        if isinstance(bad, SiteRuleError):
            logger.warning("Skipping site rule %s", bad)
    rules = SiteRules(r for r in parsed if isinstance(r, SiteRule))
    _LOADED[path] = (mtime, rules)
    return rules
