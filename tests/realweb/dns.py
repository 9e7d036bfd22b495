"""A real DNS server on 127.0.0.1 for tests: the only resolver test names ever reach.

Test crawls on the real-socket web resolve their host names here
(``DNS_NAMESERVERS=["127.0.0.1:PORT"]``), never through the machine's
resolver: a name the zone does not hold answers NXDOMAIN, and every address
in the zone must be a loopback one (127.0.0.0/8 or ``::1``), so a crawl that
follows a wrong answer still cannot send a packet off the machine.

The server is dnslib's, on UDP and TCP of one port, in threads of the test
process. The zone can change while it runs (a name's addresses move, a name
starts failing), and every question asked is kept (:attr:`TestDNS.asked`), so
a test can check how often, and for which types, a name was looked up.

>>> with TestDNS({"a.test": Name(a=["127.0.0.2"], aaaa=["::1"])}) as dns:
...     dns.nameserver   # "127.0.0.1:PORT", what DNS_NAMESERVERS takes
"""

from __future__ import annotations

import errno
import ipaddress
import socketserver
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self

from dnslib import AAAA, QTYPE, RCODE, RR, A, DNSError, DNSRecord
from dnslib.server import DNSHandler, DNSServer

#: How a name fails instead of answering: NXDOMAIN (it does not exist),
#: SERVFAIL (the server could not answer), or no answer at all (a timeout).
Failure = Literal["nxdomain", "servfail", "silent"]


@dataclass
class Name:
    """What the zone says of one name: its addresses, or how it fails."""

    a: list[str] = field(default_factory=list)
    aaaa: list[str] = field(default_factory=list)
    fail: Failure | None = None
    ttl: int = 60

    def __post_init__(self) -> None:
        for address in (*self.a, *self.aaaa):
            if not ipaddress.ip_address(address).is_loopback:
                raise ValueError(f"test DNS answers loopback addresses only, not {address}")


@dataclass(frozen=True)
class Question:
    """One question the server was asked."""

    name: str
    qtype: str  # "A", "AAAA", ...
    at: float  # time.time() when it arrived


class _Silent(DNSError):
    """Raised by the resolver for a name that answers nothing (dnslib then sends nothing)."""


class _Resolver:
    def __init__(self, dns: TestDNS) -> None:
        self.dns = dns

    def resolve(self, request: DNSRecord, handler: DNSHandler) -> DNSRecord:
        q = request.q
        name = str(q.qname).rstrip(".").lower()
        qtype = QTYPE.get(q.qtype, str(q.qtype))
        self.dns._note(Question(name, qtype, time.time()))
        entry = self.dns.lookup(name)
        reply = request.reply()
        if entry is None or entry.fail == "nxdomain":
            reply.header.rcode = RCODE.NXDOMAIN
        elif entry.fail == "servfail":
            reply.header.rcode = RCODE.SERVFAIL
        elif entry.fail == "silent":
            raise _Silent(name)
        elif qtype == "A":
            for address in entry.a:
                reply.add_answer(RR(q.qname, QTYPE.A, rdata=A(address), ttl=entry.ttl))
        elif qtype == "AAAA":
            for address in entry.aaaa:
                reply.add_answer(RR(q.qname, QTYPE.AAAA, rdata=AAAA(address), ttl=entry.ttl))
        return reply  # another type, or no address of the type: NOERROR with no answer


class _QuietLogger:
    """dnslib's logger interface, saying nothing (the questions are kept instead)."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


#: How often :meth:`TestDNS.start` looks for a port free for both UDP and TCP.
BIND_ATTEMPTS = 20


class _ThreadingUDPServer(socketserver.ThreadingMixIn, socketserver.UDPServer):
    daemon_threads = True
    allow_reuse_address = True


class _ThreadingTCPServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


class TestDNS:
    """The zone ``names`` served on 127.0.0.1, UDP and TCP, one port (0: any free)."""

    __test__ = False  # not a pytest test class

    def __init__(self, names: Mapping[str, Name] | None = None, port: int = 0) -> None:
        self._zone: dict[str, Name] = {k.lower().rstrip("."): v for k, v in (names or {}).items()}
        self._lock = threading.Lock()
        self.asked: list[Question] = []
        self._port = port
        self._servers: list[DNSServer] = []

    # ------------------------------------------------------------ the zone

    def lookup(self, name: str) -> Name | None:
        with self._lock:
            return self._zone.get(name.lower().rstrip("."))

    def set(self, name: str, entry: Name) -> None:
        """Add or change a name while the server runs."""
        with self._lock:
            self._zone[name.lower().rstrip(".")] = entry

    def update(self, names: Mapping[str, Name]) -> None:
        for name, entry in names.items():
            self.set(name, entry)

    def _note(self, question: Question) -> None:
        with self._lock:
            self.asked.append(question)

    def questions(self, name: str | None = None) -> list[Question]:
        """The questions asked so far (of ``name`` only, if given)."""
        with self._lock:
            asked = list(self.asked)
        return asked if name is None else [q for q in asked if q.name == name.lower()]

    # ------------------------------------------------------------ life cycle

    def start(self) -> Self:
        resolver, logger = _Resolver(self), _QuietLogger()
        # Port 0: the free UDP port the system picks may be taken for TCP (a
        # busy machine's outgoing connections use the same range), so try anew.
        attempts = 1 if self._port else BIND_ATTEMPTS
        for attempt in range(attempts):
            udp = DNSServer(resolver, "127.0.0.1", self._port, logger=logger,
                            server=_ThreadingUDPServer)
            port = udp.server.server_address[1]
            try:
                tcp = DNSServer(resolver, "127.0.0.1", port, tcp=True, logger=logger,
                                server=_ThreadingTCPServer)
                break
            except OSError as exc:
                udp.server.server_close()
                if exc.errno != errno.EADDRINUSE or attempt == attempts - 1:
                    raise
        self._port = port
        self._servers = [udp, tcp]
        for server in self._servers:
            server.start_thread()
        return self

    def stop(self) -> None:
        """Stop UDP and TCP at once: each waits up to socketserver's 0.5 s poll."""
        servers, self._servers = self._servers, []
        stoppers = [threading.Thread(target=server.stop) for server in servers]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()
        for server in servers:
            server.server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if not self._servers:
            raise RuntimeError("TestDNS not started")
        return self._port

    @property
    def nameserver(self) -> str:
        """``127.0.0.1:PORT``: one entry of ``DNS_NAMESERVERS``."""
        return f"127.0.0.1:{self.port}"

