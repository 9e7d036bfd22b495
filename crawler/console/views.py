"""What each page of the console shows, as plain data: the JSON API returns it as is.

Every view reads the frontier through the classes ``scrapy frontier`` uses
(:class:`~crawler.frontier.admin.FrontierAdmin`, its status, the top hosts,
a host's control), so the console, the command and the metrics agree on
every number.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import redis

from crawler.console.history import History
from crawler.deadletter import DeadReason
from crawler.frontier.admin import (
    AdminError,
    FrontierAdmin,
    HostMatch,
    frontier_keys,
    parse_host,
    parse_host_match,
)
from crawler.frontier.control import HostControl, UnknownTarget
from crawler.frontier.crawls import CrawlInfo
from crawler.frontier.keys import site_of
from crawler.frontier.leftover import GROUPS, group_of, states_of
from crawler.frontier.live import errors_of, recent_of
from crawler.frontier.refusals import with_examples
from crawler.frontier.scopestate import scope_in_force
from crawler.frontier.tophosts import RANKINGS, TopHosts
from crawler.reports.build import build
from crawler.scope.rules import Rules

#: Dead letters read at most to count them by reason (a frontier can hold
#: millions; the count then says "at least").
DEAD_SCAN_MAX = 20_000
#: Hosts a hosts page lists at most.
HOSTS_MAX = 500


class NotFound(LookupError):
    """A page asked for something the frontier does not have."""


class BadQuery(ValueError):
    """A page was asked with a parameter it cannot take (the message says which)."""


#: Operators' actions the overview lists, the newest first.
ACTIONS_SHOWN = 20


@dataclass
class Views:
    """The console's reads of one frontier."""

    admin: FrontierAdmin
    control: HostControl
    history: History
    redis: str  # where the frontier lives, as shown (no password)
    crawls_of: Callable[[], list[CrawlInfo]]
    #: The scope this console's settings give (what a worker without an
    #: operator's rules decides by); None: the host page shows no scope.
    scope_rules: Rules | None = None

    def overview(self) -> dict[str, Any]:
        """Counts by state, hosts, workers, pace and ceiling, refusals, the last hour."""
        self._look_for_layout()
        status = self.admin.status()
        out = status.as_dict()
        out["redis"] = self.redis
        out["refused_total"] = status.account.refused_total
        out["crawl_line"] = status.crawl.describe() if status.crawl is not None else ""
        out["history"] = self.history.as_dict()
        out["actions"] = self.control.recent(ACTIONS_SHOWN)
        alive = [w.id for w in status.workers if w.state == "alive"]
        out["errors"] = dict(errors_of(self.admin.client, self.admin.keys, alive).most_common())
        return out

    def _look_for_layout(self) -> None:
        """A console started before the crawl's first worker finds the layout
        that worker stored; one of another size it cannot read."""
        reader = self.admin.reader
        if reader.layout_found:
            return
        keys = self.admin.keys
        stored, found = frontier_keys(self.admin.client, keys.namespace, keys.partitions,
                                      keys.seen_buckets)
        if found and stored.partitions != keys.partitions:
            raise NotFound(f"the crawl's frontier has {stored.partitions} partitions, this "
                           f"console reads {keys.partitions}: start it again")
        reader.layout_found = found

    def report(self) -> dict[str, Any]:
        """The crawl's report as ``scrapy frontier report`` writes it, now."""
        return build(self.admin)

    def crawls(self) -> list[dict[str, Any]]:
        return [asdict(crawl) for crawl in self.crawls_of()]

    def hosts(self, by: str = "queued", top: int = 50, query: str = "",
              group: str = "") -> list[dict[str, Any]]:
        """The first ``top`` hosts by ``by``, or (``group``) every host of a group
        (:data:`GROUPS`) by name; ``query``: only hosts whose name holds it.
        Each row says its group and why (its state, what it waits for, why it
        was parked)."""
        if by not in RANKINGS:
            raise BadQuery(f"by takes one of {', '.join(RANKINGS)}, not {by!r}")
        if not 1 <= top <= HOSTS_MAX:
            raise BadQuery(f"top takes 1 to {HOSTS_MAX}, not {top}")
        if group and group not in GROUPS:
            raise BadQuery(f"state takes one of {', '.join(GROUPS)}, not {group!r}")
        query = query.strip().lower()
        if group:
            return self._group(group, top, query)
        # A search ranks more hosts and keeps those that match: the top hosts
        # by that measure among the names asked for.
        rows = TopHosts(self.admin.client, self.admin.keys).top(
            by, HOSTS_MAX if query else top)
        shown = [row.as_dict() for row in rows if query in row.host.lower()][:top]
        states = self._states([row["host"] for row in shown if "://" in row["host"]])
        for row in shown:
            left = states.get(row["host"])
            row["state"] = left.state if left else ""
            row["why"] = left.detail if left else ""
            row["group"] = group_of(left.state) if left else ""
        return shown

    def _group(self, group: str, top: int, query: str) -> list[dict[str, Any]]:
        """Every host of ``group`` whose name holds ``query``, the first ``top`` by name."""
        tops = TopHosts(self.admin.client, self.admin.keys)
        every = {h: r for h, r in tops.every_host().items() if query in h.lower()}
        waiting = [h for h, r in every.items() if r.queued and not r.blocked]
        states = self._states(waiting)
        found: dict[str, tuple[str, str]] = {}
        for host, record in sorted(every.items()):
            left = states.get(host)
            if record.blocked:
                why = ("dropped by an operator" if record.blocked == "1" else
                       DeadReason.parse(record.parked_reason).reason if record.parked_reason
                       else "parked")
                found[host] = ("parked", why)
            elif left is not None:
                found[host] = (group_of(left.state),
                               left.state + (f": {left.detail}" if left.detail else ""))
            elif not record.queued:
                found[host] = ("finished", "")
            else:
                found[host] = ("queued", "")
        names = [h for h, (g, _) in found.items() if g == group][:top]
        rows = [row.as_dict() for row in tops.details(names)]
        for row in rows:
            row["group"], row["why"] = found[row["host"]]
            row["state"] = row["group"]
        return rows

    def _states(self, hosts: list[str]) -> dict[str, Any]:
        """Why each of ``hosts`` waits (none for a reader, whose ACL runs no script)."""
        try:
            return states_of(self.admin.client, self.admin.keys, hosts)
        except redis.exceptions.NoPermissionError:
            return {}

    def host(self, name: str) -> dict[str, Any]:
        """A site, its domain and its server address: limits and why, holds, log."""
        try:
            site = site_of(parse_host(name))
        except AdminError as exc:
            raise BadQuery(str(exc)) from None
        view = self.control.view(site)
        if view is None:
            raise NotFound(f"no site {site} in the frontier {self.admin.keys.namespace}")
        workers = [w.decode("utf-8", "replace")
                   for w in self.admin.client.hkeys(self.admin.keys.workers())]
        return {**view.as_dict(),
                "recent": recent_of(self.admin.client, self.admin.keys, workers, site),
                "scope": self._scope_of(site)}

    def _scope_of(self, site: str) -> dict[str, Any] | None:
        """Whether the site's front page is in the crawl's scope, by which rule."""
        if self.scope_rules is None:
            return None
        scope, operator = scope_in_force(self.admin.client, self.admin.keys, self.scope_rules)
        verdict = scope.decide(f"http://{site}/")
        return {"rules": scope.rules().describe(), "from": "operator" if operator else "settings",
                "in_scope": verdict.rule == "in-scope", "rule": verdict.rule}

    def dead(self, reason: str | None = None, host: str | None = None,
             limit: int = 50) -> dict[str, Any]:
        """Dead letters by reason (counted over at most :data:`DEAD_SCAN_MAX`),
        and up to ``limit`` of those matching ``reason`` and ``host``."""
        match = _host_match(host)
        by_reason: Counter[str] = Counter()
        letters = []
        scanned = 0
        for letter in self.admin.iter_dead(None, match):
            scanned += 1
            by_reason[letter.reason] += 1
            if (reason is None or letter.reason == reason) and len(letters) < limit:
                letters.append(letter.as_dict())
            if scanned >= DEAD_SCAN_MAX:
                break
        return {"by_reason": dict(by_reason.most_common()), "letters": letters,
                "complete": scanned < DEAD_SCAN_MAX, "reason": reason, "host": host}

    def refused(self) -> list[dict[str, Any]]:
        """URLs refused by every worker and script, by reason, with the last few."""
        refused = self.admin.status(oldest=False).refused
        found = with_examples(self.admin.client, self.admin.keys, refused)
        return [{"reason": r.reason, "count": r.count, "examples": list(r.examples)}
                for r in sorted(found, key=lambda r: -r.count)]


def _host_match(host: str | None) -> HostMatch | None:
    if not host:
        return None
    try:
        return parse_host_match(host)
    except AdminError as exc:
        raise BadQuery(str(exc)) from None


__all__ = ["BadQuery", "NotFound", "UnknownTarget", "Views"]
