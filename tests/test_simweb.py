"""Tests of the simulated web itself (model, server, ledger, process, CLI).

The crawler's end-to-end tests trust this fixture as ground truth, so every
misbehaviour is checked here against a real server process, with plain
``http.client`` / raw sockets speaking to it as a proxy client would.
"""

from __future__ import annotations

import asyncio
import email.utils
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from protego import Protego

from tests.simweb import PAGE_MODES, ROBOTS_MODES, HostSpec, Ledger, SimWebProcess, Web
from tests.simweb.bodies import HUGE_SIZE, OVERSIZED_CUTOFF, rules_body
from tests.simweb.model import DECORATIONS, page_path
from tests.simweb.process import REPO_ROOT
from tests.simweb.server import LoopWatch
from tests.simweb.urls import url_identity

UNIFORM_MIX = {
    **{f"robots:{m}": 1.0 for m in ROBOTS_MODES},
    **{f"page:{m}": 1.0 for m in PAGE_MODES},
}
SEED, N_HOSTS = 5, 80

Response = tuple[int, dict[str, str], bytes]


# ---------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def sim() -> Iterator[SimWebProcess]:
    """One server for the module; with a uniform mix every mode appears."""
    with SimWebProcess(seed=SEED, n_hosts=N_HOSTS, mix=UNIFORM_MIX, hang_max=30) as proc:
        yield proc


@pytest.fixture(scope="module")
def web(sim: SimWebProcess) -> Web:
    return sim.web


def get(
    port: int,
    url: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    timeout: float = 5.0,
) -> Response:
    """One request with an absolute URI, as an HTTP proxy client sends it."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, url, headers=headers or {})
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body
    finally:
        conn.close()


def raw_exchange(
    port: int, payload: bytes, *, timeout: float = 3.0, half_close: bool = False
) -> bytes:
    """Send raw bytes (then maybe our FIN), return everything until the
    server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(payload)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def request_bytes(host: str, path: str, agent: str) -> bytes:
    """A proxy-style GET request head."""
    return (
        f"GET http://{host}{path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: {agent}\r\n\r\n"
    ).encode()


def first(web: Web, robots: str | None = None, page: str | None = None) -> HostSpec:
    hosts = web.hosts_where(robots=robots, page=page)
    assert hosts, f"no host with robots={robots} page={page}"
    return hosts[0]


def wait_for(predicate: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def entries_by_agent(sim: SimWebProcess, agent: str) -> list[dict]:
    return [e for e in sim.ledger() if e["user_agent"] == agent]


class HrefParser(HTMLParser):
    """(tag, href) of every a/area/link element, entities decoded."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag in ("a", "area", "link") and href is not None:
            self.found.append((tag, href))


def hrefs_of(body: bytes) -> list[tuple[str, str]]:
    parser = HrefParser()
    parser.feed(body.decode("utf-8"))
    return parser.found


# ------------------------------------------------------------ determinism


def test_same_seed_same_web_and_other_seed_differs() -> None:
    a, b = Web(seed=7, n_hosts=50), Web(seed=7, n_hosts=50)
    assert a.hosts == b.hosts
    assert a.fingerprint() == b.fingerprint()
    spec = a.hosts[3]
    assert a.links(spec.name, "/p/1") == b.links(spec.name, "/p/1")
    assert a.resource(spec.name, "/").body == b.resource(spec.name, "/").body
    c = Web(seed=8, n_hosts=50)
    assert c.hosts != a.hosts
    assert c.fingerprint() != a.fingerprint()


def test_determinism_across_processes() -> None:
    code = "from tests.simweb import Web; print(Web(seed=7, n_hosts=50).fingerprint())"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, check=True
    )
    assert out.stdout.decode().strip() == Web(seed=7, n_hosts=50).fingerprint()


def test_named_mixes() -> None:
    clean = Web(seed=1, n_hosts=400, mix="clean")
    assert {h.robots for h in clean.hosts} <= {"rules", "allow-all", "missing", "html"}
    assert {h.page for h in clean.hosts} <= {"normal", "nonhtml"}
    e2e = Web(seed=1, n_hosts=400, mix="e2e")
    pages = {h.page for h in e2e.hosts}
    assert {"trap-calendar", "trap-repeat", "redirects", "dup-heavy"} <= pages
    assert pages <= {"normal", "nonhtml", "trap-calendar", "trap-repeat", "redirects", "dup-heavy"}
    assert "rules" in {h.robots for h in e2e.hosts}
    default = Web(seed=1, n_hosts=1000)
    assert {h.robots for h in default.hosts} == set(ROBOTS_MODES)
    assert {h.page for h in default.hosts} == set(PAGE_MODES)
    good = default.hosts_where(robots=("rules", "allow-all", "missing"), page=("normal", "nonhtml"))
    assert 0.6 < len(good) / 1000 < 0.8
    assert all(3 <= h.n_pages <= 25 for h in default.hosts)
    assert default.seed_urls(2) == ["http://h00000.test/", "http://h00001.test/"]


def test_bad_mix_is_rejected() -> None:
    with pytest.raises(ValueError):
        Web(mix="nope")
    with pytest.raises(ValueError):
        Web(mix={"robots:teapot": 1.0})


def test_fixture_web_has_every_mode(web: Web) -> None:
    assert {h.robots for h in web.hosts} == set(ROBOTS_MODES)
    assert {h.page for h in web.hosts} == set(PAGE_MODES)


# -------------------------------------------------------- links & identity


def test_every_link_resolves_to_its_ground_truth_target() -> None:
    web = Web(seed=3, n_hosts=150)
    seen_tags: Counter[str] = Counter()
    for spec in web.hosts:
        for k in range(spec.n_pages):
            page_url = f"http://{spec.name}{page_path(k)}"
            for link in web.links(spec.name, page_path(k)):
                seen_tags[link.tag] += 1
                absolute = urljoin(page_url, link.href)
                if link.target is None:
                    assert urlsplit(absolute).scheme in ("mailto", "javascript", "ftp")
                    continue
                assert url_identity(absolute) == link.target, (page_url, link)
    assert {"a", "area", "link"} <= set(seen_tags)


def test_root_carries_every_decoration_and_non_http_link() -> None:
    web = Web(seed=3, n_hosts=20, mix="clean")
    spec = web.hosts[0]
    hrefs = [ln.href for ln in web.links(spec.name, "/")]
    joined = " ".join(hrefs)
    for marker in ("utm_source=", "gclid=", "fbclid=", "msclkid=", "#section", "HTTP://H", ":80/"):
        assert marker in joined
    assert "./" in hrefs and any("/./" in h for h in hrefs) and any("/../" in h for h in hrefs)
    assert any(h.startswith("mailto:") for h in hrefs)
    assert any(h.startswith("javascript:") for h in hrefs)
    assert any(h.startswith("ftp://127.0.0.1") for h in hrefs)  # loopback only
    assert len(DECORATIONS) >= 10


def test_page_identity() -> None:
    web = Web(seed=1, n_hosts=10)
    assert web.page_identity("H00003.TEST:80", "/p/./2?utm_source=a&gclid=x#f") == (
        "h00003.test",
        "/p/2",
    )
    assert web.page_identity("h00003.test", "/x/../p/2?fbclid=1&msclkid=2") == (
        "h00003.test",
        "/p/2",
    )
    assert web.page_identity("h", "/a/?sid=1&utm_medium=m") == ("h", "/a/?sid=1")
    assert web.page_identity("ignored", "HTTP://H00001.TEST:80/p/1#x") == ("h00001.test", "/p/1")


def test_served_html_matches_model_links(sim: SimWebProcess, web: Web) -> None:
    for mode in ("normal", "nonhtml", "dup-heavy", "redirects", "trap-calendar", "trap-repeat"):
        spec = first(web, page=mode)
        status, headers, body = get(sim.port, spec.root_url)
        assert status == 200 and headers["content-type"].startswith("text/html")
        assert b"<title>" in body
        expected = Counter((ln.tag, ln.href) for ln in web.links(spec.name, "/"))
        assert Counter(hrefs_of(body)) == expected


def test_dup_heavy_links_many_duplicates(web: Web) -> None:
    spec = first(web, page="dup-heavy")
    links = [ln for ln in web.links(spec.name, "/") if ln.target is not None]
    assert len(links) >= 3 * len({ln.target for ln in links})


# ------------------------------------------------------------------ robots


def test_robots_rules(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, robots="rules")
    status, headers, body = get(sim.port, f"http://{spec.name}/robots.txt")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert body == rules_body(spec.crawl_delay)
    text = body.decode()
    assert "Disallow: /private/" in text and "User-agent: badbot" in text
    assert f"Crawl-delay: {spec.crawl_delay:g}" in text
    assert spec.crawl_delay in (0.2, 0.5, 1.0)


@pytest.mark.parametrize(
    ("mode", "status", "content_type"),
    [
        ("allow-all", 200, "text/plain"),
        ("missing", 404, None),
        ("html", 200, "text/html"),
        ("forbidden", 403, None),
        ("too-many", 429, None),
        ("error-500", 500, None),
        ("error-503", 503, None),
    ],
)
def test_robots_simple_modes(
    sim: SimWebProcess, web: Web, mode: str, status: int, content_type: str | None
) -> None:
    spec = first(web, robots=mode)
    got, headers, body = get(sim.port, f"http://{spec.name}/robots.txt")
    assert got == status
    if content_type:
        assert headers["content-type"].startswith(content_type)
    if mode == "allow-all":
        assert body == b""
    if mode == "html":
        assert b"<html" in body and b"Disallow" not in body
    if mode == "too-many":
        assert int(headers["retry-after"]) > 0


def follow(port: int, url: str, max_hops: int = 10) -> list[tuple[str, int]]:
    """(url, status) of each step of a redirect chain, without following
    further than ``max_hops`` redirects."""
    steps = []
    for _ in range(max_hops + 1):
        status, headers, _ = get(port, url)
        steps.append((url, status))
        if status not in (301, 302):
            break
        url = urljoin(url, headers["location"])
    return steps


@pytest.mark.parametrize(("mode", "hops"), [("redirect-3", 3), ("redirect-6", 6)])
def test_robots_redirect_chains(sim: SimWebProcess, web: Web, mode: str, hops: int) -> None:
    spec = first(web, robots=mode)
    steps = follow(sim.port, f"http://{spec.name}/robots.txt")
    assert [s for _, s in steps] == [301] * hops + [200]
    assert [u for u, _ in steps[1:]] == web.robots_redirect_chain(spec.name)
    hop_hosts = {urlsplit(u).hostname for u, _ in steps[1:]}
    assert hop_hosts - {spec.name}, "the chain should cross to other hosts"
    status, _, body = get(sim.port, steps[-1][0])
    assert status == 200 and b"Disallow: /private/" in body


def test_robots_redirect_loop(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, robots="redirect-loop")
    start = f"http://{spec.name}/robots.txt"
    steps = follow(sim.port, start, max_hops=4)
    assert all(s == 301 for _, s in steps)
    assert [u for u, _ in steps].count(start) >= 2


def test_robots_timeout_hangs(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, robots="timeout")
    with pytest.raises(TimeoutError):
        get(sim.port, f"http://{spec.name}/robots.txt", timeout=0.5)


def test_robots_oversized(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, robots="oversized")
    status, _, body = get(sim.port, f"http://{spec.name}/robots.txt")
    assert status == 200 and len(body) >= 600 * 1024
    assert body.startswith(rules_body(spec.crawl_delay))
    assert body.index(b"Disallow: /late/") > OVERSIZED_CUTOFF
    whole = Protego.parse(body.decode())
    head = Protego.parse(body[:OVERSIZED_CUTOFF].decode())
    assert not whole.can_fetch(f"http://{spec.name}/late/1", "*")
    assert head.can_fetch(f"http://{spec.name}/late/1", "*")
    assert not head.can_fetch(f"http://{spec.name}/private/1", "*")


def test_robots_bom(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, robots="bom")
    status, _, body = get(sim.port, f"http://{spec.name}/robots.txt")
    assert status == 200 and body.startswith(b"\xef\xbb\xbfUser-agent: *")
    with pytest.raises(UnicodeDecodeError):
        body.decode("utf-8")
    parser = Protego.parse(body.decode("utf-8-sig", errors="replace"))
    assert not parser.can_fetch(f"http://{spec.name}/private/1", "*")


# ------------------------------------------------------------------- pages


def test_normal_pages_and_404s(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, page="normal")
    last = page_path(spec.n_pages - 1)
    assert get(sim.port, f"http://{spec.name}{last}")[0] == 200
    assert get(sim.port, f"http://{spec.name}/p/{spec.n_pages}")[0] == 404
    assert get(sim.port, f"http://{spec.name}/nothing/here")[0] == 404
    status, _, body = get(sim.port, "http://no-such-host.test/")
    assert status == 404 and len(body) < 500
    # Decorated spellings reach the same page.
    status, _, body = get(sim.port, f"http://{spec.name}:80/p/./1?utm_source=x")
    assert status == 200 and body == get(sim.port, f"http://{spec.name}/p/1")[2]


def test_origin_form_routed_by_host_header(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, page="normal")
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=5)
    try:
        conn.request("GET", "/", headers={"Host": spec.name})
        resp = conn.getresponse()
        assert resp.status == 200 and spec.name.encode() in resp.read()
    finally:
        conn.close()


def test_nonhtml_resources(sim: SimWebProcess, web: Web) -> None:
    types = {"pdf": "application/pdf", "png": "image/png", "json": "application/json"}
    types["txt"] = "text/plain"
    seen = set()
    for spec in web.hosts_where(page="nonhtml"):
        for k in range(spec.n_pages):
            ext = web.resource_ext(spec.name, k)
            if ext is None or ext in seen:
                continue
            seen.add(ext)
            url = f"http://{spec.name}/f/{k}.{ext}"
            assert (spec.name, f"/f/{k}.{ext}") in {
                ln.target for ln in web.links(spec.name, page_path(k))
            }
            status, headers, body = get(sim.port, url)
            assert status == 200 and headers["content-type"].startswith(types[ext])
            assert f"/nofollow/{ext}-{k}".encode() in body
            assert web.links(spec.name, f"/f/{k}.{ext}") == []
            # The trap page exists, so a crawler that follows it is caught.
            assert get(sim.port, f"http://{spec.name}/nofollow/{ext}-{k}")[0] == 200
    assert seen == set(types)


def test_redirect_pages(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, page="redirects")
    status, headers, _ = get(sim.port, f"http://{spec.name}/r/1")
    assert (status, headers["location"]) == (301, "/p/1")
    status, headers, _ = get(sim.port, f"http://{spec.name}/r/2")
    assert (status, headers["location"]) == (302, f"http://{spec.name}/p/2")
    status, headers, _ = get(sim.port, f"http://{spec.name}/r/x")
    target = urlsplit(headers["location"])
    assert status == 302 and target.hostname != spec.name and target.path == "/p/1"


def test_redirect_loop_pages(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, page="redirect-loop")
    steps = follow(sim.port, f"http://{spec.name}/loop/a", max_hops=3)
    assert [urlsplit(u).path for u, _ in steps] == ["/loop/a", "/loop/b", "/loop/a", "/loop/b"]
    assert {s for _, s in steps} == {301}


def test_rate_limited_seconds(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, page="rate-limited-seconds")
    status, headers, _ = get(sim.port, f"http://{spec.name}/p/1?utm_source=first")
    assert status == 429 and headers["retry-after"] == "2"
    # Same page under another spelling: the first-request state is per page.
    assert get(sim.port, f"http://{spec.name}/p/1")[0] == 200
    assert get(sim.port, f"http://{spec.name}/p/1")[0] == 200


def test_rate_limited_date(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, page="rate-limited-date")
    status, headers, _ = get(sim.port, f"http://{spec.name}/")
    assert status == 429
    when = email.utils.parsedate_to_datetime(headers["retry-after"]).timestamp()
    assert 1.5 <= when - time.time() <= 4.5
    assert get(sim.port, f"http://{spec.name}/")[0] == 200


def test_unavailable(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, page="unavailable")
    statuses = [get(sim.port, f"http://{spec.name}/p/2")[0] for _ in range(4)]
    assert statuses == [503, 503, 200, 200]


def test_hang_and_ledger_open_entry(sim: SimWebProcess, web: Web) -> None:
    spec = next(h for h in web.hosts_where(page="hang") if h.robots != "timeout")
    assert get(sim.port, f"http://{spec.name}/robots.txt")[0] in (200, 301, 403, 404, 429, 500, 503)
    agent = "test-hang"
    with socket.create_connection(("127.0.0.1", sim.port), timeout=0.5) as sock:
        sock.sendall(request_bytes(spec.name, "/p/1", agent))
        with pytest.raises(TimeoutError):
            sock.recv(1)
        [entry] = entries_by_agent(sim, agent)
        assert entry["done"] is None and entry["status"] is None
    wait_for(lambda: entries_by_agent(sim, agent)[0]["done"] is not None)
    [entry] = entries_by_agent(sim, agent)
    assert entry["outcome"] == "hang" and entry["status"] is None


def test_reset(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, page="reset")
    with pytest.raises(ConnectionResetError):
        raw_exchange(sim.port, request_bytes(spec.name, "/", "test-reset"))
    wait_for(lambda: entries_by_agent(sim, "test-reset"))
    assert entries_by_agent(sim, "test-reset")[0]["outcome"] == "reset"


def read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """Read up to the end of the response head; return (head, body so far)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before the head"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            return int(value)
    raise AssertionError("no Content-Length")


def test_trickle_is_slow(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, page="trickle")
    with socket.create_connection(("127.0.0.1", sim.port), timeout=3) as sock:
        sock.sendall(request_bytes(spec.name, "/", "test-trickle"))
        head, body = read_head(sock)
        assert head.startswith(b"HTTP/1.1 200")
        total = content_length(head)
        deadline = time.monotonic() + 1.6
        while time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                body += sock.recv(65536)
            except TimeoutError:
                break
        assert 0 < len(body) < total / 4, (len(body), total)
    wait_for(lambda: entries_by_agent(sim, "test-trickle")[0]["done"] is not None, timeout=5)
    assert entries_by_agent(sim, "test-trickle")[0]["outcome"] == "client-closed"


def test_huge_is_streamed(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, page="huge")
    assert "/huge" in {ln.href for ln in web.links(spec.name, "/")}
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=5)
    try:
        conn.request("GET", f"http://{spec.name}/huge", headers={"User-Agent": "test-huge"})
        resp = conn.getresponse()
        assert resp.status == 200 and int(resp.getheader("Content-Length", "0")) == HUGE_SIZE
        assert len(resp.read(1024 * 1024)) == 1024 * 1024
    finally:
        conn.close()
    wait_for(lambda: entries_by_agent(sim, "test-huge")[0]["done"] is not None)
    [entry] = entries_by_agent(sim, "test-huge")
    assert entry["outcome"] == "client-closed" and entry["bytes"] < HUGE_SIZE
    if sys.platform.startswith("linux"):  # the server never held 50 MiB
        status = Path(f"/proc/{sim.pid}/status").read_text()
        rss_kib = int(status.split("VmRSS:")[1].split()[0])
        assert rss_kib < 150 * 1024


def test_large_pages(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, page="large")
    status, headers, body = get(sim.port, f"http://{spec.name}/", timeout=10)
    assert status == 200 and int(headers["content-length"]) == len(body)
    assert 1024 * 1024 <= len(body) <= 3 * 1024 * 1024 + 64 * 1024
    assert body.startswith(b"<!DOCTYPE html>") and body.rstrip().endswith(b"</html>")
    assert Counter(hrefs_of(body)) == Counter((ln.tag, ln.href) for ln in web.links(spec.name, "/"))


def test_trap_calendar(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, page="trap-calendar")
    for page, expected in [
        ("/calendar/2024/01", {"/calendar/2023/12", "/calendar/2024/02"}),
        ("/calendar/9999/12", {"/calendar/9999/11", "/calendar/10000/01"}),
    ]:
        url = f"http://{spec.name}{page}"
        status, _, body = get(sim.port, url)
        assert status == 200
        paths = {urlsplit(urljoin(url, h)).path for tag, h in hrefs_of(body) if tag == "a"}
        assert expected <= paths
    assert get(sim.port, f"http://{spec.name}/calendar/10000/01")[0] == 200
    assert get(sim.port, f"http://{spec.name}/calendar/2024/13")[0] == 404


def test_trap_repeat(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, page="trap-repeat")
    url = f"http://{spec.name}/a/b/a/b/a/"
    status, _, body = get(sim.port, url)
    assert status == 200
    targets = {urljoin(url, h) for tag, h in hrefs_of(body) if tag == "a"}
    assert f"http://{spec.name}/a/b/a/b/a/b/" in targets
    [sid_url] = [t for t in targets if "sid=" in t]
    status, _, body2 = get(sim.port, sid_url)
    assert status == 200
    next_sid = [urljoin(sid_url, h) for _, h in hrefs_of(body2) if "sid=" in h]
    assert next_sid and next_sid[0] != sid_url  # a new session id every time


# ------------------------------------------------------- protocol & ledger


def test_keep_alive_and_connection_close(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, page="normal")
    agent = "test-keepalive"
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=5)
    try:
        for path in ("/", "/p/1?x=1"):
            conn.request("GET", f"http://{spec.name}{path}", headers={"User-Agent": agent})
            resp = conn.getresponse()
            resp.read()
            assert resp.getheader("Connection") == "keep-alive"
        conn.request(
            "GET", f"http://{spec.name}/p/2", headers={"User-Agent": agent, "Connection": "close"}
        )
        resp = conn.getresponse()
        body = resp.read()
        assert resp.getheader("Connection") == "close"
    finally:
        conn.close()
    entries = entries_by_agent(sim, agent)
    assert [e["path"] for e in entries] == ["/", "/p/1?x=1", "/p/2"]
    assert len({e["conn"] for e in entries}) == 1
    last = entries[-1]
    assert last["status"] == 200 and last["bytes"] == len(body) and last["outcome"] == "ok"
    assert last["method"] == "GET" and last["host"] == spec.name
    assert last["arrival"] <= last["done"]


@pytest.mark.parametrize(
    "payload",
    [
        b"\x00\x01\x02\xff garbage \r\n\r\n",
        b"GET\r\n\r\n",
        b"GET http://h00001.test/ HTTP/1.1\r\nthis is not a header\r\n\r\n",
        b"GET http://h00001.test/ HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n",
        b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n",
        b"GET http://h00001.test/ HTTP/1.1\r\n" + b"X-A: b\r\n" * 200 + b"\r\n",
        b"GET / HTTP/1.1\r\n\r\n",  # no Host header
        b"GET https://h00001.test/ HTTP/1.1\r\n\r\n",
    ],
)
def test_garbage_gets_4xx_and_server_survives(sim: SimWebProcess, payload: bytes) -> None:
    reply = raw_exchange(sim.port, payload)
    assert reply.startswith(b"HTTP/1.1 4"), reply[:80]
    assert sim.health()["ok"]


def test_truncated_requests_do_not_hurt(sim: SimWebProcess) -> None:
    for payload in (b"GET http://h00001.test/ HTTP/1.1\r\nHost: x", b"\xff" * 100, b""):
        assert raw_exchange(sim.port, payload, half_close=True) == b""
    assert sim.health()["ok"]


def test_connect_and_post_are_refused(sim: SimWebProcess) -> None:
    reply = raw_exchange(sim.port, b"CONNECT h00001.test:443 HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 405")
    assert get(sim.port, "http://h00001.test/", method="POST")[0] == 405


def test_ledger_analysis_on_hand_built_entries() -> None:
    def entry(n: int, host: str, path: str, arrival: float, done: float | None) -> dict:
        return {
            "id": n,
            "host": host,
            "path": path,
            "method": "GET",
            "arrival": arrival,
            "done": done,
            "status": 200,
            "bytes": 0,
            "outcome": "ok" if done else None,
            "conn": n,
            "user_agent": "x",
        }

    ledger = Ledger(
        [
            entry(1, "a.test", "/robots.txt", 0.0, 1.0),
            entry(2, "a.test", "/", 1.0, 3.0),  # starts as #1 ends: no overlap
            entry(3, "a.test", "/p/1?utm_source=x", 1.5, 2.0),
            entry(4, "a.test", "/p/1", 1.8, None),  # open until the end (10.0)
            entry(5, "b.test", "/", 2.5, 10.0),
        ]
    )
    assert ledger.max_in_flight("a.test") == 3
    assert ledger.max_in_flight("b.test") == 1
    assert ledger.min_gap("a.test") == pytest.approx(0.3)
    assert ledger.min_gap("b.test") is None
    assert ledger.hosts() == {"a.test", "b.test"}
    assert len(ledger.robots_fetches("a.test")) == 1
    assert ledger.count("a.test", "/p/1") == 1
    pages = ledger.pages(Web(n_hosts=1))
    assert pages[("a.test", "/p/1")] == 2 and ("a.test", "/robots.txt") not in pages


def test_reset_clears_ledger_and_first_request_state(sim: SimWebProcess, web: Web) -> None:
    spec = first(web, page="rate-limited-seconds")
    url = f"http://{spec.name}/p/2"
    assert [get(sim.port, url)[0] for _ in range(2)] == [429, 200]
    sim.reset()
    assert len(sim.ledger()) == 0
    assert get(sim.port, url)[0] == 429


def test_the_ledger_names_the_client_that_sent_each_request(sim: SimWebProcess,
                                                             web: Web) -> None:
    spec = first(web, page="normal")
    get(sim.port, f"http://{spec.name}/p/0", headers={"User-Agent": "client-test",
                                                      "X-Client-Id": "w7.2"})
    get(sim.port, f"http://{spec.name}/p/0", headers={"User-Agent": "client-test"})
    assert [e["client"] for e in entries_by_agent(sim, "client-test")] == ["w7.2", None]


def test_the_server_records_when_its_own_loop_did_not_run() -> None:
    """A stopped server process is a stalled loop: the window it reports covers the stop."""
    with SimWebProcess(seed=2, n_hosts=5, mix="clean") as proc:
        time.sleep(0.2)
        before = len(proc.stalls())  # a loaded machine may have stalled the start
        stopped = time.time()
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGCONT)
        stalls = proc.stalls()[before:]
        assert any(start <= stopped and end >= stopped + 0.3 for start, end in stalls)


def test_loop_watch_records_a_blocked_turn() -> None:
    async def watch() -> list[list[float]]:
        watcher = LoopWatch(every=0.01, over=0.05)
        task = asyncio.create_task(watcher.run())
        await asyncio.sleep(0.2)
        time.sleep(0.1)  # one blocked turn
        await asyncio.sleep(0.05)
        task.cancel()
        return watcher.stalls

    stalls = asyncio.run(watch())
    assert any(end - start >= 0.1 for start, end in stalls)
    assert all(end - start > 0.06 for start, end in stalls)


def test_process_lifecycle_and_cli() -> None:
    proc = SimWebProcess(seed=2, n_hosts=5, mix="clean")
    with proc:
        assert proc.running and proc.proxy_url == f"http://127.0.0.1:{proc.port}"
        assert proc.health()["hosts"] == 5
    assert not proc.running
    out = subprocess.run(
        [sys.executable, "-m", "tests.simweb", "seeds", "--seed", "2", "--hosts", "5", "-n", "3"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    )
    assert out.stdout.decode().split() == Web(2, 5).seed_urls(3)


def test_clean_shutdown_exit_code() -> None:
    proc = SimWebProcess(seed=2, n_hosts=5, mix="clean").start()
    assert proc.stop() == 0


# --------------------------------------------------------------- reachable


def test_every_page_of_a_clean_host_is_reachable_and_robots_respected() -> None:
    web = Web(seed=2, n_hosts=300, mix="clean")
    for spec in web.hosts_where(robots="rules", page="normal")[:5]:
        found = web.reachable([spec.root_url])
        own = {path for host, path in found if host == spec.name}
        assert {page_path(k) for k in range(spec.n_pages)} <= own
        assert not any(p.startswith("/private/") for p in own)
        loose = web.reachable([spec.root_url], obey_robots=False)
        assert (spec.name, "/private/1") in loose
        assert web.reachable([spec.root_url], user_agent="badbot") == {}


def test_reachable_depths_are_shortest_paths() -> None:
    web = Web(seed=2, n_hosts=300, mix="clean")
    seeds = web.seed_urls(3)
    assert web.reachable(seeds, max_depth=0) == {url_identity(u): 0 for u in seeds}
    found = web.reachable(seeds, max_depth=3)
    assert max(found.values()) == 3
    deeper = web.reachable(seeds)
    for ident, depth in found.items():
        assert deeper[ident] == depth
        if depth:  # some page one level up links here
            assert any(
                ident in {ln.target for ln in web.links(*parent) if ln.tag != "link"}
                for parent, d in found.items()
                if d == depth - 1
            )


def test_reachable_special_hosts() -> None:
    web = Web(seed=5, n_hosts=N_HOSTS, mix=UNIFORM_MIX)

    def root(mode: str) -> str:
        return first(web, page=mode).root_url

    assert web.reachable([root("hang")], obey_robots=False) == {url_identity(root("hang")): 0}
    # Traps are bounded by depth and by the limit.
    calendar = web.reachable([root("trap-calendar")], obey_robots=False, max_depth=6)
    assert any("/calendar/" in p for _, p in calendar)
    assert len(web.reachable([root("trap-repeat")], obey_robots=False, limit=300)) == 300
    shallow = web.reachable(
        [root("trap-repeat")], obey_robots=False, max_depth=8, admit=lambda u: "/a/b/a/" not in u
    )
    assert shallow and not any("/a/b/a/" in p for _, p in shallow)
    # Redirects: both ends, same depth.
    spec = first(web, page="redirects")
    found = web.reachable([spec.root_url], obey_robots=False, max_depth=1)
    redirected = [p for h, p in found if h == spec.name and p.startswith("/r/")]
    assert redirected
    for path in redirected:
        if path != "/r/x":
            assert found[(spec.name, "/p/" + path[3:])] <= found[(spec.name, path)]
    # Non-HTML resources are reached, their embedded links never followed.
    nonhtml = web.reachable([root("nonhtml")], obey_robots=False, max_depth=3)
    assert any(p.startswith("/f/") for _, p in nonhtml)
    assert not any(p.startswith("/nofollow/") for _, p in nonhtml)
    # robots: 5xx/timeout/429 disallow everything, 4xx allow everything.
    for mode in ("error-500", "timeout", "too-many"):
        assert web.reachable([first(web, robots=mode).root_url]) == {}
    assert web.reachable([first(web, robots="forbidden").root_url], max_depth=1)
    # Oversized robots: /late/ depends on how much of the file one reads.
    late = Web(seed=1, n_hosts=3, mix={"robots:oversized": 1, "page:normal": 1}).hosts[0]
    web = Web(seed=1, n_hosts=3, mix={"robots:oversized": 1, "page:normal": 1})
    assert (late.name, "/late/1") not in web.reachable([late.root_url], max_depth=1)
    cut = web.reachable([late.root_url], max_depth=1, robots_max_bytes=OVERSIZED_CUTOFF)
    assert (late.name, "/late/1") in cut
