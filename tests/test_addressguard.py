"""The address guard (SSRF protection): decisions, the middleware and the resolver.

Pure unit tests: no connection is opened and no real DNS is asked. The
resolver wrapper is tested with an inner resolver that answers from a dict.
"""

from __future__ import annotations

import logging
import re
import socket
from typing import Any

import pytest
from scrapy import Request
from scrapy.exceptions import CannotResolveHostError, NotConfigured
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler
from twisted.internet import defer
from twisted.internet.error import DNSLookupError
from twisted.python.failure import Failure

from crawler.addressguard import (
    AddressBlocked,
    AddressPolicy,
    SeenOnce,
    parse_ipv4_loose,
)
from crawler.deadletter import DeadReason
from crawler.lease import TICKET_META, Ticket, Verdict
from crawler.middlewares.addressguard import AddressGuardMiddleware
from crawler.resolver import BlockedAddressError, GuardedResolver
from tests.dict_resolver import ANSWERS, DictResolver

GUARDED = "crawler.resolver.GuardedResolver"


def _policy(**settings: Any) -> AddressPolicy:
    return AddressPolicy.from_settings(Settings(settings))


# ------------------------------------------------------------------ addresses


@pytest.mark.parametrize(
    ("ip", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("100.64.0.1", "shared"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("192.0.2.1", "private"),  # documentation
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("fec0::1", "site-local"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "ipv4-mapped-loopback"),
        ("::ffff:10.0.0.1", "ipv4-mapped-private"),
        ("::ffff:169.254.169.254", "ipv4-mapped-link-local"),
        ("2002:7f00:1::", "6to4-loopback"),
        ("2002:a00:1::1", "6to4-private"),
        ("64:ff9b::7f00:1", "nat64-loopback"),
        ("2001::1", "teredo"),
        ("2001:db8::1", "private"),
        ("::127.0.0.1", "reserved"),  # deprecated IPv4-compatible
        ("4000::1", "reserved"),  # outside 2000::/3
        ("93.184.216.34", None),
        ("8.8.8.8", None),
        ("2606:4700:4700::1111", None),
        ("::ffff:93.184.216.34", None),
        ("2002:5db8:d822::1", None),  # 6to4 of a public address
        ("64:ff9b::808:808", None),  # NAT64 of 8.8.8.8
        ("not an address", "not-an-address"),
    ],
)
def test_check_ip(ip: str, reason: str | None) -> None:
    assert AddressPolicy().check_ip(ip) == reason
    assert AddressPolicy().check_ip(ip, resolved=True) == reason


def test_allow_list_covers_ipv4_inside_ipv6() -> None:
    policy = _policy(ADDRESS_GUARD_ALLOW=["127.0.0.0/8", "fd00::1"])
    assert policy.check_ip("127.0.0.1") is None
    assert policy.check_ip("127.3.2.1") is None
    assert policy.check_ip("::ffff:127.0.0.1") is None
    assert policy.check_ip("2002:7f00:1::") is None
    assert policy.check_ip("fd00::1") is None
    assert policy.check_ip("fd00::2") == "private"
    assert policy.check_ip("10.0.0.1") == "private"
    assert policy.check_ip("::1") == "loopback"  # IPv6 loopback is not 127.0.0.0/8
    assert policy.check_url_host("127.0.0.1") is None
    assert policy.check_url_host("localhost") == "localhost"  # names: ADDRESS_GUARD_ALLOW_HOSTS


def test_allow_resolved_applies_to_dns_answers_only() -> None:
    policy = _policy(ADDRESS_GUARD_ALLOW_RESOLVED="127.0.0.0/8")  # a -s value: comma list
    assert policy.check_ip("127.0.0.1", resolved=True) is None
    assert policy.check_ip("::ffff:127.0.0.1", resolved=True) is None
    assert policy.check_ip("127.0.0.1") == "loopback"
    assert policy.check_url("http://127.0.0.1:8080/") == "loopback"
    assert policy.check_ip("10.0.0.1", resolved=True) == "private"


def test_malformed_allow_entry_stops_the_crawl() -> None:
    with pytest.raises(ValueError, match=re.escape("ADDRESS_GUARD_ALLOW: '10.0.0.0/33'")):
        _policy(ADDRESS_GUARD_ALLOW=["10.0.0.0/33"])


def test_disabled_policy_allows_everything() -> None:
    policy = _policy(ADDRESS_GUARD_ENABLED=False)
    assert policy.check_ip("127.0.0.1") is None
    assert policy.check_url("http://localhost/") is None


# ------------------------------------------------------------------ URL hosts


def _leased(url: str) -> Request:
    """A request as the frontier hands it out, with its lease's ticket."""
    return Request(url, meta={TICKET_META: Ticket("tok")})


def _verdict(request: Request) -> Verdict | None:
    return request.meta[TICKET_META].verdict


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1/", "loopback"),
        ("https://127.0.0.1:8443/x", "loopback"),
        ("http://user:pw@127.0.0.1/", "loopback"),
        ("http://[::1]/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "ipv4-mapped-loopback"),
        ("http://[fe80::1%25eth0]/", "link-local"),
        ("http://2130706433/", "loopback"),
        ("http://0x7f.0.0.1/", "loopback"),
        ("http://0x7F000001/", "loopback"),
        ("http://0177.0.0.1/", "loopback"),
        ("http://127.1/", "loopback"),
        ("http://127.0.0.1./", "loopback"),
        ("http://%31%32%37.0.0.1/", "loopback"),
        ("http://\uff11\uff12\uff17\uff0e0.0.1/", "loopback"),  # full-width digits and dot
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://0/", "unspecified"),
        ("http://localhost/", "localhost"),
        ("http://localhost:6379/", "localhost"),
        ("http://foo.localhost/", "localhost"),
        ("http://LOCALHOST./", "localhost"),
        ("http://localhost.localdomain/", "localhost"),
        ("http://ip6-localhost/", "localhost"),
        ("http://%6c%6fcalhost/", "localhost"),
        ("http://printer.local/", "local-name"),
        ("http://metadata.google.internal/", "local-name"),
        ("http://router.home.arpa/", "local-name"),
        ("http://intranet/", "single-label"),
        ("http://1.2.3.4.5/", "bad-address"),
        ("http://08.0.0.1/", "bad-address"),
        ("http:///path", "no-host"),
        ("http://[::1/", "bad-url"),
        ("ftp://127.0.0.1:1/pub/file.txt", "loopback"),
        ("http://example.com/", None),
        ("http://EXAMPLE.com./a", None),
        ("http://h00001.test/", None),
        ("http://93.184.216.34/", None),
        ("http://[2606:4700:4700::1111]/", None),
        ("http://0x5d.0xb8.0xd8.0x22/", None),  # 93.184.216.34, spelt oddly
        ("data:text/plain,hello", None),
    ],
)
def test_check_url(url: str, reason: str | None) -> None:
    assert AddressPolicy().check_url(url) == reason


@pytest.mark.parametrize(
    "host",
    ["127.1", "2130706433", "0x7f.0.0.1", "0177.0.0.1", "0x7F000001", "017700000001",
     "127.0.1", "0", "0xffffffff", "1.2.3.4"],
)
def test_loose_ipv4_agrees_with_inet_aton(host: str) -> None:
    """Pure parsing: ``inet_aton`` is what getaddrinfo reads such hosts with."""
    expected = socket.inet_ntoa(socket.inet_aton(host))
    assert str(parse_ipv4_loose(host)) == expected


@pytest.mark.parametrize("host", ["example.com", "1.2.3.4.5", "256.1.1.1", "08.1", "", "1..2"])
def test_loose_ipv4_refuses_names(host: str) -> None:
    assert parse_ipv4_loose(host) is None


def test_allowed_host_names() -> None:
    policy = _policy(ADDRESS_GUARD_ALLOW_HOSTS=["localhost", "*.corp.example", "Intranet."])
    assert policy.check_url("http://localhost:8080/") is None
    assert policy.check_url("http://wiki.corp.example/") is None
    assert policy.check_url("http://corp.example/") is None  # public name anyway
    assert policy.check_url("http://intranet/") is None
    assert policy.check_url("http://foo.localhost/") == "localhost"
    assert policy.check_url("http://127.0.0.1/") == "loopback"


def test_seen_once_is_bounded() -> None:
    seen = SeenOnce(size=2)
    assert seen.first("a") and seen.first("b")
    assert not seen.first("a")
    assert seen.first("c")  # forgets "b", the least recently seen
    assert seen.first("b")
    assert len(seen._keys) == 2


# ------------------------------------------------------------------ middleware


def _middleware(**settings: Any) -> AddressGuardMiddleware:
    crawler = get_crawler(settings_dict={"TWISTED_DNS_RESOLVER": GUARDED, **settings})
    crawler.stats.open_spider()
    return AddressGuardMiddleware.from_crawler(crawler)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "ipv4-mapped-loopback"),
        ("http://localhost/", "localhost"),
        ("http://10.0.0.1/admin", "private"),
    ],
)
def test_middleware_refuses(url: str, reason: str) -> None:
    mw = _middleware()
    request = _leased(url)
    with pytest.raises(AddressBlocked) as caught:
        mw.process_request(request)
    assert caught.value.reason == reason
    verdict = _verdict(request)
    # a dead letter the operator may requeue once the setting it names allows it
    assert verdict is not None and (verdict.op, verdict.unsent) == ("dead", True)
    why = DeadReason.parse(verdict.arg)
    assert why.reason == "address-blocked"
    assert f"is {reason}" in why.error and "allows it" in why.error
    assert mw.stats.get_value(f"guard/blocked/{reason}") == 1


def test_middleware_passes_public_and_unresolved_names() -> None:
    mw = _middleware()
    for url in ["http://example.com/", "https://93.184.216.34/", "data:,x"]:
        request = _leased(url)
        assert mw.process_request(request) is None
        assert _verdict(request) is None
    assert not any(k.startswith("guard/") for k in mw.stats.get_stats())


def test_middleware_logs_each_host_once(caplog: pytest.LogCaptureFixture) -> None:
    mw = _middleware()
    with caplog.at_level(logging.INFO, logger="crawler.middlewares.addressguard"):
        for path in ("a", "b"):
            with pytest.raises(AddressBlocked):
                mw.process_request(Request(f"http://127.0.0.1/{path}"))
    records = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(records) == 1
    assert records[0].host == "127.0.0.1"  # type: ignore[attr-defined]
    assert mw.stats.get_value("guard/blocked/loopback") == 2


def test_middleware_disabled() -> None:
    with pytest.raises(NotConfigured):
        _middleware(ADDRESS_GUARD_ENABLED=False)


def test_middleware_warns_when_dns_answers_are_unchecked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="crawler.middlewares.addressguard"):
        _middleware(TWISTED_DNS_RESOLVER="scrapy.resolver.CachingThreadedResolver")
    assert "DNS answers are not checked" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="crawler.middlewares.addressguard"):
        _middleware()
    assert caplog.text == ""


def test_middleware_turns_a_refused_lookup_into_a_refusal() -> None:
    mw = _middleware()
    mw.resolver = _resolver()
    _outcome(mw.resolver.getHostByName("internal.test"))
    request = _leased("http://internal.test/page")
    # As the HTTP handler reports it: Twisted's wrapper lost our error's type.
    exception = CannotResolveHostError("DNS lookup failed: Couldn't find the hostname")
    with pytest.raises(AddressBlocked) as caught:
        mw.process_exception(request, exception)
    assert (caught.value.reason, caught.value.address) == ("private", "10.0.0.5")
    verdict = _verdict(request)
    assert verdict is not None and (verdict.op, verdict.unsent) == ("dead", True)
    assert DeadReason.parse(verdict.arg).reason == "address-blocked"
    assert mw.stats.get_value("guard/blocked/private") == 1
    assert mw.stats.get_value("guard/blocked_after_dns") == 1


def test_middleware_finds_a_refusal_in_the_exception_chain() -> None:
    mw = _middleware()
    request = Request("http://loop.test/")
    try:
        try:
            raise BlockedAddressError("loop.test", "127.0.0.1", "loopback")
        except DNSLookupError as exc:
            raise CannotResolveHostError(str(exc)) from exc
    except CannotResolveHostError as exc:
        with pytest.raises(AddressBlocked, match="loopback"):
            mw.process_exception(request, exc)


def test_middleware_leaves_genuine_dns_errors_alone() -> None:
    mw = _middleware()
    mw.resolver = _resolver()
    assert isinstance(_outcome(mw.resolver.getHostByName("nxdomain.test")), Failure)
    request = _leased("http://nxdomain.test/")
    assert mw.process_exception(request, CannotResolveHostError("no such name")) is None
    assert mw.process_exception(request, ValueError("other")) is None
    assert _verdict(request) is None


# ------------------------------------------------------------------ resolver

def _resolver(**settings: Any) -> GuardedResolver:
    return GuardedResolver(None, DictResolver(dict(ANSWERS)), _policy(**settings))


def _outcome(d: defer.Deferred[str]) -> str | Failure:
    """The result of an already-fired Deferred (a failure is consumed, not left unhandled)."""
    results: list[str | Failure] = []
    d.addBoth(results.append)
    (result,) = results
    return result


def _refusal(outcome: str | Failure) -> BlockedAddressError:
    assert isinstance(outcome, Failure), outcome
    assert isinstance(outcome.value, BlockedAddressError)
    return outcome.value


def test_resolver_refuses_non_public_answers() -> None:
    resolver = _resolver()
    assert _outcome(resolver.getHostByName("public.test")) == "93.184.216.34"
    for name, reason in [("internal.test", "private"), ("loop.test", "loopback"),
                         ("meta.test", "link-local")]:
        error = _refusal(_outcome(resolver.getHostByName(name)))
        assert (error.name, error.address, error.reason) == (name, ANSWERS[name], reason)
        assert isinstance(error, DNSLookupError)  # what Twisted's wrapper passes on quietly
        assert resolver.blocked(name.upper() + ".") is error
    assert resolver.blocked("public.test") is None


def test_resolver_allow_lists() -> None:
    resolver = _resolver(ADDRESS_GUARD_ALLOW_RESOLVED=["127.0.0.0/8"],
                         ADDRESS_GUARD_ALLOW_HOSTS=["*.corp.test"])
    assert _outcome(resolver.getHostByName("loop.test")) == "127.0.0.1"
    assert _outcome(resolver.getHostByName("wiki.corp.test")) == "10.1.1.1"
    _refusal(_outcome(resolver.getHostByName("internal.test")))
    assert _outcome(_resolver(ADDRESS_GUARD_ALLOW="10.0.0.0/8")
                    .getHostByName("internal.test")) == "10.0.0.5"


def test_resolver_passes_literals_and_real_failures() -> None:
    resolver = _resolver()
    # A literal is a proxy's address or a URL host the middleware judged.
    assert _outcome(resolver.getHostByName("127.0.0.1")) == "127.0.0.1"
    failure = _outcome(resolver.getHostByName("nxdomain.test"))
    assert isinstance(failure, Failure)
    assert not isinstance(failure.value, BlockedAddressError)


def test_resolver_forgets_a_refusal_after_another_outcome() -> None:
    resolver = _resolver()
    _refusal(_outcome(resolver.getHostByName("internal.test")))
    assert resolver.blocked("internal.test") is not None
    inner = resolver.inner
    assert isinstance(inner, DictResolver)
    del inner.answers["internal.test"]  # the name now fails for a DNS reason
    assert not isinstance(_outcome(resolver.getHostByName("internal.test")).value,
                          BlockedAddressError)
    assert resolver.blocked("internal.test") is None


def test_resolver_disabled_checks_nothing() -> None:
    resolver = _resolver(ADDRESS_GUARD_ENABLED=False)
    assert _outcome(resolver.getHostByName("loop.test")) == "127.0.0.1"


def test_resolver_from_crawler_builds_its_inner_resolver() -> None:
    crawler = get_crawler(settings_dict={
        "ADDRESS_GUARD_RESOLVER": "tests.dict_resolver.DictResolver",
        "ADDRESS_GUARD_ALLOW_RESOLVED": ["127.0.0.0/8"],
    })
    resolver = GuardedResolver.from_crawler(crawler, reactor=None)
    assert isinstance(resolver.inner, DictResolver)
    assert _outcome(resolver.getHostByName("loop.test")) == "127.0.0.1"
    default = GuardedResolver.from_crawler(get_crawler(), reactor=None)
    assert type(default.inner).__name__ == "CachingThreadedResolver"  # not asked anything


def test_resolver_refuses_bad_inner_resolvers() -> None:
    crawler = get_crawler(settings_dict={"ADDRESS_GUARD_RESOLVER": GUARDED})
    with pytest.raises(ValueError, match="names the guard itself"):
        GuardedResolver.from_crawler(crawler, reactor=None)
    with pytest.raises(TypeError, match="IResolverSimple"):
        GuardedResolver(None, object(), AddressPolicy())


@pytest.mark.parametrize(("handler", "checked"), [
    ("crawler.handlers.CountedHTTP11DownloadHandler", True),
    ("scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler", True),
    ("scrapy.core.downloader.handlers.file.FileDownloadHandler", False),
    ("no.such.Handler", False),
])
def test_dns_answers_are_checked_for_twisted_handlers_and_their_subclasses(
    handler: str, checked: bool
) -> None:
    from crawler.middlewares.addressguard import _resolves_through_twisted

    assert _resolves_through_twisted(handler) is checked
