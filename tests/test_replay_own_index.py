"""pywb replays from the project's own CDXJ alone: keys written as pywb
writes and looks them up (the ``surt`` library's), for IP hosts, ports,
``www``, percent-encoding and case, from records written by the archive and
from a crawl of the real-socket web. pywb never indexes the files itself
here: the collection holds the WARCs and this project's ``.cdxj`` files."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest

from crawler.warc.cdxj import CdxjEntry, entries, lookup
from crawler.warc.files import WarcFiles
from tests.crawl_runner import crawl_realweb
from tests.realweb import Host, RealWebProcess, Web, links_to, page
from tests.realweb.sites import ALLOW_ALL
from tests.replay_tools import get, pywb_bin, wayback
from tests.warc_samples import INFO, RECEIVED, exchange

pytestmark = pytest.mark.crawl

#: URL -> body, each a key shape pywb's index must match: IP hosts with and
#: without a port, IPv6, www and case, an escaped "+", a "~", a query.
PAGES = {
    "http://127.0.0.5:8080/a": b"an IPv4 host with a port",
    "http://127.0.0.6/g++-12/": b"an IPv4 host, a plus sign",
    "http://[::1]:8081/v6/": b"an IPv6 host",
    "http://www.Example.test/Mixed/Case?b=2&a=1": b"www, case, a query",
    "https://example.test:8443/%7Euser/": b"an escaped tilde on a port",
    "http://example.test/g%2B%2B-12/": b"an escaped plus",
}
#: Other spellings of some of them, that must find the same capture.
SPELLINGS = {
    "http://127.0.0.6/g%2B%2B-12/": "http://127.0.0.6/g++-12/",
    "http://example.test/g++-12/": "http://example.test/g%2B%2B-12/",
    "http://EXAMPLE.test/Mixed/Case?a=1&b=2": "http://www.Example.test/Mixed/Case?b=2&a=1",
    "https://example.test:8443/~user/": "https://example.test:8443/%7Euser/",
}


def _collection(root: Path, warc_dir: Path) -> None:
    """A pywb collection ``c`` holding ``warc_dir``'s WARCs and CDXJ files, as they are."""
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(pywb_bin() / "wb-manager"), "init", "c"], cwd=root, check=True,
                   capture_output=True, timeout=120)
    collection = root / "collections" / "c"
    for warc in warc_dir.glob("*.warc.gz"):
        shutil.copy(warc, collection / "archive" / warc.name)
    indexes = sorted(warc_dir.glob("*.cdxj"))
    assert indexes, f"no CDXJ next to the WARCs in {warc_dir}"
    for index in indexes:
        shutil.copy(index, collection / "indexes" / index.name)
    assert not list((collection / "indexes").glob("index.cdxj"))  # (none of pywb's own)


def _replay(base: str, entry: CdxjEntry, url: str) -> tuple[int, bytes]:
    status, _, body = get(f"{base}/c/{entry.timestamp}id_/{url}")
    return status, body


def test_pywb_replays_ip_hosts_and_every_spelling_from_the_projects_index(
        tmp_path: Path) -> None:
    warc_dir = tmp_path / "warc"
    files = WarcFiles(warc_dir, "TEST", "vm:5510", 10_000_000, INFO)
    for i, (url, body) in enumerate(PAGES.items()):
        files.write(exchange(url, body, received_at=RECEIVED + i))
    files.close()
    by_url = {e.url: e for e in entries(warc_dir)}
    assert set(by_url) == set(PAGES)
    assert by_url["http://127.0.0.5:8080/a"].surt == "5,0,0,127:8080)/a"
    for spelling, url in SPELLINGS.items():  # scrapy warc get finds it under any spelling
        assert [e.url for e in lookup(warc_dir, spelling)] == [url], spelling
    _collection(tmp_path / "pywb", warc_dir)
    with wayback(tmp_path / "pywb") as base:
        for url, body in PAGES.items():
            assert _replay(base, by_url[url], url) == (200, body), url
        for spelling, url in SPELLINGS.items():
            assert _replay(base, by_url[url], spelling) == (200, PAGES[url]), spelling


def test_pywb_replays_every_page_of_a_crawl_from_the_projects_index(
        realweb: Callable[..., RealWebProcess], tmp_path: Path) -> None:
    web = realweb(Web([
        Host("www.shop.test", robots=ALLOW_ALL, pages={
            "/": links_to("/g++-12/", "/~user/", "/Case/Page?b=2&a=1", "https://www.shop.test/s"),
            "/g++-12/": page("a plus sign"), "/~user/": page("a tilde"),
            "/Case/Page?b=2&a=1": page("a query"), "/s": page("over TLS")}),
    ]))
    crawl_realweb(web.nameserver, [web.url("www.shop.test")], tmp_path / "crawl",
                  {"DOWNLOAD_DELAY": 0, "WARC_DIR": str(tmp_path / "warc")})
    pages = [r for r in web.ledger() if r.target != b"/robots.txt"]
    assert len(pages) == 5
    by_url = {e.url: e for e in entries(tmp_path / "warc")}
    _collection(tmp_path / "pywb", tmp_path / "warc")
    with wayback(tmp_path / "pywb") as base:
        for url, entry in by_url.items():
            status, body = _replay(base, entry, url)
            assert status == 200 and body, url
            index = get(f"{base}/c/cdx?url={quote(url, safe='')}&output=json")[2]
            assert entry.surt.encode() in index, (url, index)
    # (every answer is archived, the robots.txt files too)
    sent = {web.url("www.shop.test", r.target.decode(), r.scheme) for r in web.ledger()}
    assert set(by_url) == sent
