"""The worker's side of revisits: the crawl's policy, and what a done URL keeps.

Settings (``FRONTIER_REVISIT_*``, durations in seconds or as ``7d``, ``12h``):
``AFTER`` (0: a done URL is never fetched again), ``SEEDS`` (the seeds' own
interval; 0: ``AFTER``), ``MIN`` and ``MAX`` (the adaptive interval's bounds;
0: ``AFTER`` / 4 and ``AFTER`` x 8), ``FACTOR`` (1.5) and ``NEW_FIRST``. The
spider arguments ``revisit`` and ``revisit_seeds`` set ``AFTER`` and ``SEEDS``
for one job (scrapyd passes them as text).

A claimed URL's ticket carries the state its record kept
(:meth:`Revisits.state_of`); when the URL is done, :meth:`Revisits.release`
gives the record to keep, with the state after this fetch, and when it is
due again. ``lua/release.lua`` keeps it by its host (``PP:v:HOST``) until
then, and ``lua/claim.lua`` queues it again, behind the host's new URLs.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from crawler.frontier.records import with_field
from crawler.lease import Ticket
from crawler.revisit import FIELD, RevisitPolicy, RevisitState, parse_duration, unchanged

logger = logging.getLogger(__name__)


def policy_from_settings(settings: Any, spider: Any = None) -> RevisitPolicy:
    """The crawl's policy: the settings, and the spider's ``revisit`` /
    ``revisit_seeds`` arguments when it has them."""
    def duration(name: str, arg: str | None = None) -> float:
        value = getattr(spider, arg, None) if arg else None
        if value is None:
            value = settings.get(name) or 0
        return parse_duration(value, arg or name)

    return RevisitPolicy(
        after=duration("FRONTIER_REVISIT_AFTER", "revisit"),
        seeds=duration("FRONTIER_REVISIT_SEEDS", "revisit_seeds"),
        minimum=duration("FRONTIER_REVISIT_MIN"),
        maximum=duration("FRONTIER_REVISIT_MAX"),
        factor=max(1.0, settings.getfloat("FRONTIER_REVISIT_FACTOR", 1.5)),
        new_first=settings.getbool("FRONTIER_REVISIT_NEW_FIRST", True),
    )


class Revisits:
    """The revisit schedule of one worker's done URLs."""

    def __init__(self, policy: RevisitPolicy, stats: Any) -> None:
        self.policy = policy
        self.stats = stats

    @staticmethod
    def state_of(record: str) -> RevisitState | None:
        """The state a queued record kept from its last fetch (None: never fetched)."""
        try:
            data = json.loads(record)
        except ValueError:
            return None
        return RevisitState.of_record(data) if isinstance(data, dict) else None

    def release(self, record: str, ticket: Ticket) -> tuple[str, int]:
        """The record a done URL keeps (with its new state) and the ms until its
        next fetch."""
        seed = json.loads(record).get("d", 0) == 0
        state = self.policy.next_state(ticket.revisit, ticket.refetch, seed)
        self._count(ticket)
        return with_field(record, FIELD, state.field()), state.interval * 1000

    def _count(self, ticket: Ticket) -> None:
        old, fetch = ticket.revisit, ticket.refetch
        if old is None or fetch is None:
            return
        if fetch.not_modified:
            self.stats.inc_value("revisit/not_modified")
        elif unchanged(old, fetch):
            self.stats.inc_value("revisit/unchanged")
        else:
            self.stats.inc_value("revisit/changed")


#: Sorted-set members up to this many bytes keep Redis's compact encoding
#: (``zset-max-listpack-value``); a done URL kept for its revisit is ~100.
COMPACT_VALUE = 128


async def revisits_for(crawler: Any, spider: Any, limits: Any, client: Any
                       ) -> Revisits | None:
    """The crawl's revisit schedule (None when revisits are off); logs the policy,
    and warns when the Redis would keep each done URL at twice the memory."""
    policy = policy_from_settings(crawler.settings, spider)
    if not policy.enabled:
        return None
    await _warn_if_loose(client)
    limits.revisit_new_first = policy.new_first
    low, high = policy.bounds
    logger.info("Revisits: a done URL is fetched again after %ss (seeds %ss), "
                "adapting between %ss and %ss by x%s; %s",
                round(policy.after), round(policy.seeds or policy.after), round(low),
                round(high), policy.factor,
                "new URLs first" if policy.new_first else "new URLs and revisits by priority")
    return Revisits(policy, crawler.stats)


async def _warn_if_loose(client: Any) -> None:
    try:
        reply = await client.config_get("zset-max-*-value")
        value = max(int(v) for v in reply.values())
    except Exception:  # CONFIG refused (a managed Redis), a cluster's answer: say nothing
        return
    if value < COMPACT_VALUE:
        logger.warning(
            "Revisits keep every done URL's record in a sorted set, and this Redis keeps "
            "members over %d bytes in its large encoding (zset-max-listpack-value): about "
            "170 bytes more a URL. Set it to 256 (docs/operations.md).", value)


def keep_state(old_record: str, new_record: str) -> str:
    """``new_record`` (a retried request's, rebuilt from the request) with the
    revisit state ``old_record`` kept, if any."""
    if not new_record or f'"{FIELD}":' not in old_record:
        return new_record
    state = json.loads(old_record).get(FIELD)
    return new_record if state is None else with_field(new_record, FIELD, state)
