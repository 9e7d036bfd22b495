"""Extension: a Prometheus ``/metrics`` endpoint for the crawl, from engine start to stop.

Settings: ``PROMETHEUS_ENABLED`` (on); ``PROMETHEUS_HOST`` (``127.0.0.1``:
metrics say a lot about a crawl, so they are not on the network unless the
operator says so); ``PROMETHEUS_PORT`` (a port, or a range such as
``9410-9430`` from which each worker on a machine takes the first free
port; the bound address is logged); ``PROMETHEUS_FILE_SD_DIR`` (if set, the
worker writes its target there as ``<worker>.json`` for Prometheus'
``file_sd_configs`` and removes it when it stops);
``PROMETHEUS_FRONTIER_INTERVAL`` (seconds between frontier reads, 5).

Who may read them (:mod:`crawler.metrics.access`): ``PROMETHEUS_TLS_CERT_FILE``
and ``PROMETHEUS_TLS_KEY_FILE`` serve HTTPS (the file_sd target then carries
``__scheme__: https``, so Prometheus scrapes it over HTTPS);
``PROMETHEUS_TLS_CLIENT_CA_FILE`` requires client certificates;
``PROMETHEUS_BASIC_AUTH_USER`` and ``PROMETHEUS_BASIC_AUTH_PASSWORD_FILE``
require a password. A mistake in them is one ERROR line and a crawl without
metrics, like a busy port range: metrics must not stop a crawl. An endpoint
off loopback that anyone can read is a WARNING.

What it serves, all from this extension's own registry:

- Scrapy's stats, read at scrape time (:mod:`crawler.metrics.stats`);
- histograms of observations that stats cannot hold: download latency,
  Crawl-delays applied, Retry-After waits, DNS lookup times (the policies
  and the DNS middleware send signals, :mod:`crawler.signals`);
- live gauges: requests in the downloader, the WARC writer's queue;
- the frontier's shared state, from one reporting worker
  (:mod:`crawler.metrics.frontier`);
- process metrics (memory, CPU, open files) and ``crawler_worker_info``.
"""

from __future__ import annotations

import json
import logging
import re
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import (
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.registry import CollectorRegistry
from scrapy import signals
from scrapy.exceptions import NotConfigured

import crawler
from crawler.frontier.workers import DEFAULT_LEASE_SECONDS
from crawler.metrics.access import Access, AccessError, exposure_warning
from crawler.metrics.frontier import FrontierCollector
from crawler.metrics.server import parse_ports, serve, stop
from crawler.metrics.stats import StatsCollector
from crawler.pipelines.warc import archive_of
from crawler.scheduling.opening import worker_identity
from crawler.scheduling.worker import frontier_of
from crawler.signals import crawl_delay_applied, dns_lookup_done, retry_after_applied

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable
    from typing import Self
    from wsgiref.simple_server import WSGIServer

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
DELAY_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120)
RETRY_AFTER_BUCKETS = (1, 5, 10, 30, 60, 300, 900, 3600)
DNS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class PrometheusExtension:
    """Serves the crawl's metrics over HTTP (see the module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        self.crawler = crawler
        self.host: str = s.get("PROMETHEUS_HOST") or "127.0.0.1"
        self.ports = parse_ports(s.get("PROMETHEUS_PORT", "9410-9430"))
        self.sd_dir = Path(s["PROMETHEUS_FILE_SD_DIR"]) if s.get("PROMETHEUS_FILE_SD_DIR") \
            else None
        self.frontier_interval = s.getfloat("PROMETHEUS_FRONTIER_INTERVAL", 5.0)
        self.access: Access | None = None
        self._refusal = ""  # why the access settings cannot be served, said at engine start
        try:
            self.access = Access.from_settings(s)
        except AccessError as exc:
            self._refusal = str(exc)
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(StatsCollector(crawler.stats))
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.latency = Histogram("crawler_download_latency_seconds",
                                 "Time from sending a request to its response's headers.",
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.crawl_delay = Histogram("crawler_crawl_delay_seconds",
                                     "Crawl-delays applied to hosts, from their robots.txt.",
                                     buckets=DELAY_BUCKETS, registry=self.registry)
        self.retry_after = Histogram("crawler_retry_after_seconds",
                                     "Retry-After waits honoured (after the cap).",
                                     buckets=RETRY_AFTER_BUCKETS, registry=self.registry)
        self.dns_lookup = Histogram("crawler_dns_lookup_seconds",
                                    "Time of a DNS lookup (cache hits not included).",
                                    buckets=DNS_BUCKETS, registry=self.registry)
        self.info = Info("crawler_worker", "Who this worker is.", registry=self.registry)
        Gauge("crawler_active_requests", "Requests in the downloader now.",
              registry=self.registry).set_function(self._active_requests)
        Gauge("crawler_warc_queue_length", "Answers waiting for the WARC writer.",
              registry=self.registry).set_function(self._warc_writer_gauge("queue_length"))
        Gauge("crawler_warc_queue_bytes", "Bytes waiting for the WARC writer.",
              registry=self.registry).set_function(self._warc_writer_gauge("queued_bytes"))
        self._server: tuple[WSGIServer, threading.Thread] | None = None
        self._frontier: FrontierCollector | None = None
        self._sd_file: Path | None = None
        self.port: int | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not crawler.settings.getbool("PROMETHEUS_ENABLED"):
            raise NotConfigured("PROMETHEUS_ENABLED is off")
        ext = cls(crawler)
        connect = crawler.signals.connect
        connect(ext.engine_started, signal=signals.engine_started)
        connect(ext.engine_stopped, signal=signals.engine_stopped)
        connect(ext.spider_opened, signal=signals.spider_opened)
        connect(ext.spider_closed, signal=signals.spider_closed)
        connect(ext.response_downloaded, signal=signals.response_downloaded)
        connect(ext.crawl_delay_applied, signal=crawl_delay_applied)
        connect(ext.retry_after_applied, signal=retry_after_applied)
        connect(ext.dns_lookup_done, signal=dns_lookup_done)
        return ext

    # ------------------------------------------------------------ life cycle

    def engine_started(self) -> None:
        if self.access is None:  # no metrics is bad; no crawl would be worse
            logger.error("Metrics: not served: %s", self._refusal)
            return
        try:
            server, thread, self.port = serve(self.registry, self.host, self.ports,
                                              tls=self.access.tls,
                                              credentials=self.access.credentials)
        except OSError as exc:
            logger.error("Metrics: not served: %s", exc)
            return
        self._server = (server, thread)
        logger.info("Metrics: %s://%s:%d/metrics", self.access.scheme, _url_host(self.host),
                    self.port, extra={"metrics_port": self.port})
        warning = exposure_warning(self.host, self.port, self.access)
        if warning is not None:
            logger.warning(warning)
        if self.sd_dir is not None:
            self._write_sd_target()

    def engine_stopped(self) -> None:
        if self._sd_file is not None:
            self._sd_file.unlink(missing_ok=True)
        if self._server is not None:
            stop(*self._server)
            self._server = None

    def spider_opened(self, spider: Spider) -> None:
        frontier = frontier_of(self.crawler)
        worker = worker_identity(self.crawler.settings)
        self.info.info({"spider": spider.name, "worker": worker,
                        "partition": str(getattr(spider, "part", "") or ""),
                        "version": crawler.__version__})
        if frontier is None:
            return
        client = frontier.sync_client(socket_timeout=5)
        self._frontier = FrontierCollector(
            client, frontier.keys, worker, interval=self.frontier_interval,
            lease_seconds=self.crawler.settings.getfloat("FRONTIER_LEASE_SECONDS",
                                                         DEFAULT_LEASE_SECONDS),
            limits=frontier.limits, active=lambda: not frontier.tasks.closing)
        self.registry.register(self._frontier)

    def spider_closed(self, spider: Spider) -> None:
        """The frontier closes with the spider (an embedded Redis stops): stop reading it."""
        if self._frontier is not None:
            self.registry.unregister(self._frontier)
            self._frontier.close()
            self._frontier = None

    # ------------------------------------------------------------ observations

    def response_downloaded(self, response: Response, request: Request, spider: Spider) -> None:
        """Every download, also those a middleware then retries, redirects or drops."""
        latency = request.meta.get("download_latency")
        if latency is not None:
            self.latency.observe(latency)

    def crawl_delay_applied(self, host: str, seconds: float) -> None:
        self.crawl_delay.observe(seconds)

    def retry_after_applied(self, url: str, seconds: float) -> None:
        self.retry_after.observe(seconds)

    def dns_lookup_done(self, result: str, seconds: float) -> None:
        self.dns_lookup.observe(seconds)

    # ------------------------------------------------------------ live gauges (HTTP thread)

    def _active_requests(self) -> float:
        try:
            engine = self.crawler.engine
        except RuntimeError:  # Scrapy raises (not None) until the crawl has an engine
            return 0.0
        return float(len(engine.downloader.active))

    def _warc_writer_gauge(self, attr: str) -> Callable[[], float]:
        """A gauge function reading the WARC writer's ``attr`` (0 while there is none)."""

        def read() -> float:
            archive = archive_of(self.crawler)
            writer = archive.writer if archive is not None else None
            return float(getattr(writer, attr)) if writer is not None else 0.0

        return read

    # ------------------------------------------------------------ discovery

    def _write_sd_target(self) -> None:
        """``<dir>/<worker>.json`` for Prometheus' file_sd_configs (written atomically)."""
        assert self.sd_dir is not None and self.port is not None and self.access is not None
        worker = worker_identity(self.crawler.settings)
        host = socket.getfqdn() if self.host in ("0.0.0.0", "::", "") else self.host
        # No other labels: the scrape config's job_name stands, and crawler_worker_info
        # keeps its own "worker" label (a target label would rename it). __scheme__
        # picks the target's scheme and is dropped after relabelling, like every
        # label that starts with "__".
        labels = {"__scheme__": "https"} if self.access.tls is not None else {}
        target = [{"targets": [f"{_url_host(host)}:{self.port}"], "labels": labels}]
        self.sd_dir.mkdir(parents=True, exist_ok=True)
        path = self.sd_dir / f"{re.sub(r'[^A-Za-z0-9.-]', '-', worker)}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(target))
        tmp.replace(path)
        self._sd_file = path


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
