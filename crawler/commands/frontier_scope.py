"""``scrapy frontier scope``: show the crawl's scope, and change it for every worker.

Without options it shows the mode, hops and rules in force (an operator's,
else what this command's settings say, which is what workers started with
the same settings use) and what the crawl's seeds cover. ``--mode``,
``--hops``, ``--include RULE``, ``--exclude RULE`` and ``--remove RULE``
change it for every worker within a second (:mod:`crawler.frontier.scopestate`),
``--reset`` gives each worker its own settings back; the URLs already queued
that the new scope does not take end as dead letters with reason
``out-of-scope`` (:mod:`crawler.frontier.scopeend`), requeue-able.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import redis
from scrapy.exceptions import UsageError
from scrapy.settings import BaseSettings

from crawler.commands.frontier_output import note
from crawler.frontier import crawlconfig
from crawler.frontier.admin import FrontierAdmin
from crawler.frontier.keys import Keys
from crawler.frontier.scopeend import Keep, end_out_of_scope
from crawler.frontier.scopestate import read_rules, scope_with_forms, write_rules
from crawler.middlewares.scope import scope_from_settings
from crawler.scope.rules import Rules, ScopeError

#: The options that change the scope.
CHANGES = ("mode", "hops", "include", "exclude", "remove")


def add_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--mode", metavar="M",
                       help="scope: domain, host, prefix or any, for every worker")
    group.add_argument("--hops", type=int, metavar="N",
                       help="scope: links off scope still fetched this far, for every worker")
    group.add_argument("--include", action="append", metavar="RULE",
                       help="scope: add an include rule (re:REGEX, a URL or a SURT prefix)")
    group.add_argument("--exclude", action="append", metavar="RULE",
                       help="scope: add an exclude rule (it wins over everything)")
    group.add_argument("--remove", action="append", metavar="RULE",
                       help="scope: remove an include or exclude rule")


def changes_asked(opts: argparse.Namespace) -> bool:
    return any(getattr(opts, name) is not None for name in CHANGES)


def settings_rules(settings: BaseSettings) -> Rules:
    """The rules this command's settings describe (a worker's, started with them:
    ``SCOPE*`` and the scope of ``SITE_RULES``)."""
    return scope_from_settings(settings).rules()


def run(admin: FrontierAdmin, settings: BaseSettings, opts: argparse.Namespace) -> None:
    """Show the scope; change it first when asked."""
    client, keys = admin.client, admin.keys
    try:
        current = read_rules(client, keys)
        own = settings_rules(settings)
    except ScopeError as exc:
        raise UsageError(str(exc)) from None
    if opts.reset or changes_asked(opts):
        rules = None if opts.reset else _changed(current or own, opts)
        write_rules(client, keys, rules)
        in_force = rules or own
        ended = end_out_of_scope(client, keys, keeper(client, keys, in_force),
                                 f"scrapy frontier scope: {in_force.describe()}")
        said = "each worker's own settings" if rules is None else in_force.describe()
        note(f"scope: {said}, for every worker within a second; {ended:,} queued URL(s) "
             "now out of scope are dead letters"
             + (" (requeue with: scrapy frontier requeue --reason out-of-scope)"
                if ended else ""))
        current = rules
    # (the crawl's stored scope was given to these settings: crawlconfig.adopt)
    stored = (settings.getpriority("SCOPE") or 0) == crawlconfig.STORED_PRIORITY
    _show(client, keys, current, own, opts.json, stored)


def _changed(rules: Rules, opts: argparse.Namespace) -> Rules:
    include = [r for r in rules.include if r not in (opts.remove or ())]
    exclude = [r for r in rules.exclude if r not in (opts.remove or ())]
    unknown = [r for r in opts.remove or () if r not in rules.include + rules.exclude]
    if unknown:
        raise UsageError(f"--remove {unknown[0]}: no such rule (the rules: "
                         f"{' '.join(rules.include + rules.exclude) or 'none'})")
    include += [r for r in opts.include or () if r not in include]
    exclude += [r for r in opts.exclude or () if r not in exclude]
    changed = replace(rules, mode=(opts.mode or rules.mode).strip().lower(),
                      hops=rules.hops if opts.hops is None else opts.hops,
                      include=tuple(include), exclude=tuple(exclude))
    try:
        return changed.check()
    except ScopeError as exc:
        raise UsageError(str(exc)) from None


def keeper(client: redis.Redis, keys: Keys, rules: Rules) -> Keep:
    """Whether a queued URL stays: the new rules with every seed's forms; a
    URL fetched as a hop (``hops``) is judged from the page that linked it."""
    scope = scope_with_forms(client, keys, rules)
    return lambda url, hops: scope.decide(url, max(hops - 1, 0)).fetch


def _show(client: redis.Redis, keys: Keys, operator: Rules | None, own: Rules,
          as_json: bool, stored: bool) -> None:
    counts = {"d": 0, "h": 0, "p": 0}
    for form in client.sscan_iter(keys.scope_forms(), count=1000):
        kind = form.decode()[:1]
        counts[kind] = counts.get(kind, 0) + 1
    rules = operator or own
    if as_json:
        print(json.dumps({"rules": json.loads(rules.json()),
                          "from": "operator" if operator else
                          "crawl" if stored else "settings",
                          "seeds": {"domains": counts["d"], "hosts": counts["h"],
                                    "prefixes": counts["p"]}}))
        return
    whose = ("the operator's, for every worker (scrapy frontier scope --reset: each "
             "worker's settings)" if operator else
             "the crawl's settings, as it was started and given since" if stored else
             "each worker's settings (these are this command's)")
    print(f"scope: {rules.describe()}  [{whose}]")
    print(f"seeds cover {counts['d']:,} registered domain(s), {counts['h']:,} host name(s), "
          f"{counts['p']:,} prefix(es)")
