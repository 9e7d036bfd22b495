"""Two crawls side by side, host by host: the same seeds crawled under two crawl ids.

What a report of each tallied (pages, bytes, status codes), compared: hosts
new in the later crawl, gone from it, and for hosts in both the change in
pages and in each status code. Page by page (new, changed, unchanged, gone)
is what one crawl run again with revisits says (``changes`` in its report);
two crawl ids share no URL state to compare.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


def compare(before: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """``now``'s report next to ``before``'s (both :func:`crawler.reports.build.build`)."""
    old, new = before["tally"]["hosts"], now["tally"]["hosts"]
    hosts = {}
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        statuses = Counter((b or {}).get("statuses", {}))
        statuses.subtract((a or {}).get("statuses", {}))
        hosts[name] = {
            "state": "new" if a is None else "gone" if b is None else "both",
            "pages": [(a or {}).get("pages", 0), (b or {}).get("pages", 0)],
            "bytes": [(a or {}).get("bytes", 0), (b or {}).get("bytes", 0)],
            "status_changes": {code: n for code, n in sorted(statuses.items()) if n},
        }
    states = Counter(h["state"] for h in hosts.values())
    return {"with": before["crawl"], "hosts": hosts,
            "totals": {"hosts_new": states["new"], "hosts_gone": states["gone"],
                       "hosts_in_both": states["both"],
                       "pages": [sum(h["pages"][0] for h in hosts.values()),
                                 sum(h["pages"][1] for h in hosts.values())]}}


def rows(comparison: dict[str, Any]) -> list[list[Any]]:
    """compare.csv: one row per host, the biggest change first."""
    out = [[name, h["state"], h["pages"][0], h["pages"][1], h["pages"][1] - h["pages"][0],
            h["bytes"][0], h["bytes"][1],
            " ".join(f"{code}:{n:+d}" for code, n in h["status_changes"].items())]
           for name, h in comparison["hosts"].items()]
    return sorted(out, key=lambda row: (-abs(row[4]), row[0]))
