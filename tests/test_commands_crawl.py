"""``scrapy crawl``'s exit code (crawler/commands/crawl.py), decided from the final
stats: a plain function, no crawl. (The same in a real crawl whose every seed is
refused: tests/test_seed_refusals_crawl.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from crawler.commands.crawl import crawl_failed
from crawler.seedrefusals import all_seeds_refused

ALL_REFUSED: dict[str, Any] = {"finish_reason": "finished", "seeds/loaded": 3,
                               "seeds/refused/loopback": 2, "seeds/refused/localhost": 1}


@pytest.mark.parametrize(("stats", "failed"), [
    (ALL_REFUSED, True),
    # Seeds from the file and from the Redis seed list count alike in seeds/loaded.
    ({**ALL_REFUSED, "seeds/loaded": 4}, False),  # one seed was not refused
    # A resumed frontier (or another worker's URLs) gave it work: its job was done.
    ({**ALL_REFUSED, "frontier/leases/claimed": 12}, False),
    # Under Scrapy's own scheduler there are no leases; any answer is work done.
    ({**ALL_REFUSED, "downloader/response_count": 1}, False),
    ({"finish_reason": "finished"}, False),  # no seeds: resumed, or fed later
    ({"finish_reason": "frontier_unavailable"}, True),
    ({"finish_reason": "shutdown", "seeds/loaded": 2, "downloader/response_count": 9}, False),
], ids=["every-seed-refused", "one-seed-left", "resumed-frontier", "scrapy-scheduler-answer",
        "no-seeds", "frontier-unavailable", "ctrl-c"])
def test_the_crawl_fails_only_when_it_could_do_nothing(stats: dict[str, Any],
                                                       failed: bool) -> None:
    assert crawl_failed(stats) is failed
    if stats.get("finish_reason") != "frontier_unavailable":
        # Exit code and the summary's WARNING line agree, by construction.
        assert (all_seeds_refused(stats) is not None) is failed
