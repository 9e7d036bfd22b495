"""Binding a web's listening sockets: every (address, scheme) it serves, loopback only.

The layout is settled here, by binding: 80/443 when the policy (or root)
says so, else one free high port per scheme, the same on every address (so
a dual-stack host's URL works on both of its addresses). Automatic
addresses start at ``127.0.1.1``; when any of them is taken (another web
on the machine, say), the whole web moves to another random block of 127/8
and tries again. A pinned address or ``::1`` that is taken on 80/443 cannot
move, and that is an error saying so.
"""

from __future__ import annotations

import errno
import os
import random
import socket
from dataclasses import replace

from .layout import FIRST_BASE, IPV6_ADDRESS, Layout, place_hosts
from .spec import Ports, Web, require_loopback

ATTEMPTS = 20
Sockets = dict[tuple[str, str], socket.socket]  # (address, scheme) -> listening socket


def standard_ports(policy: Ports) -> bool:
    """Whether this policy means 80/443 here: "auto" does when running as root."""
    if policy == "standard" and os.geteuid() != 0:
        raise PermissionError("ports='standard' (80/443) needs root; use 'auto' or 'high'")
    return policy == "standard" or (policy == "auto" and os.geteuid() == 0)


def listening_socket(address: str, port: int) -> socket.socket:
    """A non-blocking TCP socket listening on loopback ``address``:``port`` (0: any)."""
    require_loopback(address)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((address, port))
        sock.listen(512)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def needed(layout: Layout) -> list[tuple[str, str]]:
    """Every (address, scheme) some host serves, in a stable order."""
    pairs: dict[tuple[str, str], None] = {}
    for place in layout.places:
        for address in place.addresses:
            if place.http:
                pairs[(address, "http")] = None
            if place.https:
                pairs[(address, "https")] = None
    return list(pairs)


class _Taken(Exception):
    def __init__(self, address: str, port: int, error: OSError) -> None:
        super().__init__(f"[{address}]:{port}: {error.strerror}")
        self.address, self.port, self.error = address, port, error


def _bind(layout: Layout, standard: bool) -> tuple[Layout, Sockets]:
    ports = {"http": 80, "https": 443} if standard else {"http": 0, "https": 0}
    sockets: Sockets = {}
    try:
        for address, scheme in needed(layout):
            try:
                sock = listening_socket(address, ports[scheme])
            except OSError as exc:
                raise _Taken(address, ports[scheme], exc) from exc
            sockets[(address, scheme)] = sock
            ports[scheme] = ports[scheme] or sock.getsockname()[1]
    except BaseException:
        for sock in sockets.values():
            sock.close()
        raise
    return replace(layout, http_port=ports["http"], https_port=ports["https"]), sockets


def bind_web(web: Web, *, attempts: int = ATTEMPTS, rng: random.Random | None = None
             ) -> tuple[Layout, Sockets]:
    """The web's layout and its listening sockets, or an error saying what is in the way."""
    standard = standard_ports(web.ports)
    rng = rng or random.Random()
    pinned = {h.address for h in web.hosts if h.address is not None} | {IPV6_ADDRESS}
    last: _Taken | None = None
    for attempt in range(attempts):
        base = FIRST_BASE if attempt == 0 else f"127.{rng.randint(2, 254)}.{rng.randint(0, 255)}.0"
        layout = place_hosts(web, base, 80 if standard else 0, 443 if standard else 0)
        try:
            return _bind(layout, standard)
        except _Taken as taken:
            if taken.error.errno == errno.EADDRNOTAVAIL and taken.address == IPV6_ADDRESS:
                raise RuntimeError("IPv6 loopback ::1 is not available on this machine"
                                   ) from taken.error
            if taken.error.errno not in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
                raise RuntimeError(f"cannot listen on {taken}") from taken.error
            if standard and taken.address in pinned:
                raise RuntimeError(
                    f"cannot listen on {taken}; it cannot move (pinned or ::1): another "
                    "test web may be running; Web(ports='high') avoids 80/443") from taken.error
            last = taken
    raise RuntimeError(f"no free block of loopback addresses after {attempts} tries "
                       f"(last: {last})")
