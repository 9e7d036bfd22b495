"""The JSON-lines feed of real crawls: a ``kill -9`` loses no row of a page done.

The frontier counts a page as done once its lease is released; it is never
fetched again, so its row must already be in the killed run's file
(crawler/feeds.py). Checked against the frontier's own counts and against what
the simulated web's server answered (its ledger).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from crawler.frontier.admin import FrontierAdmin, frontier_keys
from crawler.frontier.connection import connect
from tests.crawl_runner import CrawlResult, finish_crawl, start_crawl
from tests.simweb import SimWebProcess, Web

pytestmark = pytest.mark.crawl

# Robots off (it has its own tests): every page fetched is a lease ended as done.
# A short lease brings the killed run's leases back quickly.
SETTINGS = {"DOWNLOAD_DELAY": 0.1, "ROBOTSTXT_OBEY": False, "FRONTIER_LEASE_SECONDS": 3}


def frontier_counts(jobdir: Path) -> dict[str, int]:
    """The embedded frontier's counts (started for the read if no crawl runs it)."""
    with connect(None, jobdir / "frontier", notice=lambda _: None) as conn:
        keys, _ = frontier_keys(conn.client, "frontier:broad", 16)
        return FrontierAdmin(conn.client, keys).status(oldest=False).counts


def row_pages(web: Web, result: CrawlResult) -> set[tuple[str, str]]:
    """The pages a run's file has a row for."""
    pages = set()
    for row in result.items:
        parts = urlsplit(row["url"])
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        pages.add(web.page_identity(parts.netloc, path))
    return pages


def test_kill_9_then_resume_leaves_a_row_for_every_page_done(tmp_path: Path) -> None:
    """Killed when every page but one hanging seed is done (their leases released),
    the first run's file has all their rows; after the resume, the two files have
    a row for every page the frontier counts as done."""
    jobdir = tmp_path / "job"
    settings = {**SETTINGS, "JOBDIR": str(jobdir)}
    # Host 0's pages never answer: its seeds stay leased or queued (one at a
    # time until a first answer, FRONTIER_ADAPTIVE_FACTOR) and keep the first
    # run open while everything else is done, the moment a kill must lose no row.
    with SimWebProcess(seed=11, n_hosts=30, pinned={0: "hang"},
                       mix={"robots:allow-all": 1.0, "page:normal": 1.0}) as sim:
        web = sim.web
        started = time.monotonic()
        first = start_crawl(sim.proxy_url, web.seed_urls(), tmp_path / "first",
                            {**settings, "DOWNLOAD_TIMEOUT": 120})
        deadline, last, steady_since = time.monotonic() + 90, None, time.monotonic()
        while True:
            assert time.monotonic() < deadline, f"the crawl did not reach its last page: {last}"
            assert first.poll() is None, (tmp_path / "first" / "crawl.log").read_text()[-3000:]
            time.sleep(0.2)
            if not (jobdir / "frontier").is_dir():
                continue
            counts = frontier_counts(jobdir)
            if counts != last:
                last, steady_since = counts, time.monotonic()
            elif (counts["delayed"] == 0 and 0 < counts["leased"] <= 4
                  and counts["queued"] + counts["leased"] <= 4
                  and counts["done"] > 100 and time.monotonic() - steady_since > 0.5):
                break
        os.kill(first.pid, signal.SIGKILL)
        killed = finish_crawl(first, tmp_path / "first", started)
        assert killed.returncode == -signal.SIGKILL
        at_kill = frontier_counts(jobdir)
        assert at_kill == last

        # The same JOBDIR, no seeds: the crawl resumes its frontier; the hanging
        # seeds, back once their leases expire, fail fast and end dead.
        second = finish_crawl(
            start_crawl(sim.proxy_url, None, tmp_path / "second",
                        {**settings, "DOWNLOAD_TIMEOUT": 1, "RETRY_TIMES": 0}),
            tmp_path / "second", time.monotonic())
        assert second.returncode == 0, second.log[-3000:]
        served = {web.page_identity(e["host"], e["path"]) for e in sim.ledger().entries
                  if e["status"] is not None}

    final = frontier_counts(jobdir)
    assert final["queued"] == final["leased"] == final["delayed"] == 0, final
    assert final["dead"] == at_kill["leased"] + at_kill["queued"], (final, at_kill)
    assert final["done"] == at_kill["done"], final
    first_rows, second_rows = row_pages(web, killed), row_pages(web, second)
    # Pages done by the killed run are never fetched again: their rows are in its file.
    assert len(first_rows) == at_kill["done"], (len(first_rows), at_kill)
    # Every page the frontier counts as done has a row in one of the two files, and
    # every page the server answered is one of them.
    rows = first_rows | second_rows
    assert len(rows) == final["done"], (len(rows), final)
    assert served - rows == set()
