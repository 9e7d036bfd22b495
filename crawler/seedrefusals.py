"""Seeds the crawl refused: said loudly, once per host, with the setting that allows them.

A broad crawl refuses many links (the address guard, trap rules), and says so
quietly: a stranger's page that links to ``http://10.0.0.1/`` is no news. A
refused *seed* is different: the operator asked for that URL, and a first
crawl is usually of a test server on ``127.0.0.1`` or ``localhost``, which the
address guard refuses by default. Without a word the crawl ends in seconds
with nothing crawled and exit code 0.

So the spider marks its seed requests (``meta[SEED_META]``); whoever refuses
a request (the frontier scheduler in ``enqueue_request``, or the address
guard middleware) calls :meth:`SeedRefusals.refused`,
which logs each refused seed host once at WARNING, with the reason and, for
the address guard, the setting that would allow it
(``ADDRESS_GUARD_ALLOW=127.0.0.0/8``, ``ADDRESS_GUARD_ALLOW_HOSTS=localhost``).
At the end of the crawl :func:`all_seeds_refused` says whether every seed was
refused and nothing else was crawled (see :mod:`crawler.extensions.summary`,
which logs it at ERROR); ``scrapy crawl`` then exits with code 1
(:mod:`crawler.commands.crawl`), so scrapyd and cron see a failed job.

Stats: ``seeds/refused/<reason>`` (the guard's reason, e.g. ``loopback``, or
the frontier's, e.g. ``not-http-url``), next to the spider's ``seeds/loaded``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from crawler.addressguard import AddressBlocked, SeenOnce, allow_hint, normalise_host
from crawler.seeds import SEED_META
from crawler.signals import seed_refused

if TYPE_CHECKING:
    from scrapy import Request

logger = logging.getLogger(__name__)

#: Stats prefix of refused seeds, by reason.
REFUSED_PREFIX = "seeds/refused/"
#: Stats that say a crawl had work besides its seeds: a URL claimed from the
#: frontier (queued by an earlier run of the crawl, or by another worker: a
#: refused seed is never queued) or any answer from a server.
OTHER_WORK = ("frontier/leases/claimed", "downloader/response_count")
#: Hosts named in the end-of-crawl ERROR (then "and N more").
SHOWN_HOSTS = 5



def is_seed(request: Request) -> bool:
    """Whether ``request`` is a seed as the spider read it (not a redirect that kept its meta)."""
    return bool(request.meta.get(SEED_META)) and not request.meta.get("redirect_urls")


class SeedRefusals:
    """One crawl's refused seeds: a WARNING per host, counted in stats.

    The frontier scheduler's intake has the crawl's; the address guard
    middleware uses it too when the frontier schedules the crawl (so a host
    refused by both is logged once), its own under another scheduler.
    """

    def __init__(self, stats: Any, signals: Any = None) -> None:
        self.stats = stats
        self.signals = signals  # a crawler's: each refusal is a seed_refused signal too
        self._logged = SeenOnce()

    def refused(self, request: Request, reason: str, guard_reason: str | None = None) -> None:
        """Count a refused seed; log its host the first time.

        ``reason``: the frontier's reason (``address-blocked``, ``not-http-url``,
        a trap rule); ``guard_reason``: the address guard's (``loopback``...).
        """
        shown = guard_reason or reason
        self.stats.inc_value(REFUSED_PREFIX + shown)
        if self.signals is not None:
            self.signals.send_catch_log(seed_refused, url=request.url, reason=shown)
        host = _host(request.url)
        if not self._logged.first(host or request.url):
            return
        extra = {"url": request.url, "host": host, "reason": shown}
        if guard_reason is None:
            logger.warning("Seed refused (%s): %s", reason, request.url, extra=extra)
            return
        hint = allow_hint(host, guard_reason)
        advice = (f"to crawl it, set {hint} (e.g. scrapy crawl ... -s {hint})" if hint
                  else "no setting allows it: check the seed")
        logger.warning("Seed refused by the address guard: %s is %s; %s (first seed: %s)",
                       host or "(no host)", guard_reason, advice, request.url, extra=extra)


def refused_seeds(stats: Mapping[str, Any]) -> dict[str, int]:
    """Refused seeds by reason, from a stats dict."""
    return {k[len(REFUSED_PREFIX):]: int(v) for k, v in stats.items()
            if k.startswith(REFUSED_PREFIX)}


def all_seeds_refused(stats: Mapping[str, Any],
                      blocked: Sequence[AddressBlocked] = ()) -> str | None:
    """The "every seed was refused" line for a crawl whose every seed was, and that
    crawled nothing else, else ``None``.

    Counts seeds read (``seeds/loaded``: the seed file's and the Redis seed
    list's) against seeds refused. A seed whose *name* resolves to an address
    the guard refuses is refused later, when its host's robots.txt fetch is
    (the host is parked, ``guard/hosts_parked``): a crawl that ended by itself
    with nothing claimed, whose only parked hosts are such, refused every seed
    too, and ``blocked`` (some of those refusals, as the robots policy
    announced them, :data:`crawler.signals.host_blocked`) names the hosts,
    their addresses and the setting that allows them.

    A crawl without seeds (resumed, or joining a shared frontier) never says
    it, nor does one that had other work (:data:`OTHER_WORK`): a crawl that
    resumes a frontier with queued URLs and whose new seeds are all refused
    did its job, and its WARNING lines already name each refused seed host.
    Only the decision is taken here, from the stats alone (``scrapy crawl``
    takes its exit code from it); when it is taken, at the end of the crawl,
    every seed that was going to come has come (the Redis seed list is read
    until the frontier has nothing left).
    """
    loaded = int(stats.get("seeds/loaded", 0) or 0)
    if loaded == 0 or any(stats.get(key) for key in OTHER_WORK):
        return None
    by_reason = refused_seeds(stats)
    reasons = ", ".join(f"{n} {r}" for r, n in sorted(by_reason.items()))
    if sum(by_reason.values()) >= loaded:
        return (f"every seed was refused: {loaded} of {loaded} ({reasons}), so nothing was "
                "crawled; the WARNING lines above name the setting that allows each host")
    if not _only_guard_parked(stats):
        return None
    also = f" ({reasons} at once)" if reasons else ""
    return (f"every seed was refused: {loaded} of {loaded}{also}, so nothing was crawled: "
            f"{guard_refusals(blocked)}")


def _only_guard_parked(stats: Mapping[str, Any]) -> bool:
    """Whether the crawl ended by itself with hosts parked by the address guard
    and by nothing else (a robots.txt or a name that stayed unreachable)."""
    if stats.get("finish_reason") != "finished" or not stats.get("guard/hosts_parked"):
        return False
    return not stats.get("robots/hosts_parked") and not any(
        v for k, v in stats.items() if k.startswith("dns/hosts/parked/"))


def guard_refusals(blocked: Sequence[AddressBlocked]) -> str:
    """``the address guard refused their hosts: a.test (127.0.1.1) is loopback, ...;
    to crawl them, set ADDRESS_GUARD_ALLOW=127.0.0.0/8 (...)``."""
    if not blocked:
        return "the address guard refused their hosts (see the WARNING lines)"
    shown = ", ".join(f"{_shown(b)} is {b.reason}" for b in blocked[:SHOWN_HOSTS])
    more = f" and {len(blocked) - SHOWN_HOSTS} more" if len(blocked) > SHOWN_HOSTS else ""
    hints = list(dict.fromkeys(h for b in blocked
                               if (h := allow_hint(b.address or b.host, b.reason))))
    advice = ("; to crawl them, set " + " and ".join(hints) + " (e.g. scrapy crawl ... "
              + " ".join(f"-s {h}" for h in hints) + ")") if hints else ""
    return f"the address guard refused their hosts: {shown}{more}{advice}"


def _shown(blocked: AddressBlocked) -> str:
    address = blocked.address
    return f"{blocked.host} ({address})" if address and address != blocked.host else blocked.host


class BlockedHosts:
    """The first hosts the address guard refused after their name resolved, to name
    in the end-of-crawl ERROR (:data:`crawler.signals.host_blocked`)."""

    def __init__(self, keep: int = SHOWN_HOSTS + 1) -> None:
        self.keep = keep
        self.blocked: list[AddressBlocked] = []

    def host_blocked(self, host: str, blocked: AddressBlocked) -> None:
        if len(self.blocked) < self.keep:
            self.blocked.append(blocked)


def _host(url: str) -> str:
    try:
        return normalise_host(urlsplit(url).hostname or "")
    except ValueError:
        return ""
