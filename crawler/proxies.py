"""Which requests go through a proxy, as Scrapy's ``HttpProxyMiddleware`` decides.

A request sent through a proxy is connected, and its name resolved, by the
proxy: the crawl's DNS step and the IP scope have nothing to do for it.
"""

from __future__ import annotations

from typing import Any
from urllib.request import getproxies, proxy_bypass


class ProxyRoutes:
    """The environment's proxies (``http_proxy``, ``no_proxy``...), when
    ``HTTPPROXY_ENABLED`` lets Scrapy use them."""

    def __init__(self, proxies: dict[str, str]) -> None:
        self.proxies = proxies

    @classmethod
    def from_settings(cls, settings: Any) -> ProxyRoutes:
        return cls(getproxies() if settings.getbool("HTTPPROXY_ENABLED") else {})

    def proxied(self, host: str, name: str) -> bool:
        """Whether requests to the host key ``host`` (whose name is ``name``) go
        through a proxy of the environment."""
        scheme = host.partition("://")[0]
        return scheme in self.proxies and not ("no" in self.proxies and proxy_bypass(name))
