"""``scrapy frontier``: look at and repair a crawl's Redis frontier.

Operators run crawls for days; when a host misbehaves or a batch of URLs
dies on a transient error they need to see the frontier and act on it
without a Redis shell or knowledge of the key layout::

    scrapy frontier status [--watch SECONDS] [--json]
    scrapy frontier dead [--reason R] [--host H] [--limit N] [--json]
    scrapy frontier refused [--reason R] [--json]
    scrapy frontier requeue [--reason R] [--host H] [--front]
    scrapy frontier drop-host HOST
    scrapy frontier revisit-now [--host H]
    scrapy frontier hosts [--top N] [--by queued|errors|latency|dead] [--json]
    scrapy frontier host NAME [--domain | --ip] [--delay S] [--concurrency N]
                              [--pause | --resume] [--reset] [--json]
                              [--budget-pages N] [--budget-bytes N] [--budget-seconds S]
                              [--forget-param P | --forget-pattern PATTERN | --forget-learned]
    scrapy frontier scope [--mode M] [--hops N] [--include RULE] [--exclude RULE]
                          [--remove RULE] [--reset] [--json]
    scrapy frontier budget [--domain] [--pages N] [--bytes N] [--seconds S] [--reset] [--json]
    scrapy frontier rules [FILE | --reset]
    scrapy frontier crawls [--json]
    scrapy frontier delete (--crawl-id ID | --idle-days N) [--yes] [--force]

The frontier is found as the crawl finds it: ``--redis-url``, else REDIS_URL,
REDIS_URL_FILE or $BROADCRAWL_REDIS_URL (:func:`~crawler.frontier.connection.configured_url`),
else the embedded Redis of JOBDIR (or ``.scrapy/frontier/<spider>``), which
is started for the command if it is not running. The namespace comes from
FRONTIER_NAMESPACE and ``--spider``. Errors are one line and exit code 1:
an operator's terminal (or cron mail) should say what is wrong, not show a
traceback, and never a password.
"""

from __future__ import annotations

import argparse
import os
import sys

import redis
from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from crawler.commands import (
    frontier_budget,
    frontier_host,
    frontier_report,
    frontier_rules,
    frontier_scope,
    frontier_serve,
)
from crawler.commands.frontier_output import (
    MAX_WORKER_ROWS,
    ago,
    drop_host,
    filters,
    note,
    operator,
    print_crawls,
    print_dead,
    print_refused,
    print_status,
    print_top_hosts,
    watch,
)
from crawler.frontier import crawlconfig
from crawler.frontier.admin import (
    AdminError,
    FrontierAdmin,
    frontier_keys,
    parse_host_match,
    refuse_older_layout,
)
from crawler.frontier.connection import (
    ConnectError,
    Connection,
    RedisUnreachable,
    configured_url,
    connect,
)
from crawler.frontier.control import note_action
from crawler.frontier.crawls import CrawlInfo, delete_crawl, list_crawls
from crawler.frontier.keys import crawl_namespace
from crawler.frontier.refusals import with_examples
from crawler.frontier.status import HOST_STATES
from crawler.frontier.tophosts import RANKINGS, TopHosts
from crawler.frontier.values import Limits
from crawler.frontier.workers import DEFAULT_LEASE_SECONDS
from crawler.redaction import one_line, safe_url, url_password
from crawler.scheduling.opening import embedded_folder

SUBCOMMANDS = ("status", "hosts", "dead", "refused", "requeue", "drop-host", "revisit-now",
               "host", "scope", "budget", "rules", "crawls", "delete", "serve", "report")


class Command(ScrapyCommand):
    """The ``scrapy frontier`` command (see the module docstring)."""

    requires_project = True
    # No crawl runs: no reactor to install, no CrawlerProcess to build.
    requires_crawler_process = False

    def syntax(self) -> str:
        return ("status|hosts|dead|refused|requeue|drop-host HOST|host NAME|scope|budget|"
                "rules [FILE]|crawls|delete|serve|report [options]")

    def short_desc(self) -> str:
        return "Show and repair the crawl frontier (status, dead letters, requeue, drop a host)"

    def long_desc(self) -> str:
        return (
            "status: counts, hosts and workers (--watch SECONDS to refresh, --json); "
            "hosts by state: "
            + "; ".join(f"{n.replace('_', ' ')}: {why}" for n, why in HOST_STATES.items())
            + ". "
            "hosts: the busiest hosts (--top N, default 20; --by queued, errors, latency or "
            "dead). "
            "dead: list dead letters (--reason, --host, --limit). "
            "refused: the URLs every worker refused, by reason (a trap rule, the address "
            "guard, a learned pattern, a host budget...), with the last few of each "
            "(--reason R: that one's). "
            "requeue: put dead letters back in their queues (--reason, --host, --front). "
            "--host example.com takes every scheme and port of the name (http://example.com:80, "
            "https://example.com:443, ...), example.com:8080 every scheme on that port, a URL "
            "or host key (https://example.com:8443) only that one. "
            "drop-host HOST: make a host's queued URLs dead letters (reason 'dropped') and "
            "refuse its new links until requeue --host HOST. "
            "revisit-now: done URLs (of --host H, else all) are due for their revisit now "
            "(FRONTIER_REVISIT_AFTER); workers fetch them politely at their next claims. "
            "host NAME: the site NAME (every scheme and port of the name) and its registered "
            "domain: queues, limits in force and why, holds, breaker; --delay S, "
            "--concurrency N, --pause, --resume change them for every worker at once and "
            "until --reset (--domain: NAME's registered domain instead); a robots.txt "
            "Crawl-delay and Retry-After holds stay in force. "
            "scope: the crawl's scope (mode, hops, rules) and what its seeds cover; --mode, "
            "--hops, --include RULE, --exclude RULE, --remove RULE change it for every worker "
            "within a second (--reset: each worker's settings again), and queued URLs the new "
            "scope does not take become dead letters (reason out-of-scope). "
            "budget: the crawl's budgets (BUDGET_*); --pages N, --bytes N, --seconds S set "
            "each host's (--domain: each registered domain's) for every worker within a "
            "second, --reset gives back the workers' settings. "
            "rules FILE: load per-site rules (SITE_RULES: JSON lines keyed by SURT prefix; "
            "delay, concurrency, budgets, scope) for every worker, applied at once to the "
            "sites already in the frontier. "
            "crawls: the spider's crawls (one per crawl id) and how long each has been idle. "
            "delete: remove a crawl's frontier (--crawl-id ID, or every crawl idle for "
            "--idle-days N); shows what it would remove unless --yes; refuses a crawl with "
            "live workers unless --force. --crawl-id ID makes every subcommand act on that "
            "crawl. "
            "serve: the operator's console, a web page over the frontier with live control "
            "of hosts, on 127.0.0.1 (--bind ADDRESS, --port PORT; CONSOLE_HOST, "
            "CONSOLE_PORT; off loopback the PROMETHEUS_TLS_* and PROMETHEUS_BASIC_AUTH_* "
            "settings protect it), until Ctrl-C. "
            "report: write the crawl's report (hosts, seeds, status codes, media types, what "
            "is left; CSV, JSON and one HTML page) from every worker's saved tally into "
            "--out DIR, else REPORT_DIR/CRAWL, as each closing worker does. "
            "Redis: --redis-url, else REDIS_URL, REDIS_URL_FILE or $BROADCRAWL_REDIS_URL, "
            "else the embedded Redis of JOBDIR or .scrapy/frontier/SPIDER."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group(title="Frontier Options")
        group.add_argument("--spider", default="broad", metavar="NAME",
                           help="spider whose frontier to use (default broad)")
        group.add_argument("--redis-url", metavar="URL",
                           help="Redis of the frontier (default: REDIS_URL, REDIS_URL_FILE or "
                                "$BROADCRAWL_REDIS_URL, else the embedded one); it shows in "
                                "ps: prefer the file or the variable for a password")
        group.add_argument("--json", action="store_true",
                           help="status and dead print JSON, one object per line")
        group.add_argument("--watch", type=float, metavar="SECONDS",
                           help="status refreshes every SECONDS until Ctrl-C")
        group.add_argument("--reason", metavar="R", help="dead and requeue take only this reason")
        group.add_argument("--host", metavar="H",
                           help="dead, requeue and revisit-now take only this host: a name "
                                "(example.com) is every scheme and port of it, a URL or host "
                                "key (https://example.com:8443) only that one")
        group.add_argument("--limit", type=int, default=50, metavar="N",
                           help="dead shows at most N (0 for all, default 50)")
        group.add_argument("--front", action="store_true",
                           help="requeue to the front of the host queues, not the back")
        group.add_argument("--top", type=int, default=20, metavar="N",
                           help="hosts: how many (default 20)")
        group.add_argument("--by", default="queued", choices=RANKINGS,
                           help="hosts: rank by queued URLs, errors (failures in a row), "
                                "latency (mean answer time) or dead letters")
        group.add_argument("--crawl-id", metavar="ID", default=None,
                           help="the crawl (spider argument crawl_id) to act on")
        frontier_host.add_options(group)
        frontier_scope.add_options(group)
        frontier_serve.add_options(group)
        frontier_report.add_options(group)
        frontier_budget.add_options(group)
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
        url: str | None = None
        display = "the embedded Redis"
        try:
            url = opts.redis_url or configured_url(settings)
            display = safe_url(url) if url else display
            folder = embedded_folder(settings.get("JOBDIR"), opts.spider, create=False)
            with connect(url, None if url else folder,
                         settings.getdict("REDIS_PARAMS"), notice=note,
                         cluster=settings.getbool("REDIS_CLUSTER")) as conn:
                display = conn.url
                admin = self._admin(conn, opts.spider)
                if sub in ("requeue", "drop-host", "host"):
                    refuse_older_layout(conn.client, admin.keys)
                self._dispatch(sub, rest, admin, conn, opts)
        except KeyboardInterrupt:
            self.exitcode = 130
        except BrokenPipeError:  # `scrapy frontier dead | head`: the reader had enough
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (AdminError, ConnectError) as exc:
            self._fail(str(exc))
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            self._fail(str(RedisUnreachable(url or display, exc, url and url_password(url))))
        except redis.RedisError as exc:
            hint = ("; the Redis user may not: `scrapy acl reader` prints what showing needs, "
                    "`scrapy acl worker` what changing needs"
                    if isinstance(exc, redis.exceptions.NoPermissionError) else "")
            self._fail(f"Redis error at {display}: {one_line(exc, url and url_password(url))}"
                       + hint)

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
        if sub == "host":
            frontier_host.check_options(rest, opts)
        if sub != "scope" and frontier_scope.changes_asked(opts):
            raise UsageError("--mode, --hops, --include, --exclude and --remove apply to scope "
                             "only")
        if sub != "budget" and frontier_budget.changes_asked(opts):
            raise UsageError("--pages, --bytes and --seconds apply to budget only (a host's "
                             "own: host NAME --budget-pages N)")
        if sub in ("scope", "budget") and opts.reset and (
                frontier_scope.changes_asked(opts) or frontier_budget.changes_asked(opts)):
            raise UsageError("--reset or a change, not both")
        shared = {"scope": ("reset",), "budget": ("reset", "domain"),
                  "rules": ("reset",)}.get(sub, ())
        host_only = [name for name in frontier_host.OPTIONS if name not in shared]
        if sub != "host" and any(getattr(opts, name) not in (None, False) for name in host_only):
            raise UsageError("--delay, --concurrency, --pause, --resume, --reset, --budget-*, "
                             "--domain, --ip and --forget-* apply to host (--reset to scope "
                             "and budget, --domain to budget too)")
        if sub == "rules" and (len(rest) > 1 or (rest and opts.reset)):
            raise UsageError("rules takes one FILE, or --reset, or nothing (to show them)")
        if sub not in ("drop-host", "host", "rules") and rest:
            raise UsageError(f"unexpected argument(s): {' '.join(rest)}")
        if sub != "serve" and (opts.bind or opts.port):
            raise UsageError("--bind and --port apply to serve only")
        if sub != "report" and (opts.out or opts.compare is not None):
            raise UsageError("--out and --compare apply to report only")
        if opts.watch is not None and (sub != "status" or opts.watch <= 0):
            raise UsageError("--watch SECONDS (> 0) applies to status only")
        if opts.limit < 0:
            raise UsageError("--limit must be 0 (all) or more")
        if opts.top < 1:
            raise UsageError("--top must be 1 or more")
        return sub, rest

    def _namespace(self, spider: str, crawl_id: str | None) -> str:
        assert self.settings is not None
        template = self.settings.get("FRONTIER_NAMESPACE", "frontier:%(spider)s")
        try:
            return crawl_namespace(template, spider, crawl_id)
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    def _admin(self, conn: Connection, spider: str, crawl_id: str | None = None
               ) -> FrontierAdmin:
        """The admin of the crawl ``crawl_id`` (None: the one the command acts on)."""
        s = self.settings
        assert s is not None
        namespace = self._namespace(spider, self._crawl_id if crawl_id is None else crawl_id)
        keys, found = frontier_keys(conn.client, namespace, s.getint("FRONTIER_PARTITIONS", 16),
                                    s.getint("FRONTIER_SEEN_BUCKETS", 4096))
        if crawl_id is None and not s.frozen:  # what the crawl's workers run with
            stored = crawlconfig.read(conn.client, keys)
            if stored:
                crawlconfig.adopt(s, stored, {}, namespace)
        return FrontierAdmin(
            conn.client, keys,
            concurrency=s.getint("CONCURRENT_REQUESTS_PER_DOMAIN", 4),
            delay_ms=round(s.getfloat("DOWNLOAD_DELAY", 1.0) * 1000),
            lease_seconds=self._lease_seconds(),
            layout_found=found,
            limits=Limits.from_settings(s),  # for the ceiling: what the workers read
        )

    def _lease_seconds(self) -> float:
        """The crawl's lease, to judge heartbeats that do not state their own."""
        assert self.settings is not None
        return self.settings.getfloat("FRONTIER_LEASE_SECONDS", DEFAULT_LEASE_SECONDS)

    def _fail(self, message: str) -> None:
        print(message, file=sys.stderr)
        self.exitcode = 1

    def _dispatch(self, sub: str, rest: list[str], admin: FrontierAdmin, conn: Connection,
                  opts: argparse.Namespace) -> None:
        host = parse_host_match(opts.host) if opts.host else None
        if sub == "status":
            if opts.watch:
                watch(admin, conn, opts.watch, opts.json)
            else:
                print_status(admin.status(), conn, opts.json, MAX_WORKER_ROWS)
        elif sub == "dead":
            print_dead(admin, opts.reason, host, opts.limit, opts.json)
        elif sub == "refused":
            refused = admin.status(oldest=False).refused
            print_refused(with_examples(conn.client, admin.keys, refused), opts.reason,
                          opts.json)
        elif sub == "requeue":
            moved = admin.requeue(opts.reason, host, front=opts.front)
            where = filters(opts.reason, host)
            if moved:
                note_action(admin.client, admin.keys, "site" if host else "crawl",
                            host.site if host else "*",
                            f"requeue {moved:,} ({opts.reason or 'every reason'})", operator())
            print(f"requeued {moved:,} dead letter(s){where}" if moved
                  else f"no dead letters matched{where}")
        elif sub == "hosts":
            print_top_hosts(TopHosts(conn.client, admin.keys).top(opts.by, opts.top), opts.by,
                            opts.json)
        elif sub == "revisit-now":
            hosts, urls = admin.revisit_now(host)
            print(f"{urls:,} done URL(s) of {hosts:,} host(s) are due for a revisit now"
                  f"{filters(None, host)}")
        elif sub == "crawls":
            print_crawls(self._crawls(conn, opts.spider), opts.json)
        elif sub == "delete":
            self._delete(admin, conn, opts)
        elif sub == "host":
            assert self.settings is not None
            frontier_host.run(admin, self.settings, rest[0], opts)
        elif sub == "scope":
            assert self.settings is not None
            frontier_scope.run(admin, self.settings, opts)
        elif sub == "budget":
            assert self.settings is not None
            frontier_budget.run(admin, self.settings, opts)
        elif sub == "rules":
            assert self.settings is not None
            frontier_rules.run(admin, self.settings, rest, opts.reset)
        elif sub == "report":
            frontier_report.run(admin, self.settings, opts,
                                lambda crawl_id: self._admin(conn, opts.spider, crawl_id),
                                lambda: self._crawls(conn, opts.spider))
        elif sub == "serve":
            frontier_serve.run(admin, conn.url, self.settings, opts,
                               lambda: self._crawls(conn, opts.spider))
        else:
            drop_host(admin, rest[0])

    def _crawls(self, conn: Connection, spider: str) -> list[CrawlInfo]:
        return list_crawls(conn.client, self._namespace(spider, None), self._lease_seconds())

    def _delete(self, admin: FrontierAdmin, conn: Connection, opts: argparse.Namespace) -> None:
        """Delete one crawl, or every crawl idle for --idle-days; dry run without --yes."""
        if opts.idle_days is not None:
            chosen = [c for c in self._crawls(conn, opts.spider)
                      if c.idle_s is not None and c.idle_s >= opts.idle_days * 86400]
        else:
            chosen = [c for c in self._crawls(conn, opts.spider)
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
                      f"{ago(crawl.idle_s)}); add --yes to delete")
                continue
            removed = delete_crawl(conn.client, keys)
            print(f"deleted {crawl.namespace}: {removed:,} keys")
        if not chosen:
            print("no crawl matched")
