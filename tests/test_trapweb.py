"""Tests of the trap web (tests/trapweb): its ground truth, and its server process.

Crawler tests will trust ``TrapWeb`` as ground truth, so the model is checked
by crawling it in-process (every link, every spelling) and comparing what was
found with ``required_pages``/``page_of``, and the server by fetching through
the proxy with plain ``http.client`` and comparing bytes with the model.
"""

from __future__ import annotations

import datetime as dt
import http.client
import itertools
import re
import subprocess
import sys
from collections import deque
from collections.abc import Iterable
from fnmatch import fnmatchcase
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import pytest

from crawler.learning.traps import page_text
from crawler.urls import DEFAULT_STRIP_PARAMS
from tests.simweb.process import REPO_ROOT
from tests.trapweb import KINDS, PARAM_POOL, TRAP_KINDS, TrapWeb, TrapWebProcess
from tests.trapweb.model import CATALOGUE_SIZE, FACETS, SID, vocabulary

TODAY = dt.date(2026, 3, 15)
HTML = "text/html; charset=utf-8"
Response = tuple[int, dict[str, str], bytes]


@pytest.fixture(scope="module")
def web() -> TrapWeb:
    return TrapWeb(seed=1, per_kind=2, today=TODAY)


# ---------------------------------------------------------------- helpers


class Parsed(HTMLParser):
    """The links, canonical and paragraph words of one page."""

    def __init__(self, body: bytes) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.canonical: str | None = None
        self.words: list[str] = []
        self._in_p = False
        self.feed(body.decode())
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "a":
            self.hrefs.append(found["href"] or "")
        elif tag == "link" and found.get("rel") == "canonical":
            self.canonical = found["href"]
        self._in_p = self._in_p or tag == "p"

    def handle_endtag(self, tag: str) -> None:
        self._in_p = self._in_p and tag != "p"

    def handle_data(self, data: str) -> None:
        if self._in_p:
            self.words += re.findall(r"[\w-]+", data.lower())


def similarity(a: bytes, b: bytes) -> float:
    """Jaccard index of the two pages' paragraph word sets."""
    wa, wb = set(Parsed(a).words), set(Parsed(b).words)
    return len(wa & wb) / len(wa | wb)


def crawl(web: TrapWeb, host: str, limit: int = 5000) -> tuple[dict[str, bytes], bool]:
    """Breadth-first from ``/`` over every in-host link in every spelling, as a
    naive crawler would: (body per target, whether the frontier ran dry)."""
    bodies: dict[str, bytes] = {}
    queue, seen = deque(["/"]), {"/"}
    while queue and len(bodies) < limit:
        target = queue.popleft()
        res = web.resource(host, target)
        assert (res.status, res.content_type) == (200, HTML), (host, target)
        bodies[target] = res.body
        for href in Parsed(res.body).hrefs:
            parts = urlsplit(urljoin(f"http://{host}{target}", href))
            assert parts.netloc == host
            found = parts.path + (f"?{parts.query}" if parts.query else "")
            if found not in seen:
                seen.add(found)
                queue.append(found)
    return bodies, not queue


def identities(web: TrapWeb, host: str, targets: Iterable[str]) -> set[str | None]:
    """The pages ``targets`` show (None for trap pages)."""
    return {web.page_of(host, t) for t in targets}


def max_similarity(bodies: list[bytes]) -> float:
    return max(similarity(a, b) for a, b in itertools.combinations(bodies, 2))


def min_similarity(bodies: list[bytes]) -> float:
    return min(similarity(a, b) for a, b in itertools.combinations(bodies, 2))


def without_hrefs(body: bytes) -> bytes:
    """The page with every link's target blanked out."""
    return re.sub(rb'href="[^"]*"', b'href=""', body)


def get(port: int, url: str) -> Response:
    """One GET with an absolute-form target, as a proxy client sends it."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", url)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


# ---------------------------------------------------------------- hosts and names


def test_hosts_kinds_and_seeds(web: TrapWeb) -> None:
    assert web.hosts()[:3] == ["noise-0.test", "noise-1.test", "select-0.test"]
    assert len(web.hosts()) == web.n_hosts == 2 * len(KINDS)
    assert web.hosts("facet") == ["facet-0.test", "facet-1.test"]
    assert web.seed_urls() == [f"http://{h}/" for h in web.hosts()]
    assert [web.kind_of(h) for h in web.hosts()] == [k for k in KINDS for _ in range(2)]
    assert {h for h in web.hosts() if web.is_trap(h)} == {
        h for k in TRAP_KINDS for h in web.hosts(k)}
    assert (web.seed, web.mix) == (1, "trapweb")
    with pytest.raises(ValueError):
        web.hosts("trap")
    for unknown in ("noise-2.test", "noise-01.test", "other-0.test", "h00001.test"):
        with pytest.raises(KeyError):
            web.kind_of(unknown)
        assert web.resource(unknown, "/").status == 404


def test_param_names_are_shared_by_index_and_on_no_strip_list(web: TrapWeb) -> None:
    for i in range(2):
        assert {web.param_of(f"{kind}-{i}.test") for kind in KINDS} == {PARAM_POOL[i]}
    assert len(set(PARAM_POOL)) == len(PARAM_POOL)
    assert not [(p, s) for p in PARAM_POOL for s in DEFAULT_STRIP_PARAMS if fnmatchcase(p, s)]


def test_same_seed_same_web_other_seed_differs(web: TrapWeb) -> None:
    again, other = TrapWeb(seed=1, per_kind=2, today=TODAY), TrapWeb(seed=2, per_kind=2,
                                                                      today=TODAY)
    for host in web.hosts():
        assert again.resource(host, "/") == web.resource(host, "/")
        assert other.resource(host, "/").body != web.resource(host, "/").body
        assert again.required_pages(host) == web.required_pages(host)


def test_vocabulary_and_default_today() -> None:
    words = vocabulary()
    assert len(words) == len(set(words)) == 3000
    assert all(w.isalpha() and w.islower() for w in words)
    assert TrapWeb().today == dt.datetime.now(dt.UTC).date()
    with pytest.raises(ValueError):
        TrapWeb(per_kind=0)


def test_robots_404s_and_html(web: TrapWeb) -> None:
    for host in web.hosts():
        robots = web.resource(host, "/robots.txt")
        assert (robots.status, robots.body) == (200, b"User-agent: *\nAllow: /\n")
        assert robots.content_type is not None and robots.content_type.startswith("text/plain")
        missing = web.resource(host, "/nowhere")
        assert missing.status == 404 and missing.content_type.startswith("text/plain")
        assert web.page_of(host, "/nowhere") is None and web.page_of(host, "/robots.txt") is None
        page = web.resource(host, "/#top")
        assert page.status == 200 and page.content_type == HTML
        assert page.body.startswith(b"<!DOCTYPE html>") and b"<title>" in page.body


# ---------------------------------------------------------------- finite hosts


@pytest.mark.parametrize("kind", ["noise", "select", "miscanon", "catalogue"])
def test_finite_hosts_crawl_to_exactly_their_required_pages(web: TrapWeb, kind: str) -> None:
    for host in web.hosts(kind):
        bodies, finished = crawl(web, host)
        assert finished
        assert identities(web, host, bodies) == web.required_pages(host)
        clean = [web.resource(host, p).body for p in sorted(web.required_pages(host))[:40]]
        assert max_similarity(clean) < 0.2  # distinct pages share few words


def test_noise_spellings_are_byte_identical_with_clean_canonicals(web: TrapWeb) -> None:
    host, name = "noise-1.test", web.param_of("noise-1.test")
    bodies, _ = crawl(web, host)
    assert web.required_pages(host) == {"/", *(f"/p/{k}" for k in range(1, 12))}
    noisy = [t for t in bodies if "?" in t]
    assert len(noisy) >= 6 and all(re.fullmatch(rf"/(p/\d+)?\?{name}=[0-9a-f]{{6}}", t)
                                   for t in noisy)
    for target, body in bodies.items():
        clean = web.page_of(host, target)
        assert clean == target.split("?")[0] and body == web.resource(host, clean).body
        assert Parsed(body).canonical == f"http://{host}{clean}"
    pages = web.required_pages(host)
    hrefs = [h for p in pages for h in Parsed(web.resource(host, p).body).hrefs]
    assert 0.25 <= sum("?" in h for h in hrefs) / len(hrefs) <= 0.45
    assert len({h for h in hrefs if "?" in h}) == sum("?" in h for h in hrefs)  # each one new
    assert web.page_of(host, f"/p/3?{name}=anything") == "/p/3"


def test_select_values_are_distinct_pages_with_self_canonicals(web: TrapWeb) -> None:
    host, name = "select-0.test", web.param_of("select-0.test")
    values = [f"/list?{name}={v}" for v in range(1, 7)]
    assert web.required_pages(host) == {"/", "/list", *values, "/p/1", "/p/2", "/p/3", "/p/4"}
    assert set(Parsed(web.resource(host, "/").body).hrefs) == web.required_pages(host) - {"/"}
    for target in [*values, "/list"]:
        assert Parsed(web.resource(host, target).body).canonical == f"http://{host}{target}"
        assert web.page_of(host, target) == target
    assert max_similarity([web.resource(host, t).body for t in [*values, "/list"]]) < 0.2
    for bad in (f"/list?{name}=7", f"/list?{name}=01", "/list?other=1", f"/p/1?{name}=1"):
        assert web.resource(host, bad).status == 404 and web.page_of(host, bad) is None


def test_miscanon_pages_all_claim_the_root(web: TrapWeb) -> None:
    host, name = "miscanon-1.test", web.param_of("miscanon-1.test")
    pages = sorted(web.required_pages(host))
    assert len(pages) == 11 and {f"/?{name}={v}" for v in range(1, 6)} < set(pages)
    assert set(Parsed(web.resource(host, "/").body).hrefs) == set(pages) - {"/"}
    assert {Parsed(web.resource(host, p).body).canonical for p in pages} == {f"http://{host}/"}
    assert max_similarity([web.resource(host, p).body for p in pages]) < 0.2
    assert web.resource(host, f"/?{name}=6").status == 404


def test_catalogue_has_exactly_300_different_products(web: TrapWeb) -> None:
    host = "catalogue-0.test"
    assert len(web.required_pages(host)) == CATALOGUE_SIZE + 1
    assert web.resource(host, "/product/300").status == 200
    for bad in ("/product/301", "/product/0", "/product/01", "/product/1?x=1"):
        assert web.resource(host, bad).status == 404
    products = [web.resource(host, f"/product/{n}").body for n in range(1, 300, 23)]
    assert max_similarity(products) < 0.2
    assert all(len(Parsed(body).words) >= 190 for body in products)


# ---------------------------------------------------------------- traps


def check_trap(web: TrapWeb, host: str, limit: int) -> dict[str, bytes]:
    """An endless host whose real pages are all among the first pages a
    breadth-first crawl fetches: the bodies of the other URLs fetched."""
    bodies, finished = crawl(web, host, limit)
    assert not finished
    first = dict(itertools.islice(bodies.items(), 30))
    assert web.required_pages(host) <= identities(web, host, first)
    return {t: b for t, b in bodies.items() if t not in web.required_pages(host)}


def assert_near_duplicates(trap: dict[str, bytes]) -> None:
    """A dozen trap pages spread over the crawl all share most of their words."""
    sample = list(trap.values())[:: max(1, len(trap) // 12)]
    assert len(sample) >= 12 and min_similarity(sample) > 0.85


def test_calendar_days_are_endless_near_duplicates(web: TrapWeb) -> None:
    host = "calendar-0.test"
    assert web.required_pages(host) == {"/", "/about", "/p/1", "/p/2"}
    assert "/events/2026/03/15" in Parsed(web.resource(host, "/").body).hrefs
    trap = check_trap(web, host, 400)
    assert all(re.fullmatch(r"/events/\d{4}/\d\d/\d\d", t) for t in trap)
    assert_near_duplicates(trap)
    assert identities(web, host, trap) == {None}
    assert b"No events on 2025-01-31." in web.resource(host, "/events/2025/01/31").body
    assert Parsed(web.resource(host, "/events/2025/01/31").body).hrefs == [
        "/events/2025/01/30", "/events/2025/02/01", "/events/2025/02/28", "/"]
    assert Parsed(web.resource(host, "/events/2027/12/31").body).hrefs == [
        "/events/2027/12/30", "/"]
    for bad in ("/events/2024/12/31", "/events/2028/01/01", "/events/2026/02/29",
                "/events/2026/3/15", "/events/2026/03/15?x=1"):
        assert web.resource(host, bad).status == 404


def test_the_small_calendar_s_days_are_endless_and_near_empty(web: TrapWeb) -> None:
    host = "minical-0.test"
    assert web.required_pages(host) == {"/", "/about", "/p/1", "/p/2"}
    assert "/cal/2026/03/15" in Parsed(web.resource(host, "/").body).hrefs
    trap = check_trap(web, host, 400)
    assert all(re.fullmatch(r"/cal/\d{4}/\d\d/\d\d", t) for t in trap)
    assert identities(web, host, trap) == {None}
    day = web.resource(host, "/cal/2026/01/31")
    assert page_text(day.body).split() == ["31", "January", "2026"] * 2 + [
        w for k in range(6) for w in ("link", str(k))]
    assert Parsed(day.body).hrefs == [
        "/cal/2026/01/30", "/cal/2026/02/01", "/cal/2025/12/31", "/cal/2026/02/28",
        "/cal/2025/01/31", "/cal/2027/01/31"]
    assert Parsed(web.resource(host, "/cal/2027/12/31").body).hrefs == [
        "/cal/2027/12/30", "/cal/2027/11/30", "/cal/2026/12/31"]
    for bad in ("/cal/2024/12/31", "/cal/2028/01/01", "/cal/2026/02/29", "/cal/2026/3/15"):
        assert web.resource(host, bad).status == 404


def test_session_ids_never_close_the_loop(web: TrapWeb) -> None:
    host = "session-1.test"
    assert web.required_pages(host) == {"/", *(f"/s/{SID}/page/{k}" for k in range(1, 7))}
    trap = check_trap(web, host, 300)
    sids = [t.split("/")[2] for t in trap]
    assert len(set(sids)) == len(sids) - 5  # only the root's six links share an id
    assert all(re.fullmatch(r"[0-9a-f]{12}", s) for s in sids)
    by_page: dict[str | None, set[bytes]] = {}
    for target, body in trap.items():
        by_page.setdefault(web.page_of(host, target), set()).add(without_hrefs(body))
    assert {k: len(v) for k, v in by_page.items()} == {f"/s/{SID}/page/{k}": 1 for k in range(1, 7)}
    one, two = (web.resource(host, f"/s/{sid}/page/3").body for sid in ("x", "yy"))
    assert one != two
    assert without_hrefs(one) == without_hrefs(two)
    assert web.page_of(host, "/s/anything/page/4") == f"/s/{SID}/page/4"
    for bad in ("/s/x/page/7", "/s/x/page/0", "/s/x/page/1?a=1", "/s//page/1"):
        assert web.resource(host, bad).status == 404


def test_facets_multiply_into_near_duplicates(web: TrapWeb) -> None:
    host = "facet-0.test"
    assert web.required_pages(host) == {"/", "/shop"}
    assert Parsed(web.resource(host, "/").body).hrefs == ["/shop"]
    shop = Parsed(web.resource(host, "/shop").body).hrefs
    assert len(shop) == sum(len(values) for _, values in FACETS) + 1 and shop[-1] == "/"
    trap = check_trap(web, host, 500)
    assert_near_duplicates(trap)
    assert identities(web, host, trap) == {None}
    swapped = [web.resource(host, t).body for t in ("/shop?color=red&size=m",
                                                    "/shop?size=m&color=red")]
    assert Parsed(swapped[0]).words == Parsed(swapped[1]).words
    assert Parsed(web.resource(host, "/shop?sort=new&page=2").body).hrefs[-4:] == [
        "/shop?sort=new&page=2&brand=umbra", "/shop?sort=new&page=2&brand=vandel",
        "/shop?sort=new&page=2&brand=zorin", "/"]
    for bad in ("/shop?color=mauve", "/shop?color=red&color=blue", "/shop?bogus=1", "/shop/"):
        assert web.resource(host, bad).status == 404 and web.page_of(host, bad) is None


# ---------------------------------------------------------------- command line and server


def test_cli_prints_the_seed_urls() -> None:
    out = subprocess.run([sys.executable, "-m", "tests.trapweb", "seeds", "--seed", "4",
                          "--per-kind", "1"], cwd=REPO_ROOT, capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.split() == TrapWeb(seed=4, per_kind=1).seed_urls()


def test_the_process_serves_the_model_through_the_proxy() -> None:
    with TrapWebProcess(seed=3, per_kind=1) as proc:
        web, name = proc.web, proc.web.param_of("noise-0.test")
        assert proc.health()["mix"] == "trapweb" and proc.health()["hosts"] == len(KINDS)
        asked = ["http://noise-0.test/p/1", f"http://noise-0.test/p/1?{name}=abc123",
                 f"http://select-0.test/list?{name.replace('_', '%5F')}=2", "http://facet-0.test/shop?color=red&size=m",
                 "http://session-0.test/robots.txt", "http://catalogue-0.test/product/301"]
        answers = [get(proc.port, url) for url in asked]
        for url, (status, headers, body) in zip(asked, answers, strict=True):
            parts = urlsplit(url)
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            expected = web.resource(parts.netloc, target)
            assert (status, headers["content-type"], body) == (
                expected.status, expected.content_type, expected.body)
        assert [a[0] for a in answers] == [200, 200, 200, 200, 200, 404]
        assert answers[0][2] == answers[1][2]
        assert answers[2][2] == web.resource("select-0.test", f"/list?{name}=2").body
        ledger = proc.ledger()
        assert [(e["host"], e["path"], e["status"]) for e in ledger] == [
            (urlsplit(u).netloc, u.split(".test", 1)[1], a[0])
            for u, a in zip(asked, answers, strict=True)]
        assert ledger.pages(web)[("noise-0.test", "/p/1")] == 2  # type: ignore[arg-type]
        proc.reset()
        assert len(proc.ledger()) == 0
    assert not proc.running
