"""How a lookup fails: the kinds, their exceptions, and the kind of any error.

A kind is what the layers above decide on (:mod:`crawler.scheduling.dnsoutcomes`:
hold the host, or park it), and what ``dns/lookups/<kind>`` counts. The
backends raise many things (Twisted's ``DNSNameError``, a ``gaierror``, a
``CancelledError`` when a timeout cancels a query); :func:`as_failure` turns
each into the :class:`DNSFailure` of its kind.
"""

from __future__ import annotations

import socket
from typing import ClassVar

from twisted.internet import defer
from twisted.internet.error import DNSLookupError
from twisted.names import error as names_error
from twisted.python.failure import Failure

from crawler.resolver import BlockedAddressError

#: Every result a lookup can have, as counted in ``dns/lookups/<result>``.
RESULTS = ("ok", "nxdomain", "nodata", "servfail", "timeout", "blocked")
#: Kinds that say the name has no address at all (confirmed once, then final).
PERMANENT = frozenset({"nxdomain", "nodata"})


class DNSFailure(DNSLookupError):
    """A lookup that found no address, and why (``kind``).

    A ``DNSLookupError``: Twisted's resolution wrappers pass only that kind of
    error on quietly (any other is logged with a traceback).
    """

    kind: ClassVar[str] = "servfail"

    def __init__(self, name: str, detail: str = "") -> None:
        super().__init__(f"{name}: {self.kind}" + (f" ({detail})" if detail else ""))
        self.name = name
        self.detail = detail


class NameNotFound(DNSFailure):
    """NXDOMAIN: the name does not exist (asked twice)."""

    kind = "nxdomain"


class NoAddress(DNSFailure):
    """The name exists but has no A or AAAA record (asked twice)."""

    kind = "nodata"


class ServerFailure(DNSFailure):
    """SERVFAIL, REFUSED, a malformed answer, or the system resolver's temporary failure."""

    kind = "servfail"


class LookupTimeout(DNSFailure):
    """No answer within ``DNS_TIMEOUT``."""

    kind = "timeout"


_BY_KIND: dict[str, type[DNSFailure]] = {
    cls.kind: cls for cls in (NameNotFound, NoAddress, ServerFailure, LookupTimeout)}


def failure_for(kind: str, name: str, detail: str = "") -> DNSFailure:
    """The :class:`DNSFailure` of ``kind`` (a kind without a class of its own: a server failure)."""
    return _BY_KIND.get(kind, ServerFailure)(name, detail)


def failure_kind(failure: Failure | BaseException) -> str:
    """The kind of a failed query: what Twisted, the system or the inner resolver raised."""
    error = failure.value if isinstance(failure, Failure) else failure
    if isinstance(error, DNSFailure | BlockedAddressError):
        return error.kind
    if isinstance(error, names_error.DNSNameError):
        return "nxdomain"
    if isinstance(error, defer.TimeoutError | defer.CancelledError):
        return "timeout"
    if isinstance(error, socket.gaierror):
        return gai_kind(error.errno)
    return "servfail"


def gai_kind(code: int | None) -> str:
    """The kind of a ``getaddrinfo`` error (glibc says EAI_AGAIN for SERVFAIL and timeouts)."""
    if code == socket.EAI_NONAME:
        return "nxdomain"
    if code == getattr(socket, "EAI_NODATA", None):
        return "nodata"
    return "servfail"


def as_failure(failure: Failure, name: str) -> Failure:
    """Any failure as a :class:`DNSFailure` (a timeout cancels a query: CancelledError)."""
    if isinstance(failure.value, DNSFailure):
        return failure
    return Failure(failure_for(failure_kind(failure), name, type(failure.value).__name__))


__all__ = [
    "PERMANENT", "RESULTS", "DNSFailure", "LookupTimeout", "NameNotFound", "NoAddress",
    "ServerFailure", "as_failure", "failure_for", "failure_kind", "gai_kind",
]
