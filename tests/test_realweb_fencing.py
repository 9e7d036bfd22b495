"""A worker that stands still past its leases starts nothing another worker took.

On the real-socket web: a worker crawling a paced site holds a reservation
(the site's next URLs, due over the next seconds: ``lua/claim.lua``) when it
is frozen (SIGSTOP) for longer than its leases. Another worker joins and
takes the site over once they expire. When the frozen one runs again, its
reserved URLs are past their turns: each asks the start gate, naming its
lease, and is refused (``lua/start.lua``: the lease is the fencing token);
its late releases are refused too (``lua/release.lua``). What the server
sees: every page once, except one the frozen worker had already sent.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.crawl_runner import REALWEB_DEFAULTS, finish_crawl, realweb_settings, start_crawl
from tests.realweb import Host, RealWebProcess, Web, links_to

pytestmark = pytest.mark.crawl

PAGES = 24


def _site() -> dict[str | bytes, object]:
    """``/`` linking to every page (so the whole site is queued after it)."""
    pages: dict[str | bytes, object] = {"/": links_to(*(f"/{k}" for k in range(1, PAGES)))}
    for k in range(1, PAGES):
        pages[f"/{k}"] = links_to(title=f"page {k}")
    return pages


def test_a_frozen_worker_starts_nothing_another_worker_took(
        realweb: Callable[..., RealWebProcess], redis_url: str, redis_prefix: str,
        tmp_path: Path) -> None:
    web = realweb(Web([Host("frozen.test", robots="User-agent: *\nAllow: /\n",
                            pages=_site())]))  # type: ignore[arg-type]
    settings = {**realweb_settings(web.nameserver), **REALWEB_DEFAULTS,
                "REDIS_URL": redis_url, "FRONTIER_NAMESPACE": f"{redis_prefix}fence",
                "CONCURRENT_REQUESTS_PER_DOMAIN": 4, "DOWNLOAD_DELAY": 0.4,
                "DOWNLOAD_DELAY_JITTER": 0, "FRONTIER_ADAPTIVE_FACTOR": 0,
                "FRONTIER_LEASE_SECONDS": 2}
    seeds = [web.url("frozen.test")]
    started = time.monotonic()
    first = start_crawl(None, seeds, tmp_path / "w0", settings)
    second = None
    try:
        deadline = time.monotonic() + 60
        while len([r for r in web.ledger().for_host("frozen.test")
                   if r.target not in (b"/", b"/robots.txt")]) < 3:
            assert time.monotonic() < deadline and first.poll() is None, "no progress"
            time.sleep(0.02)
        os.kill(first.pid, signal.SIGSTOP)
        stopped = time.time()
        second = start_crawl(None, seeds, tmp_path / "w1", settings)
        time.sleep(6)  # past the leases (2 s) of everything it reserved (3 s ahead)
        os.kill(first.pid, signal.SIGCONT)
        results = [finish_crawl(first, tmp_path / "w0", started),
                   finish_crawl(second, tmp_path / "w1", started)]
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait()
    for result in results:
        assert result.returncode == 0, result.log[-3000:]
        assert "Traceback" not in result.log, result.log[-3000:]
    requests = web.ledger().for_host("frozen.test")
    pages = [r for r in requests if r.target != b"/robots.txt"]
    counts = Counter(r.target for r in pages)
    assert sorted(counts) == sorted([b"/", *(f"/{k}".encode() for k in range(1, PAGES))])
    twice = {target for target, n in counts.items() if n > 1}
    # Fetched again: only pages the frozen worker had sent before it stopped
    # (their leases ran out with their answers not yet released), at most the
    # site's concurrency (what it could hold leased at once); nothing it held
    # reserved started after it ran again.
    for target in twice:
        arrivals = sorted(r.arrival for r in pages if r.target == target)
        assert len(arrivals) == 2 and arrivals[0] < stopped, (target, arrivals, stopped)
    assert len(twice) <= 4, twice
    frozen = results[0]
    refused = int(frozen.stat("frontier/pacing/given_back/lease_lost") or 0)
    stale = int(frozen.stat("frontier/leases/stale") or 0)
    assert refused >= 1, frozen.log[-4000:]  # its reserved URLs asked, and were refused
    assert stale >= refused, (stale, refused)  # and their releases too
    assert int(results[1].stat("frontier/leases/done") or 0) > 0
