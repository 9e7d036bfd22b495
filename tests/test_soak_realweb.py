"""The real-socket chaos soak's short variant (``python -m bench.soak.realweb --short``).

Three workers on one Redis crawl 48 sites of the real-socket web (names from
its DNS server, six to an address, each address's gate three requests at
once, some sites with a Crawl-delay) while a driver SIGKILLs one and starts it
again, SIGSTOPs another for 20 s, adds a fourth, SIGTERMs one and restarts
Redis; every check of the soak's table must hold (see ``bench/soak/realweb.py``).
About a minute on 2 cores.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import realweb


@pytest.mark.crawl
def test_short_chaos_soak_on_the_real_socket_web_keeps_every_promise(tmp_path: Path) -> None:
    result = realweb.run(realweb.SHORT, tmp_path, log=lambda line: None)
    table = result.table()
    print(table)
    assert result.passed, table
    kinds = {e.what for e in result.events}
    assert {"SIGKILL", "SIGTERM", "SIGSTOP", "SIGCONT", "join", "restart",
            "redis-restart"} <= kinds, table
