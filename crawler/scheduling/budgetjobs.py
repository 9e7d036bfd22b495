"""A site that spent its budget: the rest of its queue ends as dead letters.

A claim never hands out more URLs than a site's (or its domain's) page
budget allows; once a budget is spent (``BUDGET_*``: pages, bytes or
seconds), the next claim of the site hands out a budget job instead
(``lua/claim.lua``), and the worker that got it ends the site's queue: every
scheme and port of the name, each URL a dead letter with reason ``budget``
(``scrapy frontier dead --reason budget`` lists them), and its new links are
refused, not queued (``frontier/refused/budget``). Raising the budget and
``scrapy frontier requeue --reason budget --host NAME`` brings them back.

A job whose worker fails or vanishes is handed out again when its time in
the frontier runs out (``bj``), so a spent site never stays queued.

Stats: ``budget/sites_spent/<site|domain>/<pages|bytes|seconds>`` (sites
ended, once per site and worker) and ``budget/ended`` (URLs made dead letters).
"""

from __future__ import annotations

import logging
from typing import Any

from redis.exceptions import RedisError

from crawler.deadletter import DeadReason
from crawler.frontier.keys import site_of
from crawler.frontier.store import Frontier
from crawler.frontier.values import BudgetSpent
from crawler.scheduling.health import RedisHealth
from crawler.scheduling.tasks import Tasks

logger = logging.getLogger(__name__)

#: The setting that raises each budget, for the log line.
SETTING = {("site", "pages"): "BUDGET_HOST_PAGES", ("site", "bytes"): "BUDGET_HOST_BYTES",
           ("site", "seconds"): "BUDGET_HOST_SECONDS",
           ("domain", "pages"): "BUDGET_DOMAIN_PAGES", ("domain", "bytes"): "BUDGET_DOMAIN_BYTES",
           ("domain", "seconds"): "BUDGET_DOMAIN_SECONDS"}


class BudgetJobs:
    """End the queues of sites whose budget is spent (see the module docstring)."""

    def __init__(self, store: Frontier, stats: Any, health: RedisHealth, tasks: Tasks) -> None:
        self.store = store
        self.stats = stats
        self.health = health
        self.tasks = tasks
        self._running: set[str] = set()
        self._logged: set[str] = set()

    def start(self, jobs: list[tuple[str, BudgetSpent]]) -> None:
        """Run the jobs a claim handed out (one at a time per site)."""
        for host, spent in jobs:
            site = site_of(host)
            if site not in self._running:
                self._running.add(site)
                self.tasks.spawn(self._end(host, site, spent))

    async def _end(self, host: str, site: str, spent: BudgetSpent) -> None:
        reason = DeadReason.now("budget", f"{site} spent {spent.describe()}")
        try:
            ended = await self.store.park_host(host, reason.json(), whole_site=True, spent=True)
        except (RedisError, OSError) as exc:
            self.health.trouble(exc)  # its job comes back when its time runs out
            return
        finally:
            self._running.discard(site)
        self.stats.inc_value("budget/ended", ended)
        first = site not in self._logged
        if first:
            self._logged.add(site)
            self.stats.inc_value(f"budget/sites_spent/{spent.whose}/{spent.what}")
        logger.log(logging.INFO if first else logging.DEBUG,
                   "Budget: %s spent %s; %d queued URL(s) are dead letters and its new links "
                   "are refused (raise %s, then: scrapy frontier requeue --reason budget "
                   "--host %s)", site, spent.describe(), ended,
                   SETTING[spent.whose, spent.what], site,
                   extra={"host": host, "budget": spent.what, "ended": ended})
