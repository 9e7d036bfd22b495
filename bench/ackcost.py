"""What a page's archive acknowledgement costs the worker, in CPU per page.

A page's lease now ends only once the archive acknowledged its record
(:mod:`crawler.scheduling.leases`): the capture middleware hands the lease a
Deferred of its own, and the lease table waits on a ``DeferredList`` of them.
This prices that path on its own, side by side in one run against the path
without it (the lease released at once, as before): the real
:class:`~crawler.scheduling.leases.LeaseTable`, tickets and Deferreds, the
record's outcome arriving after the engine let the request go (the slower
path), ``--pages`` pages a run, medians of ``--runs``. It also prices the
disk guard's look (three ``statvfs`` calls, once a second) per page at the
crawl's pace. The end-to-end price is ``bench.vanilla --against REF`` (the
whole crawl before and after), whose run-to-run spread (a few percent) is
wider than this cost; this benchmark resolves it.

    python -m bench.ackcost [--quick] [--runs N] [--per-page-ms MS] [--pages-per-s N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from scrapy import Request
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler
from twisted.internet.defer import Deferred

from bench.common import Check, Col, Report, Table, finish, median_of, median_row, parse_args
from crawler.frontier.values import Lease, Limits, Release
from crawler.lease import TICKET_META, Ticket
from crawler.middlewares.warc import own_copy
from crawler.scheduling.leases import LeaseTable
from crawler.warc.files import Written

WRITTEN = Written(Path("x.warc.gz"), 0, 100, "sha1:X", "2026-12-04T00:00:00Z")


def _pages(n: int) -> list[tuple[Request, Ticket, Lease]]:
    pages = []
    for i in range(n):
        lease = Lease(f"http://h{i % 500}.test:80", i.to_bytes(16, "big"), "{}")
        ticket = Ticket(lease.token)
        pages.append((Request(f"http://h{i % 500}.test/{i}", meta={TICKET_META: ticket}),
                      ticket, lease))
    return pages


def lease_path(n: int, acknowledged: bool) -> float:
    """CPU seconds for ``n`` pages through the lease table (with or without the ack)."""
    stats = MemoryStatsCollector(get_crawler())
    table = LeaseTable(stats, Limits(), lambda request, lease: "")
    sent: list[Release] = []
    pages = _pages(n)
    records: list[Deferred[Any]] = []
    started = time.process_time()
    for request, ticket, lease in pages:
        table.add(lease, request.url)
        if acknowledged:  # the capture middleware's part
            record: Deferred[Any] = Deferred()
            ticket.archiving(own_copy(record))
            records.append(record)
        ticket.done(health="ok")
        table.finished(request, sent.append)
    for record in records:  # the writer's batch comes back after the engine's end
        record.callback(WRITTEN)
    cpu = time.process_time() - started
    assert len(sent) == n and not table.archiving
    return cpu


def guard_look(n: int) -> float:
    """CPU seconds of ``n`` looks of the disk guard (three statvfs calls each)."""
    folders = [tempfile.gettempdir(), os.getcwd(), str(Path.home())]
    started = time.process_time()
    for _ in range(n):
        for folder in folders:
            os.statvfs(folder)
    return time.process_time() - started


def main(argv: list[str] | None = None) -> Report:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--per-page-ms", type=float, default=4.7,
                            help="the project's CPU ms per request (bench.vanilla's small "
                            "web, median) that the cost is a share of")
        parser.add_argument("--pages-per-s", type=float, default=130.0,
                            help="a worker's pace, to price the guard's once-a-second look")

    args = parse_args(__doc__.splitlines()[0], argv, default_runs=5, options=options)
    started = time.monotonic()
    n = 20_000 if args.quick else 100_000
    rows: dict[str, list[dict[str, Any]]] = {"released at once": [], "after the ack": []}
    for run in range(args.runs):
        for side, acknowledged in (("released at once", False), ("after the ack", True)):
            cpu = lease_path(n, acknowledged)
            rows[side].append({"us_per_page": cpu * 1e6 / n})
        print(f"run {run + 1}/{args.runs}: " + ", ".join(
            f"{side} {rows[side][-1]['us_per_page']:.1f} us/page" for side in rows), flush=True)
    guard_us = median_of([{"v": guard_look(2000) * 1e6 / 2000} for _ in range(args.runs)], "v")
    extra = median_of(rows["after the ack"], "us_per_page") - median_of(
        rows["released at once"], "us_per_page")
    guard_per_page = guard_us / args.pages_per_s
    share = (extra + guard_per_page) / (args.per_page_ms * 1000)
    report = Report("ackcost", "python -m bench.ackcost", args.runs, args.quick)
    report.tables.append(Table(
        f"The lease path, {n:,} pages a run (medians, min-max)",
        ["side", "CPU us per page"],
        [median_row(side, rows[side], [Col("us_per_page", ".1f", spread=True)])
         for side in rows],
        "The real LeaseTable, tickets and Deferreds; the records acknowledged after the "
        "engine let the requests go."))
    report.checks += [
        Check("the acknowledgement's CPU per page", f"{extra:.1f} us", "(what it adds)", None),
        Check("the disk guard's look, per page at the worker's pace",
              f"{guard_per_page:.2f} us", f"({guard_us:.0f} us a look, "
              f"{args.pages_per_s:.0f} pages/s)", None),
        Check("both, as a share of the project's CPU per page",
              f"{share:.2%}", f"<= 2% (of {args.per_page_ms} ms)", share <= 0.02),
    ]
    finish(report, args, started)
    return report


if __name__ == "__main__":
    main()
