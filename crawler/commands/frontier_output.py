"""What ``scrapy frontier`` prints: tables for people, JSON lines for scripts.

The command (:mod:`crawler.commands.frontier`) decides what to do; this says
it. Tables keep to the terminal (``--watch`` fits its height), and JSON is
streamed one object per line so ``--limit 0`` on millions of dead letters
stays flat in memory.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

from crawler.frontier.account import Account, reasons
from crawler.frontier.admin import AdminError, DeadLetter, FrontierAdmin, HostMatch, parse_host
from crawler.frontier.capacity import Capacity
from crawler.frontier.connection import Connection
from crawler.frontier.control import note_action
from crawler.frontier.controlviews import AddressView, Gate, HostView, Spend
from crawler.frontier.crawls import CrawlInfo
from crawler.frontier.keys import STATES, Count, site_of
from crawler.frontier.refusals import Refusal
from crawler.frontier.status import EXTRA_COUNTS, HOST_STATES, Status
from crawler.frontier.tophosts import HostRow

CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen: a refresh without scrolling
MAX_WORKER_ROWS = 20


def print_crawls(crawls: list[CrawlInfo], as_json: bool) -> None:
    """The crawls of a spider, idlest last (what ``delete --idle-days`` would pick)."""
    if as_json:
        for crawl in crawls:
            print(json.dumps(asdict(crawl)))
        return
    if not crawls:
        print("no crawls")
        return
    rows: list[list[Any]] = [["crawl id", "namespace", "partitions", "idle", "alive workers"]]
    rows += [[c.crawl_id or "(default)", c.namespace, c.partitions,
              "?" if c.idle_s is None else _duration(c.idle_s), c.alive_workers]
             for c in crawls]
    print(table(rows, left=(0, 1)))


def note(message: str) -> None:
    """A remark on stderr, so that stdout stays the answer (``--json | jq``)."""
    print(message, file=sys.stderr)


def filters(reason: str | None, host: HostMatch | str | None) -> str:
    """`` (reason R, host H)``: what an answer was restricted to, or nothing
    (``host a.test, every scheme and port`` for a bare name: see :class:`HostMatch`)."""
    parts = [f"reason {reason}"] if reason else []
    parts += [f"host {host}"] if host else []
    return f" ({', '.join(parts)})" if parts else ""


def ago(seconds: float | None) -> str:
    """``5m ago``, or ``?`` when it is not known."""
    return "?" if seconds is None else f"{_duration(seconds)} ago"


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def table(rows: Sequence[Sequence[Any]], left: Iterable[int] = (0,), indent: str = "") -> str:
    """Rows as aligned columns: numbers right, the columns in ``left`` left."""
    cells = [[f"{c:,}" if isinstance(c, int) else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lefts = set(left)
    lines = []
    for row in cells:
        out = [c.ljust(w) if i in lefts else c.rjust(w)
               for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append(indent + "  ".join(out).rstrip())
    return "\n".join(lines)


def format_status(st: Status, url: str, max_workers: int = MAX_WORKER_ROWS) -> str:
    """The status as a compact text table."""
    head = f"Frontier {st.namespace} at {url} ({st.partitions} partitions)"
    if not st.layout_found:
        head += "; no crawl has opened it yet (partitions from FRONTIER_PARTITIONS)"
    c = st.counts
    names = [n for n in (*STATES, *EXTRA_COUNTS) if n != Count.HOSTS]
    # other counters (e.g. stale), not the account's (below) nor its by-reason fields
    names += sorted(set(c) - set(names) - {Count.HOSTS, Count.HOSTS_FETCHED, Count.SEEDS}
                    - {n for n in c if ":" in n})
    h = st.hosts
    lines = [
        head, "",
        table([["URLs", *names], ["", *(c.get(n, 0) for n in names)]]),
        _hosts_table(h),
    ]
    if st.crawl is not None:
        lines.append(f"Crawl  {st.crawl.describe()}")
    lines += account_lines(st.account)
    if st.oldest_queued_s is not None:
        lines.append(f"Oldest queued URL waiting {_duration(st.oldest_queued_s)} (+-10 s)")
    if st.next_revisit_s is not None:
        lines.append(f"Revisits  {c.get(Count.REVISIT, 0):,} done URL(s) waiting; the next is "
                     + ("due now" if st.next_revisit_s <= 0 else
                        f"due in {_duration(st.next_revisit_s)}"))
    if st.capacity is not None and st.capacity.sites_with_work:
        lines += _capacity_lines(st.capacity)
    alive = [w for w in st.workers if w.state == "alive"]
    held = sum(w.held or 0 for w in alive)
    lines.append(f"Workers  {len(alive)} alive, {len(st.workers) - len(alive)} gone; "
                 f"alive workers hold {held:,} of {c.get(Count.LEASED, 0):,} leases")
    if st.workers:
        rows: list[list[Any]] = [["worker", "state", "last seen", "held", "pid", "host"]]
        for w in st.workers[:max_workers]:
            state = "paused" if w.paused and w.state == "alive" else w.state
            rows.append([w.id, state, ago(w.seen_ago), "?" if w.held is None else w.held,
                         w.pid or "?", w.host or "?"])
        lines.append(table(rows, left=(0, 1, 2, 5), indent="  "))
        if len(st.workers) > max_workers:
            lines.append(f"  ... {len(st.workers) - max_workers} more (--json lists all)")
        lines += [f"  {w.id} is paused: {w.paused}" for w in st.workers[:max_workers]
                  if w.paused and w.state == "alive"]
    return "\n".join(lines)


def account_lines(account: Account) -> list[str]:
    """The crawl's account (the figures every view shows): what was fetched,
    refused, dead and parked, by reason."""
    lines = [f"Fetched  {account.fetched_line()}"]
    if account.refused:
        lines.append(f"Refused  {account.refused_total:,} URL(s): {reasons(account.refused, 99)}"
                     " (scrapy frontier refused shows examples)")
    if account.dead:
        lines.append(f"Dead letters  {account.dead_total:,}: {reasons(account.dead, 99)} "
                     "(scrapy frontier dead lists them)")
    if account.parked:
        lines.append(f"Parked hosts  {account.parked_total:,}: {reasons(account.parked, 99)}")
    return lines


def _capacity_lines(cap: Capacity) -> list[str]:
    """The ceiling, the pace now, the time to drain and the workers it would take."""
    now = "?" if cap.current is None else f"{cap.current:,.1f}"
    bound = ", ".join(f"{n:,} by {what}" for what, n in sorted(cap.bound_by.items()))
    lines = [f"Pace     {now} pages/s now; ceiling {cap.ceiling:,.1f} pages/s with unlimited "
             f"workers ({cap.sites_with_work:,} sites with work: {bound})"]
    drain = [f"{_duration(s)} at {at}" for at, s in (("the current pace",
                                                      cap.drain_at_current_s),
                                                     ("the ceiling", cap.drain_at_ceiling_s))
             if s is not None]
    if drain:
        more = ("" if cap.workers_for_ceiling is None
                else f"; {cap.workers_for_ceiling:,} worker(s) as fast as today's reach the "
                     "ceiling")
        lines.append(f"Drain    the {cap.queued:,} queued URLs: " + ", ".join(drain) + more)
    return lines


def _hosts_table(h: dict[str, int]) -> str:
    """Hosts by state, each state named for what its hosts are doing (HOST_STATES);
    a status read without the queue scan has only the claimable ones and the rest."""
    names = [n for n in HOST_STATES if n in h]
    if "finished" not in h:
        names.append("other")
    return table([["Hosts", "total", *(n.replace("_", " ") for n in names)],
                  ["", h["total"], *(h[n] for n in names)]])


def print_status(st: Status, conn: Connection, as_json: bool, max_workers: int) -> None:
    """One status: a table, or one JSON line stamped with the Redis and the time."""
    if as_json:
        print(json.dumps({"redis": conn.url, "time": round(time.time(), 3), **st.as_dict()}),
              flush=True)
    else:
        print(format_status(st, conn.url, max_workers), flush=True)


def watch(admin: FrontierAdmin, conn: Connection, every: float, as_json: bool) -> None:
    """Refresh until Ctrl-C; the table fits the terminal, JSON is one line a refresh."""
    try:
        while True:
            st = admin.status()
            if not as_json:
                rows = max(3, shutil.get_terminal_size().lines - 12)
                sys.stdout.write(CLEAR + time.strftime("%H:%M:%S")
                                 + f"  every {every:g} s, Ctrl-C to stop\n")
                print_status(st, conn, False, rows)
            else:
                print_status(st, conn, True, 0)
            time.sleep(every)
    except KeyboardInterrupt:
        print()


def print_top_hosts(rows: list[HostRow], by: str, as_json: bool) -> None:
    """``scrapy frontier hosts``: the first hosts by ``by``, one line each."""
    if as_json:
        for row in rows:
            print(json.dumps(row.as_dict()))
        return
    if not rows:
        print(f"no host has any {by}" if by != "queued" else "no host has queued URLs")
        return
    what = "site" if by in ("errors", "latency") else "host"
    lines: list[list[Any]] = [[what, "queued", "in flight", "latency ms", "failures in a row",
                               "breaker openings", "dead"]]
    for r in rows:
        lines.append([r.host, r.queued, r.in_flight,
                      "-" if r.latency_ms is None else r.latency_ms, r.failures, r.openings,
                      r.dead])
    print(table(lines))


def print_dead(admin: FrontierAdmin, reason: str | None, host: HostMatch | None, limit: int,
               as_json: bool) -> None:
    """Matching dead letters (up to ``limit``), and how many there are in all."""
    if as_json:  # streamed: --limit 0 on millions of dead letters stays flat in memory
        for i, letter in enumerate(admin.iter_dead(reason, host)):
            if limit and i >= limit:
                break
            print(json.dumps(letter.as_dict()))
        return
    letters = admin.dead(reason, host, limit + 1 if limit else 0)
    truncated = bool(limit) and len(letters) > limit
    letters = letters[:limit] if limit else letters
    total = admin.status().counts.get(Count.DEAD, 0)
    if letters:
        print(_dead_table(letters))
    filtered = filters(reason, host)
    if truncated:
        print(f"first {len(letters):,} shown{filtered}, of {total:,} dead; --limit 0 for all")
    elif filtered:
        print(f"{len(letters):,} matching{filtered}, of {total:,} dead")
    else:
        print(f"{len(letters):,} dead letter(s)")


def print_refused(found: list[Refusal], reason: str | None, as_json: bool) -> None:
    """``scrapy frontier refused``: URLs refused by reason (``reason``: that one's),
    with the last few of each."""
    if reason is not None:
        found = [r for r in found if r.reason == reason]
    if as_json:
        for r in found:
            print(json.dumps({"reason": r.reason, "count": r.count,
                              "examples": list(r.examples)}))
        return
    if not found:
        print(f"no URL was refused{f' for {reason}' if reason else ''}")
        return
    for r in found:
        print(f"{r.reason}: {r.count:,} URL(s)"
              + ("" if r.examples else " (counted by the frontier's scripts, no examples)"))
        for url in r.examples:
            print(f"  {url}")


def _dead_table(letters: list[DeadLetter]) -> str:
    now = time.time()
    rows: list[list[Any]] = [["reason", "error", "died", "host", "url"]]
    for d in letters:
        died = ago(max(0.0, now - d.time)) if d.time is not None else "?"
        rows.append([d.reason, d.error or "-", died, d.host, d.url or "?"])
    return table(rows, left=range(5))


def operator() -> str:
    """Who runs this command, for the control log: the system user and machine."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for the uid (a container's)
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()} (scrapy frontier)"


def drop_host(admin: FrontierAdmin, text: str) -> None:
    """Drop a host and say how to undo it; a bare name that only exists as https
    is refused with the right spelling rather than dropping nothing."""
    host = parse_host(text)
    if not admin.known_host(host) and "://" not in text:
        other = parse_host(f"https://{text}/")
        if admin.known_host(other):
            raise AdminError(f"host {host} is not in the frontier; did you mean {other}?")
    result = admin.drop_host(host)
    note_action(admin.client, admin.keys, "site", site_of(host),
                f"drop {host} ({result.queued + result.delayed:,} URLs)", operator())
    print(f"dropped {host}: {result.queued:,} queued and {result.delayed:,} delayed URL(s) "
          f'are now dead letters (reason "dropped"); {result.in_flight:,} in flight '
          "finish with their workers")
    print("new links to it are refused until you undo the drop with: scrapy frontier requeue "
          f"--reason dropped --host {host}")


def print_host(view: HostView, as_json: bool) -> None:
    """``scrapy frontier host NAME``: a site, its domain and what is in force."""
    if as_json:
        print(json.dumps(view.as_dict()))
        return
    print(f"site {view.site} (domain {view.domain}, partition {view.partition})")
    for a in view.authorities:
        fetched = ("" if a.robots_fetched_ago_s is None
                   else f", fetched {ago(a.robots_fetched_ago_s)}")
        blocked = f", {a.blocked}" if a.blocked else ""
        print(f"  {a.host}: {a.queued:,} queued; robots.txt {a.robots}{fetched}, "
              f"version {a.robots_version}{blocked}")
        _print_learned(a.learned)
    print(f"  in flight {view.site_gate.in_flight:,}, delayed {view.delayed:,}, "
          f"dead {view.dead:,}")
    _print_gate("site", view.site_gate)
    if view.crawl_delay_floor_s:
        print(f"  Crawl-delay floor {view.crawl_delay_floor_s:g} s (robots.txt; no override "
              "goes below it)")
    if view.held_for_s:
        print(f"  held for {_duration(view.held_for_s)} more (Retry-After, a 429 / 503 or "
              "the breaker)")
    print(f"  breaker {view.breaker} ({view.breaker_openings} opening(s)); "
          f"failed DNS lookups in a row: {view.dns_failures}")
    if view.budget is not None:
        print(f"  budget: {_spend_line(view.budget)}")
    print(f"domain {view.domain}: {view.domain_waiting_hosts:,} host(s) waiting for it")
    if view.domain_budget is not None:
        print(f"  budget: {_spend_line(view.domain_budget)}")
    _print_gate("domain", view.domain_gate)
    if view.address is not None:
        _print_address(view.address)
    else:
        print("server address: not known yet (learned at its robots.txt fetch, or when its "
              "server first has no room for it)")
    _print_log(view.log)


def _spend_line(spend: Spend) -> str:
    """``pages 5 of 5, bytes 52,100 (no limit), time 12 s of 60 s (setting
    BUDGET_HOST_*); spent: pages``."""
    def part(name: str, used: str, limit: str | None) -> str:
        return f"{name} {used} of {limit}" if limit else f"{name} {used} (no limit)"
    line = ", ".join((
        part("pages", f"{spend.pages:,}", spend.pages_limit and f"{spend.pages_limit:,}"),
        part("bytes", f"{spend.bytes:,}", spend.bytes_limit and f"{spend.bytes_limit:,}"),
        part("time", f"{spend.seconds:,.0f} s",
             spend.seconds_limit and f"{spend.seconds_limit:,g} s")))
    spent = spend.spent
    return f"{line} ({spend.limits_from})" + (f"; spent: {spent}" if spent else "")


def _print_learned(learned: dict[str, Any]) -> None:
    """What a host's pages taught (crawler/frontier/sitefacts.py), if anything."""
    noise, patterns = learned.get("noise") or [], learned.get("patterns") or []
    if noise:
        print(f"    noise parameters (learned): {', '.join(noise)}")
    for pattern in patterns:
        print(f"    trap pattern refused: {pattern}")
    others = {k: v for k, v in (learned.get("evidence") or {}).items() if k not in noise}
    if others:
        print("    parameters with evidence: " + ", ".join(
            f"{k} ({agree} for noise, {against} against)"
            for k, (agree, against) in others.items()))
    if learned.get("canonical_unreliable"):
        print("    canonical links unreliable (many pages name one other page): ignored")


def print_address(view: AddressView, as_json: bool) -> None:
    """``scrapy frontier host ADDRESS``: a server address's gate (the IP scope)."""
    if as_json:
        print(json.dumps(view.as_dict()))
        return
    _print_address(view)
    _print_log(view.log)


def _print_address(view: AddressView) -> None:
    known = ("" if view.known_for_s is None
             else f", the site points here for {_duration(view.known_for_s)} more (DNS TTL)")
    print(f"server address {view.address}: {view.waiting_hosts:,} host(s) waiting for room"
          f"{known}")
    _print_gate("address", view.gate)


def _print_log(log: list[dict[str, Any]]) -> None:
    if log:
        print("changes by operators, newest first:")
    for entry in log:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.get("time", 0)))
        who = f" (by {entry['who']})" if entry.get("who") else ""
        print(f"  {when} {entry.get('scope')} {entry.get('name')}: {entry.get('change')}{who}")


def _print_gate(scope: str, gate: Gate) -> None:
    paused = " PAUSED by an operator;" if gate.paused else ""
    concurrency = "no limit" if gate.concurrency == 0 else f"{gate.concurrency}"
    print(f"  {scope}:{paused} concurrency {concurrency} ({gate.concurrency_from}), "
          f"delay {gate.delay_s:g} s ({gate.delay_from}); in flight {gate.in_flight}, "
          f"next claim in {gate.next_claim_in_s:.1f} s, next start in "
          f"{gate.next_start_in_s:.1f} s")
