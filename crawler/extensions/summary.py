"""Extension: a short summary at the end of every crawl, for the person at the terminal.

Scrapy ends a crawl with its stats dump: a hundred keys, useful to an
operator who knows them, opaque to everyone else ("Crawled 2106 pages" next
to "Stored 1847 items": which is what?). After it (the last thing logged,
where the eye lands), this extension logs a block of at most fourteen lines that
says what the crawl did, in words::

    Crawl summary (finished, 2 min 4 s):
      pages fetched: 1,847 from 97 host(s), 100 seed(s) (and 103 robots.txt fetches)
      not fetched: 5,120 duplicate links skipped, 322 refused (robots 310, trap-pattern 12)
      learned: 3 noise parameter(s), 2 trap pattern(s) (see the log; scrapy frontier host NAME)
      dead letters: 40 URLs (http-503 31, timeout 9; scrapy frontier dead); 2 host(s) parked (...)
      items: one per page, in output/broad-2026-01-01T10-00-00.jsonl
      archive: 3 WARC file(s) in job/warc
      left in the frontier: 4 URL(s) queued on 2 host(s), 40 dead letter(s) in all
        held: dns 2 host(s) (broken.test: dns-servfail, 2 failed lookup(s), retry at 12:04:10; ...)
      continue with: scrapy crawl broad -s JOBDIR=job

and, when the crawl had seeds, every one was refused and nothing else was
crawled, one ERROR line ``every seed was refused: ...``
(:func:`crawler.seedrefusals.all_seeds_refused`; ``scrapy crawl`` then exits
with code 1).

Under the frontier its figures are the crawl's account
(:class:`crawler.frontier.account.Account`, read with what is left when the
crawl stops): every run's and every worker's, the figures ``scrapy frontier
status``, the report, the console and the metrics show, with ``this run: N``
when this run's pages differ. Without the frontier they are this run's stats.
The block is :func:`crawl_summary` of the final stats dict and that leftover
(a plain function, testable without a crawl); the extension adds what stats
lack: pages (responses that are not robots.txt) and their distinct hosts
(``pages/fetched``, ``pages/hosts``), the feeds written (``feed_slot_closed``)
and the WARC directory. Settings: ``CRAWL_SUMMARY_ENABLED`` (True; the seed
line is logged even when off), ``CRAWL_SUMMARY_MAX_HOSTS`` (100000: distinct
hosts counted exactly up to this many, then shown as "at least").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import signals

from crawler.frontier.account import Account, reasons
from crawler.frontier.leftover import HostLeft, Leftover
from crawler.frontier.schema import COUNTS
from crawler.robots.fetch import ROBOTS_FETCH_META
from crawler.scheduling.scheduler import scheduler_of
from crawler.seedrefusals import BlockedHosts, all_seeds_refused, refused_seeds
from crawler.signals import host_blocked

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

#: Stats this extension keeps (the rest of the summary is Scrapy's and the crawler's stats).
PAGES_STAT = "pages/fetched"
HOSTS_STAT = "pages/hosts"
HOSTS_CAPPED_STAT = "pages/hosts_capped"


class CrawlSummary:
    """Counts pages and hosts while the crawl runs; logs the summary when the engine stops."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.enabled = crawler.settings.getbool("CRAWL_SUMMARY_ENABLED", True)
        self.max_hosts = crawler.settings.getint("CRAWL_SUMMARY_MAX_HOSTS", 100_000)
        self.hosts: set[str] = set()
        self.feeds: list[tuple[str, int]] = []
        self.left: Leftover | None = None
        self.resume = ""
        self.blocked = BlockedHosts()
        self.nothing_left: str | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        ext = cls(crawler)
        crawler.signals.connect(ext.response_received, signal=signals.response_received)
        crawler.signals.connect(ext.feed_slot_closed, signal=signals.feed_slot_closed)
        # engine_stopped: after Scrapy's stats dump and "Spider closed", so the
        # summary is the last thing on the screen.
        crawler.signals.connect(ext.engine_stopped, signal=signals.engine_stopped)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(ext.blocked.host_blocked, signal=host_blocked)
        return ext

    def spider_closed(self, **kwargs: Any) -> None:
        """What the frontier scheduler found left (it read it on closing, before
        this signal; by engine_stopped the scheduler is gone)."""
        scheduler = scheduler_of(self.crawler)
        if scheduler is not None and scheduler.spider is not None:
            self.left = scheduler.left
            self.resume = scheduler.continue_command()
            self.nothing_left = scheduler.nothing_left

    def response_received(self, response: Response, request: Request, **kwargs: Any) -> None:
        if request.meta.get(ROBOTS_FETCH_META):
            return
        self.stats.inc_value(PAGES_STAT)
        host = urlsplit(response.url).hostname or ""
        if host in self.hosts:
            return
        if len(self.hosts) >= self.max_hosts:
            self.stats.set_value(HOSTS_CAPPED_STAT, 1)
            return
        self.hosts.add(host)
        self.stats.set_value(HOSTS_STAT, len(self.hosts))

    def feed_slot_closed(self, slot: Any, **kwargs: Any) -> None:
        self.feeds.append((str(getattr(slot, "uri", "?")), int(getattr(slot, "itemcount", 0))))

    def engine_stopped(self, **kwargs: Any) -> None:
        stats = self.stats.get_stats()
        if self.enabled:
            lines = crawl_summary(stats, feeds=self.feeds, archive=self._archive_dir(stats),
                                  left=self.left, resume=self.resume)
            logger.info("\n".join(lines), extra={"summary": True})
        if self.nothing_left is not None:  # (logged even with the summary off, like the next)
            logger.warning(self.nothing_left)
        refused = all_seeds_refused(stats, self.blocked.blocked)
        if refused is not None:  # an ERROR: the job failed (scrapy crawl exits with 1)
            logger.error(refused, extra={"seeds_refused": refused_seeds(stats)})

    def _archive_dir(self, stats: Mapping[str, Any]) -> str | None:
        if not stats.get("warc/files"):
            return None
        from crawler.pipelines.warc import archive_of  # the pipeline's own idea of where it wrote

        archive = archive_of(self.crawler)
        return str(archive.directory.resolve()) if archive is not None else None


def crawl_summary(stats: Mapping[str, Any], *, feeds: Sequence[tuple[str, int]] = (),
                  archive: str | None = None, left: Leftover | None = None,
                  resume: str = "") -> list[str]:
    """The summary block's lines (at most fourteen) from a crawl's final stats dict.

    ``feeds``: (URI, items written) of each feed; ``archive``: the WARC
    directory, if files were written there; ``left``: what the frontier
    still holds, and ``resume`` the command that continues. Every count is
    named by what it counts; a part with nothing to say is left out.
    """
    def n(key: str) -> int:
        return int(stats.get(key, 0) or 0)

    def by_prefix(prefix: str) -> dict[str, int]:
        return {k[len(prefix):]: int(v) for k, v in stats.items()
                if k.startswith(prefix) and v}

    lines = [f"Crawl summary ({stats.get('finish_reason', 'unfinished')}, "
             f"{_duration(stats.get('elapsed_time_seconds'))}):"]
    account = left.account if left is not None else None
    lines += (_account_lines(account, stats) if account is not None
              else _stats_lines(stats, by_prefix))
    pages = (account.fetched if account is not None
             else n(PAGES_STAT) if PAGES_STAT in stats else n("response_received_count"))

    seeds = refused_seeds(stats)
    if seeds:
        lines.append(f"  seeds refused: {sum(seeds.values())} of {n('seeds/loaded')} "
                     f"({reasons(seeds)}; see the WARNING lines)")

    items = n("item_scraped_count")
    if feeds:
        for uri, count in feeds[:3]:  # an item per page: the same number said once
            shown = "one per page" if count == pages else f"{count}"
            lines.append(f"  items: {shown}, in {uri}")
    else:
        lines.append(f"  items: {items}, written to no feed (FEEDS is empty)")
    if archive is not None:
        lines.append(f"  archive: {n('warc/files')} WARC file(s) in {archive}")
    if n("storage/pauses") or n("warc/errors") or n("feed/rows_lost"):
        lines.append(storage_line(stats))
    if left is not None:
        lines += leftover_lines(left, resume)
    return lines[:14]


def _account_lines(account: Account, stats: Mapping[str, Any]) -> list[str]:
    """The crawl's figures from its account (every view's), with what this run
    did when it differs (a continued crawl, several workers)."""
    run = int(stats.get("frontier/leases/done", 0) or 0)
    robots = sum(int(v) for k, v in stats.items() if k.startswith("robots/fetch/status/"))
    notes = [f"this run: {run:,}"] if run != account.fetched else []
    if robots:
        notes.append(f"and {robots:,} robots.txt fetches")
    lines = [f"  pages fetched: {account.fetched:,} from {account.hosts_fetched:,} host(s), "
             f"{account.seeds:,} seed(s)"
             + (f" ({'; '.join(notes)})" if notes else "")]
    skipped = []
    if account.duplicates:
        skipped.append(f"{account.duplicates:,} duplicate links skipped")
    if account.refused:
        skipped.append(f"{account.refused_total:,} refused ({reasons(account.refused)})")
    parts = []
    if account.dead:
        parts.append(f"{account.dead_total:,} URLs ({reasons(account.dead)}; "
                     "scrapy frontier dead)")
    if account.parked:
        parts.append(f"{account.parked_total:,} host(s) parked ({reasons(account.parked)})")
    return lines + _ends(stats, skipped, "; ".join(parts))


def _stats_lines(stats: Mapping[str, Any], by_prefix: Any) -> list[str]:
    """The figures from this run's stats alone (a crawl without the frontier)."""
    def n(key: str) -> int:
        return int(stats.get(key, 0) or 0)

    pages = n(PAGES_STAT) if PAGES_STAT in stats else n("response_received_count")
    hosts = f"{'at least ' if stats.get(HOSTS_CAPPED_STAT) else ''}{n(HOSTS_STAT)}"
    robots = sum(by_prefix("robots/fetch/status/").values())
    lines = [f"  pages fetched: {pages} from {hosts} host(s)"
             + (f" (and {robots} robots.txt fetches)" if robots else "")]
    skipped = []
    if n("robots/denied"):
        skipped.append(f"{n('robots/denied')} denied by robots.txt")
    if n("frontier/duplicates"):
        skipped.append(f"{n('frontier/duplicates')} duplicate links skipped")
    refused = by_prefix("frontier/refused/")
    if refused:
        skipped.append(f"{sum(refused.values())} refused ({reasons(refused)})")
    learned = by_prefix("learned/dropped/")
    if learned:
        skipped.append(f"{sum(learned.values())} ended by a learned rule ({reasons(learned)})")
    return lines + _ends(stats, skipped, _dead_letters(stats, n("frontier/leases/dead"),
                                                        by_prefix))


def _ends(stats: Mapping[str, Any], skipped: list[str], dead: str) -> list[str]:
    """What was not fetched, what was learned, the dead letters (the parts with
    something to say)."""
    lines = ["  not fetched: " + ", ".join(skipped)] if skipped else []
    params, traps = (int(stats.get(k, 0) or 0) for k in ("learning/params_learned",
                                                          "traps/patterns"))
    if params or traps:
        lines.append(f"  learned: {params} noise parameter(s), {traps} trap pattern(s) (see "
                     "the log; scrapy frontier host NAME)")
    if dead:
        lines.append("  dead letters: " + dead)
    return lines


def storage_line(stats: Mapping[str, Any]) -> str:
    """What storage trouble cost: pauses, records that could not be written
    (their pages fetched again), feed rows lost."""
    def n(key: str) -> int:
        return int(stats.get(key) or 0)

    parts = []
    if n("storage/pauses"):
        parts.append(f"paused {n('storage/pauses')} time(s) for disk room or a failing "
                     f"archive ({float(stats.get('storage/paused_seconds') or 0):.0f} s)")
    if n("warc/errors"):
        parts.append(f"{n('warc/errors')} record(s) not written "
                     f"({n('frontier/leases/unarchived')} page(s) to fetch again)")
    if n("feed/rows_lost"):
        parts.append(f"{n('feed/rows_lost')} feed row(s) lost")
    return "  storage: " + "; ".join(parts) + " (see the Storage, WARC and Feed lines)"


def leftover_lines(left: Leftover, resume: str = "") -> list[str]:
    """What remains in the frontier (none when nothing does): queued URLs and
    their hosts, the held ones by why (the hosts named when few), what is
    delayed and dead, and the command that continues."""
    if not (left.queued or left.delayed or left.leased):
        return []
    hosts = len(left.hosts) if left.complete else "?"
    counts = [f"{left.queued} URL(s) queued on {hosts} host(s)"]
    if left.leased:
        counts.append(f"{left.leased} leased to other workers")
    if left.delayed:
        counts.append(f"{left.delayed} delayed for a retry"
                      + (f" (the first at {_clock(left.delayed_next_ms)})"
                         if left.delayed_next_ms is not None else ""))
    dead = left.counts.get(COUNTS.dead, 0)
    if dead:
        counts.append(f"{dead} dead letter(s) in all (scrapy frontier dead)")
    lines = ["  left in the frontier: " + ", ".join(counts)]
    if not left.complete:
        lines.append("    (too many hosts to read them at the stop: scrapy frontier status, "
                     "scrapy frontier hosts)")
    held = left.held_by_state()
    if held:
        lines.append("    held: " + "; ".join(
            f"{state} {len(group)} host(s) ({_held_hosts(group)})"
            for state, group in held.items()))
    waiting = {state: n for state, n in left.urls_by_state().items()
               if state not in {"empty", *held}}
    if waiting:
        lines.append("    not held (due soon): " + reasons(waiting) + " URL(s)")
    if resume:
        lines.append(f"  continue with: {resume}")
    return lines


def _held_hosts(group: Sequence[HostLeft], shown: int = 3) -> str:
    """``broken.test: servfail, retry at 12:04:10`` for the first few hosts."""
    parts = []
    for h in group[:shown]:
        detail = f"{_detail(h)}, " if h.detail else ""
        when = "until an operator acts" if h.until_ms < 0 else f"retry at {_clock(h.until_ms)}"
        parts.append(f"{h.host}: {detail}{when}")
    more = len(group) - shown
    return "; ".join(parts) + (f"; {more} more" if more > 0 else "")


def _detail(h: HostLeft) -> str:
    """A held host's detail in words (``lua/leftover.lua`` spells it for machines)."""
    if h.state == "dns":
        kind, _, attempts = h.detail.partition(" ")
        return f"dns-{kind}, {attempts} failed lookup(s)"
    if h.state == "breaker":
        return "probe in flight" if h.detail == "probe" else f"open, opening {h.detail}"
    if h.state == "robots-unreachable":
        return f"{h.detail} failed fetch(es)"
    return h.detail


def _clock(ms: int | None) -> str:
    """A server time in ms as the local wall clock, ``12:04:10``."""
    if ms is None:
        return "?"
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000))


def _dead_letters(stats: Mapping[str, Any], dead: int, by_prefix: Any) -> str:
    """URLs that ended as dead letters (why), and hosts parked (whose URLs wait as dead)."""
    parts = []
    # by the letters' reason: the leases that ended dead, and the URLs of parked hosts
    by_reason = by_prefix("frontier/dead/")
    if by_reason:
        parts.append(f"{sum(by_reason.values())} URLs ({reasons(by_reason)}; "
                     "scrapy frontier dead)")
    elif dead:
        why = []
        gave_up = by_prefix("retry/gave_up/")
        if gave_up:
            why.append(f"gave up retrying: {reasons(gave_up)}")
        too_large = int(stats.get("download/aborted/too-large", 0) or 0)
        if too_large:
            why.append(f"too large: {too_large}")
        other = dead - sum(gave_up.values()) - too_large
        if other > 0:
            why.append(f"download errors: {other}")
        parts.append(f"{dead} URLs ({'; '.join(why)})" if why else f"{dead} URLs")
    parked = by_prefix("dns/hosts/parked/")
    robots_parked = int(stats.get("robots/hosts_parked", 0) or 0)
    if robots_parked:
        parked["robots.txt unreachable"] = robots_parked
    guard_parked = int(stats.get("guard/hosts_parked", 0) or 0)
    if guard_parked:
        parked["address-blocked"] = guard_parked
    if parked:
        parts.append(f"{sum(parked.values())} host(s) parked ({reasons(parked)})")
    return "; ".join(parts)


def _duration(seconds: Any) -> str:
    """``42 s``, ``3 min 5 s``, ``2 h 10 min``."""
    if seconds is None:
        return "duration unknown"
    total = round(float(seconds))
    if total < 60:
        return f"{total} s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"

