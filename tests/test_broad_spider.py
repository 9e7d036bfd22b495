"""The broad spider's own bookkeeping of failed requests."""

from __future__ import annotations

from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from twisted.python.failure import Failure

from tests.project_spider import project_spider


def test_a_chain_past_redirect_max_times_is_counted() -> None:
    spider = project_spider()
    request = Request("http://a.test/r/11")
    for error in (IgnoreRequest("max redirections reached"), IgnoreRequest("robots")):
        failure = Failure(error)
        failure.request = request  # as Scrapy sets it for errbacks
        spider.on_error(failure)
    assert spider.crawler.stats.get_value("broad/redirect_max_reached") == 1
