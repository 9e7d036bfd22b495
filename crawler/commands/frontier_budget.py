"""``scrapy frontier budget``: show the crawl's budgets, and change them for every worker.

Without options it shows the budgets in force: an operator's (set here, for
every worker), else what this command's settings say (``BUDGET_*``: what
workers started with the same settings use). ``--pages N``, ``--bytes N`` and
``--seconds S`` set each host's budget, with ``--domain`` each registered
domain's (0: no limit); every worker puts them in force within a second
(:mod:`crawler.frontier.budgetstate`). ``--reset`` gives each worker its own
settings back. A host whose budget a raise leaves room for takes its new
links again at once; what its spent budget ended comes back with ``scrapy
frontier requeue --reason budget``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from scrapy.exceptions import UsageError
from scrapy.settings import BaseSettings

from crawler.commands.frontier_output import note
from crawler.frontier.admin import FrontierAdmin
from crawler.frontier.budgetstate import read_budgets, write_budgets
from crawler.frontier.values import Budgets
from crawler.scheduling.budgetwatch import describe

#: The options that change the budgets.
CHANGES = ("pages", "bytes", "seconds")


def add_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--pages", type=int, metavar="N",
                       help="budget: URLs each host fetches at most, for every worker "
                            "(--domain: each registered domain; 0: no limit)")
    group.add_argument("--bytes", type=int, metavar="N",
                       help="budget: bytes each host (--domain: domain) receives at most")
    group.add_argument("--seconds", type=float, metavar="S",
                       help="budget: seconds each host (--domain: domain) is crawled at most, "
                            "from its first request")


def changes_asked(opts: argparse.Namespace) -> bool:
    return any(getattr(opts, name) is not None for name in CHANGES)


def run(admin: FrontierAdmin, settings: BaseSettings, opts: argparse.Namespace) -> None:
    """Show the budgets; change them first when asked."""
    client, keys = admin.client, admin.keys
    try:
        own = Budgets.from_settings(settings)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    current = read_budgets(client, keys)
    if opts.reset:
        write_budgets(client, keys, None)
        current = None
        note("budgets: each worker's own settings, for every worker within a second")
    elif changes_asked(opts):
        current = _changed(current or own, opts)
        write_budgets(client, keys, current)
        note(f"budgets: {describe(current)}, for every worker within a second; what a spent "
             "budget ended comes back with: scrapy frontier requeue --reason budget")
    in_force = current or own
    if opts.json:
        print(json.dumps({"budgets": in_force.script_args(),
                          "from": "operator" if current else "settings"}))
        return
    whose = ("the operator's, for every worker (scrapy frontier budget --reset: each "
             "worker's settings)" if current else
             "each worker's settings (these are this command's)")
    print(f"budgets: {describe(in_force)}  [{whose}]")
    print("a host's own budget (scrapy frontier host NAME --budget-pages N) wins over these")


def _changed(budgets: Budgets, opts: argparse.Namespace) -> Budgets:
    scope = "domain" if opts.domain else "host"
    values = {"pages": opts.pages, "bytes": opts.bytes,
              "ms": None if opts.seconds is None else round(opts.seconds * 1000)}
    for name, value in values.items():
        if value is not None and value < 0:
            flag = "--seconds" if name == "ms" else f"--{name}"
            raise UsageError(f"{flag} takes 0 (no limit) or more")
    return replace(budgets, **{f"{scope}_{name}": value for name, value in values.items()
                               if value is not None})
