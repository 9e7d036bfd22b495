"""A worker's side of learning: a copy of the hosts' rules, and the pages' observations.

Rules are asked for on every request and every link, so each worker keeps a
copy per host. What pages show is sent in batches, one script a batch and
two commands a host whatever its pages: a page's evidence goes within half
its site's delay (between a tenth of a second and two seconds), so that a
rule it completes is known before the site's next request, and pages of
slow-paced sites wait for each other. Each batch's answer carries the current
rules of its hosts:
a worker crawling a host has the rules any worker's pages taught within a
batch. A host this worker sends nothing about is read again after
``LEARN_RULES_TTL`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, defaultdict
from typing import Any

from redis.exceptions import RedisError

from crawler.admission import is_dated
from crawler.frontier.sitefacts import LearnLimits, News, Observation, SiteFacts
from crawler.learning.rules import SiteRules
from crawler.learning.traps import page_sketch, url_pattern
from crawler.learning.variants import DROPS, OTHER, SELF, PageEvidence, page_evidence

logger = logging.getLogger(__name__)

#: Hosts whose rules a worker keeps a copy of (the least recently used go).
CACHE_HOSTS = 50_000
#: A page's evidence is sent within half its site's delay, within these bounds (s).
FLUSH_MIN_S, FLUSH_MAX_S = 0.1, 2.0


def observations(evidence: PageEvidence, pattern: str | None, text_sketch: str | None
                 ) -> list[Observation]:
    """One page's evidence in the ops of ``lua/learn.lua``: its ``D`` first
    (a page fetched before teaches nothing again). Parameters whose names
    hold white space are left out: the frontier stores names space-separated."""
    out: list[Observation] = [("D", evidence.key, evidence.digest)]
    said = evidence.canonical
    variants = [(name, base) for name, base in evidence.variants if _storable(name)]
    bases = dict(variants)
    if said is not None:
        target = f"{said.target} {evidence.key}" if said.relation == OTHER else ""
        out.append(("C", said.relation, target))
        if said.relation in (SELF, DROPS):
            out += [("K", name, "") for name in said.kept if _storable(name)]
            out += [("N", name, bases[name]) for name in said.dropped if name in bases]
    out += [("V", name, f"{base} {evidence.digest}") for name, base in variants]
    if pattern is not None and text_sketch is not None:
        out.append(("T", pattern, text_sketch))
    return out


def _storable(name: str) -> bool:
    return bool(name) and not any(c.isspace() for c in name)


class SiteLearning:
    """The rules' copy and the observations' batches of one worker."""

    def __init__(self, facts: SiteFacts, stats: Any, ttl: float, traps: bool) -> None:
        self.facts = facts
        self.stats = stats
        self.ttl = ttl
        self.traps = traps
        self._rules: OrderedDict[str, tuple[SiteRules, float]] = OrderedDict()
        self._reading: dict[str, asyncio.Future[SiteRules]] = {}
        self._pending: dict[str, list[Observation]] = defaultdict(list)
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()

    # -- rules ------------------------------------------------------------------

    def cached(self, host: str) -> SiteRules | None:
        """The host's rules as this worker knows them now (None: not known)."""
        entry = self._rules.get(host)
        return entry[0] if entry is not None else None

    async def rules_of(self, host: str) -> SiteRules:
        """The host's rules, read again from the frontier once the copy is old."""
        entry = self._rules.get(host)
        if entry is not None and entry[1] > time.monotonic():
            return entry[0]
        reading = self._reading.get(host)
        if reading is None:
            reading = asyncio.ensure_future(self._read(host))
            self._reading[host] = reading
        return await asyncio.shield(reading)

    async def _read(self, host: str) -> SiteRules:
        try:
            rules = SiteRules.parse(*(await self.facts.rules([host]))[host])
            self._keep(host, rules)
        except (RedisError, OSError):
            # No answer: go on with what is known (a rule is an economy, not a
            # promise), and ask again next time.
            entry = self._rules.get(host)
            rules = entry[0] if entry is not None else SiteRules()
        finally:
            self._reading.pop(host, None)
        return rules

    def _keep(self, host: str, rules: SiteRules) -> None:
        self._rules[host] = (rules, time.monotonic() + self.ttl)
        self._rules.move_to_end(host)
        while len(self._rules) > CACHE_HOSTS:
            self._rules.popitem(last=False)

    # -- observations -----------------------------------------------------------

    def observe(self, host: str, canon: str, body: bytes, declared: str | None,
                delay_s: float = 0.0) -> None:
        """Note what a fetched HTML page at ``canon`` shows (its canonical link
        ``declared``, already canonical); sent within half its site's delay
        ``delay_s`` (see the module docstring)."""
        pattern = url_pattern(canon) if self.traps else None
        text_sketch = (page_sketch(body, dated=is_dated(canon))
                       if pattern is not None else None)
        self._pending[host] += observations(page_evidence(canon, body, declared),
                                            pattern, text_sketch)
        self._send_within(min(max(delay_s / 2, FLUSH_MIN_S), FLUSH_MAX_S))

    def _send_within(self, wait_s: float) -> None:
        loop = asyncio.get_event_loop()
        at = loop.time() + wait_s
        if self._timer is not None:
            if self._timer.when() <= at:
                return
            self._timer.cancel()
        self._timer = loop.call_at(at, self._send_now)

    def _send_now(self) -> None:
        self._timer = None
        task = asyncio.ensure_future(self.flush())
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def flush(self) -> None:
        """Send what is pending now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending = self._pending, defaultdict(list)
        if not pending:
            return
        try:
            news, rules = await self.facts.observe(pending)
        except (RedisError, OSError) as exc:
            # Evidence is not work: a batch lost to a Redis outage only delays a rule.
            self.stats.inc_value("learning/batches_lost")
            logger.warning("Learning: lost %d host(s)' observations: %s", len(pending), exc)
            return
        for host, stored in rules.items():
            self._keep(host, SiteRules.parse(*stored))
        for item in news:
            self._say(item)

    def _say(self, news: News) -> None:
        """Log and count one decision (its rules are in the copy already)."""
        if news.kind == "learned":
            self.stats.inc_value("learning/params_learned")
            logger.info("Learned: query parameter %r is noise on %s (%s); URLs that differ "
                        "only in it are one page", news.name, news.host, news.detail)
        elif news.kind == "withdrawn":
            self.stats.inc_value("learning/params_withdrawn")
            logger.warning("Learned rule withdrawn: query parameter %r on %s matters (%s)",
                           news.name, news.host, news.detail)
        elif news.kind == "trap":
            self.stats.inc_value("traps/patterns")
            logger.warning("Trap: refusing URLs of the pattern %s on %s (%s)",
                           news.name, news.host, news.detail)


def learning_for(settings: Any, stats: Any, client: Any, keys: Any) -> SiteLearning | None:
    """A worker's learning on the frontier ``keys`` name, per the ``LEARN_*``
    settings (None: ``LEARN_ENABLED`` is off)."""
    if not settings.getbool("LEARN_ENABLED", True):
        return None
    limits = LearnLimits(
        min_evidence=max(1, settings.getint("LEARN_MIN_EVIDENCE", 2)),
        max_fields=settings.getint("LEARN_MAX_FIELDS", 512),
        alike_pages=settings.getint("LEARN_TRAP_ALIKE_PAGES", 15),
        alike_share=settings.getfloat("LEARN_TRAP_ALIKE_SHARE", 0.5),
        distance=settings.getint("LEARN_TRAP_DISTANCE", 8),
    )
    return SiteLearning(SiteFacts(client, keys, limits), stats,
                        ttl=settings.getfloat("LEARN_RULES_TTL", 30.0),
                        traps=settings.getbool("LEARN_TRAPS", True))
