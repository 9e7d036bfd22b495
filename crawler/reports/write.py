"""A crawl's report as files: CSV and JSON for tools, one HTML page for people.

``report.json`` holds everything (:func:`crawler.reports.build.build`);
``hosts.csv``, ``seeds.csv``, ``statuses.csv``, ``mimes.csv`` and ``left.csv``
are its tables, one row per host, seed, status code, media type and host with
work left; ``report.html`` is self-contained (styles and charts inline, no
script, nothing fetched), so it can be mailed or archived as one file.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from collections import Counter
from html import escape
from pathlib import Path
from typing import Any

import jinja2

from crawler.frontier.keys import site_of
from crawler.reports.compare import rows as compare_rows
from crawler.urls import host_key

#: Rows of a table on the HTML page (the CSV files have them all).
HTML_ROWS = 200
#: What a page is next to its last fetch (:attr:`crawler.reports.tally.HostTally.changes`).
CHANGES = ("new", "changed", "unchanged", "gone")

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("crawler.reports", "templates"),
    autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
_ENV.filters["utc"] = lambda t: time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(t)))


def tables(report: dict[str, Any]) -> dict[str, tuple[list[str], list[list[Any]]]]:
    """The report's tables: file name -> (header, rows), the biggest first."""
    tally = report["tally"]
    hosts = tally["hosts"]
    left = report["left"]
    statuses: Counter[str] = Counter()
    mimes: Counter[str] = Counter()
    for host in hosts.values():
        statuses.update(host["statuses"])
        mimes.update(host["mimes"])
    pages_of_site = {name: host["pages"] for name, host in hosts.items()}
    host_rows = sorted(
        ([name, h["pages"], h["bytes"], round(h["seconds"], 3), _pairs(h["statuses"]),
          _pairs(h["mimes"]), sum(h["errors"].values()), _pairs(h["errors"]), h["robots"],
          h["robots_denied"], left["queued"].get(name, 0),
          sum(left["dead"].get(name, {}).values())]
         for name, h in hosts.items()),
        key=lambda row: (-row[1], row[0]))
    seed_rows = [[url, outcome, site, pages_of_site.get(site, 0)]
                 for url, outcome in sorted(tally["seeds"].items()) for site in [_site(url)]]
    left_hosts = sorted(set(left["queued"]) | set(left["dead"]))
    left_rows = sorted(([name, left["queued"].get(name, 0),
                         sum(left["dead"].get(name, {}).values()),
                         _pairs(left["dead"].get(name, {}))] for name in left_hosts),
                       key=lambda row: (-row[1], -row[2], row[0]))
    return {
        "hosts.csv": (["host", "pages", "bytes", "seconds", "statuses", "mime_types",
                       "errors", "errors_by_kind", "robots_txt", "robots_denied",
                       "queued_left", "dead_letters"], host_rows),
        "seeds.csv": (["seed", "outcome", "site", "pages_of_site"], seed_rows),
        "statuses.csv": (["status", "pages"], [[k, v] for k, v in statuses.most_common()]),
        "mimes.csv": (["mime_type", "pages"], [[k, v] for k, v in mimes.most_common()]),
        "left.csv": (["host", "queued", "dead_letters", "dead_by_reason"], left_rows),
        "off_scope.csv": (["host", "links"], [[k, v] for k, v in Counter(
            tally.get("off_scope", {})).most_common()]),
        "compare.csv": (["host", "state", "pages_before", "pages_now", "pages_change",
                         "bytes_before", "bytes_now", "status_changes"],
                        compare_rows(report["compare"]) if report.get("compare") else []),
        "changes.csv": (["host", *CHANGES], sorted(
            ([name, *(c.get(k, 0) for k in CHANGES)]
             for name, c in report.get("changes", {}).items()),
            key=lambda row: (-sum(row[1:]), row[0]))),
    }


def write(report: dict[str, Any], folder: Path) -> Path:
    """Write every file of ``report`` into ``folder``; returns the HTML page's path.

    Each file is written whole and then moved into place, so a reader never
    sees half of one (a report is rewritten by each worker that closes)."""
    folder.mkdir(parents=True, exist_ok=True)
    all_tables = tables(report)
    for name, (header, rows) in all_tables.items():
        _replace(folder / name, _csv(header, rows))
    _replace(folder / "report.json", json.dumps(report, indent=1, sort_keys=True) + "\n")
    html = render(report, all_tables)
    page = folder / "report.html"
    _replace(page, html)
    return page


def render(report: dict[str, Any],
           all_tables: dict[str, tuple[list[str], list[list[Any]]]] | None = None) -> str:
    """The report's HTML page."""
    return _ENV.get_template("report.html").render(
        report=report, tables=all_tables or tables(report), rows=HTML_ROWS, bars=_bars,
        changes=CHANGES)


def _csv(header: list[str], rows: list[list[Any]]) -> str:
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def _replace(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)


def _pairs(counts: dict[str, int]) -> str:
    """``200:12 404:1``: a cell's counts, the biggest first."""
    return " ".join(f"{k}:{v}" for k, v in Counter(counts).most_common())


def _site(url: str) -> str:
    key = host_key(url)
    return site_of(key) if key else ""


def _bars(rows: list[list[Any]], width: int = 360, bar: int = 16) -> str:
    """An inline SVG bar chart of (label, value) rows."""
    shown = rows[:12]
    top = max((float(r[1]) for r in shown), default=0.0) or 1.0
    height = bar * len(shown) + 4
    parts = [f'<svg class="bars" width="{width + 220}" height="{height}" role="img">']
    for i, (label, value, *_) in enumerate(shown):
        y = i * bar + 2
        length = float(value) / top * width
        parts.append(f'<text x="0" y="{y + bar - 4}">{escape(str(label))[:28]}</text>'
                     f'<rect x="180" y="{y}" width="{length:.1f}" height="{bar - 3}"/>'
                     f'<text x="{184 + length:.1f}" y="{y + bar - 4}">{value:,}</text>')
    parts.append("</svg>")
    return "".join(parts)
