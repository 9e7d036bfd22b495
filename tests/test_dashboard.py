"""The Grafana dashboard and docs/metrics.md agree with the metrics the crawler exports.

The exported names are derived from the code: the stats mapping
(:data:`crawler.metrics.stats.COUNTERS` and ``GAUGES``), the metric families
built in ``crawler/metrics/frontier.py`` and ``crawler/extensions/prometheus.py``
(found by parsing those files), and prometheus_client's process collector. A
dashboard query that names anything else (a typo, a renamed metric) fails here.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from crawler import settings
from crawler.metrics.stats import COUNTERS, GAUGES

REPO = Path(__file__).resolve().parent.parent
DASHBOARD = REPO / "dashboards" / "broadcrawl.json"
DOCS = REPO / "docs" / "metrics.md"
FRONTIER_SOURCE = REPO / "crawler" / "metrics" / "frontier.py"
SOURCES = (FRONTIER_SOURCE, REPO / "crawler" / "extensions" / "prometheus.py",
           REPO / "crawler" / "metrics" / "stats.py")

#: Constructors of metric families in the sources, and the kind each makes.
CONSTRUCTORS = {
    "Counter": "counter", "CounterMetricFamily": "counter",
    "Gauge": "gauge", "GaugeMetricFamily": "gauge", "_gauge": "gauge",
    "Histogram": "histogram", "HistogramMetricFamily": "histogram",
    "Info": "info", "InfoMetricFamily": "info",
}
#: Series names each kind of family exposes (family name + suffix).
SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "info": ("_info",),
}
#: Frontier families every worker exports (the rest come from the reporter only).
PER_WORKER_FRONTIER = {"crawler_frontier_reporter", "crawler_frontier_metrics_errors"}
#: Top-to-bottom order of the dashboard's rows (a word of each row's title).
ROW_ORDER = ("Throughput", "Latency", "Frontier", "Hosts", "Pipeline", "Workers", "Robots",
             "Politeness")

PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
                   "group_left", "group_right", "inf", "nan", "atan2"}


# ------------------------------------------------------------------ what the crawler exports

def _source_families(path: Path) -> dict[str, str]:
    """``{family name: kind}`` of every metric family constructed in ``path``."""
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and node.args[0].value.startswith("crawler_")):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if called == "Rule":  # the stats mapping, read from COUNTERS and GAUGES
            continue
        found[node.args[0].value] = CONSTRUCTORS.get(called, f"unknown ({called})")
    return found


@cache
def families() -> dict[str, str]:
    """``{family name as prometheus_client names it: kind}`` for every crawler_ family."""
    found = {rule.name: "counter" for rule in COUNTERS}
    found |= {rule.name: "gauge" for rule in GAUGES}
    for path in SOURCES:
        found |= _source_families(path)
    return found


def exposed_family(name: str, kind: str) -> str:
    """The name a family has in the exposition text (and so in PromQL and the docs)."""
    return {"counter": f"{name}_total", "info": f"{name}_info"}.get(kind, name)


@cache
def process_series() -> frozenset[str]:
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    return frozenset(sample.name for family in registry.collect() for sample in family.samples)


@cache
def exported_series() -> frozenset[str]:
    names = {name + suffix for name, kind in families().items()
             for suffix in SUFFIXES.get(kind, ())}
    return frozenset(names | process_series())


def counter_like(name: str) -> bool:
    """A series that ``rate()`` and ``increase()`` make sense on."""
    return name.endswith(("_total", "_bucket", "_sum", "_count"))


# ------------------------------------------------------------------ PromQL

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'|`[^`]*`")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, labels, keywords left out)."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\$\{?\w+(?::\w+)?\}?", " ", text)  # Grafana variables
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ",
                  text)
    names = set()
    for match in re.finditer(r"(?<![\w.:])[A-Za-z_:][\w:]*", text):
        word = match.group()
        if word.lower() in PROMQL_KEYWORDS or text[match.end():].lstrip().startswith("("):
            continue  # a keyword, a function or an aggregation
        names.add(word)
    return names


def rated_names(expr: str) -> set[str]:
    """Metric names directly inside ``rate(...)``, ``irate(...)`` or ``increase(...)``."""
    return set(re.findall(r"\b(?:i?rate|increase)\s*\(\s*([A-Za-z_:][\w:]*)", expr))


# ------------------------------------------------------------------ the dashboard

@cache
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def all_panels(panels: list[dict[str, Any]] | None = None) -> Iterator[dict[str, Any]]:
    """Every panel, rows and the panels of collapsed rows included."""
    for panel in dashboard()["panels"] if panels is None else panels:
        yield panel
        yield from all_panels(panel.get("panels") or [])


def expressions() -> list[tuple[str, str]]:
    """``(where, PromQL)`` for every query of the dashboard, variables' queries included."""
    found = [(f"panel {panel['title']!r}", target["expr"])
             for panel in all_panels() for target in panel.get("targets", [])]
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        query = query.get("query", "") if isinstance(query, dict) else query
        match = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", query)
        found.append((f"variable {variable['name']!r}", match.group(1) if match else query))
    return found


def test_the_dashboard_is_an_importable_grafana_dashboard() -> None:
    board = dashboard()
    assert board["title"] and board["uid"]
    assert board["schemaVersion"] >= 36
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {"job", "instance"} & set(variables)
    for panel in all_panels():
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["refId"], panel["title"]
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_every_panel_has_a_unique_id_a_title_and_a_place() -> None:
    ids = [panel["id"] for panel in all_panels()]
    assert all(isinstance(i, int) for i in ids)
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in all_panels():
        assert isinstance(panel.get("title"), str) and panel["title"].strip(), panel["id"]
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]


def test_rows_run_from_throughput_to_politeness() -> None:
    rows = [panel["title"] for panel in dashboard()["panels"] if panel["type"] == "row"]
    positions = [next(i for i, title in enumerate(rows) if word in title) for word in ROW_ORDER]
    assert positions == sorted(positions), rows
    tops = [panel["gridPos"]["y"] for panel in dashboard()["panels"]]
    assert tops == sorted(tops), "panels are not listed top to bottom"


def test_every_query_uses_only_metrics_the_crawler_exports() -> None:
    unknown = {}
    for where, expr in expressions():
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        if names - exported_series():
            unknown[where] = sorted(names - exported_series())
    assert not unknown, f"not exported by the crawler: {unknown}"


def test_rates_are_taken_of_counters_only() -> None:
    for where, expr in expressions():
        for name in rated_names(expr):
            assert counter_like(name), f"{where}: rate/increase of the gauge {name}"


def test_shared_frontier_metrics_are_counted_once() -> None:
    """The reporter's families are aggregated with ``max by (frontier, ...)``, and the
    panel tells the reader why."""
    shared = {exposed_family(name, kind) for name, kind in _source_families(FRONTIER_SOURCE)
              .items() if name not in PER_WORKER_FRONTIER}
    assert shared
    used = set()
    for panel in all_panels():
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name in metric_names(expr) & shared:
                used.add(name)
                pattern = rf"max by \(frontier\b[^)]*\)\s*\(\s*(?:rate\(|increase\()?{name}\b"
                assert re.search(pattern, expr), f"{panel['title']!r}: {name} not under max"
                assert "reporter" in panel.get("description", ""), panel["title"]
    assert {"crawler_frontier_urls", "crawler_frontier_hosts",
            "crawler_frontier_oldest_queued_age_seconds"} <= used


def test_the_dashboard_shows_what_an_operator_watches_first() -> None:
    exprs = " ".join(expr for _, expr in expressions())
    for wanted in ("rate(crawler_responses_total", "by (class)",
                   "histogram_quantile(0.5,", "histogram_quantile(0.9,",
                   "histogram_quantile(0.99,", "crawler_download_latency_seconds_bucket",
                   "crawler_frontier_urls", "crawler_frontier_oldest_queued_age_seconds",
                   "crawler_frontier_hosts_breaker", "crawler_frontier_duplicate_ratio",
                   "crawler_warc_queue_length", "crawler_warc_lag_seconds",
                   "crawler_warc_backpressure_waits_total", "process_resident_memory_bytes",
                   "crawler_robots_decisions_total", "crawler_crawl_delay_seconds_bucket",
                   "crawler_retry_after_seconds_bucket"):
        assert wanted in exprs, wanted


# ------------------------------------------------------------------ the checker itself

@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (class) (rate(crawler_responses_total{job=~"$job"}[$__rate_interval]))',
     {"crawler_responses_total"}),
    ("histogram_quantile(0.9, sum by (le) (rate(crawler_download_latency_seconds_bucket"
     "[5m])))", {"crawler_download_latency_seconds_bucket"}),
    ("process_resident_memory_bytes * on (job, instance) group_left (worker) "
     "crawler_worker_info", {"process_resident_memory_bytes", "crawler_worker_info"}),
    ('sum(rate(a_total{type!~".*(b|c)"}[1m])) or vector(0) offset 5m', {"a_total"}),
    ("max(x) by (frontier) / 1e3 > bool 2", {"x"}),
])
def test_metric_names_are_read_from_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_a_misspelt_or_foreign_metric_is_caught() -> None:
    assert "crawler_responses_total" in exported_series()
    for wrong in ("crawler_respones_total", "crawler_responses",
                  "python_gc_objects_collected_total", "crawler_download_latency_seconds"):
        assert metric_names(f"sum(rate({wrong}[5m]))") - exported_series() == {wrong}


def test_the_exported_names_are_derived_from_the_code() -> None:
    kinds = families()
    unknown = {name: kind for name, kind in kinds.items() if kind not in SUFFIXES}
    assert not unknown, f"teach CONSTRUCTORS these metric constructors: {unknown}"
    assert kinds["crawler_frontier_urls"] == "gauge"
    assert kinds["crawler_frontier_offers"] == "counter"
    assert kinds["crawler_download_latency_seconds"] == "histogram"
    assert kinds["crawler_worker"] == "info"
    assert {"crawler_worker_info", "crawler_retries_total", "crawler_warc_lag_seconds",
            "crawler_frontier_metrics_errors_total"} <= exported_series()
    assert "process_resident_memory_bytes" in exported_series()
    for path in SOURCES:  # every quoted metric name in the sources was understood
        literals = set(re.findall(r"""["'](crawler_\w+)["']""", path.read_text()))
        assert literals <= set(kinds), path.name


# ------------------------------------------------------------------ the docs

def test_the_docs_name_every_exported_metric_family() -> None:
    text = DOCS.read_text()
    missing = sorted(name for name in (exposed_family(n, k) for n, k in families().items())
                     if not re.search(rf"\b{re.escape(name)}\b", text))
    assert not missing, f"docs/metrics.md does not mention {missing}"


def test_the_docs_name_only_settings_that_exist_and_all_prometheus_ones() -> None:
    text = DOCS.read_text()
    named = set(re.findall(r"\bPROMETHEUS_[A-Z_]+\b", text))
    declared = {name for name in dir(settings) if name.startswith("PROMETHEUS_")}
    assert named == declared


def test_the_docs_point_at_the_dashboard_and_the_default_endpoint() -> None:
    text = DOCS.read_text()
    assert "dashboards/broadcrawl.json" in text
    assert "127.0.0.1:9410" in text and "file_sd_configs" in text
    assert "PROMETHEUS_HOST=0.0.0.0" in text


# ------------------------------------------------------------------ promtool, when present

promtool = shutil.which("promtool")


@pytest.mark.skipif(promtool is None, reason="promtool is not installed")
def test_promtool_parses_every_query(tmp_path: Path) -> None:
    rules = ["groups:", "  - name: dashboard", "    rules:"]
    for i, (_, expr) in enumerate(expressions()):
        expr = re.sub(r"\$\{?__rate_interval\}?", "5m", expr)
        expr = re.sub(r"\$\{?\w+\}?", ".*", expr)
        rules += [f"      - record: dashboard:query_{i}", f"        expr: {json.dumps(expr)}"]
    path = tmp_path / "rules.yml"
    path.write_text("\n".join(rules) + "\n")
    result = subprocess.run([str(promtool), "check", "rules", str(path)],
                            capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(promtool is None, reason="promtool is not installed")
def test_promtool_accepts_the_scrape_configs_of_the_docs(tmp_path: Path) -> None:
    configs = re.findall(r"```yaml\n(scrape_configs:.+?)```", DOCS.read_text(), re.S)
    assert len(configs) >= 2
    for i, config in enumerate(configs):
        path = tmp_path / f"prometheus-{i}.yml"
        path.write_text(config)
        result = subprocess.run([str(promtool), "check", "config", "--syntax-only", str(path)],
                                capture_output=True, text=True, check=False, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
