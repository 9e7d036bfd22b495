"""The chaos soak's short variant (``python -m bench.soak --scenario short``).

Three workers on one Redis crawl 240 misbehaving hosts while a driver
SIGKILLs workers, SIGTERMs one and restarts Redis; every check of the soak's
table must hold (see ``bench/soak``). About two minutes on 2 cores.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import checks, run
from bench.soak.scenario import SHORT
from tests.simweb import Ledger, Web


@pytest.mark.crawl
def test_short_chaos_soak_keeps_every_promise(tmp_path: Path) -> None:
    result = run(SHORT, tmp_path, log=lambda line: None)
    table = result.table()
    print(table)
    assert result.passed, table
    kinds = {e.what for e in result.events}
    assert {"SIGKILL", "SIGTERM", "restart", "redis-restart"} <= kinds, table


def _paced(gap_from: float, gap: float, stalls: list[tuple[float, float]]) -> checks.Row:
    """The DOWNLOAD_DELAY row for two page requests to a host without a Crawl-delay."""
    web = Web(seed=2, n_hosts=50, mix="clean")
    host = next(h.name for h in web.hosts_where(page="normal")
                if checks._crawl_delay(web, h.name) is None)
    entries = [{"id": i, "host": host, "path": f"/p/{i}", "method": "GET", "arrival": t,
                "done": t + 0.01, "status": 200, "bytes": 10, "outcome": "ok", "conn": i,
                "user_agent": "t", "client": f"w{i}.1"}
               for i, t in enumerate((gap_from, gap_from + gap))]
    evidence = checks.Evidence(web, Ledger(entries))
    rows = checks.pacing_rows(web, evidence, delay_floor=0.25, concurrency=4,
                              server_stalls=stalls)
    return next(r for r in rows if r.check.startswith("DOWNLOAD_DELAY"))


def test_a_short_gap_is_a_violation_unless_a_measured_server_stall_covers_it() -> None:
    bad = _paced(100.0, 0.03, [])
    assert not bad.ok and "0.03" in bad.measured and "'w0.1', 'w1.1'" in bad.measured
    # The server's loop did not run from 99.8 to 100.0: the first request may
    # have arrived 0.2 s before its stamp, so the gap may have been 0.23 s.
    covered = _paced(100.0, 0.03, [(99.8, 99.995)])
    assert covered.ok and "1 in a measured server stall" in covered.measured
    # A stall that ended well before the stamp says nothing about it.
    assert not _paced(100.0, 0.03, [(99.8, 99.9)]).ok
    # Nor does one too short for the shortfall.
    assert not _paced(100.0, 0.03, [(99.95, 99.995)]).ok


def test_stamp_lateness_is_the_time_since_the_stall_began() -> None:
    late = checks.StampLateness([(10.0, 10.5), (20.0, 20.1)])
    assert late.at(9.0) == 0 and late.at(15.0) == 0
    assert late.at(10.5) == pytest.approx(0.5) and late.at(10.505) == pytest.approx(0.505)
    assert late.at(20.05) == pytest.approx(0.05)
    assert late.summary() == "2, at worst 500 ms"
