"""Fetching one robots.txt through Scrapy's downloader, the RFC 9309 way.

Scrapy's downloader does the HTTP (proxies, TLS, DNS, the address guards to
come); this module decides what a fetch *is*: redirects are followed here,
not by ``RedirectMiddleware``, so that at most five are followed across
hosts, a loop is seen as a loop, and the outcome belongs to the original
authority [2.3.1.2]; the body is cut at ``max_bytes`` by stopping the
download, never rejected for its size [2.5]; there are no retries (the
frontier retries unreachable files with backoff) and no cookies.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.exceptions import StopDownload

from crawler.addressguard import AddressBlocked
from crawler.backoff import retry_after_seconds
from crawler.urls import resolve_link

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

#: Marks a robots.txt request: other middlewares leave it alone.
ROBOTS_FETCH_META = "robots_fetch"
MAX_REDIRECTS = 5
#: The error of a fetch the address guard refused (the host, or a redirect).
BLOCKED_ERROR = "AddressBlocked"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_AGE = re.compile(rb"(?:^|[,\s])max-age\s*=\s*\"?(\d+)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Fetched:
    """The outcome of one robots.txt fetch (``status`` None: no HTTP answer)."""

    status: int | None
    body: bytes = b""
    error: str | None = None
    url: str = ""
    redirects: int = 0
    truncated: bool = False
    max_age: int | None = None  # Cache-Control max-age of the final answer, seconds
    retry_after: float | None = None  # its Retry-After (a 429 / 503), seconds
    blocked: AddressBlocked | None = None  # the address guard's refusal, if it refused

    @property
    def detail(self) -> str:
        """What the error said, when it says more than its name (the guard's
        refusal and the setting that allows it)."""
        return self.blocked.explained() if self.blocked is not None else ""


class RobotsFetcher:
    """Fetches robots.txt files for one crawl."""

    def __init__(self, crawler: Crawler, timeout: float, max_bytes: int) -> None:
        self.crawler = crawler
        self.timeout = timeout
        self.max_bytes = max_bytes
        crawler.signals.connect(self._bytes_received, signal=signals.bytes_received)

    def _bytes_received(self, data: bytes, request: Request, spider: Any) -> None:
        """Stop reading past ``max_bytes``: the part read is the file [2.5]."""
        if not request.meta.get(ROBOTS_FETCH_META):
            return
        got = request.meta.get("_robots_bytes", 0) + len(data)
        request.meta["_robots_bytes"] = got
        if got > self.max_bytes:
            raise StopDownload(fail=False)

    def request(self, url: str, meta: dict[str, Any] | None = None) -> Request:
        return Request(url, dont_filter=True, meta={
            **(meta or {}),
            ROBOTS_FETCH_META: True,
            "dont_redirect": True,
            "handle_httpstatus_all": True,
            "dont_retry": True,
            "dont_obey_robotstxt": True,
            "dont_merge_cookies": True,
            "download_timeout": self.timeout,
            "download_maxsize": 0,  # the bytes_received handler cuts instead
            "download_warnsize": 0,
        })

    async def fetch(self, origin: str, meta: dict[str, Any] | None = None) -> Fetched:
        """Fetch ``origin``/robots.txt, following up to five redirects (``meta``:
        what the first request, the one to the origin itself, carries)."""
        url = f"{origin}/robots.txt"
        seen = {url}
        for hop in range(MAX_REDIRECTS + 1):
            try:
                response = await self.crawler.engine.download_async(
                    self.request(url, meta if hop == 0 else None))
            except AddressBlocked as blocked:
                return Fetched(None, error=BLOCKED_ERROR, url=url, redirects=hop,
                               blocked=blocked)
            except Exception as exc:  # any network error or timeout: unreachable [2.3.1.4]
                return Fetched(None, error=type(exc).__name__, url=url, redirects=hop)
            target = _redirect_target(response)
            if target is None:
                return _fetched(response, hop)
            if target in seen or hop == MAX_REDIRECTS or not target.startswith("http"):
                # a loop, a sixth redirect or an odd scheme: "unavailable" [2.3.1.2]
                return Fetched(response.status, url=url, redirects=hop + 1,
                               error="redirect-loop" if target in seen else "too-many-redirects")
            seen.add(target)
            url = target
        raise AssertionError("unreachable")  # pragma: no cover


def _redirect_target(response: Response) -> str | None:
    if response.status not in _REDIRECTS:
        return None
    location = response.headers.get(b"Location")
    if not location:
        return None  # a redirect without a location is a 3xx answer: "unavailable"
    return resolve_link(location.decode("latin-1"), response.url)


def _fetched(response: Response, redirects: int) -> Fetched:
    truncated = "download_stopped" in response.flags
    return Fetched(response.status, response.body, None, response.url, redirects, truncated,
                   _max_age(response.headers.get(b"Cache-Control")),
                   retry_after_seconds(response.headers.get(b"Retry-After"), time.time()))


def _max_age(value: bytes | None) -> int | None:
    match = _MAX_AGE.search(value or b"")
    return int(match.group(1)) if match else None
