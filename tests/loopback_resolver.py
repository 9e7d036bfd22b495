"""A Twisted resolver for test crawls that can only ever answer loopback.

Test crawls reach the simulated web through its proxy, so no host name should
need resolving. If a request ever bypasses the proxy (a bug in the code under
test), this resolver still sends it to 127.0.0.1 instead of asking the
machine's DNS or reaching another address: no test may send a packet outside
127.0.0.0/8. Use with ``-s TWISTED_DNS_RESOLVER=tests.loopback_resolver.LoopbackOnlyResolver``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IResolverSimple
from zope.interface import implementer


@implementer(IResolverSimple)
class LoopbackOnlyResolver:
    """Resolve every name to 127.0.0.1, and count what was asked."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        self.asked: list[str] = []

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: Any) -> LoopbackOnlyResolver:
        return cls(reactor)

    def install_on_reactor(self) -> None:
        self.reactor.installResolver(self)

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> defer.Deferred[str]:
        self.asked.append(name)
        return defer.succeed("127.0.0.1")
