"""Claimed URLs, waiting in a small local buffer for the engine to take them.

The buffer is sized to the free download slots: a URL claimed but not
started holds its host's slot in Redis for every worker, so a worker claims
only what it can start now. When no host is due, the claim says when the
next one is and a timer wakes the worker then.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING

from redis.exceptions import RedisError
from scrapy import Request

from crawler.deadletter import DeadReason
from crawler.frontier.records import RecordError, from_record
from crawler.frontier.values import Lease, Release
from crawler.lease import TICKET_META, Ticket
from crawler.scheduling.startwindow import StartWindow
from crawler.urls import canonical_url

if TYPE_CHECKING:
    from crawler.scheduling.scheduler import FrontierScheduler

logger = logging.getLogger("crawler.scheduling.scheduler")


class Claims:
    """The buffer of claimed requests and the claims that fill it."""

    def __init__(self, scheduler: FrontierScheduler) -> None:
        self.scheduler = scheduler
        self.buffer: deque[Request] = deque()
        self.claiming = False
        # False once a claim found nothing due and nothing pending: claiming
        # again is pointless until something is admitted, released or due.
        self.claimable = True
        self._wakeup: asyncio.TimerHandle | None = None
        #: The start turn's window each claim asks for (what requests take
        #: from the claim to the socket: the download handler tells it).
        self.window = StartWindow()

    def pop(self) -> Request | None:
        """The next claimed request for the engine; claims more when running low."""
        if not self.buffer:
            self.want()
            return None
        request = self.buffer.popleft()
        if len(self.buffer) < self.scheduler.concurrency // 4:
            self.want()
        return request

    def want(self) -> None:
        """Claim as many URLs as there are free download slots (one claim at a time)."""
        scheduler = self.scheduler
        if (self.claiming or scheduler.closing or scheduler.frontier is None
                or not self.claimable or scheduler.pauses):
            return
        active = len(scheduler.crawler.engine.downloader.active)
        free = (scheduler.concurrency - active - len(self.buffer)
                - len(scheduler.robots_jobs))
        if free > 0:
            self.claiming = True
            # A claim under way when the worker closes is let finish: its
            # script has leased the URLs, and only its answer says which, so
            # that the close can give them back instead of leaving them to
            # run out their lease.
            scheduler.spawn(self._claim(free), flush=True)

    async def _claim(self, n: int) -> None:
        scheduler = self.scheduler
        assert scheduler.frontier is not None and scheduler.spider is not None
        asked = time.monotonic()  # the claims' start turns count from no later than this
        window_ms = self.window.ms
        try:
            result = await scheduler.frontier.claim(n, scheduler.worker, window_ms)
        except (RedisError, OSError) as exc:
            scheduler.health.trouble(exc)
            self.claiming = False
            self.wake_in(1.0)
            return
        scheduler.health.ok()
        self.claiming = False
        start_by = asked + window_ms / 1000
        for lease in result.leases:
            try:
                request = from_record(lease.record, scheduler.spider, lease.host,
                                      scheduler.meta_keys)
            except RecordError as exc:
                self._bad_record(lease, exc)
                continue
            ticket = Ticket(lease.token, lease.robots_version, claimed=asked,
                            start_by=start_by, gate_turn=(0, *lease.turns))
            if scheduler.leases.revisits is not None:
                ticket.revisit = scheduler.leases.revisits.state_of(lease.record)
            request.meta[TICKET_META] = ticket
            scheduler.leases.add(lease, canonical_url(request.url, scheduler.stripper))
            self.buffer.append(request)
        for host in result.robots_jobs:
            scheduler.robots_jobs.start(host)
        if scheduler.ips is not None:
            if result.ip_waits:
                scheduler.ips.joined(result.ip_waits, result.server_ms)
            if result.dns_jobs:
                scheduler.ips.look_up(result.dns_jobs)
        if result.leases or result.robots_jobs:
            scheduler.idle_since = None  # work came: FRONTIER_IDLE_WAIT counts from its end
            scheduler.stats.inc_value("frontier/leases/claimed", len(result.leases))
            scheduler.wake()
        elif result.next_ready_ms is not None:
            # Nothing due: no claim until then (or until something is admitted,
            # released or woken), however often the engine asks.
            self.claimable = False
            self.wake_in((result.next_ready_ms - result.server_ms) / 1000)
        else:  # nothing due, nothing delayed: no claim until something changes
            self.claimable = False
            scheduler.refresh_counts()

    def _bad_record(self, lease: Lease, error: RecordError) -> None:
        """A queue entry this worker did not write (or cannot read): a dead letter
        with reason ``bad-record``, never a request."""
        scheduler = self.scheduler
        scheduler.stats.inc_value("frontier/bad_records")
        logger.warning("Frontier: a queued record of %s is not one a worker writes (%s); it "
                       "is a dead letter (scrapy frontier dead --reason bad-record)",
                       lease.host, error)
        scheduler.sync.release(Release(lease.host, lease.fingerprint, "dead",
                                       DeadReason.now("bad-record", str(error)).json()))

    def changed(self) -> None:
        """Something this worker did (an admission, a release, a job's end) may
        have made URLs claimable: the next :meth:`want` claims."""
        self.claimable = True

    def now(self) -> None:
        """URLs may be claimable now (a host woken, a job ended): claim at once."""
        self.claimable = True
        self.want()

    def maybe_claimable(self) -> None:
        """URLs are queued somewhere (another worker may have admitted them):
        claim again, unless a claim already said when the next one is due
        (its timer claims then, within a second)."""
        if self._wakeup is None:
            self.claimable = True

    def wake_in(self, seconds: float) -> None:
        """Claim again in ``seconds`` (between 5 ms and 1 s)."""
        if self.scheduler.closing:
            return
        self.cancel()
        delay = min(max(seconds, 0.005), 1.0)
        self._wakeup = asyncio.get_event_loop().call_later(delay, self._on_wakeup)

    def cancel(self) -> None:
        if self._wakeup:
            self._wakeup.cancel()
            self._wakeup = None

    def _on_wakeup(self) -> None:
        self._wakeup = None
        self.claimable = True
        self.want()
        self.scheduler.wake()
