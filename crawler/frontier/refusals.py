"""The URLs workers refused before they reached the frontier, for every worker to see.

A worker refuses some links before Redis (``scheduling/intake.py``): a trap
rule, the address guard, a learned trap pattern, a URL that is not HTTP.
Its stats count them, but an operator asks the frontier (``scrapy frontier
status``, ``scrapy frontier refused``) and wants the same numbers, and to
see what was refused. Each worker adds its counts by reason to one hash
(``ns:refused``) and its newest examples to a list per reason
(``ns:refused:REASON``, capped at :data:`EXAMPLES`), in one pipelined round
trip a second (``scheduling/refusalnotes.py``). The refusals the scripts make
themselves (over a host's page budget, a dropped host, a spent budget) and
the URLs refused at their lease (robots.txt, a learned rule: counted by the
release, with the worker's examples here) are in the partitions' counts
already; :func:`by_reason` puts both together.

Every key is touched by one command at a time: Redis Cluster safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crawler.frontier.keys import Count, Keys
from crawler.frontier.schema import refused_at_lease

#: Examples kept for each reason.
EXAMPLES = 20
#: The refusals the frontier's scripts count in the partitions' counts, by
#: the name the stats give them (``frontier/refused/<reason>``).
SCRIPT_REFUSALS: dict[str, str] = {
    "host-budget": Count.REFUSED, "dropped-host": Count.BLOCKED, "budget": Count.BUDGET}


@dataclass(frozen=True, slots=True)
class Refusal:
    """How many URLs were refused for one reason, and the last few of them."""

    reason: str
    count: int
    examples: tuple[str, ...] = ()


async def note(client: Any, keys: Keys, counts: Mapping[str, int],
               examples: Mapping[str, list[str]]) -> None:
    """Add ``counts`` (reason -> URLs) and ``examples`` (reason -> URLs, oldest
    first) to the frontier's, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for reason, n in counts.items():
        pipe.hincrby(keys.refused(), reason, n)
    for reason, urls in examples.items():
        if urls:
            key = keys.refused_examples(reason)
            pipe.lpush(key, *urls)
            pipe.ltrim(key, 0, EXAMPLES - 1)
    await pipe.execute()


def by_reason(raw: Mapping[bytes, bytes], counts: Mapping[str, int]) -> dict[str, int]:
    """URLs refused by reason, most first: the workers' (a ``ns:refused`` hash as
    read) and the scripts' (from ``counts``, the partitions' summed)."""
    found = {k.decode(): int(v) for k, v in raw.items()}
    for reason, name in SCRIPT_REFUSALS.items():
        if counts.get(name):
            found[reason] = found.get(reason, 0) + int(counts[name])
    for reason, n in refused_at_lease(counts).items():
        found[reason] = found.get(reason, 0) + n
    return dict(sorted(found.items(), key=lambda item: (-item[1], item[0])))


def with_examples(client: Any, keys: Keys, refused: Mapping[str, int]) -> list[Refusal]:
    """``refused`` (reason -> URLs, :func:`by_reason`) with each reason's last
    few URLs (none for the scripts' refusals), in one round trip."""
    pipe = client.pipeline(transaction=False)
    for reason in refused:
        pipe.lrange(keys.refused_examples(reason), 0, EXAMPLES - 1)
    lists = pipe.execute() if refused else []
    return [Refusal(reason, n, tuple(u.decode("utf-8", "replace") for u in urls))
            for (reason, n), urls in zip(refused.items(), lists, strict=True)]
