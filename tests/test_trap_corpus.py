"""Real links are never refused as traps: a corpus of a few hundred real URL
shapes (tests/url_corpus/real_links.txt) through the admission middleware,
the same rules the frontier's intake applies (``crawler/admission.py``)."""

from __future__ import annotations

from pathlib import Path

from scrapy import Request
from scrapy.utils.test import get_crawler

from crawler.admission import TrapRules
from crawler.middlewares.admission import AdmissionMiddleware
from crawler.urls import canonical_url

CORPUS = Path(__file__).parent / "url_corpus" / "real_links.txt"


def _links() -> list[str]:
    return [line for line in CORPUS.read_text().splitlines()
            if line and not line.startswith("#")]


def test_the_corpus_is_a_few_hundred_links() -> None:
    links = _links()
    assert len(links) >= 250 and len(set(links)) == len(links)


def test_no_real_link_breaks_a_trap_rule() -> None:
    rules = TrapRules()
    refused = {}
    for link in _links():
        canon = canonical_url(link)
        assert canon is not None, link
        reason = rules.check(canon, year=2026)
        if reason is not None:
            refused[link] = reason
    assert refused == {}


def test_the_admission_middleware_admits_every_real_link() -> None:
    crawler = get_crawler(settings_dict={"ADMISSION_MAX_PAGES_PER_HOST": 0})
    crawler.stats.open_spider()
    middleware = AdmissionMiddleware.from_crawler(crawler)
    links = _links()
    admitted = [link for link in links
                if middleware.get_processed_request(Request(link), None) is not None]
    assert len(admitted) == len(links), sorted(set(links) - set(admitted))[:20]
    assert not any(key.startswith("admission/refused/")
                   for key in crawler.stats.get_stats())
