"""The console as a person uses it: a real browser steers a real two-worker crawl.

Two workers crawl the simulated web on one Redis; ``scrapy frontier serve``
serves the console of that crawl; Debian's Chromium, driven by Selenium and
chromium-driver, opens it. The browser reads the crawl's page, finds the
busiest host on the hosts page, opens it and presses *pause*: the test web's
ledger must show that host silent from then on while the other hosts go on
being fetched, and the host fetched again after *resume*. A screenshot of each
page is kept (``CONSOLE_ARTIFACTS``, default ``test-artifacts/console``).

Chromium is told to send nothing off the machine: every name but the console's
loopback address resolves to nothing, and every request that is not to
loopback goes to a proxy on a closed loopback port.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.crawl_runner import REPO, finish_crawl, start_crawl
from tests.simweb import SimWebProcess

pytestmark = pytest.mark.crawl

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
ARTIFACTS = Path(os.environ.get("CONSOLE_ARTIFACTS", REPO / "test-artifacts" / "console"))
MIX = {"robots:missing": 1.0, "page:normal": 1.0}
#: Seconds a request started before the pause may take to reach the server.
GRACE_S = 1.0
PAUSED_S = 4.0

needs_browser = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="needs Debian's chromium and chromium-driver (apt-get install chromium "
           "chromium-driver)")


def _browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in (
            "--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1400",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--disable-default-apps", "--disable-domain-reliability",
            "--dns-prefetch-disable", "--metrics-recording-only",
            # Nothing leaves the machine: no name resolves, and whatever is not
            # loopback goes to a closed loopback port.
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            "--proxy-server=http://127.0.0.1:9"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(str(DRIVER)), options=options)


def _serve(redis_url: str, namespace: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "scrapy", "frontier", "serve", "--port", "0",
         "-s", f"REDIS_URL={redis_url}", "-s", f"FRONTIER_NAMESPACE={namespace}",
         "-s", "FRONTIER_PARTITIONS=4", "-s", "CONSOLE_SAMPLE_SECONDS=1"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE,
        text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if found := re.search(r"at (http://127\.0\.0\.1:\d+)/", line):
            return proc, found.group(1)
    proc.kill()
    raise AssertionError("the console did not start")


def _wait_for(browser: Any, text: str, timeout: float = 10) -> None:
    """Until the page (after a form's post and redirect) shows ``text``."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, timeout).until(lambda b: text in b.page_source)


@pytest.fixture
def shots() -> Iterator[Path]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("*.png"):
        old.unlink()
    yield ARTIFACTS


@needs_browser
def test_an_operator_pauses_a_host_from_the_browser_and_the_crawl_obeys(
        redis_url: str, tmp_path: Path, shots: Path) -> None:
    from selenium.webdriver.common.by import By

    namespace = f"test:console:{time.time_ns()}"
    settings = {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": namespace,
                "FRONTIER_PARTITIONS": 4, "FRONTIER_SEEN_BUCKETS": 64, "DOWNLOAD_DELAY": 0.25,
                "DEPTH_LIMIT": 0, "ADMISSION_MAX_PAGES_PER_HOST": 60,
                "FRONTIER_IDLE_WAIT": 4, "CONSOLE_LIVE_SECONDS": 1}
    console = browser = None
    try:
        with SimWebProcess(seed=47, n_hosts=6, mix=MIX) as web:
            seeds = web.web.seed_urls()
            started = time.monotonic()
            procs = [start_crawl(web.proxy_url, seeds[i::2], tmp_path / f"w{i}",
                                 {**settings, "FRONTIER_WORKER_ID": f"w{i}"})
                     for i in range(2)]
            console, base = _serve(redis_url, namespace)
            browser = _browser()

            # The crawl's page, once both workers have joined.
            deadline = time.monotonic() + 30
            while True:
                browser.get(base + "/")
                page = browser.page_source
                if page.count(">alive<") == 2 or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert page.count(">alive<") == 2, page[:3000]
            assert namespace in page and "No frontier of this crawl" not in page
            browser.save_screenshot(str(shots / "1-crawl.png"))

            # The hosts page lists what the frontier holds: this web's hosts.
            browser.get(base + "/hosts")
            links = browser.find_elements(By.CSS_SELECTOR, "#hosts td a.url")
            listed = [link.text for link in links]
            assert listed and all(re.fullmatch(r"http://[a-z0-9.-]+:80", h) for h in listed)
            assert {h.split("//")[1].split(":")[0] for h in listed} <= {
                spec.name for spec in web.web.hosts}
            browser.save_screenshot(str(shots / "2-hosts.png"))
            chosen = listed[0].split("//")[1].split(":")[0]
            links[0].click()
            assert f"Site <code>{chosen}</code>" in browser.page_source
            browser.save_screenshot(str(shots / "3-host.png"))

            # Pause it; the page comes back saying so.
            browser.find_element(By.ID, "pause-site").click()
            paused_at = time.time()
            _wait_for(browser, "paused by an operator")
            assert "done=" in browser.current_url
            browser.save_screenshot(str(shots / "4-host-paused.png"))
            time.sleep(PAUSED_S)
            ledger = web.ledger()
            silent_from = paused_at + GRACE_S
            during = [e for e in ledger if silent_from <= e["arrival"] <= paused_at + PAUSED_S]
            assert [e["path"] for e in during if e["host"] == chosen] == []
            others = {e["host"] for e in during if e["host"] != chosen}
            assert others, "the other hosts stopped too"
            # Its recent fetches, as the workers wrote them: what the server saw.
            browser.refresh()
            cells = browser.find_elements(By.CSS_SELECTOR, "#recent td.url")
            shown = {cell.text.split(chosen, 1)[1] for cell in cells}
            asked = {e["path"] for e in ledger if e["host"] == chosen}
            assert shown and shown <= asked, (shown, asked)

            # Resume it: it is fetched again.
            browser.find_element(By.ID, "resume-site").click()
            resumed_at = time.time()
            _wait_for(browser, "resume</td>")
            assert "paused by an operator" not in browser.page_source.split("<h2>")[0]
            deadline = time.monotonic() + 15
            again: list[Any] = []
            while not again and time.monotonic() < deadline:
                time.sleep(0.5)
                again = [e for e in web.ledger()
                         if e["host"] == chosen and e["arrival"] >= resumed_at]
            assert again, f"{chosen} was not fetched after resume"
            page = browser.page_source
            assert "pause" in page and "resume" in page and "console user at 127.0.0.1" in page

            for name in ("dead", "refused", "crawls"):
                browser.get(f"{base}/{name}")
                assert "<h1>" in browser.page_source
                browser.save_screenshot(str(shots / f"5-{name}.png"))
            results = [finish_crawl(p, tmp_path / f"w{i}", started, timeout=180)
                       for i, p in enumerate(procs)]
            assert [r.returncode for r in results] == [0, 0]
    finally:
        if browser is not None:
            browser.quit()
        if console is not None:
            console.send_signal(signal.SIGINT)
            console.wait(timeout=20)
            if console.stderr is not None:
                console.stderr.close()
        client = redis.Redis.from_url(redis_url)
        stale = list(client.scan_iter(match=f"*{namespace}*", count=1000))
        if stale:
            client.delete(*stale)
        client.close()
    assert len(list(shots.glob("*.png"))) == 7
