"""How a request carries its frontier lease and the word on how it ends.

The frontier scheduler puts a claimed URL's lease token in the request's
meta; the components between the engine and the downloader (robots, guard,
DNS, retry, pacing) leave what they decided in the same meta, and the
scheduler reads it when the engine is done with the request
(:class:`crawler.scheduling.leases.LeaseTable`). The keys live here, below
every one of them, so that none imports another to spell them.
"""

from __future__ import annotations

#: The lease token (the claimed URL's fingerprint, hex) of a frontier request.
LEASE_META = "_frontier_lease"
#: The name of the download error that ended it (set by FrontierOutcomeMiddleware).
ERROR_META = "_frontier_error"
#: Set by the robots middleware on a request it refused: "denied" or "unknown".
ROBOTS_META = "_frontier_robots"
#: Set by the retry, DNS and pacing middlewares: {"op", "arg", "hold_ms", "health"}.
OUTCOME_META = "_frontier_outcome"
#: Set by a guard that refused a request: the reason it ends as done with.
REASON_META = "_frontier_reason"
#: The version of the host's robots rules when the URL was claimed.
ROBOTS_VERSION_META = "_robots_v"
#: When the URL was claimed (monotonic seconds).
CLAIMED_META = "_frontier_claimed"
#: When the request passed the start gate (monotonic seconds), for the download handler.
GATE_META = "_frontier_gate_passed"
