"""A crawl's report, as data: every worker's tally and what the frontier still holds.

Read with a blocking client, from the closing worker's thread or from
``scrapy frontier report``: the saved tallies (:mod:`crawler.frontier.reports`),
the counts by state, the queued URLs and dead letters host by host, and the
refusals by reason. The dead letters are read up to :data:`DEAD_SCAN_MAX`.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Any

from crawler.frontier import reports as saved_reports
from crawler.frontier.admin import FrontierAdmin
from crawler.frontier.keys import site_of
from crawler.frontier.tophosts import TopHosts
from crawler.reports.tally import Tally

DEAD_SCAN_MAX = 200_000


def latest_run(saved: dict[str, dict[str, Any]]) -> dict[str, list[float]]:
    """The workers of the crawl's latest run, with when each started and ended:
    the last to start, and every worker still running then (workers of one run
    overlap; last week's ended before this week's began)."""
    times = {worker: (float(data.get("started") or 0), float(data.get("ended") or 0))
             for worker, data in saved.items()}
    if not times:
        return {}
    last_start = max(started for started, _ in times.values())
    return {worker: [started, ended] for worker, (started, ended) in sorted(times.items())
            if ended >= last_start}


def build(admin: FrontierAdmin, *, crawl: str = "") -> dict[str, Any]:
    """The report of the crawl ``admin`` reads (``crawl``: its name, as shown)."""
    saved = saved_reports.read_all(admin.client, admin.keys)
    tally, latest = Tally(), Tally()
    for data in saved.values():
        tally.merge(Tally.of(data.get("total", {})))
    runs = latest_run(saved)
    for worker in runs:
        latest.merge(Tally.of(saved[worker].get("run", {})))
    status = admin.status(oldest=False)
    queued: Counter[str] = Counter()
    for host, n in TopHosts(admin.client, admin.keys).queued_by_host().items():
        queued[site_of(host)] += n
    dead: dict[str, Counter[str]] = defaultdict(Counter)
    scanned = 0
    for letter in admin.iter_dead():
        dead[site_of(letter.host)][letter.reason] += 1
        scanned += 1
        if scanned >= DEAD_SCAN_MAX:
            break
    return {
        "crawl": crawl or admin.keys.namespace,
        "generated_at": round(time.time(), 3),
        "workers": sorted(saved),
        # The crawl's figures, as every view shows them (the tallies count answers:
        # a retried page's every answer, a dead letter's last one).
        "account": status.account.as_dict(),
        "tally": tally.as_dict(),
        # What the latest run of each worker saw: a recurring crawl's week.
        "latest_runs": runs,
        "changes": {name: dict(h.changes) for name, h in latest.hosts.items() if h.changes},
        "left": {"counts": status.counts, "refused": status.refused,
                 "queued": {host: n for host, n in queued.items() if n},
                 "dead": {host: dict(reasons) for host, reasons in dead.items()},
                 "dead_complete": scanned < DEAD_SCAN_MAX},
    }
