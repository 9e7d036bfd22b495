"""DNS as a step of its own in real crawls: ``scrapy crawl broad`` in a subprocess.

Names are answered only by the test DNS server on 127.0.0.1
(``DNS_NAMESERVERS``; the harness's loopback-only resolver is configured too
and must never be asked). Two tiny HTTP servers stand for the hosts that
resolve: one on 127.0.0.2 (an A record) and one on ``[::1]`` (an IPv6-only
name, AAAA only). The other seeds' names do not exist (NXDOMAIN), fail
(SERVFAIL), or get no answer at all. No proxy: the crawl connects to what it
resolved. The crawl runs twice, with robots.txt obeyed (a host's first
contact is its robots job, whose DNS step the scheduler asks first) and
without (the page requests meet the failures).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import redis

from crawler.frontier.admin import FrontierAdmin, frontier_keys
from tests.crawl_runner import REPO, CrawlResult, finish_crawl, proxy_env, start_crawl
from tests.realweb.dns import Name, TestDNS

pytestmark = pytest.mark.crawl

PAGES = {
    "/": b'<html><body><a href="/a">a</a> <a href="/b">b</a></body></html>',
    "/a": b'<html><body><a href="/b">b</a> <a href="/c">c</a></body></html>',
    "/b": b"<html><body>b</body></html>",
    "/c": b"<html><body>c</body></html>",
}
ROBOTS = b"User-agent: *\nAllow: /\n"
BAD = ("gone.test", "broken.test", "silent.test")
MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class Hit:
    """One request a test server received."""

    server: str  # the address it listens on
    host: str  # the Host header
    path: str
    client: str


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    hits: list[Hit]
    lock: threading.Lock


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.hits.append(Hit(self.server.server_address[0],
                                        self.headers.get("Host", ""), self.path,
                                        self.client_address[0]))
        body = ROBOTS if self.path == "/robots.txt" else PAGES.get(self.path)
        if body is None:
            self.send_response(404)
            body = b"not here"
        else:
            self.send_response(200)
        self.send_header("Content-Type", "text/plain" if self.path == "/robots.txt"
                         else "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Web:
    """The two hosts that resolve, on one port of 127.0.0.2 and of ::1."""

    def __init__(self) -> None:
        self.hits: list[Hit] = []
        self.lock = threading.Lock()
        self.servers: list[_Server] = []

    def start(self) -> Web:
        for _ in range(20):  # the same free port on both addresses
            v4 = self._make(_Server, ("127.0.0.2", 0))
            try:
                v6 = self._make(_Server6, ("::1", v4.server_address[1]))
            except OSError:
                v4.server_close()
                continue
            self.servers = [v4, v6]
            for server in self.servers:
                threading.Thread(target=server.serve_forever, daemon=True).start()
            return self
        raise RuntimeError("no port free on both 127.0.0.2 and ::1")

    def _make(self, cls: type[_Server], address: tuple[str, int]) -> _Server:
        server = cls(address, _Handler)
        server.hits, server.lock = self.hits, self.lock
        return server

    @property
    def port(self) -> int:
        return self.servers[0].server_address[1]

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()

    def paths(self, server: str) -> set[str]:
        with self.lock:
            return {h.path for h in self.hits if h.server == server}

    def names(self) -> set[str]:
        with self.lock:
            return {h.host.rsplit(":", 1)[0] for h in self.hits}


@dataclass
class Crawled:
    result: CrawlResult
    web: Web
    dns: TestDNS
    namespace: str
    redis_url: str
    robots: bool

    def admin(self, client: redis.Redis) -> FrontierAdmin:
        keys, found = frontier_keys(client, self.namespace, 4, seen_buckets=64)
        assert found
        return FrontierAdmin(client, keys)


@pytest.fixture(scope="module", params=[True, False], ids=["robots", "no-robots"])
def crawled(request: pytest.FixtureRequest, redis_url: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawled]:
    robots: bool = request.param
    web = Web().start()
    zone = {"ok.test": Name(a=["127.0.0.2"]), "v6.test": Name(aaaa=["::1"]),
            "broken.test": Name(fail="servfail"), "silent.test": Name(fail="silent")}
    namespace = f"test:dns:{time.time_ns()}"
    try:
        with TestDNS(zone) as dns:  # gone.test is not in the zone: NXDOMAIN
            port = web.port
            seeds = [f"http://{name}:{port}{path}" for name in ("ok.test", "v6.test", *BAD)
                     for path in ("/", "/x")]
            settings = {
                "REDIS_URL": redis_url, "FRONTIER_NAMESPACE": namespace,
                "FRONTIER_PARTITIONS": 4, "FRONTIER_SEEN_BUCKETS": 64,
                "TWISTED_DNS_RESOLVER": "crawler.dns.CrawlResolver",
                "DNS_NAMESERVERS": [dns.nameserver],
                "ADDRESS_GUARD_ALLOW_RESOLVED": "127.0.0.0/8,::1/128",
                "DNS_TIMEOUT": 1, "DNS_RETRY_BASE": 0.5, "DNS_RETRY_MAX": 1,
                "DNS_FAILED_MAX_ATTEMPTS": MAX_ATTEMPTS,
                # A breaker that opens after two failures would open at once if a
                # failed lookup still counted as a network failure.
                "BREAKER_THRESHOLD": 2, "RETRY_BACKOFF_BASE": 0.2,
                "ROBOTSTXT_OBEY": robots, "DOWNLOAD_DELAY": 0, "DEPTH_LIMIT": 3,
                "PROMETHEUS_ENABLED": False,
            }
            workdir = tmp_path_factory.mktemp("dns-robots" if robots else "dns-pages")
            started = time.monotonic()
            # No proxy: the crawl must resolve and connect by itself.
            proc = start_crawl("", seeds, workdir, settings,
                               env={"http_proxy": "", "HTTP_PROXY": ""})
            result = finish_crawl(proc, workdir, started, timeout=90)
            yield Crawled(result, web, dns, namespace, redis_url, robots)
    finally:
        web.stop()
        client = redis.Redis.from_url(redis_url)
        stale = list(client.scan_iter(match=f"*{namespace}*", count=1000))
        if stale:
            client.delete(*stale)
        client.close()


def _stat(result: CrawlResult, name: str) -> int:
    return int(result.stat(name) or 0)


def test_the_crawl_finishes_within_a_minute(crawled: Crawled) -> None:
    result = crawled.result
    assert result.returncode == 0, result.log[-3000:]
    assert result.seconds < 60, result.seconds


def test_the_a_and_the_ipv6_only_hosts_are_fully_crawled(crawled: Crawled) -> None:
    web = crawled.web
    robots = {"/robots.txt"} if crawled.robots else set()
    assert web.paths("127.0.0.2") == {"/", "/a", "/b", "/c", "/x"} | robots
    assert web.paths("::1") == {"/", "/a", "/b", "/c", "/x"} | robots
    assert web.names() == {"ok.test", "v6.test"}  # the bad names never reached a server
    statuses = {(i["url"], i["status"]) for i in crawled.result.items}
    port = web.port
    for name in ("ok.test", "v6.test"):
        assert (f"http://{name}:{port}/c", 200) in statuses
        assert (f"http://{name}:{port}/x", 404) in statuses


def test_the_bad_names_end_as_dns_dead_letters(crawled: Crawled) -> None:
    client = redis.Redis.from_url(crawled.redis_url)
    try:
        dead = crawled.admin(client).dead()
    finally:
        client.close()
    by_host: dict[str, set[str]] = {}
    for letter in dead:
        by_host.setdefault(letter.host.split("://")[1].rsplit(":", 1)[0], set()).add(
            letter.reason)
    assert by_host == {"gone.test": {"dns-nxdomain"}, "broken.test": {"dns-failed"},
                       "silent.test": {"dns-failed"}}
    assert len(dead) == 6  # both URLs of each bad host, the first one included
    errors = {letter.host.split("://")[1].rsplit(":", 1)[0]: letter.error for letter in dead}
    assert "NXDOMAIN" in errors["gone.test"]
    assert "SERVFAIL" in errors["broken.test"]
    assert "DNS_TIMEOUT" in errors["silent.test"]


def test_no_breaker_opened_and_nothing_was_retried_as_a_download_error(
        crawled: Crawled) -> None:
    result = crawled.result
    assert _stat(result, "breaker/open") == 0
    assert _stat(result, "retry/reason_count/download-error") == 0
    assert _stat(result, "robots/fetch/error/DNSLookupError") == 0
    client = redis.Redis.from_url(crawled.redis_url)
    try:
        admin = crawled.admin(client)
        for name in BAD:
            host = f"http://{name}:{crawled.web.port}"
            key = admin.keys.site(admin.partition(host), host)  # the breaker is the site's
            fields = {k.decode(): v.decode() for k, v in client.hgetall(key).items()}
            assert int(fields.get("cf", "0")) == 0 and "bo" not in fields, (name, fields)
    finally:
        client.close()


def test_each_bad_name_was_asked_as_the_dns_settings_say(crawled: Crawled) -> None:
    dns = crawled.dns
    # NXDOMAIN: one lookup and its confirmation (A and AAAA each); a second
    # request that met it before the host was parked may have asked once more.
    assert len(dns.questions("gone.test")) in (4, 8)
    # SERVFAIL and silence: one lookup per attempt, and the host's other URL,
    # when it was claimed before the failure held the host, asks once more in
    # that attempt (uncounted): between one and two lookups per attempt.
    for name in ("broken.test", "silent.test"):
        lookups = len(dns.questions(name)) // 2
        assert MAX_ATTEMPTS <= lookups <= 2 * MAX_ATTEMPTS, (name, lookups)
    result = crawled.result
    assert _stat(result, "dns/lookups/nxdomain") >= 1
    assert _stat(result, "dns/lookups/servfail") >= MAX_ATTEMPTS
    assert _stat(result, "dns/lookups/timeout") >= MAX_ATTEMPTS
    assert _stat(result, "dns/lookups/ok") >= 2
    assert _stat(result, "dns/hosts/parked/nxdomain") == 1
    assert _stat(result, "dns/hosts/parked/failed") == 2
    assert _stat(result, "dns/hosts/held") >= 2 * (MAX_ATTEMPTS - 1)
    assert 900 <= _stat(result, "dns/lookup_ms/max") < 1500  # the silent name's timeouts
    # The first contact is the IP scope's DNS job (before any claim), then
    # the robots.txt job or the page requests.
    where = "robots_jobs" if crawled.robots else "requests"
    assert (_stat(result, f"dns/{where}/timeout")
            + _stat(result, "dns/dns_jobs/timeout")) >= MAX_ATTEMPTS
    assert _stat(result, "dns/dns_jobs/timeout") >= 1


def test_dns_dead_letters_can_be_requeued(crawled: Crawled) -> None:
    """``scrapy frontier requeue --reason``: dns-nxdomain after one crawl, dns-failed after
    the other (the hosts are unparked and their failed lookups forgotten)."""
    reason, moved, left = (("dns-nxdomain", 2, "dns-failed") if crawled.robots
                           else ("dns-failed", 4, "dns-nxdomain"))
    command = [sys.executable, "-m", "scrapy", "frontier", "requeue", "--reason", reason,
               "-s", f"REDIS_URL={crawled.redis_url}",
               "-s", f"FRONTIER_NAMESPACE={crawled.namespace}", "-s", "FRONTIER_PARTITIONS=4"]
    done = subprocess.run(command, cwd=REPO, env=proxy_env(""), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"requeued {moved} dead letter(s)" in done.stdout, done.stdout
    client = redis.Redis.from_url(crawled.redis_url)
    try:
        admin = crawled.admin(client)
        assert {d.reason for d in admin.dead()} == {left}
        assert admin.status(oldest=False).counts["queued"] == moved
        for letter_host in {f"http://{n}:{crawled.web.port}" for n in BAD}:
            part = admin.partition(letter_host)
            requeued = reason == ("dns-nxdomain" if "gone" in letter_host else "dns-failed")
            fields = client.hgetall(admin.keys.host(part, letter_host))
            assert (b"b" in fields) is not requeued, (letter_host, fields)
            if requeued:  # DNS failures are counted for the site (the name)
                assert b"da" not in client.hgetall(admin.keys.site(part, letter_host))
    finally:
        client.close()


def test_the_log_says_what_happened_to_each_bad_host(crawled: Crawled) -> None:
    log = crawled.result.log
    assert "parked (dns-nxdomain)" in log and "parked (dns-failed)" in log
    assert "scrapy frontier requeue --reason dns-nxdomain" in log
    assert "Traceback" not in log, log[-3000:]
