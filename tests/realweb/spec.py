"""What a real-socket test web holds: hosts, their names, pages and robots.txt.

A test writes the web it needs in a few lines, and the server process gets it
as JSON (``Web.to_json`` / ``Web.from_json``):

>>> web = Web([
...     Host("a.test", robots="User-agent: *\\nDisallow: /private\\n", pages={
...         "/": links_to("/x?b=2&a=1", "https://a.test/y", "http://b.test/"),
...         "/x?b=2&a=1": page("exact target"),
...         "/y": page(status=503, headers={"Retry-After": "5"}),
...     }),
...     Host("b.test", upgrade=True),            # http -> https, same target
...     Host("v6.test", ipv4=False, ipv6=True),  # AAAA ::1 only
... ])

Pages are keyed by the exact request-target as it comes off the wire: a
``str`` key is matched as its UTF-8 bytes, a ``bytes`` key as is, so
``/list?b=2&a=1`` and ``/list?a=1&b=2`` are two different pages, and so are
``/caf%C3%A9`` and ``"/café"`` (raw UTF-8 bytes in the path).

Addresses are not written here: the server gives each host its own loopback
address when it starts (``layout.py``), unless a host names one
(``address=``) or shares one with others (``share=``). Every address, given
or allocated, must be a loopback one.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .dns import Failure, Name

#: How the web picks its ports: 80/443 ("standard", needs root), free high
#: ports shared by every address ("high"), or standard when running as root
#: and high otherwise ("auto").
Ports = Literal["auto", "standard", "high"]

Target = str | bytes

ROBOTS_TARGET = b"/robots.txt"


def require_loopback(address: str) -> str:
    """``address`` if it is a loopback one (127.0.0.0/8 or ::1); ValueError otherwise.

    The test web must never bind, announce or link to an address off the
    machine, so this is checked wherever an address enters it.
    """
    try:
        ip = ipaddress.ip_address(address)
    except ValueError as exc:
        raise ValueError(f"the test web takes IP address literals only, not {address!r}") from exc
    if not ip.is_loopback:
        raise ValueError(f"the test web uses loopback addresses only (127.0.0.0/8, ::1), "
                         f"not {address}")
    return str(ip)


def target_bytes(target: Target) -> bytes:
    """A page key as the request-target bytes it matches (str keys as UTF-8)."""
    return target if isinstance(target, bytes) else target.encode("utf-8")


@dataclass
class Page:
    """One answer: status, headers, body, and how the server delivers it.

    ``links`` make an HTML body (rendered at serve time, so that absolute
    links to the web's own hosts carry the port when it is not the default);
    ``body`` is sent verbatim instead. ``size`` pads (with spaces) or cuts
    the body to exactly that many bytes. ``delay`` is how long the server
    waits, after the request head arrived, before it answers (a slow
    server). ``verbatim`` is header lines sent as they are, after the
    others (each ending in CRLF: repeated names, odd case, folded lines).
    ``redirect`` is a Location, where ``{host}`` is the requested
    host name and ``{target}`` the exact request-target (see
    :func:`to_https`); it is completed with the port like a link.
    """

    status: int = 200
    body: bytes | str | None = None
    links: list[str] = field(default_factory=list)
    title: str = ""
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    size: int | None = None
    redirect: str | None = None
    verbatim: bytes = b""

    def __post_init__(self) -> None:
        if isinstance(self.body, str):
            self.body = self.body.encode("utf-8")
        if self.body is not None and self.links:
            raise ValueError("a page has a verbatim body or links, not both")
        if self.delay < 0 or (self.size is not None and self.size < 0):
            raise ValueError("delay and size must not be negative")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["body"] = None if self.body is None else bytes(self.body).decode("latin-1")
        d["verbatim"] = self.verbatim.decode("latin-1")
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Page:
        d = dict(d)
        if d.get("body") is not None:
            d["body"] = d["body"].encode("latin-1")
        d["verbatim"] = d.get("verbatim", "").encode("latin-1")
        return cls(**d)


def page(body: bytes | str = "", *, status: int = 200, content_type: str | None = None,
         headers: Mapping[str, str] | None = None, delay: float = 0.0,
         size: int | None = None) -> Page:
    """A page with a verbatim body (text/html unless ``content_type`` says otherwise)."""
    return Page(status=status, body=body, content_type=content_type,
                headers=dict(headers or {}), delay=delay, size=size)


def links_to(*hrefs: str, title: str = "", status: int = 200,
             headers: Mapping[str, str] | None = None, delay: float = 0.0,
             size: int | None = None) -> Page:
    """An HTML page linking to each of ``hrefs`` (absolute, relative, any scheme)."""
    return Page(status=status, links=list(hrefs), title=title, headers=dict(headers or {}),
                delay=delay, size=size)


def redirect(location: str, status: int = 301) -> Page:
    """A redirect to ``location`` (``{host}``/``{target}`` filled in when served)."""
    if not 300 <= status < 400:
        raise ValueError(f"a redirect needs a 3xx status, not {status}")
    return Page(status=status, redirect=location)


def to_https(status: int = 301) -> Page:
    """A redirect to the same host and exact target over HTTPS."""
    return redirect("https://{host}{target}", status)


@dataclass
class Host:
    """A site: its names, its content, and how it is reached.

    ``names`` (one name or several; the first is the main one) all serve
    the same content and are all in the certificate. ``robots`` is the
    robots.txt body, or a status (404, 500...) or a full Page; None means
    there is no robots.txt (404). ``http_pages`` override ``pages`` for
    plain HTTP only; ``upgrade`` answers every plain HTTP request with a
    301 to the same target over HTTPS. ``http``/``https`` False: the host
    does not serve that scheme (connection refused when it has its address
    alone, 421 when it shares it). ``ipv4``/``ipv6`` say whether it has an A
    record and listens on its IPv4 address, and whether it has AAAA ``::1``
    and listens there. ``address`` pins its IPv4 address; hosts with the
    same ``share`` tag get one allocated address between them (shared
    hosting, told apart by the Host header and SNI). ``dns_fail`` makes its
    names fail in DNS (its servers still listen).
    """

    names: str | Sequence[str]
    pages: dict[Target, Page] = field(default_factory=dict)
    robots: str | int | Page | None = None
    http_pages: dict[Target, Page] = field(default_factory=dict)
    upgrade: bool = False
    http: bool = True
    https: bool = True
    ipv4: bool = True
    ipv6: bool = False
    address: str | None = None
    share: str | None = None
    dns_fail: Failure | None = None
    ttl: int = 60

    def __post_init__(self) -> None:
        names = [self.names] if isinstance(self.names, str) else list(self.names)
        if not names:
            raise ValueError("a host needs at least one name")
        self.names = tuple(n.lower().rstrip(".") for n in names)
        if not (self.ipv4 or self.ipv6):
            raise ValueError(f"{self.name}: a host needs IPv4 or IPv6 (or both)")
        if self.address is not None:
            if not self.ipv4:
                raise ValueError(f"{self.name}: address= is an IPv4 address; ipv4 is off")
            if ipaddress.ip_address(require_loopback(self.address)).version != 4:
                raise ValueError(f"{self.name}: address= takes an IPv4 address; "
                                 "IPv6 hosts always use ::1")
            if self.share is not None:
                raise ValueError(f"{self.name}: give address= or share=, not both")
        if isinstance(self.robots, int) and not isinstance(self.robots, bool):
            self.robots = Page(status=self.robots, body=f"{self.robots}\n",
                               content_type="text/plain")
        elif isinstance(self.robots, str):
            self.robots = Page(body=self.robots, content_type="text/plain")
        self.pages = {target_bytes(k): v for k, v in self.pages.items()}
        self.http_pages = {target_bytes(k): v for k, v in self.http_pages.items()}
        if ROBOTS_TARGET in self.pages and self.robots is not None:
            raise ValueError(f"{self.name}: robots.txt given twice (robots= and pages=)")

    @property
    def name(self) -> str:
        return self.names[0]

    @property
    def robots_page(self) -> Page | None:
        assert self.robots is None or isinstance(self.robots, Page)
        return self.robots

    def find(self, scheme: str, target: bytes) -> Page | None:
        """The page for ``target`` over ``scheme``, or None (404)."""
        if scheme == "http" and self.upgrade:
            return to_https()
        if scheme == "http" and target in self.http_pages:
            return self.http_pages[target]
        if target == ROBOTS_TARGET and self.robots is not None:
            return self.robots_page
        return self.pages.get(target)

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in vars(self).items() if k not in ("pages", "http_pages", "robots")}
        d["names"] = list(self.names)
        d["robots"] = None if self.robots is None else self.robots_page.to_dict()  # type: ignore[union-attr]
        for key in ("pages", "http_pages"):
            d[key] = {t.decode("latin-1"): p.to_dict() for t, p in getattr(self, key).items()}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Host:
        d = dict(d)
        for key in ("pages", "http_pages"):
            d[key] = {t.encode("latin-1"): Page.from_dict(p) for t, p in d[key].items()}
        if d["robots"] is not None:
            d["robots"] = Page.from_dict(d["robots"])
        return cls(**d)


@dataclass
class Web:
    """The hosts, extra DNS entries (names with no server, failures) and the port policy."""

    hosts: list[Host]
    dns: dict[str, Name] = field(default_factory=dict)
    ports: Ports = "auto"

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for host in self.hosts:
            for name in host.names:
                if name in seen:
                    raise ValueError(f"name {name} belongs to two hosts")
                seen.add(name)
        self.dns = {k.lower().rstrip("."): v for k, v in self.dns.items()}
        for entry in self.dns.values():
            for address in (*entry.a, *entry.aaaa):
                require_loopback(address)  # Name checks too; this keeps it true after edits
        if self.ports not in ("auto", "standard", "high"):
            raise ValueError(f"ports is 'auto', 'standard' or 'high', not {self.ports!r}")

    def host(self, name: str) -> Host | None:
        name = name.lower().rstrip(".")
        return next((h for h in self.hosts if name in h.names), None)

    def to_json(self) -> str:
        return json.dumps({"hosts": [h.to_dict() for h in self.hosts],
                           "dns": {k: asdict(v) for k, v in self.dns.items()},
                           "ports": self.ports})

    @classmethod
    def from_json(cls, text: str) -> Web:
        d = json.loads(text)
        return cls(hosts=[Host.from_dict(h) for h in d["hosts"]],
                   dns={k: Name(**v) for k, v in d["dns"].items()}, ports=d["ports"])


def web_of(n_hosts: int, pages_per_host: int = 3, *, tld: str = "test",
           robots: str | int | None = "User-agent: *\nAllow: /\n",
           ports: Ports = "auto") -> Web:
    """A quick web: hosts ``h1.test`` ... each on its own address.

    Host i's ``/`` links to its pages ``/p/1`` ... ``/p/K``; page k links to
    page k+1 (the last one back to ``/``) and to the next host's ``/``, so
    every page of every host is reachable from any host's ``/``.
    """
    if n_hosts < 1 or pages_per_host < 0:
        raise ValueError("web_of needs at least one host and no negative page count")
    names = [f"h{i}.{tld}" for i in range(1, n_hosts + 1)]
    hosts = []
    for i, name in enumerate(names):
        other = f"http://{names[(i + 1) % n_hosts]}/"
        pages: dict[Target, Page] = {
            "/": links_to(*(f"/p/{k}" for k in range(1, pages_per_host + 1)), title=name)}
        for k in range(1, pages_per_host + 1):
            nxt = f"/p/{k + 1}" if k < pages_per_host else "/"
            pages[f"/p/{k}"] = links_to(nxt, other, title=f"{name} page {k}")
        hosts.append(Host(name, pages=pages, robots=robots))
    return Web(hosts, ports=ports)


def shared_hosting(names: Sequence[str], share: str = "shared", **host_options: Any
                   ) -> list[Host]:
    """One host per name, all on a single allocated address (``share``).

    Each serves a ``/`` naming itself, so a test sees which one answered.
    """
    return [Host(name, pages={"/": page(f"<h1>{name}</h1>\n")}, share=share, **host_options)
            for name in names]
