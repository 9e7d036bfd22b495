"""Scrapy add-on: this crawler's machinery in any Scrapy project, from one line.

In the other project's settings::

    ADDONS = {"crawler.addon.BroadCrawlAddon": 100}

and its spiders crawl through the shared Redis frontier (``SCHEDULER``), with
the RFC 9309 robots policy, the retry policy that waits in the frontier,
circuit breakers, cross-worker pacing, the address guard (URLs and DNS
answers), the WARC archive, Prometheus metrics and the progress line, exactly
as ``crawler/settings.py`` wires them for this project.

What it sets, and how
---------------------
Nothing is listed twice: the values are read from :mod:`crawler.settings`
(its UPPERCASE names), the source of truth of the manual wiring, so a new
setting there reaches the add-on by itself.

- Plain settings (``ROBOTS_*``, ``RETRY_*``, ``BACKOFF_*``, ``BREAKER_*``,
  ``FRONTIER_*``, ``WARC_*``, ``PROMETHEUS_*``, ``ADDRESS_GUARD_*``,
  ``SCHEDULER``, ``REQUEST_FINGERPRINTER_CLASS``, ``DOWNLOAD_CONNECT_TIMEOUT``,
  the politeness and limit values...) are set with
  ``settings.set(name, value, "addon")``: above Scrapy's defaults, below
  anything the project (20), a spider (30) or the command line (40) says.
- Component priority dictionaries (``DOWNLOADER_MIDDLEWARES``,
  ``ITEM_PIPELINES``, ``EXTENSIONS``) get each entry with
  ``BaseSettings.setdefault_in_component_priority_dict``: a component the
  project already names, as a class or as any import path, keeps the
  project's order or its ``None``. That includes the two that are switched
  off (Scrapy's ``RobotsTxtMiddleware`` and ``RetryMiddleware``, replaced by
  the robots and retry policies) and ``LogStats`` (replaced by the progress
  line): a project that maps one of them to a number keeps it.
- Other dictionaries (``DOWNLOAD_HANDLERS``, keyed by URL scheme) get the
  keys the project does not have; a scheme the project maps, even to
  ``None``, stays the project's.
- Two hooks, because Scrapy reads settings at two moments.
  :meth:`BroadCrawlAddon.update_pre_crawler_settings` runs on the
  ``CrawlerProcess`` settings before any crawler exists, and applies it all
  there: the process, not a crawler, installs ``TWISTED_DNS_RESOLVER`` (the
  crawl resolver), sizes the thread pool (``REACTOR_THREADPOOL_MAXSIZE``)
  and builds the resolver from its own settings (``DNS_NAMESERVERS``,
  ``DNSCACHE_*``, ``DNS_CACHE_*``, ``DNS_TIMEOUT``, ``ADDRESS_GUARD_RESOLVER``,
  the ``ADDRESS_GUARD_*`` policy); and a spider's ``update_settings`` (the
  broad spider's default feed reads ``BROAD_DEFAULT_FEED``) runs on each
  crawler's copy of them before any add-on's ``update_settings``. :meth:`BroadCrawlAddon.
  update_settings` then applies it again to the crawler's settings, for a
  crawler whose process did not run the first hook, less those
  process-only settings (:data:`PROCESS_ONLY`): on a crawler they would
  change nothing but would make the address guard's startup check believe
  DNS answers are checked. So an add-on enabled only in a spider's
  ``custom_settings`` checks URLs but not DNS answers, and both the add-on
  and :class:`~crawler.middlewares.addressguard.AddressGuardMiddleware` say
  so at startup.

What it leaves to the project
-----------------------------
- ``BOT_NAME``, ``SPIDER_MODULES``, ``NEWSPIDER_MODULE``: the project's
  identity and its spiders.
- ``COMMANDS_MODULE``: Scrapy reads it before add-ons run, and a project may
  have its own. It is not needed for ``scrapy frontier``, ``scrapy warc`` and
  ``scrapy partition``: installing broadcrawl registers them as
  ``scrapy.commands`` entry points (pyproject.toml), found in every project.
  (``COMMANDS_MODULE = "crawler.commands"`` also brings this project's
  ``scrapy crawl``, which reports a bad spider argument without a traceback.)
- ``USER_AGENT`` and ``ROBOTSTXT_USER_AGENT``: who is crawling and whom to
  contact is the operator's to say. This project's values carry a
  placeholder contact address, and robots.txt groups must be matched against
  the product token the sites see in the User-Agent: the robots policy takes
  the token from the project's ``USER_AGENT`` when ``ROBOTSTXT_USER_AGENT``
  is unset.
- ``LOG_LEVEL``: how much a process logs is the operator's choice, not a
  component's (Scrapy's default, DEBUG, writes a line per request: set
  ``LOG_LEVEL = "INFO"`` for a broad crawl).
- ``HTTPERROR_ALLOW_ALL``: it decides which responses reach *every* callback
  of the project; this project's broad spider wants 404s and 500s as items,
  another project's spiders expect Scrapy's default (2xx only). Archiving,
  retries and the frontier see every status either way.
- ``FEED_EXPORT_ENCODING``, ``FEED_EXPORT_FIELDS``: the format and fields of the
  project's own feeds (those fields are this project's ``PageItem``'s; the broad
  spider's default feed names its encoding and fields itself).

``BROAD_*`` settings are set: only :class:`~crawler.spiders.broad.
BroadSpider` reads them, so they are inert for other spiders and ready for
that spider when a project adds it to ``SPIDER_MODULES``.

What a spider must respect
--------------------------
Any ``scrapy.Spider`` works: requests and their callbacks cross Redis as
small JSON records (:mod:`crawler.frontier.records`). Callbacks and errbacks
must be methods of the spider (a request without a callback gets ``parse``),
requests must be GET without a body, per-request headers and cookies are not
kept, and only the meta keys in ``FRONTIER_META_KEYS`` survive. A spider may
name a default errback in a ``frontier_errback`` attribute; none is needed.
A request that breaks a rule is refused with a log line naming the field.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from scrapy.settings import SETTINGS_PRIORITIES
from scrapy.utils.misc import load_object

from crawler import settings as broad_settings
from crawler.scheduling.scheduler import uses_frontier

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

PRIORITY = "addon"

#: Settings of :mod:`crawler.settings` that belong to the project (see above).
PROJECT_OWN: frozenset[str] = frozenset({
    "BOT_NAME", "SPIDER_MODULES", "NEWSPIDER_MODULE", "COMMANDS_MODULE",
    "USER_AGENT", "ROBOTSTXT_USER_AGENT",
    "LOG_LEVEL", "HTTPERROR_ALLOW_ALL", "FEED_EXPORT_ENCODING", "FEED_EXPORT_FIELDS",
})

#: Component priority dictionaries: merged one component at a time.
COMPONENT_DICTS: frozenset[str] = frozenset({
    "DOWNLOADER_MIDDLEWARES", "SPIDER_MIDDLEWARES", "ITEM_PIPELINES", "EXTENSIONS",
})

#: Read only by the CrawlerProcess (its resolver and thread pool), never by a crawler.
PROCESS_ONLY: frozenset[str] = frozenset({
    "TWISTED_DNS_RESOLVER", "ADDRESS_GUARD_RESOLVER", "REACTOR_THREADPOOL_MAXSIZE",
    "DNSCACHE_ENABLED", "DNSCACHE_SIZE", "DNS_TIMEOUT", "DNS_NAMESERVERS",
    "DNS_CACHE_MIN_TTL", "DNS_CACHE_MAX_TTL",
})


def addon_settings(module: ModuleType = broad_settings) -> dict[str, Any]:
    """The settings the add-on brings: ``module``'s, less :data:`PROJECT_OWN`.

    Values are deep copies, so no project can change the module's lists.
    """
    return {name: copy.deepcopy(getattr(module, name)) for name in dir(module)
            if name.isupper() and name not in PROJECT_OWN}


def apply_settings(settings: BaseSettings, values: Mapping[str, Any]) -> None:
    """Set ``values`` at "addon" priority, merging dictionaries entry by entry."""
    for name, value in values.items():
        if name in COMPONENT_DICTS:
            for path, order in value.items():
                settings.setdefault_in_component_priority_dict(name, load_object(path), order)
        elif isinstance(value, dict):
            _setdefault_keys(settings, name, value)
        else:
            settings.set(name, value, PRIORITY)


def _setdefault_keys(settings: BaseSettings, name: str, entries: Mapping[str, Any]) -> None:
    """Add the keys of ``entries`` that ``settings[name]`` lacks.

    Like Scrapy's ``setdefault_in_component_priority_dict``: applied whatever
    the setting's priority, which stays as it was ("addon" for a new setting).
    """
    current = settings.getdict(name)
    missing = {key: value for key, value in entries.items() if key not in current}
    if missing:
        priority = settings.getpriority(name)
        settings.set(name, {**current, **missing}, PRIORITY if priority is None else priority)


def _names(values: Iterable[str]) -> str:
    return ", ".join(sorted(values))


class AddonConfigError(ValueError):
    """The project's settings and the add-on cannot work together (the crawl does not start)."""


class BroadCrawlAddon:
    """Wire the broad crawler's components and defaults into a Scrapy project."""

    @classmethod
    def update_pre_crawler_settings(cls, settings: BaseSettings) -> None:
        """Everything, on the process settings that every crawler copies."""
        apply_settings(settings, addon_settings())

    def update_settings(self, settings: BaseSettings) -> None:
        """Everything a crawler reads, again, should the process have missed the add-on."""
        apply_settings(settings, {name: value for name, value in addon_settings().items()
                                  if name not in PROCESS_ONLY})
        self._check(settings)

    def _check(self, settings: BaseSettings) -> None:
        """Say when the project's own choices leave the add-on's parts without support."""
        if not uses_frontier(settings):
            raise AddonConfigError(
                f"BroadCrawlAddon needs the frontier scheduler, but SCHEDULER is "
                f"{settings['SCHEDULER']!r}: the robots policy checks only requests the "
                "frontier handed out, and pacing, Retry-After waits and circuit breakers "
                "live in it. Remove SCHEDULER from the project's settings, or leave the "
                "add-on out and wire the components you want yourself")
        if (settings.getpriority("TWISTED_DNS_RESOLVER") or 0) < SETTINGS_PRIORITIES[PRIORITY]:
            logger.warning(
                "BroadCrawlAddon was enabled after the crawler process started (in a "
                "spider's custom_settings?): its process-wide settings (%s) do not apply, "
                "so DNS answers are not checked by the address guard. Enable it in the "
                "project settings", _names(PROCESS_ONLY))
