"""Where each host of a web lives: its loopback addresses and the web's two ports.

The server process decides the layout when it starts (it knows which
addresses and ports it could bind) and hands it to the test as JSON; the
test builds URLs from it, so URLs carry a port exactly when it is not the
scheme's default.

IPv4 hosts get addresses counted up from a base (``127.0.1.1``,
``127.0.1.2``, ...; octets 0 and 255 skipped); IPv6 hosts all use ``::1``,
the one IPv6 loopback address, and are told apart by Host header and SNI.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from .dns import Name
from .spec import Web, require_loopback

DEFAULT_PORTS = {"http": 80, "https": 443}
IPV6_ADDRESS = "::1"
#: Where allocation starts unless that block is busy (another web running).
FIRST_BASE = "127.0.1.0"


@dataclass(frozen=True)
class Place:
    """One host's names and where they answer."""

    names: tuple[str, ...]
    ipv4: str | None
    ipv6: str | None
    http: bool
    https: bool

    @property
    def name(self) -> str:
        return self.names[0]

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(a for a in (self.ipv4, self.ipv6) if a is not None)


@dataclass(frozen=True)
class Layout:
    """Every host's place, and the HTTP and HTTPS ports (the same on every address)."""

    places: tuple[Place, ...]
    http_port: int
    https_port: int

    def place(self, name: str) -> Place:
        name = name.lower().rstrip(".")
        for place in self.places:
            if name in place.names:
                return place
        raise KeyError(f"no host named {name} in this web")

    def knows(self, name: str) -> bool:
        return any(name.lower().rstrip(".") in p.names for p in self.places)

    def port(self, scheme: str) -> int:
        return {"http": self.http_port, "https": self.https_port}[scheme]

    def authority(self, name: str, scheme: str) -> str:
        """``name`` or ``name:port``: the port only when it is not the default one."""
        port = self.port(scheme)
        return name if port == DEFAULT_PORTS[scheme] else f"{name}:{port}"

    def url(self, name: str, target: str = "/", scheme: str = "http") -> str:
        """The URL of ``target`` on host ``name`` (which must be in the web)."""
        self.place(name)
        if not target.startswith("/"):
            raise ValueError(f"a target starts with '/': {target!r}")
        return f"{scheme}://{self.authority(name, scheme)}{target}"

    def addresses(self) -> set[str]:
        return {a for p in self.places for a in p.addresses}

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Layout:
        d = json.loads(text)
        places = tuple(Place(names=tuple(p["names"]), ipv4=p["ipv4"], ipv6=p["ipv6"],
                             http=p["http"], https=p["https"]) for p in d["places"])
        return cls(places, d["http_port"], d["https_port"])


def _addresses_from(base: str, taken: set[str]) -> Iterator[str]:
    """Loopback IPv4 addresses after ``base``, skipping .0, .255 and ``taken``."""
    n = int(ipaddress.IPv4Address(base))
    last = int(ipaddress.IPv4Address("127.255.255.254"))
    while n < last:
        n += 1
        address = str(ipaddress.IPv4Address(n))
        if n & 0xFF in (0, 255) or address in taken or address == "127.0.0.1":
            continue
        yield address


def place_hosts(web: Web, base: str, http_port: int, https_port: int) -> Layout:
    """The layout with automatic addresses counted from ``base``.

    Pinned addresses (``address=``) are kept; each ``share`` tag gets one
    address; every other IPv4 host gets one of its own.
    """
    pinned = {h.address for h in web.hosts if h.address is not None}
    fresh = _addresses_from(require_loopback(base), pinned)
    shared: dict[str, str] = {}
    places = []
    for host in web.hosts:
        ipv4 = None
        if host.ipv4:
            if host.address is not None:
                ipv4 = host.address
            elif host.share is not None:
                if host.share not in shared:
                    shared[host.share] = next(fresh)
                ipv4 = shared[host.share]
            else:
                ipv4 = next(fresh)
        places.append(Place(names=tuple(host.names), ipv4=ipv4,
                            ipv6=IPV6_ADDRESS if host.ipv6 else None,
                            http=host.http, https=host.https))
    layout = Layout(tuple(places), http_port, https_port)
    for address in layout.addresses():
        require_loopback(address)
    return layout


def zone(web: Web, layout: Layout) -> dict[str, Name]:
    """The DNS zone: each name's addresses from the layout, then ``web.dns`` on top."""
    names: dict[str, Name] = {}
    for host in web.hosts:
        place = layout.place(host.name)
        entry = Name(a=[place.ipv4] if place.ipv4 else [],
                     aaaa=[place.ipv6] if place.ipv6 else [], fail=host.dns_fail, ttl=host.ttl)
        for name in host.names:
            names[name] = entry
    names.update(web.dns)
    return names
