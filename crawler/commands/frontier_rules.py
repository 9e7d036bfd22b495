"""``scrapy frontier rules FILE``: load per-site rules into a running crawl.

The file is a ``SITE_RULES`` file (:mod:`crawler.siterules`: JSON lines keyed
by SURT prefix). Loading it

- applies its delay, concurrency and budgets to every site already in the
  frontier that a rule matches, as an operator's override (what ``scrapy
  frontier host NAME --delay ... --budget-pages ...`` writes), for every
  worker at once;
- stores its text for every worker (``ns:siterules``), which gives sites new
  to the frontier the same settings when their first URL is admitted;
- adds its ``scope`` rules to the crawl's scope for every worker, ending the
  URLs queued that it puts out of scope (as ``scrapy frontier scope --exclude``).

``rules`` alone shows the rules loaded; ``--reset`` forgets them (the sites'
overrides stay until ``host NAME --reset``). Bad lines are reported with
their numbers and skipped.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import redis
from scrapy.exceptions import UsageError
from scrapy.settings import BaseSettings

from crawler.commands import frontier_scope
from crawler.commands.frontier_output import note
from crawler.frontier.admin import FrontierAdmin
from crawler.frontier.control import Change, HostControl
from crawler.frontier.keys import Keys
from crawler.frontier.scopeend import end_out_of_scope
from crawler.frontier.scopestate import read_rules as read_scope
from crawler.frontier.scopestate import write_rules as write_scope
from crawler.frontier.values import Limits
from crawler.siterules import SiteRule, SiteRuleError, SiteRules, SiteSettings, read_rules


def run(admin: FrontierAdmin, settings: BaseSettings, rest: list[str], reset: bool) -> None:
    client, keys = admin.client, admin.keys
    if reset:
        client.delete(keys.site_rules())
        note("site rules: forgotten; each worker's SITE_RULES apply to new sites again "
             "(sites changed by them keep it until: scrapy frontier host NAME --reset)")
        return
    if not rest:
        raw = client.get(keys.site_rules())
        print(raw.decode("utf-8", "replace").rstrip() if raw
              else "no site rules loaded (each worker's SITE_RULES apply)")
        return
    path = Path(rest[0])
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"rules {path} cannot be read: {exc}") from None
    parsed = list(read_rules(text.splitlines(), str(path)))
    for bad in parsed:
        if isinstance(bad, SiteRuleError):
            note(f"skipping site rule {bad}")
    rules = SiteRules(r for r in parsed if isinstance(r, SiteRule))
    client.set(keys.site_rules(), text)
    changed = _apply_to_sites(client, keys, Limits.from_settings(settings), rules)
    note(f"site rules: {len(rules)} loaded for every worker (sites new to the frontier get "
         f"them within a second); {changed:,} site(s) already in the frontier changed")
    _apply_to_scope(admin, settings, rules)


def _apply_to_sites(client: redis.Redis, keys: Keys, limits: Limits, rules: SiteRules) -> int:
    """Every site record a rule matches gets its settings as an operator's override."""
    control = HostControl(client, keys, limits)
    changed = 0
    for key in client.scan_iter(match=keys.sites_pattern(), count=1000):
        site = Keys.site_of_key(key)
        own = rules.for_host(site.strip("[]"))
        change = _change(own)
        if change is not None and not change.empty():
            control.change(site, change)
            changed += 1
    return changed


def _change(own: SiteSettings) -> Change | None:
    if not own:
        return None
    return Change(concurrency=own.concurrency,
                  delay_ms=None if own.delay is None else round(own.delay * 1000),
                  budget_pages=own.budget_pages, budget_bytes=own.budget_bytes,
                  budget_ms=None if own.budget_seconds is None
                  else round(own.budget_seconds * 1000))


def _apply_to_scope(admin: FrontierAdmin, settings: BaseSettings, rules: SiteRules) -> None:
    """The rules' scope includes and excludes join the crawl's scope for every worker."""
    include, exclude = rules.scope_rules("include"), rules.scope_rules("exclude")
    if not include and not exclude:
        return
    client, keys = admin.client, admin.keys
    base = read_scope(client, keys) or frontier_scope.settings_rules(settings)
    scope = replace(base, include=tuple(dict.fromkeys((*base.include, *include))),
                    exclude=tuple(dict.fromkeys((*base.exclude, *exclude))))
    write_scope(client, keys, scope)
    ended = end_out_of_scope(client, keys, frontier_scope.keeper(client, keys, scope),
                             f"scrapy frontier rules: {scope.describe()}")
    note(f"scope: {scope.describe()}, for every worker within a second; {ended:,} queued "
         "URL(s) now out of scope are dead letters")
