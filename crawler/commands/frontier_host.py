"""``scrapy frontier host NAME``: show a site, its domain and its server address; change one.

The subcommand with the most options of ``scrapy frontier``: ``--delay``,
``--concurrency``, ``--pause``, ``--resume`` and ``--reset`` change the site
(``--domain``: its registered domain, ``--ip``: its server's address) for
every worker at once, until ``--reset`` (:mod:`crawler.frontier.control`);
``--budget-pages``, ``--budget-bytes`` and ``--budget-seconds`` set the
site's own budgets; ``--forget-param``, ``--forget-pattern`` and
``--forget-learned`` remove what its pages taught. Its options, their checks
and what it does live here, beside the subcommand, as the other subcommands'
do; the command (:mod:`crawler.commands.frontier`) parses and dispatches.
Every change is logged on the frontier's control log with :func:`operator`.
"""

from __future__ import annotations

import argparse

from scrapy.exceptions import UsageError
from scrapy.settings import BaseSettings

from crawler.commands.frontier_output import note, operator, print_address, print_host
from crawler.frontier.admin import AdminError, FrontierAdmin, parse_host
from crawler.frontier.control import Change, HostControl, UnknownTarget
from crawler.frontier.keys import site_of
from crawler.frontier.values import Limits

#: The options that change a host (or domain) rather than show it.
BUDGETS = ("budget_pages", "budget_bytes", "budget_seconds")
CHANGES = ("delay", "concurrency", "pause", "resume", "reset", *BUDGETS)
FORGETS = ("forget_param", "forget_pattern", "forget_learned")
#: Every option of this subcommand (``--reset`` and ``--domain`` are others' too).
OPTIONS = (*CHANGES, *FORGETS, "domain", "ip")


def add_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--domain", action="store_true",
                       help="host: change NAME's registered domain, not the site")
    group.add_argument("--ip", action="store_true",
                       help="host: change the server address NAME points at (or NAME, an "
                            "address): every name on that server")
    group.add_argument("--delay", type=float, metavar="S",
                       help="host: seconds between two requests, for every worker")
    group.add_argument("--concurrency", type=int, metavar="N",
                       help="host: requests in flight at most, for every worker")
    group.add_argument("--pause", action="store_true",
                       help="host: no new request until --resume")
    group.add_argument("--resume", action="store_true", help="host: undo --pause")
    group.add_argument("--reset", action="store_true",
                       help="host: every override off (back to settings and robots.txt)")
    group.add_argument("--budget-pages", type=int, metavar="N",
                       help="host: the site's page budget, for every worker (0: none); "
                            "a raised budget takes its new links again")
    group.add_argument("--budget-bytes", type=int, metavar="N",
                       help="host: the site's byte budget (0: none)")
    group.add_argument("--budget-seconds", type=float, metavar="S",
                       help="host: the site's time budget, from its first request (0: none)")
    group.add_argument("--forget-param", metavar="P",
                       help="host: remove the learned rule that P is noise (and its "
                            "evidence)")
    group.add_argument("--forget-pattern", metavar="PATTERN",
                       help="host: accept URLs of a refused trap pattern again")
    group.add_argument("--forget-learned", action="store_true",
                       help="host: remove everything the host's pages taught")


def check_options(rest: list[str], opts: argparse.Namespace) -> None:
    """Refuse what ``host`` cannot do, before Redis is asked anything."""
    if len(rest) != 1:
        raise UsageError("host takes one NAME (example.com, or a URL of the site)")
    if opts.pause and opts.resume:
        raise UsageError("--pause or --resume, not both")
    if opts.delay is not None and opts.delay < 0:
        raise UsageError("--delay must be 0 or more seconds")
    if opts.domain and opts.ip:
        raise UsageError("--domain or --ip, not both")
    for name in BUDGETS:
        value = getattr(opts, name)
        if value is not None and (value < 0 or opts.domain or opts.ip):
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} takes 0 (no limit) or more, for a site (a domain's "
                             "budget is the setting BUDGET_DOMAIN_*)")
    wide = opts.domain or opts.ip
    lowest = 0 if wide else 1
    if opts.concurrency is not None and opts.concurrency < lowest:
        raise UsageError(f"--concurrency must be {lowest} or more"
                         + (" (0: no limit)" if wide else ""))
    if wide and not any(getattr(opts, name) for name in CHANGES):
        what = "domain" if opts.domain else "server address"
        raise UsageError(f"--{'domain' if opts.domain else 'ip'} changes NAME's {what}: give "
                         "--delay, --concurrency, --pause, --resume or --reset (host NAME "
                         "alone shows them all)")


def run(admin: FrontierAdmin, settings: BaseSettings, name: str,
        opts: argparse.Namespace) -> None:
    """Show a site, its domain and its server address; change one first when asked."""
    # The limits the crawl's workers read.
    control = HostControl(admin.client, admin.keys, Limits.from_settings(settings))
    site = site_of(parse_host(name))
    change = Change(
        concurrency=opts.concurrency,
        delay_ms=None if opts.delay is None else round(opts.delay * 1000),
        pause=True if opts.pause else False if opts.resume else None, reset=opts.reset,
        budget_pages=opts.budget_pages, budget_bytes=opts.budget_bytes,
        budget_ms=None if opts.budget_seconds is None else round(opts.budget_seconds * 1000))
    scope = "domain" if opts.domain else "ip" if opts.ip else "site"
    try:
        if not change.empty():
            target = control.change(site, change, scope=scope, who=operator())
            what = {"site": "site", "domain": "domain", "ip": "server address"}[scope]
            note(f"{what} {target}: {change.words()}, for every worker from its next "
                 "request")
            if change.budget():
                note(f"its URLs ended by a budget come back with: scrapy frontier requeue "
                     f"--reason budget --host {target}")
        _forget(control, site, opts)
        view = control.view(site)
        address = control.address_of(site) if view is None else None
        if view is None and address is None:
            raise UnknownTarget(f"no site {site} in the frontier {admin.keys.namespace}")
    except UnknownTarget as exc:
        raise AdminError(str(exc)) from None
    if view is not None:
        print_host(view, opts.json)
    else:
        assert address is not None
        print_address(control.view_address(address), opts.json)


def _forget(control: HostControl, site: str, opts: argparse.Namespace) -> None:
    """--forget-param / --forget-pattern / --forget-learned, before the view."""
    if not any(getattr(opts, name) for name in FORGETS):
        return
    hosts = control.forget_learned(site, param=opts.forget_param, pattern=opts.forget_pattern)
    what = (f"rule {opts.forget_param!r}" if opts.forget_param else
            f"pattern {opts.forget_pattern}" if opts.forget_pattern else "what it learned")
    if not hosts:
        raise UnknownTarget(f"site {site} has no {what} to forget")
    note(f"site {site}: {what} forgotten ({', '.join(hosts)}), for every worker within "
         "LEARN_RULES_TTL")
