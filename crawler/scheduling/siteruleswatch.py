"""Site rules an operator loads reach this worker within a second.

``scrapy frontier rules FILE`` stores the file's text under
``ns:siterules``; this task reads that key once a second and, when it
changed (:mod:`.keywatch`), hands the worker's intake the new rules
(:mod:`crawler.siterules`): sites new to the frontier get them when their
first URL is admitted (the command itself applied them to the sites already
there). Gone again, the worker's own ``SITE_RULES`` apply.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from crawler.scheduling.keywatch import KeyWatch
from crawler.siterules import SiteRule, SiteRuleError, SiteRules, read_rules

logger = logging.getLogger(__name__)


class SiteRulesWatch(KeyWatch):
    """Calls ``use(rules)`` with what the operator loaded (or this worker's own)."""

    def __init__(self, client: object, key: str, own: SiteRules,
                 use: Callable[[SiteRules], None]) -> None:
        super().__init__(client, key)
        self.own = own
        self.use = use

    def changed(self, raw: bytes | None) -> None:
        if not raw:
            self.use(self.own)
            logger.info("Site rules: this worker's own again (%d)", len(self.own))
            return
        parsed = list(read_rules(raw.decode("utf-8", "replace").splitlines(),
                                 "scrapy frontier rules"))
        rules = SiteRules(r for r in parsed if isinstance(r, SiteRule))
        bad = sum(1 for r in parsed if isinstance(r, SiteRuleError))
        self.use(rules)
        logger.info("Site rules: %d loaded by scrapy frontier rules, for sites new to the "
                    "frontier%s", len(rules), f" ({bad} bad line(s) skipped)" if bad else "")
