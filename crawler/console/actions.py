"""What an operator may change from the console, and the record of who did.

Each action is one of ``scrapy frontier``'s (``host NAME --pause``, ``--delay``,
``--concurrency``, ``--reset``, ``drop-host``, ``requeue``): the same scripts,
so every worker obeys it from its next request. Each is logged by the
console (its log line names the operator) and kept on the frontier's control
log, which ``scrapy frontier host NAME`` and the host's page show.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from crawler.frontier.admin import (
    AdminError,
    FrontierAdmin,
    HostMatch,
    parse_host,
    parse_host_match,
)
from crawler.frontier.control import Change, HostControl, UnknownTarget
from crawler.frontier.keys import site_of

logger = logging.getLogger(__name__)

#: The host actions, by the name a form or an API call gives.
HOST_ACTIONS = ("pause", "resume", "slow", "limit", "reset", "drop")
SCOPES = ("site", "domain")


class ActionError(ValueError):
    """An action that cannot be done as asked (the message says why)."""


@dataclass(frozen=True, slots=True)
class Done:
    """What an action did, in words for the page and the log."""

    target: str
    what: str


def host_action(admin: FrontierAdmin, control: HostControl, name: str,
                form: Mapping[str, str], who: str) -> Done:
    """Do ``form["action"]`` to site ``name`` (or, with ``scope=domain``, its
    registered domain): pause, resume, slow (``delay`` seconds), limit
    (``concurrency``), reset, drop."""
    action = form.get("action", "")
    scope = form.get("scope", "site") or "site"
    if action not in HOST_ACTIONS:
        raise ActionError(f"action takes one of {', '.join(HOST_ACTIONS)}, not {action!r}")
    if scope not in SCOPES:
        raise ActionError(f"scope takes site or domain, not {scope!r}")
    try:
        site = site_of(parse_host(name))
    except AdminError as exc:
        raise ActionError(str(exc)) from None
    if action == "drop":
        return _drop(admin, control, site, scope, who)
    change = _change(action, form)
    try:
        target = control.change(site, change, scope=scope, who=who)
    except UnknownTarget as exc:
        raise ActionError(str(exc)) from None
    done = Done(target, f"{scope} {target}: {change.words()}")
    logger.info("Console: %s, for every worker from its next request (by %s)", done.what, who)
    return done


def _change(action: str, form: Mapping[str, str]) -> Change:
    if action == "pause":
        return Change(pause=True)
    if action == "resume":
        return Change(pause=False)
    if action == "reset":
        return Change(reset=True)
    if action == "slow":
        delay = _number(form, "delay", float, low=0.0, high=86_400.0)
        return Change(delay_ms=round(delay * 1000))
    return Change(concurrency=int(_number(form, "concurrency", int, low=1, high=10_000)))


def _number(form: Mapping[str, str], name: str, kind: type[float] | type[int], *,
            low: float, high: float) -> float:
    try:
        value = kind(form.get(name, ""))
    except ValueError:
        raise ActionError(f"{name} takes a number, not {form.get(name, '')!r}") from None
    if not low <= value <= high:
        raise ActionError(f"{name} takes {low:g} to {high:g}, not {value:g}")
    return value


def _drop(admin: FrontierAdmin, control: HostControl, site: str, scope: str,
          who: str) -> Done:
    if scope != "site":
        raise ActionError("drop takes a site: a domain's sites are dropped one by one")
    hosts = admin.authorities(HostMatch(site))
    if not hosts:
        raise ActionError(f"no site {site} in the frontier {admin.keys.namespace}")
    dead = 0
    for host in hosts:
        result = admin.drop_host(host)
        dead += result.queued + result.delayed
    what = f"site {site}: dropped, {dead:,} queued URL(s) now dead letters (reason dropped)"
    control.note("site", site, f"drop ({dead:,} URLs)", who)
    logger.info("Console: %s (by %s)", what, who)
    return Done(site, what)


def requeue(admin: FrontierAdmin, control: HostControl, form: Mapping[str, str],
            who: str) -> Done:
    """Put dead letters back in their queues (``reason``, ``host``: only those)."""
    reason = form.get("reason") or None
    host_text = form.get("host") or None
    try:
        match = parse_host_match(host_text) if host_text else None
    except AdminError as exc:
        raise ActionError(str(exc)) from None
    moved = admin.requeue(reason, match)
    scope = f"reason {reason}" if reason else "every reason"
    where = f", host {match}" if match else ""
    what = f"requeued {moved:,} dead letter(s) ({scope}{where})"
    if moved:
        control.note("site" if match else "crawl", match.site if match else "*",
                     f"requeue {moved:,} ({scope}{where})", who)
    logger.info("Console: %s (by %s)", what, who)
    return Done(str(match) if match else "*", what)
