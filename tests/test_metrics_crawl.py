"""Metrics of real crawls: scraped while two workers crawl, checked against the ledger,
by promtool, and by a real Prometheus server that scrapes them."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.crawl_runner import CrawlResult, finish_crawl, start_crawl
from tests.prometheus_process import OPENER, PROMETHEUS, prometheus, query
from tests.simweb import SimWebProcess
from tests.simweb.ledger import Ledger

pytestmark = pytest.mark.crawl

MIX = {"robots:rules": 0.6, "robots:missing": 0.4, "page:normal": 0.7,
       "page:rate-limited-seconds": 0.15, "page:nonhtml": 0.15}
PROMTOOL = shutil.which("promtool")


@dataclass
class Scraper:
    """Scrapes every target the workers list in the file_sd folder, in rounds, until stopped."""

    sd_dir: Path
    #: The last round with both workers open and both alive in the frontier's
    #: own view (a worker that has begun to close has left its list of workers).
    complete: dict[str, str] = field(default_factory=dict)
    targets_seen: set[str] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.wait(0.3):
            scraped: dict[str, str] = {}
            for target in self._targets():
                with contextlib.suppress(OSError):
                    scraped[target] = OPENER.open(f"http://{target}/metrics",
                                                  timeout=5).read().decode()
            # Both workers open (a closing one has dropped its frontier collector)
            # and both alive in the frontier's list (one closing has left it).
            if (len(scraped) == 2
                    and all("crawler_frontier_reporter{" in text for text in scraped.values())
                    and total(scraped, "crawler_frontier_workers", state="alive") == 2):
                self.complete = scraped

    def _targets(self) -> list[str]:
        targets = []
        for path in self.sd_dir.glob("*.json"):
            try:
                groups = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # written atomically, but it may vanish at shutdown
            targets += groups[0]["targets"]
        self.targets_seen.update(targets)
        return targets


@dataclass
class Crawl:
    results: list[CrawlResult]
    ledger: Ledger
    scrapes: dict[str, str]
    targets_seen: set[str]
    sd_dir: Path
    prometheus: dict[str, list] | None


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Metric samples by name (``_total``, ``_bucket`` ... included) from a scrape."""
    found: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[s.name].append((s.labels, s.value))
    return found


def total(scrapes: dict[str, str], name: str, **labels: str) -> float:
    """Sum of ``name`` over every worker's last scrape (matching ``labels``)."""
    return sum(value for text in scrapes.values() for got, value in samples(text).get(name, [])
               if all(got.get(k) == v for k, v in labels.items()))


@pytest.fixture(scope="module")
def crawl(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawl]:
    """Two workers on one Redis, each listing its endpoint in one file_sd folder; a
    scraper polls them, and a real Prometheus (when installed) scrapes them too."""
    tmp = tmp_path_factory.mktemp("metrics")
    sd_dir = tmp / "sd"
    sd_dir.mkdir()
    namespace = f"test:metrics:{time.time_ns()}"
    settings = {"REDIS_URL": redis_url, "FRONTIER_NAMESPACE": namespace,
                "FRONTIER_PARTITIONS": 4, "FRONTIER_SEEN_BUCKETS": 64, "DOWNLOAD_DELAY": 0.1,
                "DEPTH_LIMIT": 2, "ADMISSION_MAX_PAGES_PER_HOST": 8, "RETRY_BACKOFF_BASE": 0.2,
                "PROMETHEUS_PORT": "0", "PROMETHEUS_FILE_SD_DIR": str(sd_dir),
                "PROMETHEUS_FRONTIER_INTERVAL": 0.5, "FRONTIER_IDLE_WAIT": 6,
                "LOGSTATS_INTERVAL": 2}
    config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
              "scrape_configs": [{"job_name": "broadcrawl", "file_sd_configs": [
                  {"files": [f"{sd_dir}/*.json"], "refresh_interval": "1s"}]}]}
    scraper = Scraper(sd_dir)
    poller = threading.Thread(target=scraper.run, daemon=True)
    poller.start()
    queried: dict[str, list] | None = None
    try:
        with contextlib.ExitStack() as stack:
            port = stack.enter_context(prometheus(tmp / "prometheus", config)) \
                if PROMETHEUS else None
            web = stack.enter_context(SimWebProcess(seed=31, n_hosts=20, mix=MIX))
            started = time.monotonic()
            procs = [start_crawl(web.proxy_url, web.web.seed_urls()[i::2], tmp / f"w{i}",
                                 {**settings, "FRONTIER_WORKER_ID": f"w{i}"})
                     for i in range(2)]
            if port is not None:
                queried = _query_while_crawling(port, procs)
            results = [finish_crawl(p, tmp / f"w{i}", started) for i, p in enumerate(procs)]
            ledger = web.ledger()
    finally:
        scraper.stop.set()
        poller.join(5)
    yield Crawl(results, ledger, dict(scraper.complete), scraper.targets_seen, sd_dir, queried)
    client = redis.Redis.from_url(redis_url)
    stale = list(client.scan_iter(match=f"*{namespace}*", count=1000))
    if stale:
        client.delete(*stale)
    client.close()


def _query_while_crawling(port: int, procs: list[subprocess.Popen[str]]) -> dict[str, list]:
    """What Prometheus holds once it has scraped both workers mid-crawl."""
    results: dict[str, list] = {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        results = {expr: query(port, expr) for expr in (
            "crawler_requests_total", "crawler_frontier_reporter",
            "sum(crawler_frontier_urls)", "crawler_worker_info",
            "up{job='broadcrawl'}")}
        if len(results["crawler_requests_total"]) == 2 and results["sum(crawler_frontier_urls)"]:
            return results
        time.sleep(0.5)
    return results


def test_workers_finish_and_list_themselves_for_discovery(crawl: Crawl) -> None:
    for result in crawl.results:
        assert result.returncode == 0, result.log[-3000:]
        assert "Metrics: http://127.0.0.1:" in result.log
        assert "frontier:" in next(line for line in result.log.splitlines()
                                   if "] INFO: Progress: " in line)
    assert len(crawl.targets_seen) == 2
    assert all(t.startswith("127.0.0.1:") for t in crawl.targets_seen)
    assert list(crawl.sd_dir.glob("*.json")) == []  # removed when the workers stopped
    assert len(crawl.scrapes) == 2


def test_scraped_counters_match_the_server_and_the_stats(crawl: Crawl) -> None:
    """The last scrape of both workers at once (taken while they idle after the
    crawl) against what the server answered and what their final stats say."""
    answered = Counter(e["status"] for e in crawl.ledger if e["done"] is not None)
    assert total(crawl.scrapes, "crawler_requests_total") == len(crawl.ledger)
    for status, count in answered.items():
        assert total(crawl.scrapes, "crawler_responses_total", code=str(status)) == count, status
    assert answered[429] > 0 and answered[404] > 0
    bytes_stat = sum(int(r.stat("downloader/response_bytes")) for r in crawl.results)
    assert total(crawl.scrapes, "crawler_response_bytes_total") == bytes_stat
    assert bytes_stat > sum(e["bytes"] for e in crawl.ledger)  # bodies plus headers
    items = sum(int(r.stat("item_scraped_count")) for r in crawl.results)
    assert total(crawl.scrapes, "crawler_items_total") == items
    retry_after = sum(int(r.stat("retry/retry_after") or 0) for r in crawl.results)
    assert total(crawl.scrapes, "crawler_retry_after_seconds_count") == retry_after > 0
    delays = sum(int(r.stat("robots/crawl_delay/hosts") or 0) for r in crawl.results)
    assert total(crawl.scrapes, "crawler_crawl_delay_seconds_count") == delays > 0
    assert total(crawl.scrapes, "crawler_download_latency_seconds_count") == len(crawl.ledger)


def test_one_worker_reports_the_frontier_so_sums_count_it_once(crawl: Crawl) -> None:
    reporters = [text for text in crawl.scrapes.values()
                 if samples(text)["crawler_frontier_reporter"][0][1] == 1]
    assert len(reporters) == 1
    others = [text for text in crawl.scrapes.values() if text is not reporters[0]]
    assert "crawler_frontier_urls{" not in others[0]
    pages = {(e["host"], e["path"]) for e in crawl.ledger
             if not e["path"].startswith("/robots.txt")}
    done = total(crawl.scrapes, "crawler_frontier_urls", state="done")
    dead = total(crawl.scrapes, "crawler_frontier_urls", state="dead")
    refused = total(crawl.scrapes, "crawler_frontier_urls", state="refused")
    denied = sum(int(r.stat("robots/denied") or 0) for r in crawl.results)
    assert done + dead == len(pages)  # done is fetched
    assert refused == denied > 0  # a URL robots.txt forbids ends refused, never done
    assert total(crawl.scrapes, "crawler_frontier_urls", state="queued") == 0


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) is not "
                                             "installed; .ci/run installs it")
def test_promtool_finds_no_problem_in_a_scrape(crawl: Crawl) -> None:
    for text in crawl.scrapes.values():
        check = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(),
                               capture_output=True, timeout=30)
        assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()


@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus (Debian package prometheus) is not "
                                               "installed; .ci/run installs it")
def test_a_real_prometheus_scrapes_the_workers(crawl: Crawl) -> None:
    got = crawl.prometheus
    assert got is not None
    assert len(got["crawler_requests_total"]) == 2, got
    assert {r["metric"]["worker"] for r in got["crawler_worker_info"]} == {"w0", "w1"}
    assert sum(float(r["value"][1]) for r in got["crawler_frontier_reporter"]) == 1
    assert float(got["sum(crawler_frontier_urls)"][0]["value"][1]) > 0
    assert all(r["value"][1] == "1" for r in got["up{job='broadcrawl'}"])
