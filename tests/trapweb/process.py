"""Run the trap web in a subprocess, for tests.

The server is the simulated web's own (``tests.simweb.server``) serving
:class:`~tests.trapweb.model.TrapWeb`, so everything but the model and the
command line is ``SimWebProcess``'s: start, ``READY``, stop, the control
endpoints and the ledger.
"""

from __future__ import annotations

import datetime as dt
import sys

from tests.simweb.process import SimWebProcess

from .model import TrapWeb


class TrapWebProcess(SimWebProcess):
    """``python -m tests.trapweb serve`` as a context manager.

    >>> with TrapWebProcess(seed=3, per_kind=2) as trap:
    ...     crawl(proxy=trap.proxy_url, seeds=trap.web.seed_urls())
    ...     ledger = trap.ledger()
    """

    def __init__(self, seed: int = 1, per_kind: int = 2, *, today: dt.date | None = None,
                 startup_timeout: float = 15.0) -> None:
        """``today`` (default: UTC today, fixed now) goes to the server too, so
        the calendar trap of ``self.web`` and of the server start on one day."""
        super().__init__(seed=seed, n_hosts=1, mix="clean", startup_timeout=startup_timeout)
        self.web = TrapWeb(seed=seed, per_kind=per_kind, today=today)  # type: ignore[assignment]

    def command(self) -> list[str]:
        web: TrapWeb = self.web  # type: ignore[assignment]
        return [sys.executable, "-m", "tests.trapweb", "serve", "--port", "0",
                "--seed", str(web.seed), "--per-kind", str(web.per_kind),
                "--today", web.today.isoformat()]
