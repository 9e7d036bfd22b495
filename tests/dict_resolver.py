"""A DNS test double for the address guard's tests: names answered from a dict.

Scrapy builds it from a setting too:
``ADDRESS_GUARD_RESOLVER = "tests.dict_resolver.DictResolver"``.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IResolverSimple
from zope.interface import implementer

ANSWERS = {
    "internal.test": "10.0.0.5",
    "public.test": "93.184.216.34",
    "loop.test": "127.0.0.1",
    "meta.test": "169.254.169.254",
    "wiki.corp.test": "10.1.1.1",
    "127.0.0.1": "127.0.0.1",
}


@implementer(IResolverSimple)
class DictResolver:
    """A DNS test double: answers from :data:`ANSWERS`, fails for other names."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: Any) -> DictResolver:
        return cls(ANSWERS)

    def getHostByName(self, name: str, timeout: Any = ()) -> defer.Deferred[str]:
        self.asked.append(name)
        if name in self.answers:
            return defer.succeed(self.answers[name])
        return defer.fail(DNSLookupError(f"no such name: {name}"))
