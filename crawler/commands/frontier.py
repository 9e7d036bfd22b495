"""``scrapy frontier``: look at and repair a crawl's Redis frontier.

Operators run crawls for days; when a host misbehaves or a batch of URLs
dies on a transient error they need to see the frontier and act on it
without a Redis shell or knowledge of the key layout::

    scrapy frontier status [--watch SECONDS] [--json]
    scrapy frontier dead [--reason R] [--host H] [--limit N] [--json]
    scrapy frontier requeue [--reason R] [--host H] [--front]
    scrapy frontier drop-host HOST
    scrapy frontier crawls [--json]
    scrapy frontier delete (--crawl-id ID | --idle-days N) [--yes] [--force]

The frontier is found as the crawl finds it: ``--redis-url`` or REDIS_URL,
else the embedded Redis of JOBDIR (or ``.scrapy/frontier/<spider>``), which
is started for the command if it is not running. The namespace comes from
FRONTIER_NAMESPACE and ``--spider``. Errors are one line and exit code 1:
an operator's terminal (or cron mail) should say what is wrong, not show a
traceback, and never a password.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import redis
from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError
from scrapy.utils.project import data_path

from crawler.frontier.admin import (
    ALIVE_SECONDS,
    EXTRA_COUNTS,
    HOST_STATES,
    AdminError,
    Connection,
    CrawlInfo,
    DeadLetter,
    FrontierAdmin,
    RedisUnreachable,
    Status,
    connect,
    delete_crawl,
    frontier_keys,
    list_crawls,
    parse_host,
    refuse_older_layout,
    safe_url,
    url_password,
)
from crawler.frontier.keys import crawl_namespace
from crawler.frontier.store import STATES

SUBCOMMANDS = ("status", "dead", "requeue", "drop-host", "crawls", "delete")
CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen: a refresh without scrolling
MAX_WORKER_ROWS = 20


class Command(ScrapyCommand):
    """The ``scrapy frontier`` command (see the module docstring)."""

    requires_project = True
    # No crawl runs: no reactor to install, no CrawlerProcess to build.
    requires_crawler_process = False

    def syntax(self) -> str:
        return "status|dead|requeue|drop-host [HOST]|crawls|delete [options]"

    def short_desc(self) -> str:
        return "Show and repair the crawl frontier (status, dead letters, requeue, drop a host)"

    def long_desc(self) -> str:
        return (
            "status: counts, hosts and workers (--watch SECONDS to refresh, --json); "
            "hosts by state: "
            + "; ".join(f"{n.replace('_', ' ')}: {why}" for n, why in HOST_STATES.items())
            + ". "
            "dead: list dead letters (--reason, --host, --limit). "
            "requeue: put dead letters back in their queues (--reason, --host, --front). "
            "drop-host HOST: make a host's queued URLs dead letters (reason 'dropped') and "
            "refuse its new links until requeue --host HOST. "
            "crawls: the spider's crawls (one per crawl id) and how long each has been idle. "
            "delete: remove a crawl's frontier (--crawl-id ID, or every crawl idle for "
            "--idle-days N); shows what it would remove unless --yes; refuses a crawl with "
            "live workers unless --force. --crawl-id ID makes every subcommand act on that "
            "crawl. "
            "Redis: --redis-url or REDIS_URL, else the embedded Redis of JOBDIR or "
            ".scrapy/frontier/SPIDER."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group(title="Frontier Options")
        group.add_argument("--spider", default="broad", metavar="NAME",
                           help="spider whose frontier to use (default broad)")
        group.add_argument("--redis-url", metavar="URL",
                           help="Redis of the frontier (default REDIS_URL, else the embedded one)")
        group.add_argument("--json", action="store_true",
                           help="status and dead print JSON, one object per line")
        group.add_argument("--watch", type=float, metavar="SECONDS",
                           help="status refreshes every SECONDS until Ctrl-C")
        group.add_argument("--reason", metavar="R", help="dead and requeue take only this reason")
        group.add_argument("--host", metavar="H",
                           help="dead and requeue take only this host (example.com, https://h:8443)")
        group.add_argument("--limit", type=int, default=50, metavar="N",
                           help="dead shows at most N (0 for all, default 50)")
        group.add_argument("--front", action="store_true",
                           help="requeue to the front of the host queues, not the back")
        group.add_argument("--crawl-id", metavar="ID", default=None,
                           help="the crawl (spider argument crawl_id) to act on")
        group.add_argument("--idle-days", type=float, metavar="N",
                           help="delete: every crawl of the spider idle for N days or more")
        group.add_argument("--yes", action="store_true", help="delete: really delete")
        group.add_argument("--force", action="store_true",
                           help="delete: even a crawl whose workers are alive")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        sub, rest = self._parse(args, opts)
        self._crawl_id = opts.crawl_id if opts.crawl_id is not None else (
            self.settings.get("FRONTIER_CRAWL_ID") if self.settings else None)
        self._namespace(opts.spider, self._crawl_id)  # a bad id is a usage error, before Redis
        settings = self.settings
        assert settings is not None
        url = opts.redis_url or settings.get("REDIS_URL") or None
        display = safe_url(url) if url else "the embedded Redis"
        try:
            with connect(url, None if url else self._embedded_dir(opts.spider),
                         settings.getdict("REDIS_PARAMS"), notice=_note,
                         cluster=settings.getbool("REDIS_CLUSTER")) as conn:
                display = conn.url
                admin = self._admin(conn, opts.spider)
                if sub in ("requeue", "drop-host"):
                    refuse_older_layout(conn.client, admin.keys.namespace)
                self._dispatch(sub, rest, admin, conn, opts)
        except KeyboardInterrupt:
            self.exitcode = 130
        except BrokenPipeError:  # `scrapy frontier dead | head`: the reader had enough
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except AdminError as exc:
            self._fail(str(exc))
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            self._fail(str(RedisUnreachable(url or display, exc, url and url_password(url))))
        except redis.RedisError as exc:
            secret = url and url_password(url)
            message = " ".join(str(exc).split())
            self._fail(f"Redis error at {display}: "
                       + (message.replace(secret, "***") if secret else message))

    # ------------------------------------------------------------------ plumbing

    def _parse(self, args: list[str], opts: argparse.Namespace) -> tuple[str, list[str]]:
        unknown = [a for a in args if a.startswith("-")]
        if unknown:
            raise UsageError(f"unknown option(s): {' '.join(unknown)}")
        if not args or args[0] not in SUBCOMMANDS:
            raise UsageError(f"give one of: {', '.join(SUBCOMMANDS)}")
        sub, rest = args[0], args[1:]
        if sub == "delete" and (opts.crawl_id is None) == (opts.idle_days is None):
            raise UsageError("delete takes --crawl-id ID (\"\" for the default crawl) or "
                             "--idle-days N")
        if sub == "drop-host" and len(rest) != 1:
            raise UsageError("drop-host takes one HOST (example.com or https://example.com:8443)")
        if sub != "drop-host" and rest:
            raise UsageError(f"unexpected argument(s): {' '.join(rest)}")
        if opts.watch is not None and (sub != "status" or opts.watch <= 0):
            raise UsageError("--watch SECONDS (> 0) applies to status only")
        if opts.limit < 0:
            raise UsageError("--limit must be 0 (all) or more")
        return sub, rest

    def _namespace(self, spider: str, crawl_id: str | None) -> str:
        assert self.settings is not None
        template = self.settings.get("FRONTIER_NAMESPACE", "frontier:%(spider)s")
        try:
            return crawl_namespace(template, spider, crawl_id)
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    def _embedded_dir(self, spider: str) -> Path:
        """Where the crawl's embedded Redis keeps its files (as the scheduler does)."""
        assert self.settings is not None
        jobdir = self.settings.get("JOBDIR")
        return Path(jobdir) / "frontier" if jobdir else Path(data_path(f"frontier/{spider}"))

    def _admin(self, conn: Connection, spider: str) -> FrontierAdmin:
        s = self.settings
        assert s is not None
        namespace = self._namespace(spider, self._crawl_id)
        keys, found = frontier_keys(conn.client, namespace, s.getint("FRONTIER_PARTITIONS", 16),
                                    s.getint("FRONTIER_SEEN_BUCKETS", 4096))
        return FrontierAdmin(
            conn.client, keys,
            concurrency=s.getint("CONCURRENT_REQUESTS_PER_DOMAIN", 4),
            delay_ms=round(s.getfloat("DOWNLOAD_DELAY", 1.0) * 1000),
            # Workers beat every lease/3 s: gone after three missed beats, 60 s at least.
            alive_seconds=max(ALIVE_SECONDS, s.getfloat("FRONTIER_LEASE_SECONDS", 60)),
            layout_found=found,
        )

    def _fail(self, message: str) -> None:
        print(message, file=sys.stderr)
        self.exitcode = 1

    def _dispatch(self, sub: str, rest: list[str], admin: FrontierAdmin, conn: Connection,
                  opts: argparse.Namespace) -> None:
        host = parse_host(opts.host) if opts.host else None
        if sub == "status":
            if opts.watch:
                _watch(admin, conn, opts.watch, opts.json)
            else:
                _print_status(admin.status(), conn, opts.json, MAX_WORKER_ROWS)
        elif sub == "dead":
            _print_dead(admin, opts.reason, host, opts.limit, opts.json)
        elif sub == "requeue":
            moved = admin.requeue(opts.reason, host, front=opts.front)
            where = _filters(opts.reason, host)
            print(f"requeued {moved:,} dead letter(s){where}" if moved
                  else f"no dead letters matched{where}")
        elif sub == "crawls":
            _print_crawls(list_crawls(conn.client, self._namespace(opts.spider, None)),
                          opts.json)
        elif sub == "delete":
            self._delete(admin, conn, opts)
        else:
            _drop_host(admin, rest[0])

    def _delete(self, admin: FrontierAdmin, conn: Connection, opts: argparse.Namespace) -> None:
        """Delete one crawl, or every crawl idle for --idle-days; dry run without --yes."""
        if opts.idle_days is not None:
            base = self._namespace(opts.spider, None)
            chosen = [c for c in list_crawls(conn.client, base)
                      if c.idle_s is not None and c.idle_s >= opts.idle_days * 86400]
        else:
            chosen = [c for c in list_crawls(conn.client, self._namespace(opts.spider, None))
                      if c.namespace == admin.keys.namespace]
            if not chosen:
                self._fail(f"no crawl {admin.keys.namespace} at {conn.url}")
                return
        for crawl in chosen:
            if crawl.alive_workers and not opts.force:
                self._fail(f"{crawl.namespace}: {crawl.alive_workers} worker(s) alive; stop "
                           "them first (or --force)")
                continue
            keys, _ = frontier_keys(conn.client, crawl.namespace, crawl.partitions or 16)
            if not opts.yes:
                print(f"would delete {crawl.namespace} ({crawl.partitions} partitions, idle "
                      f"{_ago(crawl.idle_s)}); add --yes to delete")
                continue
            removed = delete_crawl(conn.client, keys)
            print(f"deleted {crawl.namespace}: {removed:,} keys")
        if not chosen:
            print("no crawl matched")


# ---------------------------------------------------------------------- output


def _print_crawls(crawls: list[CrawlInfo], as_json: bool) -> None:
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


def _note(message: str) -> None:
    print(message, file=sys.stderr)


def _filters(reason: str | None, host: str | None) -> str:
    parts = [f"reason {reason}"] if reason else []
    parts += [f"host {host}"] if host else []
    return f" ({', '.join(parts)})" if parts else ""


def _ago(seconds: float | None) -> str:
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
    names = [n for n in (*STATES, *EXTRA_COUNTS) if n != "hosts"]
    names += sorted(set(c) - set(names) - {"hosts"})  # e.g. stale
    h = st.hosts
    lines = [
        head, "",
        table([["URLs", *names], ["", *(c.get(n, 0) for n in names)]]),
        _hosts_table(h),
    ]
    if st.oldest_queued_s is not None:
        lines.append(f"Oldest queued URL waiting {_duration(st.oldest_queued_s)} (+-10 s)")
    alive = [w for w in st.workers if w.state == "alive"]
    held = sum(w.held or 0 for w in alive)
    lines.append(f"Workers  {len(alive)} alive, {len(st.workers) - len(alive)} gone; "
                 f"alive workers hold {held:,} of {c.get('leased', 0):,} leases")
    if st.workers:
        rows: list[list[Any]] = [["worker", "state", "last seen", "held", "pid", "host"]]
        for w in st.workers[:max_workers]:
            rows.append([w.id, w.state, _ago(w.seen_ago), "?" if w.held is None else w.held,
                         w.pid or "?", w.host or "?"])
        lines.append(table(rows, left=(0, 1, 2, 5), indent="  "))
        if len(st.workers) > max_workers:
            lines.append(f"  ... {len(st.workers) - max_workers} more (--json lists all)")
    return "\n".join(lines)


def _hosts_table(h: dict[str, int]) -> str:
    """Hosts by state, each state named for what its hosts are doing (HOST_STATES);
    a status read without the queue scan has only the claimable ones and the rest."""
    names = [n for n in HOST_STATES if n in h]
    if "finished" not in h:
        names.append("other")
    return table([["Hosts", "total", *(n.replace("_", " ") for n in names)],
                  ["", h["total"], *(h[n] for n in names)]])


def _print_status(st: Status, conn: Connection, as_json: bool, max_workers: int) -> None:
    if as_json:
        print(json.dumps({"redis": conn.url, "time": round(time.time(), 3), **st.as_dict()}),
              flush=True)
    else:
        print(format_status(st, conn.url, max_workers), flush=True)


def _watch(admin: FrontierAdmin, conn: Connection, every: float, as_json: bool) -> None:
    """Refresh until Ctrl-C; the table fits the terminal, JSON is one line a refresh."""
    try:
        while True:
            st = admin.status()
            if not as_json:
                rows = max(3, shutil.get_terminal_size().lines - 12)
                sys.stdout.write(CLEAR + time.strftime("%H:%M:%S")
                                 + f"  every {every:g} s, Ctrl-C to stop\n")
                _print_status(st, conn, False, rows)
            else:
                _print_status(st, conn, True, 0)
            time.sleep(every)
    except KeyboardInterrupt:
        print()


def _print_dead(admin: FrontierAdmin, reason: str | None, host: str | None, limit: int,
                as_json: bool) -> None:
    if as_json:  # streamed: --limit 0 on millions of dead letters stays flat in memory
        for i, letter in enumerate(admin.iter_dead(reason, host)):
            if limit and i >= limit:
                break
            print(json.dumps(letter.as_dict()))
        return
    letters = admin.dead(reason, host, limit + 1 if limit else 0)
    truncated = bool(limit) and len(letters) > limit
    letters = letters[:limit] if limit else letters
    total = admin.status().counts.get("dead", 0)
    if letters:
        print(_dead_table(letters))
    filtered = _filters(reason, host)
    if truncated:
        print(f"first {len(letters):,} shown{filtered}, of {total:,} dead; --limit 0 for all")
    elif filtered:
        print(f"{len(letters):,} matching{filtered}, of {total:,} dead")
    else:
        print(f"{len(letters):,} dead letter(s)")


def _dead_table(letters: list[DeadLetter]) -> str:
    now = time.time()
    rows: list[list[Any]] = [["reason", "error", "died", "host", "url"]]
    for d in letters:
        died = _ago(max(0.0, now - d.time)) if d.time is not None else "?"
        rows.append([d.reason, d.error or "-", died, d.host, d.url or "?"])
    return table(rows, left=range(5))


def _drop_host(admin: FrontierAdmin, text: str) -> None:
    host = parse_host(text)
    if not admin.known_host(host) and "://" not in text:
        other = parse_host(f"https://{text}/")
        if admin.known_host(other):
            raise AdminError(f"host {host} is not in the frontier; did you mean {other}?")
    result = admin.drop_host(host)
    print(f"dropped {host}: {result.queued:,} queued and {result.delayed:,} delayed URL(s) "
          f'are now dead letters (reason "dropped"); {result.in_flight:,} in flight '
          "finish with their workers")
    print("new links to it are refused until you undo the drop with: scrapy frontier requeue "
          f"--reason dropped --host {host}")
