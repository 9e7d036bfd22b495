"""The reactor-lag extension on the real reactor: a blocked reactor is seen, logged and counted."""

from __future__ import annotations

import logging
import time

import pytest
import pytest_twisted
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler
from twisted.internet import reactor
from twisted.internet.task import deferLater

from crawler.extensions.looplag import ReactorLag


def _extension(**settings: object) -> ReactorLag:
    crawler = get_crawler(settings_dict={"LOOPLAG_INTERVAL": 0.02, "LOOPLAG_STALL": 0.1,
                                         "LOOPLAG_LOG": 0.2, **settings})
    crawler.stats.open_spider()
    return ReactorLag.from_crawler(crawler)


@pytest_twisted.ensureDeferred
async def test_a_blocked_reactor_is_counted_and_logged_with_its_window(
        caplog: pytest.LogCaptureFixture) -> None:
    ext = _extension()
    ext.engine_started()
    await deferLater(reactor, 0.1, lambda: None)
    blocked_at = time.time()
    await deferLater(reactor, 0, time.sleep, 0.3)  # a callback that holds the reactor
    with caplog.at_level(logging.WARNING, logger="crawler.extensions.looplag"):
        await deferLater(reactor, 0.1, lambda: None)
    ext.engine_stopped()
    stats = ext.stats
    assert 0.25 <= stats.get_value("reactor/lag_max") < 1.0
    assert stats.get_value("reactor/stalls") == 1
    [record] = [r for r in caplog.records if "Reactor stalled" in r.getMessage()]
    free_at, ran_at = (float(x) for x in record.args[1:])  # type: ignore[index]
    assert free_at <= blocked_at + 0.05 and ran_at >= blocked_at + 0.3


@pytest_twisted.ensureDeferred
async def test_a_free_reactor_has_no_stalls() -> None:
    ext = _extension()
    ext.engine_started()
    await deferLater(reactor, 0.3, lambda: None)
    ext.engine_stopped()
    assert ext.stats.get_value("reactor/stalls") is None
    assert ext.stats.get_value("reactor/lag_max") < 0.1


def test_interval_zero_turns_it_off() -> None:
    with pytest.raises(NotConfigured):
        _extension(LOOPLAG_INTERVAL=0)
