"""``scrapy frontier report``: write the crawl's report now (crawler/reports/).

The same report every closing worker writes (:mod:`crawler.middlewares.report`),
from the tallies the workers saved and what the frontier holds now; into
``--out DIR``, else ``REPORT_DIR``/CRAWL.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crawler.commands.frontier_output import note
from crawler.frontier.admin import AdminError, FrontierAdmin
from crawler.frontier.crawls import CrawlInfo
from crawler.middlewares.report import crawl_folder
from crawler.reports.build import build
from crawler.reports.compare import compare
from crawler.reports.write import write


def unknown_crawl(crawl_id: str, known: list[CrawlInfo]) -> str:
    """Why ``--compare CRAWL_ID`` is refused: no worker ever opened that crawl
    (set next to nothing, every host would read as new)."""
    names = ", ".join(repr(c.crawl_id) for c in known) or "none"
    return (f"--compare: no crawl {crawl_id!r} in this frontier (no worker ever opened it); "
            f"the crawls it holds: {names} (scrapy frontier crawls)")


def add_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--out", metavar="DIR",
                       help="report: the folder to write into (default REPORT_DIR/CRAWL)")
    group.add_argument("--compare", metavar="ID",
                       help="report: set the crawl next to the crawl ID (\"\" for the "
                            "default crawl), host by host: pages, bytes, status codes, hosts "
                            "new and gone")


def run(admin: FrontierAdmin, settings: Any, opts: argparse.Namespace,
        admin_of: Callable[[str], FrontierAdmin],
        crawls: Callable[[], list[CrawlInfo]]) -> None:
    folder = Path(opts.out) if opts.out else (
        Path(settings.get("REPORT_DIR", "output/reports")) / crawl_folder(admin.keys.namespace))
    report = build(admin)
    if opts.compare is not None:
        other = admin_of(opts.compare)
        if other.keys.namespace == admin.keys.namespace:
            raise AdminError("--compare names the crawl the report is of: name another one")
        if not other.layout_found:
            raise AdminError(unknown_crawl(opts.compare, crawls()))
        report["compare"] = compare(build(other), report)
    page = write(report, folder)
    workers = report["workers"]
    if not workers:
        note("no worker of this crawl saved a tally yet (workers save theirs when they "
             "close): the report shows only what the frontier holds")
    print(f"{page} (and CSV and JSON beside it; the tallies of {len(workers)} worker(s))")
