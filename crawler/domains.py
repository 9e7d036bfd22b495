"""The registered domain of a host name: the politeness scope above a host.

``www.example.co.uk``, ``img.example.co.uk`` and ``example.co.uk`` belong to
one organisation and usually to one set of servers, so the frontier paces
them together (``FRONTIER_DOMAIN_CONCURRENCY``, ``FRONTIER_DOMAIN_DELAY``) as
well as each by itself, and keeps them in one partition.

The Public Suffix List comes from the snapshot tldextract ships (a Scrapy
dependency): it is never fetched at run time, so every worker of a fleet
agrees on it for as long as they run the same release. Its private section
counts (``alice.github.io`` and ``bob.github.io`` are two domains): the list
marks those suffixes precisely because their subdomains belong to different
people, and the servers they share are the IP scope's to protect. A name
under a suffix the list does not know (``a.test``, an intranet name) follows
the list's default rule ``*``: its last label is the suffix. An address
literal and a one-label name are their own domain.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

import tldextract

_extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None,
                                 include_psl_private_domains=True)


@lru_cache(maxsize=65536)
def registered_domain(name: str) -> str:
    """The registered domain of host name ``name`` (lower case, no port).

    >>> registered_domain("www.example.co.uk"), registered_domain("me.github.io")
    ('example.co.uk', 'me.github.io')
    >>> registered_domain("www.a.test"), registered_domain("[::1]")
    ('a.test', '[::1]')
    """
    name = name.lower().rstrip(".")
    if _is_address(name) or "." not in name:
        return name
    parts = _extract(name)
    if parts.suffix and parts.domain:
        return f"{parts.domain}.{parts.suffix}"
    if parts.suffix:
        return parts.suffix  # the name is a public suffix itself
    return ".".join(name.rsplit(".", 2)[-2:])


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True
