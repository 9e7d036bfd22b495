"""The crawl's budgets, changed live for every worker (``scrapy frontier budget``).

``BUDGET_*`` are each worker's settings; an operator's change goes to one
key, ``ns:budgets`` (the budgets as JSON, every one of them), which each
worker reads once a second (:mod:`crawler.scheduling.budgetwatch`) and puts
in force from its next claim. Deleting it (``--reset``) gives each worker
its own settings back. A site's own budget (``scrapy frontier host NAME
--budget-pages N``) is in its record and wins over both.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from crawler.frontier.keys import Keys
from crawler.frontier.values import Budgets


def parse_budgets(raw: bytes | str | None) -> Budgets | None:
    """The budgets an operator set (None: none, or not readable)."""
    if not raw:
        return None
    try:
        body = json.loads(raw)
        names = {f.name for f in fields(Budgets)}
        budgets = Budgets(**{k: int(v) for k, v in body.items() if k in names})
    except (ValueError, TypeError, AttributeError):
        return None
    return budgets if all(getattr(budgets, n) >= 0 for n in names) else None


def read_budgets(client: Any, keys: Keys) -> Budgets | None:
    """The operator's budgets in force (a blocking client; None: the settings')."""
    return parse_budgets(client.get(keys.budgets()))


def write_budgets(client: Any, keys: Keys, budgets: Budgets | None) -> None:
    """Put ``budgets`` in force for every worker (None: back to their settings)."""
    if budgets is None:
        client.delete(keys.budgets())
    else:
        client.set(keys.budgets(), json.dumps(budgets.script_args()))
