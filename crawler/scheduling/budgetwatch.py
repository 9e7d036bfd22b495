"""An operator's change of the crawl's budgets reaches this worker within a second.

``scrapy frontier budget`` writes the budgets every worker is to use
(:mod:`crawler.frontier.budgetstate`); this task reads that key once a
second (:mod:`.keywatch`) and puts what it finds in force for the next
claim (the claims and releases read ``Limits.budgets`` each time), or the
worker's own settings when the key is gone.
"""

from __future__ import annotations

import logging

from crawler.frontier.budgetstate import parse_budgets
from crawler.frontier.values import Budgets, Limits
from crawler.scheduling.keywatch import KeyWatch

logger = logging.getLogger(__name__)


class BudgetWatch(KeyWatch):
    """Keeps ``limits.budgets`` what the operator (or the settings) say."""

    def __init__(self, client: object, key: str, limits: Limits) -> None:
        super().__init__(client, key)
        self.limits = limits
        self.own: Budgets = limits.budgets

    def changed(self, raw: bytes | None) -> None:
        wanted = parse_budgets(raw) or self.own
        if wanted != self.limits.budgets:
            self.limits.budgets = wanted
            logger.info("Budgets: %s (%s)", describe(wanted),
                        "changed for every worker by scrapy frontier budget" if raw
                        else "this worker's settings again")


def describe(budgets: Budgets) -> str:
    """``host: 100 pages, 5,000,000 bytes; domain: none`` (for logs and the command)."""
    def one(pages: int, size: int, ms: int) -> str:
        said = [f"{pages:,} pages"] if pages else []
        said += [f"{size:,} bytes"] if size else []
        said += [f"{ms / 1000:g} s"] if ms else []
        return ", ".join(said) or "no limit"
    return (f"each host {one(budgets.host_pages, budgets.host_bytes, budgets.host_ms)}; "
            f"each domain {one(budgets.domain_pages, budgets.domain_bytes, budgets.domain_ms)}")
