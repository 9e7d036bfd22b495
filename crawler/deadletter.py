"""Why a URL died: the one shape of a dead letter's reason.

A dead letter is stored as ``host \\n reason \\n entry`` (``lua/release.lua``,
``lua/admit.lua``, ``lua/drop_host.lua``); the reason is the JSON object
written here, with ``reason`` (a short label the operator filters on:
``scrapy frontier dead --reason R``), ``error`` (what happened, for people),
``attempts`` (when retries ran out) and ``t`` (Unix seconds). Every writer in
Python builds a :class:`DeadReason`; the one Lua constant
(``admit.lua``'s parked host) writes the same keys. Readers go through
:meth:`DeadReason.parse`, which takes a reason of any age.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DeadReason:
    """The label, the error and the time of one URL's death."""

    reason: str
    error: str = ""
    attempts: int = 0
    time: int | None = None  # Unix seconds

    @classmethod
    def now(cls, reason: str, error: str = "", attempts: int = 0) -> DeadReason:
        """A reason stamped with the current time."""
        return cls(reason, error, attempts, round(time.time()))

    def json(self) -> str:
        body: dict[str, str | int] = {"reason": self.reason}
        if self.error:
            body["error"] = self.error
        if self.attempts:
            body["attempts"] = self.attempts
        if self.time is not None:
            body["t"] = self.time
        return json.dumps(body)

    @classmethod
    def parse(cls, text: str) -> DeadReason:
        """Read a stored reason; text that is not our JSON object is the label itself."""
        try:
            body = json.loads(text)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return cls(text)
        t, attempts = body.get("t"), body.get("attempts")
        return cls(str(body.get("reason", "?")), str(body.get("error", "")),
                   attempts if isinstance(attempts, int) else 0,
                   t if isinstance(t, int) else None)
