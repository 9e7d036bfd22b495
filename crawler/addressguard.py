"""Which addresses the crawler may connect to (SSRF protection), as pure decisions.

A broad crawler follows links that strangers wrote. A page or a redirect that
points at ``http://169.254.169.254/`` (a cloud's metadata service, with its
credentials), ``http://localhost:6379/`` (our own Redis) or ``http://10.0.0.7/``
(an intranet) would turn the crawler into a proxy into the network it runs
in. So by default no request goes to an address that is not public:
loopback, private, link-local, shared (CGNAT ``100.64.0.0/10``), multicast,
reserved or unspecified, in IPv4 and IPv6, including the IPv6 forms that carry
an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, 6to4 ``2002::/16``, NAT64
``64:ff9b::/96``, whose embedded address is judged) and Teredo (always refused).

This module only decides; it does no I/O (no DNS, no sockets). Two components
apply it (see :mod:`crawler.resolver` for what is checked where):

- :class:`crawler.middlewares.addressguard.AddressGuardMiddleware` checks what
  a URL says by itself (:meth:`AddressPolicy.check_url`), for every request;
- :class:`crawler.dns.CrawlResolver` (the default ``TWISTED_DNS_RESOLVER``,
  or the older :class:`crawler.resolver.GuardedResolver`) checks every DNS
  answer (:meth:`AddressPolicy.check_ip` with ``resolved=True``).

A URL host is judged in every form that some resolver or browser reads as an
address: ``127.0.0.1``, ``[::ffff:127.0.0.1]``, ``2130706433``, ``0x7f.0.0.1``,
``0177.0.0.1``, ``127.1``, percent-encoded, full-width digits, a trailing dot.
Names that always mean "this machine or its network" are refused without DNS:

- ``localhost``, ``*.localhost`` (RFC 6761) and the ``/etc/hosts`` aliases
  (``localhost.localdomain``, ``ip6-localhost``, ...): reason ``localhost``;
- ``*.local`` (mDNS, RFC 6762), ``*.home.arpa`` (RFC 8375), ``*.internal``
  (reserved for private use by ICANN; ``metadata.google.internal``) and
  ``*.localdomain``: reason ``local-name``;
- a name without a dot (``http://intranet/``, ``http://metadata/``): the
  system resolver completes it with the machine's search domains, so it names
  a host of the local network, never a public site (reason ``single-label``);
- a host that ends in a number but is no valid address (``1.2.3.4.5``,
  ``08.0.0.1``): no public name looks like that (reason ``bad-address``).

Settings (read by :meth:`AddressPolicy.from_settings`):

- ``ADDRESS_GUARD_ENABLED`` (True): off, nothing is checked anywhere.
- ``ADDRESS_GUARD_ALLOW`` ([]): networks (CIDR or single addresses) allowed
  although special, both written in URLs and as DNS answers (an intranet crawl).
- ``ADDRESS_GUARD_ALLOW_RESOLVED`` ([]): networks allowed only as the DNS
  answer for a name, never written as a literal in a URL. The test harness
  needs it: its resolver answers 127.0.0.1 for every name, while a link to
  ``http://127.0.0.1/`` must still be refused.
- ``ADDRESS_GUARD_ALLOW_HOSTS`` ([]): trusted host names (``name``, or
  ``*.domain`` for its subdomains): neither the name rules nor their DNS
  answers are checked. For a proxy given by a name that resolves to a private
  address, or an intranet site.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import unicodedata
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from scrapy.exceptions import IgnoreRequest

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: How a request the guard refused ends in the frontier: a dead letter of this reason.
BLOCKED_REASON = "address-blocked"

_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")  # "this host"; Linux connects 0.0.0.0 to itself
_SHARED = ipaddress.IPv4Network("100.64.0.0/10")  # carrier-grade NAT (RFC 6598): not global
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052: the gateway connects to the last 32 bits

_LOCALHOST_NAMES = frozenset({
    "localhost", "localhost.localdomain", "localhost4", "localhost4.localdomain4",
    "localhost6", "localhost6.localdomain6", "ip6-localhost", "ip6-loopback",
})
# /etc/hosts entries of Debian and macOS that name multicast and broadcast addresses.
_LOCAL_NAMES = frozenset({"ip6-allnodes", "ip6-allrouters", "broadcasthost"})
_LOCAL_SUFFIXES = (".local", ".localdomain", ".internal", ".home.arpa")
# Schemes whose URLs never open a connection (no host to judge).
_NO_NETWORK_SCHEMES = frozenset({"data", "file", "about"})
# Full stops that IDNA reads as label separators.
_IDNA_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})


class AddressBlocked(IgnoreRequest):
    """A request refused because of where it would connect.

    An ``IgnoreRequest``: a decision, not a download error, so it is neither
    retried nor counted as a download error; its URL ends as a dead letter
    of reason ``address-blocked`` (``crawler.lease.Ticket.block``).
    """

    def __init__(self, host: str, reason: str, address: str | None = None) -> None:
        self.host = host
        self.reason = reason
        self.address = address
        shown = f"{host} ({address})" if address and address != host else host
        super().__init__(f"address guard: {shown} is {reason}")

    def explained(self) -> str:
        """The refusal and the setting that would allow it, if one would: what
        the operator reads in a dead letter."""
        hint = allow_hint(self.address or self.host, self.reason)
        return f"{self}; {hint} allows it" if hint else str(self)


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """Which addresses and host names may be connected to.

    ``allow`` networks pass everywhere; ``allow_resolved`` ones only as DNS
    answers; ``allow_hosts`` (exact names) and ``allow_host_suffixes``
    (``.domain``) are trusted names whose name and answers are not checked.
    """

    enabled: bool = True
    allow: tuple[IPNetwork, ...] = ()
    allow_resolved: tuple[IPNetwork, ...] = ()
    allow_hosts: frozenset[str] = frozenset()
    allow_host_suffixes: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, settings: Any) -> AddressPolicy:
        """Read the ``ADDRESS_GUARD_*`` settings; a malformed entry raises ``ValueError``.

        A typo in a security setting must stop the crawl, not weaken the guard.
        """
        hosts = [normalise_host(h) for h in settings.getlist("ADDRESS_GUARD_ALLOW_HOSTS")]
        return cls(
            enabled=settings.getbool("ADDRESS_GUARD_ENABLED", True),
            allow=parse_networks(settings.getlist("ADDRESS_GUARD_ALLOW"), "ADDRESS_GUARD_ALLOW"),
            allow_resolved=parse_networks(settings.getlist("ADDRESS_GUARD_ALLOW_RESOLVED"),
                                          "ADDRESS_GUARD_ALLOW_RESOLVED"),
            allow_hosts=frozenset(h for h in hosts if not h.startswith(("*.", "."))),
            allow_host_suffixes=tuple("." + h.lstrip("*.") for h in hosts
                                      if h.startswith(("*.", "."))),
        )

    def check_ip(self, ip: str, *, resolved: bool = False) -> str | None:
        """Why ``ip`` may not be connected to, or ``None`` when it may.

        ``resolved``: ``ip`` is a DNS answer, so ``allow_resolved`` applies too.
        Text that is no address is refused (``not-an-address``).
        """
        if not self.enabled:
            return None
        address = parse_ip(ip)
        if address is None:
            return "not-an-address"
        return address_reason(address, self.allow + self.allow_resolved if resolved
                              else self.allow)

    def check_url_host(self, host: str) -> str | None:
        """Why a URL with this host may not be fetched, judged without DNS, or ``None``.

        ``None`` does not make a name safe: its DNS answer is judged later.
        """
        if not self.enabled:
            return None
        forms = [normalise_host(host)]
        if "%" in host:  # some proxies decode it: judge both forms, the decoded first
            forms.insert(0, normalise_host(unquote(host)))
        for form in forms:
            reason = self._check_host_form(form)
            if reason is not None:
                return reason
        return None

    def check_url(self, url: str) -> str | None:
        """:meth:`check_url_host` for the host of ``url`` (``no-host`` when it has none).

        ``data:`` and ``file:`` URLs open no connection and pass.
        """
        if not self.enabled:
            return None
        try:
            parts = urlsplit(url)
            host = parts.hostname or ""
        except ValueError:  # e.g. an unbalanced "[" in the netloc
            return "bad-url"
        if parts.scheme.lower() in _NO_NETWORK_SCHEMES:
            return None
        return self.check_url_host(host)

    def host_trusted(self, host: str) -> bool:
        """Whether ``host`` (normalised) is listed in ``ADDRESS_GUARD_ALLOW_HOSTS``."""
        return host in self.allow_hosts or host.endswith(self.allow_host_suffixes)

    def _check_host_form(self, name: str) -> str | None:
        if not name:
            return "no-host"  # Twisted "resolves" an empty host to 0.0.0.0
        if self.host_trusted(name):
            return None
        address = parse_ip(name) or parse_ipv4_loose(name)
        if address is not None:
            return address_reason(address, self.allow)
        if _ends_in_number(name):
            return "bad-address"
        return local_name_reason(name)


def parse_networks(entries: Iterable[str], setting: str = "network") -> tuple[IPNetwork, ...]:
    """CIDR networks or single addresses, as networks (host bits are masked)."""
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"{setting}: {entry!r} is not an IP network ({exc})") from None
    return tuple(networks)


def normalise_host(host: str) -> str:
    """A host as the guard compares it: lower case, ASCII (IDNA), no brackets or trailing dots."""
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host.isascii():
        host = unicodedata.normalize("NFKC", host).translate(_IDNA_DOTS)
        # Not a valid IDN: compared as it is (then it cannot be a local name).
        with contextlib.suppress(UnicodeError):
            host = host.encode("idna").decode("ascii")
    return host.rstrip(".").lower()


def parse_ip(text: str) -> IPAddress | None:
    """The address ``text`` spells in standard notation (an IPv6 zone is dropped), or ``None``."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:
        text = text.partition("%")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def parse_ipv4_loose(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address ``host`` spells in a form resolvers accept, or ``None``.

    ``getaddrinfo`` (through ``inet_aton``) and browsers (the WHATWG URL
    standard) read ``2130706433``, ``0x7f.0.0.1``, ``0177.0.0.1`` and
    ``127.1`` as 127.0.0.1. The WHATWG rules are implemented here, so the
    answer does not depend on the C library; ``socket.inet_aton`` (pure
    parsing) is asked as well, for whatever this platform's resolver accepts
    besides.
    """
    value = _whatwg_ipv4(host)
    if value is not None:
        return ipaddress.IPv4Address(value)
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, ValueError):  # ValueError: non-ASCII text or a NUL
        return None


def address_reason(address: IPAddress, allow: tuple[IPNetwork, ...] = ()) -> str | None:
    """Why ``address`` is not a public address, or ``None`` (also when in ``allow``).

    An IPv6 address that carries an IPv4 one is judged by the IPv4 address,
    allow-list included, with the carrier as a prefix: ``ipv4-mapped-loopback``.
    """
    if any(address in network for network in allow):  # other IP versions never match
        return None
    if isinstance(address, ipaddress.IPv4Address):
        return _ipv4_reason(address)
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        carrier, ipv4 = embedded
        reason = address_reason(ipv4, allow)
        return None if reason is None else f"{carrier}-{reason}"
    return _ipv6_reason(address)


def local_name_reason(name: str) -> str | None:
    """Why the normalised host ``name`` always means the local machine or network, or ``None``."""
    if name in _LOCALHOST_NAMES or name.endswith(".localhost"):
        return "localhost"
    if name in _LOCAL_NAMES or name.endswith(_LOCAL_SUFFIXES):
        return "local-name"
    if "." not in name:
        return "single-label"
    return None


def _ipv4_reason(address: ipaddress.IPv4Address) -> str | None:
    if address in _THIS_NETWORK:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address.is_reserved:  # 240.0.0.0/4, with the broadcast address
        return "reserved"
    if address in _SHARED:
        return "shared"
    if address.is_private:
        return "private"
    if not address.is_global:
        return "not-global"
    return None


def _ipv6_reason(address: ipaddress.IPv6Address) -> str | None:
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address.is_site_local:  # deprecated fec0::/10, still routed inside some networks
        return "site-local"
    if address.teredo is not None:  # the client part is obfuscated: never a web server
        return "teredo"
    if address.is_reserved:  # everything outside 2000::/3 that is not named above
        return "reserved"
    if address.is_private:  # fc00::/7 unique local, documentation, ...
        return "private"
    if not address.is_global:
        return "not-global"
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    if address.ipv4_mapped is not None:
        return "ipv4-mapped", address.ipv4_mapped
    if address.sixtofour is not None:
        return "6to4", address.sixtofour
    if address in _NAT64:
        return "nat64", ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _whatwg_ipv4(host: str) -> int | None:
    """The WHATWG URL standard's IPv4 parser: 1 to 4 decimal, octal or hex parts."""
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if not 1 <= len(parts) <= 4:
        return None
    numbers: list[int] = []
    for part in parts:
        number = _ipv4_number(part)
        if number is None:
            return None
        numbers.append(number)
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        return None
    return sum(n << (8 * (3 - i)) for i, n in enumerate(head)) + last


def _ipv4_number(part: str) -> int | None:
    if not part:
        return None
    digits, text = "0123456789", part
    if part[:2].lower() == "0x":
        digits, text = "0123456789abcdef", part[2:]
    elif len(part) > 1 and part.startswith("0"):
        digits, text = "01234567", part[1:]
    if not text:
        return 0  # "0x" alone is 0 for WHATWG
    if any(c not in digits for c in text.lower()):
        return None
    return int(text, len(digits))


def _ends_in_number(host: str) -> bool:
    """WHATWG: a host whose last label is a number must be an IPv4 address."""
    last = host.rstrip(".").rpartition(".")[2].lower()
    if last.startswith("0x"):
        return all(c in "0123456789abcdef" for c in last[2:])
    return last.isascii() and last.isdigit()


class SeenOnce:
    """The last ``size`` keys seen: "log once per host" with bounded memory.

    A broad crawl meets millions of hosts, so a plain set of logged hosts
    would only grow; an LRU forgets the oldest, which at worst logs a host twice.
    """

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._keys: OrderedDict[str, None] = OrderedDict()

    def first(self, key: str) -> bool:
        """True the first time ``key`` is seen (since it was last forgotten)."""
        if key in self._keys:
            self._keys.move_to_end(key)
            return False
        self._keys[key] = None
        if len(self._keys) > self.size:
            self._keys.popitem(last=False)
        return True


_HOST_REASONS = frozenset({"localhost", "local-name", "single-label"})
_LOOPBACK_V4 = ipaddress.IPv4Network("127.0.0.0/8")


def allow_hint(host: str, guard_reason: str) -> str | None:
    """The setting that would let the address guard pass ``host``, or ``None`` if none would.

    Names are allowed by name (``ADDRESS_GUARD_ALLOW_HOSTS``), addresses by
    network (``ADDRESS_GUARD_ALLOW``): all of loopback for a loopback address,
    the address itself otherwise (the operator may widen it to its network).
    A host that is no valid address or an empty host cannot be allowed.
    """
    name = normalise_host(host)
    if guard_reason in _HOST_REASONS:
        return f"ADDRESS_GUARD_ALLOW_HOSTS={name}"
    address = parse_ip(name) or parse_ipv4_loose(name)
    if address is None:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.is_loopback:
            return "ADDRESS_GUARD_ALLOW=::1"
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is not None:  # the guard judges (and allows) the carried IPv4 address
            address = embedded
    if address in _LOOPBACK_V4:
        return "ADDRESS_GUARD_ALLOW=127.0.0.0/8"
    return f"ADDRESS_GUARD_ALLOW={address}"
