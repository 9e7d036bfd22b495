"""A component the crawl's own wiring leaves out says nothing at start: a
WARNING is for something the operator should act on, and there is nothing
to do about the scope-redirect check under the frontier (its intake decides
redirects) or the seed feed under Scrapy's scheduler."""

from __future__ import annotations

import logging
from types import ModuleType

import pytest
from scrapy import Spider
from scrapy.core.downloader.middleware import DownloaderMiddlewareManager
from scrapy.core.spidermw import SpiderMiddlewareManager
from scrapy.utils.test import get_crawler

from crawler import settings as broad_settings


def _project(module: ModuleType) -> dict[str, object]:
    return {name: getattr(module, name) for name in dir(module) if name.isupper()}


@pytest.mark.parametrize("scheduler", ["frontier", "scrapy"])
def test_no_component_is_disabled_with_a_warning_by_the_default_wiring(
        caplog: pytest.LogCaptureFixture, scheduler: str) -> None:
    settings = _project(broad_settings)
    if scheduler == "scrapy":
        settings["SCHEDULER"] = "scrapy.core.scheduler.Scheduler"
    crawler = get_crawler(Spider, settings)
    with caplog.at_level(logging.DEBUG):
        DownloaderMiddlewareManager.from_crawler(crawler)
        SpiderMiddlewareManager.from_crawler(crawler)
    disabled = [r for r in caplog.records if r.getMessage().startswith("Disabled")]
    assert [r.getMessage() for r in disabled if r.levelno >= logging.WARNING] == []
    # (said at DEBUG, for whoever looks for why it is not in the list)
    expected = "ScopeRedirectMiddleware" if scheduler == "frontier" else "SeedFeedMiddleware"
    assert any(expected in r.getMessage() for r in disabled), [r.getMessage() for r in disabled]
