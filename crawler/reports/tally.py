"""What one worker's downloads showed, host by host and seed by seed.

Plain counters, merged by addition, so that every worker's tally of one crawl
adds up to the crawl's (:meth:`Tally.merge`). A tally keeps at most
:data:`MAX_HOSTS` hosts and :data:`MAX_SEEDS` seeds: past that, what it sees is
counted under ``(other hosts)``, and the report says how many were folded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Hosts and seeds a tally keeps by name (a crawl of millions of hosts keeps
#: the first ones and folds the rest into one row).
MAX_HOSTS = 50_000
MAX_SEEDS = 50_000
OTHER_HOSTS = "(other hosts)"


@dataclass(slots=True)
class HostTally:
    """One host's downloads (a host: a name, and a port when it is not the default)."""

    pages: int = 0  # answers to page requests (robots.txt not counted)
    bytes: int = 0  # their bodies as received
    seconds: float = 0.0  # their download times, added up
    statuses: Counter[str] = field(default_factory=Counter)
    mimes: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)  # download errors by type
    robots: str = ""  # its robots.txt: the status of the fetch, or the error
    robots_denied: int = 0  # URLs robots.txt did not allow
    first: float = 0.0  # Unix seconds of its first and last answer
    last: float = 0.0
    #: Pages by what they are next to their last fetch (revisits, FRONTIER_REVISIT_AFTER):
    #: "new" (never fetched before), "changed", "unchanged" (304, or the same payload),
    #: "gone" (404 or 410 now).
    changes: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {"pages": self.pages, "bytes": self.bytes, "seconds": round(self.seconds, 3),
                "statuses": dict(self.statuses), "mimes": dict(self.mimes),
                "errors": dict(self.errors), "robots": self.robots,
                "robots_denied": self.robots_denied, "first": self.first, "last": self.last,
                "changes": dict(self.changes)}

    @classmethod
    def of(cls, data: dict[str, Any]) -> HostTally:
        return cls(int(data.get("pages", 0)), int(data.get("bytes", 0)),
                   float(data.get("seconds", 0.0)), Counter(data.get("statuses", {})),
                   Counter(data.get("mimes", {})), Counter(data.get("errors", {})),
                   str(data.get("robots", "")), int(data.get("robots_denied", 0)),
                   float(data.get("first", 0.0)), float(data.get("last", 0.0)),
                   Counter(data.get("changes", {})))

    def add(self, other: HostTally) -> None:
        self.pages += other.pages
        self.bytes += other.bytes
        self.seconds += other.seconds
        self.statuses.update(other.statuses)
        self.mimes.update(other.mimes)
        self.errors.update(other.errors)
        self.robots = self.robots or other.robots
        self.robots_denied += other.robots_denied
        self.first = min(filter(None, (self.first, other.first)), default=0.0)
        self.last = max(self.last, other.last)
        self.changes.update(other.changes)


@dataclass(slots=True)
class Tally:
    """A worker's (or, merged, a crawl's) tally."""

    hosts: dict[str, HostTally] = field(default_factory=dict)
    #: Seed URL -> what became of it: "200", "404", "error: TimeoutError",
    #: "refused: loopback", "robots-denied"...
    seeds: dict[str, str] = field(default_factory=dict)
    folded_hosts: int = 0
    #: Hosts linked from the crawl's pages but off its scope, and how often.
    off_scope: Counter[str] = field(default_factory=Counter)

    def host(self, name: str) -> HostTally:
        found = self.hosts.get(name)
        if found is None:
            if len(self.hosts) >= MAX_HOSTS:
                self.folded_hosts += 1
                name = OTHER_HOSTS
                found = self.hosts.get(name)
            if found is None:
                found = self.hosts[name] = HostTally()
        return found

    def page(self, host: str, status: int, mime: str, size: int, seconds: float,
             at: float) -> None:
        """An answer to a page request."""
        tally = self.host(host)
        tally.pages += 1
        tally.bytes += size
        tally.seconds += seconds
        tally.statuses[str(status)] += 1
        tally.mimes[mime or "(none)"] += 1
        tally.first = tally.first or at
        tally.last = max(tally.last, at)

    def change(self, host: str, what: str) -> None:
        """A page is ``what`` (new, changed, unchanged, gone) next to its last fetch."""
        self.host(host).changes[what] += 1

    def error(self, host: str, kind: str) -> None:
        self.host(host).errors[kind] += 1

    def robots(self, host: str, outcome: str) -> None:
        self.host(host).robots = outcome

    def denied(self, host: str) -> None:
        self.host(host).robots_denied += 1

    def seed(self, url: str, outcome: str) -> None:
        """What became of a seed: the last word wins (a redirect's target answers)."""
        if url in self.seeds or len(self.seeds) < MAX_SEEDS:
            self.seeds[url] = outcome

    def merge(self, other: Tally) -> None:
        for name, tally in other.hosts.items():
            mine = self.hosts.get(name)
            if mine is None:
                self.hosts[name] = HostTally.of(tally.as_dict())
            else:
                mine.add(tally)
        for url, outcome in other.seeds.items():
            # A seed one worker fetched beats another's "not reached".
            if url not in self.seeds or not _reached(self.seeds[url]):
                self.seeds[url] = outcome
        self.folded_hosts += other.folded_hosts
        self.off_scope.update(other.off_scope)

    def as_dict(self) -> dict[str, Any]:
        return {"hosts": {name: t.as_dict() for name, t in self.hosts.items()},
                "seeds": dict(self.seeds), "folded_hosts": self.folded_hosts,
                "off_scope": dict(self.off_scope)}

    @classmethod
    def of(cls, data: dict[str, Any]) -> Tally:
        return cls({name: HostTally.of(t) for name, t in data.get("hosts", {}).items()},
                   {str(k): str(v) for k, v in data.get("seeds", {}).items()},
                   int(data.get("folded_hosts", 0)), Counter(data.get("off_scope", {})))


def change_of(status: int, previous_digest: str | None, digest: Callable[[], str]) -> str | None:
    """What a page is next to its last fetch (see :attr:`HostTally.changes`);
    ``previous_digest`` None: never fetched before; ``digest``: this answer's
    payload digest, computed only when there is one to compare with. None: an
    answer that says neither (a redirect, a server error)."""
    if previous_digest is None:
        return "new"
    if status == 304:
        return "unchanged"
    if status in (404, 410):
        return "gone"
    if not 200 <= status < 300:
        return None
    return "unchanged" if previous_digest and digest() == previous_digest else "changed"


def _reached(outcome: str) -> bool:
    return outcome[:1].isdigit()
