"""Which enqueued requests become admissions to the frontier, and which are refused.

Refused here, before Redis, are requests that could never be worth a fetch:
not HTTP(S), a redirect back into its own chain, a crawler trap, an address
the guard blocks, a request whose meta cannot be stored. A refused seed is
reported to the operator (:mod:`crawler.seedrefusals`); anything else only
counts in ``frontier/refused/<reason>``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy import Request, Spider
from scrapy.utils.httpobj import urlparse_cached

from crawler.addressguard import BLOCKED_REASON, AddressPolicy
from crawler.admission import TrapRules
from crawler.frontier.records import RecordError, to_record
from crawler.frontier.values import Admission, Limits
from crawler.learning.rules import TRAP, VARIANT
from crawler.learning.variants import without
from crawler.seedrefusals import SeedRefusals, is_seed
from crawler.siterules import SiteRules, SiteSettings, load_site_rules
from crawler.urls import canonical_host_key, canonical_url, url_fingerprint

if TYPE_CHECKING:
    from crawler.learning.worker import SiteLearning

logger = logging.getLogger("crawler.scheduling.scheduler")


class Intake:
    """The checks an enqueued request passes before it is offered to the frontier."""

    def __init__(self, crawler: Any, limits: Limits, stripper: Any,
                 meta_keys: tuple[str, ...]) -> None:
        s = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.limits = limits
        self.stripper = stripper
        self.meta_keys = meta_keys
        self.traps = TrapRules.from_settings(s)
        # Refused when queued (links, redirects, seeds): no robots fetch for them either.
        self.address_policy = AddressPolicy.from_settings(s)
        self.slot_settings: dict[str, dict[str, Any]] = s.getdict("DOWNLOAD_SLOTS")
        #: The hosts' learned rules, once the frontier is open (None: off).
        self.learning: SiteLearning | None = None
        #: The crawl's scope for a redirect (which passes no spider middleware):
        #: the rule that drops it, or None to follow it (None: no scope).
        self.redirect_scope: Callable[[Request], str | None] | None = None
        self._dont_filter_said = False
        #: Per-site settings (SITE_RULES, or the file an operator loaded since).
        self.site_rules: SiteRules = load_site_rules(s.get("SITE_RULES"))
        #: Seeds refused, said once per host (the address guard middleware's too).
        self.seed_refusals = SeedRefusals(crawler.stats, crawler.signals)
        #: Told of every refusal (reason, URL): the frontier's record of them
        #: (``scheduling/refusalnotes.py``), once the frontier is open.
        self.on_refused: Callable[[str, str], None] | None = None

    def admission(self, request: Request, sent: str | None, canon: str | None,
                  spider: Spider) -> Admission | None:
        """The admission of ``request`` (sent and canonical forms of its URL), or
        None when it is refused (counted and, for a seed, reported)."""
        if sent is None or canon is None:
            return self.refuse(request, "not-http-url")
        if self._redirect_loop(request, canon):
            return self.refuse(request, "redirect-loop")
        if (self.redirect_scope is not None and request.meta.get("redirect_urls")
                and self.redirect_scope(request) is not None):
            return self.refuse(request, "off-scope-redirect")
        trap = self.traps.check(canon)
        if trap is not None:
            return self.refuse(request, trap)
        blocked = self.address_policy.check_url(canon)
        if blocked is not None:
            self.stats.inc_value(f"guard/blocked/{blocked}")
            return self.refuse(request, BLOCKED_REASON, blocked)
        host = canonical_host_key(canon)
        rules = self.learning.cached(host) if self.learning is not None else None
        if rules:
            if rules.trap(canon) is not None:
                return self.refuse(request, TRAP)
            if rules.fetched_as_variant(canon):
                self.stats.inc_value("dedup/variant")
                return self.refuse(request, VARIANT)
            plain = rules.variant_of(canon)
            if plain is not None:  # another spelling: offered as the page's own URL
                self.stats.inc_value("dedup/variant")
                self.stats.inc_value("learning/variants_rewritten")
                sent, canon = without(sent, rules.noise), plain
        try:
            record = to_record(request, sent, spider, self.meta_keys, host)
        except RecordError as exc:
            logger.error("Frontier refused %s: %s", request.url, exc)
            return self.refuse(request, "unserializable")
        return Admission(canon, host, url_fingerprint(canon), record, request.priority,
                         self._host_config(request))

    def dont_filter(self, request: Request) -> None:
        """``dont_filter=True`` does not bypass the frontier's dedup, and says so once.

        The frontier is the crawl's memory across runs and workers: a URL is
        fetched once per crawl (``FRONTIER_CRAWL_ID`` names a new one), so a
        request that asks to skip the duplicate check is admitted like any
        other. Requests made from a claimed URL (its redirects) carry the
        claim's ``dont_filter`` and are not counted.
        """
        self.stats.inc_value("frontier/dont_filter_ignored")
        if not self._dont_filter_said:
            self._dont_filter_said = True
            logger.warning(
                "Frontier: dont_filter=True does not make a URL fetched again (first: %s); "
                "the frontier fetches each URL once per crawl, FRONTIER_CRAWL_ID starts a "
                "new crawl. Counted in frontier/dont_filter_ignored", request.url)

    def refuse(self, request: Request, reason: str, guard_reason: str | None = None) -> None:
        self.stats.inc_value(f"frontier/refused/{reason}")
        if self.on_refused is not None:
            self.on_refused(reason, request.url)
        if is_seed(request):  # the operator asked for it: say so (crawler/seedrefusals.py)
            self.seed_refusals.refused(request, reason, guard_reason)
        logger.debug("Frontier refused (%s): %s", reason, request.url)

    def _redirect_loop(self, request: Request, canon: str) -> bool:
        """A redirect back to a URL of its own chain (a -> b -> a): never worth a fetch."""
        chain = request.meta.get("redirect_urls")
        return bool(chain) and canon in {canonical_url(u, self.stripper) for u in chain}

    def _host_config(self, request: Request) -> str:
        """"conc:delay_ms" for a host with its own DOWNLOAD_SLOTS entry or site rule,
        and ":pages:bytes:ms" after it for a site rule's budget; else "" (written
        when its site is new: lua/admit.lua)."""
        name = urlparse_cached(request).hostname or ""
        limits = self.slot_limits(request.meta.get("download_slot") or name)
        own = self.site_rules.for_host(name) if self.site_rules and name else None
        if not own:
            return f"{limits[0]}:{limits[1]}" if limits else ""
        conc, delay = self._ruled(own, limits)
        seconds = own.budget_seconds
        budget = ":".join("" if value is None else str(value) for value in (
            own.budget_pages, own.budget_bytes, None if seconds is None else round(seconds * 1000)))
        return f"{conc}:{delay}" + ("" if budget == "::" else f":{budget}")

    def _ruled(self, own: SiteSettings, limits: tuple[int, int] | None) -> tuple[int, int]:
        """A site rule's concurrency and delay (ms) over DOWNLOAD_SLOTS' or the settings'."""
        conc, delay = limits or (self.limits.concurrency, self.limits.delay_ms)
        if own.concurrency is not None:
            conc = own.concurrency
        if own.delay is not None:
            delay = round(own.delay * 1000)
        return conc, delay

    def slot_limits(self, slot_name: str) -> tuple[int, int] | None:
        """A ``DOWNLOAD_SLOTS`` entry's (concurrency, delay ms), if it has one."""
        slot = self.slot_settings.get(slot_name) if self.slot_settings else None
        if not slot:
            return None
        return (int(slot.get("concurrency", self.limits.concurrency)),
                round(float(slot.get("delay", self.limits.delay_ms / 1000)) * 1000))

    def host_limits(self, host: str) -> tuple[int, int]:
        """The project's concurrency and delay (ms) for a host key (a site rule
        first, then DOWNLOAD_SLOTS)."""
        name = host.partition("://")[2].rsplit(":", 1)[0].strip("[]")
        limits = self.slot_limits(name)
        own = self.site_rules.for_host(name) if self.site_rules and name else None
        if own:
            return self._ruled(own, limits)
        return limits or (self.limits.concurrency, self.limits.delay_ms)
