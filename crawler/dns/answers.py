"""What a lookup finds: an :class:`Answer`, and the addresses in a DNS answer section.

No I/O: the records come from :mod:`twisted.names` (:mod:`crawler.dns.lookups`
asks for them).
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass

from twisted.names import dns as names_dns

#: CNAME links followed at most (a longer chain is a loop or a broken zone).
MAX_CNAME_HOPS = 8


@dataclass(frozen=True, slots=True)
class Answer:
    """The addresses a name resolved to, and how long they may be kept (None: unknown)."""

    addresses: tuple[str, ...]
    ttl: float | None = None


def ordered(addresses: Sequence[str]) -> tuple[str, ...]:
    """Distinct addresses, IPv4 first, else in the order given.

    On a machine without IPv6 routes an IPv6 address fails at once, but
    Twisted's endpoint waits 0.3 s before it tries the next address, which
    every dual-stack host would cost. An IPv6-only host has only IPv6
    addresses and is crawled through them.
    """
    unique = list(dict.fromkeys(addresses))
    return tuple([a for a in unique if ":" not in a] + [a for a in unique if ":" in a])


def addresses_in(name: str, answers: Sequence[names_dns.RRHeader], qtype: int
                 ) -> tuple[list[str], int | None, str | None]:
    """The ``qtype`` addresses of ``name`` in an answer section, following its CNAMEs.

    Returns (addresses, smallest TTL of the records used, and the CNAME target
    still to be asked when the server gave the chain but not its end).
    """
    cnames = {_owner(rr): rr for rr in answers if rr.type == names_dns.CNAME}
    current, ttls, seen = name, [], {name}
    while current in cnames and len(seen) <= MAX_CNAME_HOPS:
        record = cnames[current]
        ttls.append(record.ttl)
        current = record.payload.name.name.decode("ascii", "replace").rstrip(".").lower()
        if current in seen:
            break  # a loop: no address at its end
        seen.add(current)
    found = [rr for rr in answers if rr.type == qtype and _owner(rr) == current]
    ttls += [rr.ttl for rr in found]
    addresses = [_address(rr) for rr in found]
    dangling = current if not addresses and current != name and current not in cnames else None
    return addresses, min(ttls) if ttls else None, dangling


def _owner(record: names_dns.RRHeader) -> str:
    return record.name.name.decode("ascii", "replace").rstrip(".").lower()


def _address(record: names_dns.RRHeader) -> str:
    if record.type == names_dns.A:
        return record.payload.dottedQuad()
    return socket.inet_ntop(socket.AF_INET6, record.payload.address)


__all__ = ["MAX_CNAME_HOPS", "Answer", "addresses_in", "ordered"]
