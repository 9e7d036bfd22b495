"""The address guard in a real crawl: non-public destinations never reach the wire.

Test crawls resolve every name to 127.0.0.1 and reach the simulated web
through its proxy on 127.0.0.1, which answers any host: a request the guard
failed to stop would show up in the web's ledger.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.crawl_runner import run_crawl
from tests.simweb import SimWebProcess

pytestmark = pytest.mark.crawl


@pytest.fixture(scope="module")
def sim() -> Iterator[SimWebProcess]:
    with SimWebProcess(seed=2, n_hosts=4, mix="clean") as process:
        yield process


def test_links_to_internal_addresses_are_never_requested(sim: SimWebProcess,
                                                         tmp_path: Path) -> None:
    port = sim.port
    internal = [
        f"http://127.0.0.1:{port}/", f"http://localhost:{port}/", "http://10.0.0.1/",
        "http://169.254.169.254/latest/meta-data/", f"http://[::1]:{port}/",
        f"http://[::ffff:127.0.0.1]:{port}/", f"http://2130706433:{port}/", "http://intranet/",
    ]
    # h00001.test bypasses the proxy, so its name is resolved here: to 127.0.0.1,
    # which this crawl does not allow as a DNS answer (the tests' default does).
    result = run_crawl(
        sim.proxy_url, ["http://h00000.test/", "http://h00001.test/", *internal], tmp_path,
        settings={"DOWNLOAD_DELAY": 0.1, "DEPTH_LIMIT": 0, "ROBOTSTXT_OBEY": True,
                  "ADDRESS_GUARD_ALLOW_RESOLVED": "192.0.2.0/24"},
        env={"no_proxy": "h00001.test"},
    )
    assert result.returncode == 0, result.log[-3000:]
    hosts = sim.ledger().hosts()
    assert "h00000.test" in hosts  # the public-looking host is crawled through the proxy
    assert hosts <= {h.name for h in sim.web.hosts} - {"h00001.test"}, hosts
    assert int(result.stat("frontier/refused/address-blocked") or 0) == len(internal)
    assert int(result.stat("guard/blocked_after_dns") or 0) >= 1
    assert "h00001.test" in result.log and "address-blocked" in result.log
