"""The chaos soak's short variant (``python -m bench.soak --scenario short``).

Three workers on one Redis crawl 240 misbehaving hosts while a driver
SIGKILLs workers, SIGTERMs one and restarts Redis; every check of the soak's
table must hold (see ``bench/soak``). About two minutes on 2 cores.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import run
from bench.soak.scenario import SHORT

pytestmark = pytest.mark.crawl


def test_short_chaos_soak_keeps_every_promise(tmp_path: Path) -> None:
    result = run(SHORT, tmp_path, log=lambda line: None)
    table = result.table()
    print(table)
    assert result.passed, table
    kinds = {e.what for e in result.events}
    assert {"SIGKILL", "SIGTERM", "restart", "redis-restart"} <= kinds, table
