"""When each partition may next have something to claim, as this worker knows it.

A claim in a partition with nothing due is a script call that finds nothing.
With the crawl paced (a second between two requests to a host), most claims
are like that: a worker would ask partition after partition for the one host
whose turn has come. Each claim's answer says when its partition's next host
(or delayed URL, lease expiry, revisit) is due, so the worker asks a
partition again only when that time has come, or when something it did
there may have made a host ready sooner: a robots.txt stored, a DNS answer
noted, a parked host woken (``touch``: ask at the next claim). An admission
or a release says itself when the partition's next thing is due after it
(``told``), so that a release of a host paced a second away costs no claim.

What other workers do reaches this worker as a message: a script that makes
something due sooner than a waiting worker was told says so on the crawl's
wake channel (:meth:`woken`, :mod:`crawler.scheduling.wakes`). Behind it,
every ``sweep_ms`` every partition is asked again (a message lost with its
connection, a frontier an older worker writes to). ``sweep_ms`` 0 asks every
partition at every claim.

Times are the server's (the scripts' clock): the worker keeps the offset
between its clock and the server's, from each claim's answer.
"""

from __future__ import annotations

import math
import time

#: A partition with nothing timed: asked again when touched or swept.
NEVER = math.inf
#: A partition this worker has no word of (never asked, touched, swept, or
#: it gave all it was asked): asked at the next claim.
UNKNOWN = -1.0


def _local_ms() -> float:
    return time.monotonic() * 1000


class PartitionDue:
    """Each partition's next due time (server ms), as the last claims said."""

    def __init__(self, partitions: int, sweep_ms: int) -> None:
        self.sweep_ms = sweep_ms
        self._due: list[float] = [UNKNOWN] * partitions
        self._touches = [0] * partitions
        self._offset = 0.0  # server ms - local ms
        self._swept = -math.inf  # local ms of the last sweep

    def __len__(self) -> int:
        """The number of partitions."""
        return len(self._due)

    def now(self) -> int:
        """The server's time now, as this worker reckons it."""
        return int(_local_ms() + self._offset)

    def heard(self, server_ms: int) -> None:
        """A claim ran at ``server_ms`` by the server's clock."""
        self._offset = server_ms - _local_ms()

    def touch(self, *partitions: int) -> None:
        """This worker changed something in these partitions that may make a
        host ready (called once the change is made)."""
        for part in partitions:
            self._due[part] = UNKNOWN
            self._touches[part] += 1

    def told(self, partition: int, next_ms: int) -> None:
        """A change this worker made in ``partition`` ran, and said when the
        partition's next thing is due after it (-1: nothing timed). It only
        brings the partition's turn closer: what was known before still
        holds, and the change may only have added to it. (A claim sent
        before the change and answered after it had not seen it: its word
        no longer counts, as after a touch.)"""
        self._touches[partition] += 1
        due = next_ms if next_ms >= 0 else NEVER
        if due < self._due[partition]:
            self._due[partition] = due

    def woken(self, partition: int, at_ms: int) -> bool:
        """Another worker's script made something due in ``partition`` at
        ``at_ms``, sooner than a claim had said (the wake channel): whether
        that brings the partition's turn closer. A claim under way does not
        count (it may have run before the change), as after a touch."""
        self._touches[partition] += 1
        if at_ms < self._due[partition]:
            self._due[partition] = at_ms
            return True
        return False

    def stamp(self, partition: int) -> int:
        """Taken when a claim is sent: its answer counts only if the partition
        was not touched meanwhile (the claim may have run before the change)."""
        return self._touches[partition]

    def answered(self, partition: int, stamp: int, next_ms: int, more: bool) -> None:
        """A claim in ``partition`` said when its next thing is due (-1: nothing
        timed there), or that it got all it asked for and has more due now."""
        if more or stamp != self._touches[partition]:
            self._due[partition] = UNKNOWN
        else:
            self._due[partition] = next_ms if next_ms >= 0 else NEVER

    def due(self, order: list[int]) -> list[int]:
        """The partitions of ``order`` to ask now (all of them at a sweep)."""
        local = _local_ms()
        if self.sweep_ms <= 0 or local - self._swept >= self.sweep_ms:
            self._swept = local
            self._due = [UNKNOWN] * len(self._due)
        now = self.now()
        return [part for part in order if self._due[part] <= now]

    def soonest_ms(self) -> float | None:
        """The earliest time (server ms) a partition said it has something due,
        None when no partition said so (none asked yet, or nothing timed)."""
        known = [t for t in self._due if t not in (UNKNOWN, NEVER)]
        return min(known) if known else None

    def next_ms(self) -> int | None:
        """When a claim should look again: now if a partition is unknown (not
        asked since it was touched or swept: a claim under way may have missed
        a release), else the earliest time a partition said is due, or the next
        sweep; None when nothing is timed and sweeps are off. Without sweeps
        every claim asks every partition anyway, so only the answers count."""
        if self.sweep_ms > 0 and UNKNOWN in self._due:
            return self.now()
        nxt = min((t for t in self._due if t != UNKNOWN), default=NEVER)
        if self.sweep_ms > 0:
            nxt = min(nxt, self._swept + self.sweep_ms + self._offset)
        return None if nxt == NEVER else int(nxt)
