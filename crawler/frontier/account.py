"""The crawl's one account: the figures every view of a crawl shows.

The summary a worker logs, the crawl's report, the console, ``scrapy frontier
status`` and the Prometheus metrics each used to count for themselves (a
worker's stats, the workers' tallies, the frontier's states), and a crawl
told three stories. They all read this account instead, made of the
partitions' counts (``PP:n``, :data:`crawler.frontier.schema.COUNTS`), which
the frontier's scripts keep in the same step as the change they count, and
of the workers' refusals before the frontier (``ns:refused``):

* pages fetched: URLs done, and done means fetched (a final answer);
* hosts fetched from: hosts with at least one URL done;
* seeds: seed URLs admitted (``lua/admit.lua``);
* dead letters by the reason's label (``x:LABEL``, ``lua/common.lua``
  ``dead_letter``), the labels ``scrapy frontier dead --reason`` filters on;
* refusals by reason (:func:`crawler.frontier.refusals.by_reason`);
* hosts parked by the reason's label (``p:LABEL``, ``lua/drop_host.lua``).

The reasons are one vocabulary: the dead letters' labels
(:mod:`crawler.deadletter`) and the refusals' reasons, the same words in
every view. What a run did by itself (its answers, its retries) stays in its
stats and tallies, and views say "this run" when they show it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from crawler.frontier.schema import COUNTS, by_label

#: The label of dead letters counted before their reasons were (a frontier
#: written by an older build): the dead letters no label accounts for.
UNLABELLED = "unlabelled"


@dataclass(frozen=True, slots=True)
class Account:
    """A crawl's figures, as every view shows them."""

    fetched: int = 0
    hosts_fetched: int = 0
    hosts: int = 0  # hosts admitted
    seeds: int = 0
    queued: int = 0
    leased: int = 0
    delayed: int = 0
    duplicates: int = 0
    revisited: int = 0
    dead: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    parked: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, counts: Mapping[str, int], refused: Mapping[str, int]) -> Account:
        """The account from the partitions' summed counts and the refusals by reason."""
        def n(name: str) -> int:
            return max(0, int(counts.get(name, 0) or 0))

        dead = by_label(counts, COUNTS.dead_by)
        unlabelled = n(COUNTS.dead) - sum(dead.values())
        if unlabelled > 0:
            dead[UNLABELLED] = unlabelled
        return cls(fetched=n(COUNTS.done), hosts_fetched=n(COUNTS.hosts_fetched),
                   hosts=n(COUNTS.hosts), seeds=n(COUNTS.seeds), queued=n(COUNTS.queued),
                   leased=n(COUNTS.leased), delayed=n(COUNTS.delayed),
                   duplicates=n(COUNTS.dup), revisited=n(COUNTS.revisited), dead=dead,
                   refused={k: v for k, v in refused.items() if v},
                   parked=by_label(counts, COUNTS.parked_by))

    @property
    def dead_total(self) -> int:
        return sum(self.dead.values())

    @property
    def refused_total(self) -> int:
        return sum(self.refused.values())

    @property
    def parked_total(self) -> int:
        return sum(self.parked.values())

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "dead_total": self.dead_total,
                "refused_total": self.refused_total, "parked_total": self.parked_total}

    def fetched_line(self) -> str:
        """``1,847 page(s) from 97 host(s); 100 seed(s)``."""
        return (f"{self.fetched:,} page(s) from {self.hosts_fetched:,} host(s); "
                f"{self.seeds:,} seed(s)")


def reasons(counts: Mapping[str, int], shown: int = 5) -> str:
    """``a 3, b 1``: the biggest first, at most ``shown`` (then ``...``)."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{k} {v:,}" for k, v in ranked[:shown])
    return text + (", ..." if len(ranked) > shown else "")
