"""The crawl resolver (crawler/dns/) against a real DNS server on 127.0.0.1.

Every name is answered by :class:`tests.realweb.dns.TestDNS` (loopback
addresses only), so no test asks the machine's resolver and no packet leaves
the machine. Refusals of non-loopback answers are tested as decisions on
address lists (:func:`crawler.dns.resolver.allowed_addresses`), never by connecting.
"""

from __future__ import annotations

import gc
import re
import socket
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import pytest_twisted
from scrapy.settings import Settings
from scrapy.utils.misc import load_object
from twisted.internet import defer, reactor
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.error import CannotListenError, DNSLookupError
from twisted.internet.interfaces import IResolutionReceiver
from twisted.internet.protocol import DatagramProtocol
from twisted.internet.task import deferLater
from twisted.names import dns as names_dns
from zope.interface import implementer

import crawler.dns.resolver
from crawler.addressguard import AddressPolicy, parse_networks
from crawler.dns.answers import Answer, addresses_in, ordered
from crawler.dns.cache import AnswerCache
from crawler.dns.events import RECORDER, LookupEvent, LookupRecorder
from crawler.dns.failures import (
    LookupTimeout,
    NameNotFound,
    NoAddress,
    ServerFailure,
    failure_kind,
    gai_kind,
)
from crawler.dns.lookups import (
    NameserverLookup,
    SimpleLookup,
    SystemLookup,
    build_lookup,
    parse_nameservers,
    retry_timeouts,
)
from crawler.dns.resolver import CrawlResolver, allowed_addresses
from crawler.resolver import BlockedAddressError
from tests.loopback_resolver import LoopbackOnlyResolver
from tests.realweb.dns import Name, TestDNS

ZONE = {
    "a.test": Name(a=["127.0.0.2"], aaaa=["::1"]),
    "v4.test": Name(a=["127.0.0.3", "127.0.0.4"]),
    "v6.test": Name(aaaa=["::1"]),
    "gone.test": Name(fail="nxdomain"),
    "broken.test": Name(fail="servfail"),
    "silent.test": Name(fail="silent"),
    "empty.test": Name(),  # exists, no address: NOERROR with no answer
    "short.test": Name(a=["127.0.0.5"], ttl=1),
    "long.test": Name(a=["127.0.0.6"], ttl=3600),
}
LOOPBACK = ("127.0.0.0/8", "::1/128")


@pytest.fixture(scope="module")
def dns() -> Iterator[TestDNS]:
    with TestDNS(ZONE) as server:
        yield server


def _policy(*allow_resolved: str, **kwargs: Any) -> AddressPolicy:
    return AddressPolicy(allow_resolved=parse_networks(allow_resolved), **kwargs)


def _resolver(servers: list[tuple[str, int]], *, timeout: float = 1.0,
              policy: AddressPolicy | None = None, min_ttl: float = 0.0,
              max_ttl: float = 3600.0, recorder: LookupRecorder | None = None) -> CrawlResolver:
    return CrawlResolver(reactor, NameserverLookup(reactor, servers, timeout),
                         policy or _policy(*LOOPBACK), AnswerCache(100, min_ttl, max_ttl),
                         recorder=recorder or LookupRecorder())


def _server(dns: TestDNS) -> list[tuple[str, int]]:
    return [("127.0.0.1", dns.port)]


async def _error(d: defer.Deferred[Any]) -> BaseException:
    try:
        result = await d
    except Exception as exc:
        return exc
    raise AssertionError(f"expected a failure, got {result!r}")


def _asked(dns: TestDNS, name: str, since: int = 0) -> list[str]:
    """The types asked for ``name``, after the first ``since`` questions about it."""
    return [q.qtype for q in dns.questions(name)][since:]


# ------------------------------------------------------------------ answers


@pytest_twisted.ensureDeferred
async def test_a_and_aaaa_are_asked_and_ipv4_comes_first(dns: TestDNS) -> None:
    resolver = _resolver(_server(dns))
    since = len(dns.questions("a.test"))
    assert await resolver.resolve("a.test") == ("127.0.0.2", "::1")
    assert await resolver.resolve("v4.test") == ("127.0.0.3", "127.0.0.4")
    assert sorted(_asked(dns, "a.test", since)) == ["A", "AAAA"]


@pytest_twisted.ensureDeferred
async def test_an_ipv6_only_name_resolves(dns: TestDNS) -> None:
    resolver = _resolver(_server(dns))
    assert await resolver.resolve("V6.Test.") == ("::1",)  # any spelling of the name


@implementer(IResolutionReceiver)
class _Receiver:
    """Collects what a resolution delivers, as Twisted's endpoints receive it."""

    def __init__(self) -> None:
        self.addresses: list[Any] = []
        self.began = False
        self.done: defer.Deferred[list[Any]] = defer.Deferred()

    def resolutionBegan(self, resolution: Any) -> None:
        self.began = True

    def addressResolved(self, address: Any) -> None:
        self.addresses.append(address)

    def resolutionComplete(self) -> None:
        self.done.callback(self.addresses)


@pytest_twisted.ensureDeferred
async def test_resolve_host_name_delivers_addresses_with_the_port(dns: TestDNS) -> None:
    resolver = _resolver(_server(dns))
    receiver = _Receiver()
    resolver.resolveHostName(receiver, "a.test", 8080)
    assert await receiver.done == [IPv4Address("TCP", "127.0.0.2", 8080),
                                   IPv6Address("TCP", "::1", 8080)]
    assert receiver.began
    only_v4 = _Receiver()  # what reactor.resolve / connectTCP ask for
    resolver.resolveHostName(only_v4, "a.test", 80, [IPv4Address])
    assert await only_v4.done == [IPv4Address("TCP", "127.0.0.2", 80)]
    failed = _Receiver()
    resolver.resolveHostName(failed, "missing.test", 80)  # not in the zone: NXDOMAIN
    assert await failed.done == []  # the endpoint then fails with DNSLookupError


@pytest_twisted.ensureDeferred
async def test_literal_addresses_are_not_looked_up(dns: TestDNS) -> None:
    resolver = _resolver(_server(dns))
    before = len(dns.questions())
    assert await resolver.resolve("127.0.0.9") == ("127.0.0.9",)
    assert await resolver.resolve("[::1]") == ("::1",)
    assert len(dns.questions()) == before


# ------------------------------------------------------------------ failures


@pytest_twisted.ensureDeferred
async def test_nxdomain_is_confirmed_by_a_second_lookup(dns: TestDNS) -> None:
    recorder = LookupRecorder()
    events: list[LookupEvent] = []
    recorder.subscribe(events.append)
    resolver = _resolver(_server(dns), recorder=recorder)
    since = len(dns.questions("gone.test"))
    error = await _error(resolver.resolve("gone.test"))
    assert isinstance(error, NameNotFound) and isinstance(error, DNSLookupError)
    assert error.kind == "nxdomain"
    assert sorted(_asked(dns, "gone.test", since)) == ["A", "A", "AAAA", "AAAA"]  # two rounds
    assert resolver.failure("GONE.test") is error
    assert [(e.name, e.result, e.rounds) for e in events] == [("gone.test", "nxdomain", 2)]
    # Not cached: the next request's lookup asks again (twice again).
    await _error(resolver.resolve("gone.test"))
    assert len(_asked(dns, "gone.test", since)) == 8


@pytest_twisted.ensureDeferred
async def test_a_name_without_addresses_is_nodata_confirmed(dns: TestDNS) -> None:
    resolver = _resolver(_server(dns))
    since = len(dns.questions("empty.test"))
    error = await _error(resolver.resolve("empty.test"))
    assert isinstance(error, NoAddress) and error.kind == "nodata"
    assert len(_asked(dns, "empty.test", since)) == 4


@pytest_twisted.ensureDeferred
async def test_servfail_is_reported_as_such_and_not_asked_again(dns: TestDNS) -> None:
    resolver = _resolver(_server(dns))
    since = len(dns.questions("broken.test"))
    error = await _error(resolver.resolve("broken.test"))
    assert isinstance(error, ServerFailure) and error.kind == "servfail"
    assert sorted(_asked(dns, "broken.test", since)) == ["A", "AAAA"]


@pytest_twisted.ensureDeferred
async def test_a_silent_name_times_out_within_dns_timeout(dns: TestDNS) -> None:
    resolver = _resolver(_server(dns), timeout=1.0)
    started = time.monotonic()
    error = await _error(resolver.resolve("silent.test"))
    took = time.monotonic() - started
    assert isinstance(error, LookupTimeout) and error.kind == "timeout"
    assert 0.9 <= took < 1.6, took


@pytest_twisted.ensureDeferred
async def test_the_confirming_lookup_asks_the_next_nameserver(dns: TestDNS) -> None:
    """A name one server has lost is not given up while another still knows it."""
    with TestDNS({}) as forgetful:  # NXDOMAIN for every name
        resolver = _resolver([("127.0.0.1", forgetful.port), *_server(dns)])
        before = len(dns.questions("v4.test"))
        assert await resolver.resolve("v4.test") == ("127.0.0.3", "127.0.0.4")
        assert len(forgetful.questions("v4.test")) == 2
        assert len(dns.questions("v4.test")) == before + 2


def _closed_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest_twisted.ensureDeferred
async def test_with_nameservers_set_nothing_else_is_asked() -> None:
    """A dead nameserver means failed lookups, never a fallback to the system's
    resolver or /etc/hosts (which would answer "localhost")."""
    resolver = _resolver([("127.0.0.1", _closed_udp_port())], timeout=0.5)
    for name in ("localhost", "a.test"):
        error = await _error(resolver.resolve(name))
        assert isinstance(error, LookupTimeout), (name, error)


@pytest_twisted.ensureDeferred
async def test_a_nameserver_outage_is_told_from_a_failing_name(dns: TestDNS) -> None:
    """SERVFAIL or silence for one name while the server answers others (the root
    zone) is the name's; no answer to anything is the nameservers'."""
    resolver = _resolver(_server(dns))
    since = len(dns.questions(""))
    await _error(resolver.resolve("silent.test"))
    assert await resolver.nameservers_answer() is True
    assert await resolver.nameservers_answer() is True  # trusted for ALIVE_SECONDS
    assert _asked(dns, "", since) == ["NS"]
    dead = _resolver([("127.0.0.1", _closed_udp_port())], timeout=0.5)
    assert await dead.nameservers_answer() is False
    system = CrawlResolver(reactor, SimpleLookup(LoopbackOnlyResolver(reactor), 1.0),
                           AddressPolicy(), AnswerCache(1, 1, 1), recorder=LookupRecorder())
    assert await system.nameservers_answer() is True  # nothing to ask: always counts


# ------------------------------------------------------------------ the cache


@pytest_twisted.ensureDeferred
async def test_answers_are_cached_for_their_ttl(dns: TestDNS) -> None:
    resolver = _resolver(_server(dns))
    since_long, since_short = len(dns.questions("long.test")), len(dns.questions("short.test"))
    for _ in range(3):
        assert await resolver.resolve("long.test") == ("127.0.0.6",)
        assert await resolver.resolve("short.test") == ("127.0.0.5",)
    assert len(_asked(dns, "long.test", since_long)) == 2  # A and AAAA, once
    assert len(_asked(dns, "short.test", since_short)) == 2
    await deferLater(reactor, 1.2, lambda: None)  # short.test's TTL of 1 s runs out
    assert await resolver.resolve("short.test") == ("127.0.0.5",)
    assert await resolver.resolve("long.test") == ("127.0.0.6",)
    assert len(_asked(dns, "short.test", since_short)) == 4
    assert len(_asked(dns, "long.test", since_long)) == 2


@pytest_twisted.ensureDeferred
async def test_the_ttl_is_clamped_by_the_floor_and_the_ceiling() -> None:
    with TestDNS({"short.test": Name(a=["127.0.0.5"], ttl=1),
                  "long.test": Name(a=["127.0.0.6"], ttl=3600)}) as dns:
        resolver = _resolver(_server(dns), min_ttl=5, max_ttl=1)
        assert resolver.cache.max_ttl == 5  # a ceiling under the floor is the floor
        resolver = _resolver(_server(dns), min_ttl=3, max_ttl=3)
        await resolver.resolve("short.test")
        await resolver.resolve("long.test")
        await deferLater(reactor, 1.2, lambda: None)
        await resolver.resolve("short.test")  # kept past its TTL of 1 s: the floor
        assert len(dns.questions("short.test")) == 2
        await deferLater(reactor, 2.0, lambda: None)
        await resolver.resolve("long.test")  # asked again long before 3600 s: the ceiling
        assert len(dns.questions("long.test")) == 4


@pytest_twisted.ensureDeferred
async def test_concurrent_lookups_of_a_name_share_one(dns: TestDNS) -> None:
    resolver = _resolver(_server(dns))
    since = len(dns.questions("v4.test"))
    results = await defer.gatherResults([resolver.resolve("v4.test") for _ in range(5)])
    assert results == [("127.0.0.3", "127.0.0.4")] * 5
    assert len(_asked(dns, "v4.test", since)) == 2


def test_the_cache_forgets_the_least_recently_used() -> None:
    cache = AnswerCache(2, 60, 3600)
    cache.put("a", Answer(("127.0.0.1",), 60))
    cache.put("b", Answer(("127.0.0.2",), 60))
    assert cache.get("a") == ("127.0.0.1",)
    cache.put("c", Answer(("127.0.0.3",), 60))
    assert (cache.get("a"), cache.get("b"), len(cache)) == (("127.0.0.1",), None, 2)
    off = AnswerCache(0, 60, 3600)
    off.put("a", Answer(("127.0.0.1",), 60))
    assert off.get("a") is None


# ------------------------------------------------------------------ the address guard


@pytest_twisted.ensureDeferred
async def test_loopback_answers_pass_only_when_allowed_as_resolved(dns: TestDNS) -> None:
    recorder = LookupRecorder()
    events: list[LookupEvent] = []
    recorder.subscribe(events.append)
    strict = _resolver(_server(dns), policy=_policy(), recorder=recorder)
    error = await _error(strict.resolve("a.test"))
    assert isinstance(error, BlockedAddressError) and error.kind == "blocked"
    assert (error.address, error.reason) == ("127.0.0.2", "loopback")
    assert strict.blocked("a.test") is error
    v4_only = _resolver(_server(dns), policy=_policy("127.0.0.0/8"), recorder=recorder)
    assert await v4_only.resolve("a.test") == ("127.0.0.2",)  # ::1 dropped
    assert v4_only.blocked("a.test") is None
    assert [(e.result, e.refused) for e in events] == [("blocked", 2), ("ok", 1)]
    assert isinstance(await _error(v4_only.resolve("v6.test")), BlockedAddressError)
    both = _resolver(_server(dns), policy=_policy(*LOOPBACK))
    assert await both.resolve("a.test") == ("127.0.0.2", "::1")


@pytest_twisted.ensureDeferred
async def test_a_refusal_is_forgotten_when_the_name_resolves_again(dns: TestDNS) -> None:
    resolver = _resolver(_server(dns), policy=_policy())
    await _error(resolver.resolve("long.test"))
    assert resolver.blocked("long.test") is not None
    resolver.policy = _policy("127.0.0.0/8")  # the operator allows it; the answer is cached
    assert await resolver.resolve("long.test") == ("127.0.0.6",)
    assert resolver.blocked("long.test") is None and resolver.failure("long.test") is None


@pytest_twisted.ensureDeferred
async def test_trusted_hosts_and_a_disabled_guard_check_nothing(dns: TestDNS) -> None:
    trusted = AddressPolicy(allow_hosts=frozenset({"a.test"}))
    recorder = LookupRecorder()
    events: list[LookupEvent] = []
    recorder.subscribe(events.append)
    resolver = _resolver(_server(dns), policy=trusted, recorder=recorder)
    assert await resolver.resolve("a.test") == ("127.0.0.2", "::1")
    assert [(e.result, e.refused) for e in events] == [("ok", 0)]
    off = AddressPolicy(enabled=False)
    assert await _resolver(_server(dns), policy=off).resolve("v6.test") == ("::1",)


def test_refused_addresses_are_dropped_and_the_rest_kept() -> None:
    public_v4, public_v6 = "93.184.216.34", "2606:4700:4700::1111"
    answers = [public_v4, "127.0.0.1", "10.0.0.7", "169.254.169.254", public_v6,
               "::ffff:127.0.0.1", "fd00::1", "::1"]
    allowed, refused = allowed_addresses(AddressPolicy(), answers)
    assert allowed == [public_v4, public_v6]
    assert dict(refused) == {"127.0.0.1": "loopback", "10.0.0.7": "private",
                             "169.254.169.254": "link-local",
                             "::ffff:127.0.0.1": "ipv4-mapped-loopback", "fd00::1": "private",
                             "::1": "loopback"}
    # A public-looking and a loopback answer: only the public one is used.
    assert allowed_addresses(AddressPolicy(), [public_v4, "127.0.0.1"])[0] == [public_v4]
    # Allowed as DNS answers, loopback passes; a private address still does not.
    allowed, refused = allowed_addresses(_policy(*LOOPBACK), ["127.0.0.2", "::1", "10.0.0.7"])
    assert (allowed, [a for a, _ in refused]) == (["127.0.0.2", "::1"], ["10.0.0.7"])


# ------------------------------------------------------------------ the reactor


@pytest_twisted.ensureDeferred
async def test_installed_it_also_answers_reactor_resolve(dns: TestDNS) -> None:
    """connectTCP (a proxy's tunnel) asks reactor.resolve: Twisted wraps the name resolver."""
    resolver = _resolver(_server(dns))
    old_resolver, old_name_resolver = reactor.resolver, reactor.nameResolver
    try:
        resolver.install_on_reactor()
        assert reactor.nameResolver is resolver
        assert await reactor.resolve("a.test") == "127.0.0.2"
        error = await _error(reactor.resolve("v6.test"))  # no IPv4 address to give
        assert isinstance(error, DNSLookupError)
        error = await _error(reactor.resolve("gone.test"))
        assert isinstance(resolver.failure("gone.test"), NameNotFound)
    finally:
        reactor.installNameResolver(old_name_resolver)
        reactor.resolver = old_resolver
        crawler.dns.resolver._installed = None


# ------------------------------------------------------------------ building it


def _process(**settings: Any) -> SimpleNamespace:
    """What Scrapy passes to from_crawler: the CrawlerProcess, with its settings."""
    return SimpleNamespace(settings=Settings({"ADDRESS_GUARD_ALLOW_RESOLVED": list(LOOPBACK),
                                              **settings}))


@pytest_twisted.ensureDeferred
async def test_from_crawler_asks_the_nameservers_and_nothing_else(dns: TestDNS) -> None:
    process = _process(DNS_NAMESERVERS=[dns.nameserver], DNS_TIMEOUT=2, DNS_CACHE_MIN_TTL=7,
                       DNS_CACHE_MAX_TTL=70, DNSCACHE_SIZE=5,
                       ADDRESS_GUARD_RESOLVER="tests.loopback_resolver.LoopbackOnlyResolver")
    resolver = CrawlResolver.from_crawler(process, reactor)
    assert isinstance(resolver.lookup, NameserverLookup)  # the loopback resolver is not used
    assert resolver.lookup.servers == [("127.0.0.1", dns.port)]
    assert (resolver.cache.size, resolver.cache.min_ttl, resolver.cache.max_ttl) == (5, 7, 70)
    assert await resolver.resolve("a.test") == ("127.0.0.2", "::1")
    assert isinstance(await _error(resolver.resolve("gone.test")), NameNotFound)


def test_without_nameservers_the_system_or_the_named_resolver_is_used() -> None:
    assert isinstance(build_lookup(_process(), reactor), SystemLookup)
    named = build_lookup(
        _process(ADDRESS_GUARD_RESOLVER="tests.loopback_resolver.LoopbackOnlyResolver"), reactor)
    assert isinstance(named, SimpleLookup) and isinstance(named.inner, LoopbackOnlyResolver)
    with pytest.raises(ValueError, match="crawl resolver itself"):
        build_lookup(_process(ADDRESS_GUARD_RESOLVER="crawler.dns.CrawlResolver"), reactor)
    with pytest.raises(ValueError, match="not an IP address"):
        build_lookup(_process(DNS_NAMESERVERS=["ns.example"]), reactor)
    from_command_line = build_lookup(_process(DNS_NAMESERVERS='["127.0.0.1:5353", "::1"]'),
                                     reactor)
    assert isinstance(from_command_line, NameserverLookup)
    assert from_command_line.servers == [("127.0.0.1", 5353), ("::1", 53)]
    assert build_lookup(_process(DNS_NAMESERVERS="127.0.0.1:5353,[::1]:54"), reactor
                        ).servers == [("127.0.0.1", 5353), ("::1", 54)]  # type: ignore[attr-defined]
    off = CrawlResolver.from_crawler(_process(DNSCACHE_ENABLED=False), reactor)
    assert off.cache.size == 0


@pytest_twisted.ensureDeferred
async def test_an_iresolversimple_gives_its_one_ipv4_answer() -> None:
    inner = LoopbackOnlyResolver(reactor)
    resolver = CrawlResolver(reactor, SimpleLookup(inner, 1.0), _policy("127.0.0.0/8"),
                             AnswerCache(10, 60, 60), recorder=LookupRecorder())
    assert await resolver.resolve("anything.test") == ("127.0.0.1",)
    assert await resolver.resolve("anything.test") == ("127.0.0.1",)
    assert inner.asked == ["anything.test"]  # the second came from the cache


def test_the_process_recorder_is_one_for_all_resolvers() -> None:
    assert CrawlResolver(reactor, SimpleLookup(LoopbackOnlyResolver(reactor), 1.0),
                         AddressPolicy(), AnswerCache(1, 1, 1)).recorder is RECORDER


def test_the_package_re_exports_the_submodules_own_objects() -> None:
    """``crawler.dns.CrawlResolver`` is the settings path; what the package
    re-exports is the submodules' own object, the process-wide state included."""
    assert load_object("crawler.dns.CrawlResolver") is CrawlResolver
    assert crawler.dns.RECORDER is RECORDER
    submodules = [crawler.dns.failures, crawler.dns.answers, crawler.dns.lookups,
                  crawler.dns.cache, crawler.dns.events, crawler.dns.resolver]
    for name in crawler.dns.__all__:
        assert any(getattr(m, name, None) is getattr(crawler.dns, name) for m in submodules), name


# ------------------------------------------------------------------ pure parts


def test_nameserver_entries() -> None:
    assert parse_nameservers(["127.0.0.1", "127.0.0.1:5353", "::1", "[::1]:54", "[::1]",
                              " 10.0.0.53 "]) == [
        ("127.0.0.1", 53), ("127.0.0.1", 5353), ("::1", 53), ("::1", 54), ("::1", 53),
        ("10.0.0.53", 53)]
    for bad in ("ns1.example", "127.0.0.1:0", "127.0.0.1:99999", "[::1]:x", "127.0.0.1:"):
        with pytest.raises(ValueError, match="DNS_NAMESERVERS"):
            parse_nameservers([bad])


@pytest.mark.parametrize(("total", "waits"), [
    (5, (1, 2, 2)), (10, (1, 2, 4, 3)), (1, (1,)), (0.5, (0.5,)), (3, (1, 2)),
])
def test_retransmission_waits_add_up_to_the_timeout(total: float, waits: tuple) -> None:
    assert retry_timeouts(total) == waits
    assert sum(retry_timeouts(total)) == pytest.approx(total)


def test_addresses_are_distinct_and_ipv4_first() -> None:
    assert ordered(["::1", "127.0.0.2", "::1", "127.0.0.3"]) == ("127.0.0.2", "127.0.0.3", "::1")


def _rr(name: str, record: Any, ttl: int) -> names_dns.RRHeader:
    return names_dns.RRHeader(name, record.TYPE, names_dns.IN, ttl, record)


def test_cname_chains_are_followed_in_the_answer() -> None:
    answers = [
        _rr("www.a.test", names_dns.Record_CNAME("edge.b.test"), 300),
        _rr("edge.b.test", names_dns.Record_CNAME("node.c.test"), 30),
        _rr("node.c.test", names_dns.Record_A("127.0.0.7"), 600),
        _rr("other.test", names_dns.Record_A("127.0.0.8"), 5),  # not ours
    ]
    assert addresses_in("www.a.test", answers, names_dns.A) == (["127.0.0.7"], 30, None)
    # The chain without its end: its target is to be asked.
    assert addresses_in("www.a.test", answers[:2], names_dns.A) == ([], 30, "node.c.test")
    loop = [_rr("x.test", names_dns.Record_CNAME("y.test"), 60),
            _rr("y.test", names_dns.Record_CNAME("x.test"), 60)]
    assert addresses_in("x.test", loop, names_dns.A)[0] == []
    v6 = [_rr("v6.test", names_dns.Record_AAAA("::1"), 60)]
    assert addresses_in("v6.test", v6, names_dns.AAAA) == (["::1"], 60, None)


def test_failure_kinds() -> None:
    from twisted.names import error as names_error

    assert failure_kind(names_error.DNSNameError()) == "nxdomain"
    assert failure_kind(names_error.DNSServerError()) == "servfail"
    assert failure_kind(names_error.DNSQueryRefusedError()) == "servfail"
    assert failure_kind(names_error.DNSQueryTimeoutError(0)) == "timeout"
    assert failure_kind(defer.TimeoutError()) == "timeout"
    assert failure_kind(BlockedAddressError("a", "127.0.0.1", "loopback")) == "blocked"
    assert gai_kind(socket.EAI_NONAME) == "nxdomain"
    assert gai_kind(socket.EAI_AGAIN) == "servfail"  # SERVFAIL or a timeout, glibc can't say
    assert gai_kind(socket.EAI_FAIL) == "servfail"
    if hasattr(socket, "EAI_NODATA"):
        assert gai_kind(socket.EAI_NODATA) == "nodata"


def _leak_filter() -> re.Pattern[str]:
    config = tomllib.loads(Path(__file__).parent.parent.joinpath("pyproject.toml").read_text())
    (entry,) = [f for f in config["tool"]["pytest"]["ini_options"]["filterwarnings"]
                if f.startswith("ignore:Exception ignored in")]
    return re.compile(entry.split(":")[1])


def test_only_a_socket_that_never_bound_may_leak() -> None:
    """Twisted leaks the socket of a failed bind (the DNS client's random source
    port was taken): the test run ignores exactly that socket and no other."""
    busy = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    busy.bind(("0.0.0.0", 0))  # UDP, nothing is sent
    try:
        with pytest.raises(CannotListenError):
            reactor.listenUDP(busy.getsockname()[1], DatagramProtocol())
        gc.collect()  # the leaked socket warns now; the filter must let it pass
    finally:
        busy.close()
    pattern = _leak_filter()
    assert pattern.match("Exception ignored in: <socket.socket fd=23, family=2, type=2, "
                         "proto=0, laddr=('0.0.0.0', 0)>")
    for used in ("<socket.socket fd=23, family=2, type=2, proto=0, laddr=('127.0.0.1', 5353)>",
                 "<socket.socket fd=9, family=2, type=1, proto=0, laddr=('0.0.0.0', 0)>",
                 "<socket.socket fd=9, family=10, type=2, proto=0, laddr=('::', 0, 0, 0)>"):
        assert not pattern.match(f"Exception ignored in: {used}")
