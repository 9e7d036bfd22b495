"""What each host's pages taught the crawl, in Redis: noise parameters and trap patterns.

Workers send what their pages showed (:class:`Observation` lists, built by
:mod:`crawler.learning.worker`), and ``lua/learn.lua`` weighs it in the
host's partition, atomically, so that evidence from every worker adds up and
a rule is learned once. A worker reads a host's rules back with
:meth:`SiteFacts.rules`; an operator sees and removes them with
:func:`facts_of` and :func:`forget` (``scrapy frontier host``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from redis.asyncio import Redis

from crawler.frontier.calls import Call, run_per_partition
from crawler.frontier.keys import Keys, partition_of
from crawler.frontier.schema import FACTS
from crawler.frontier.scriptargs import learn_args
from crawler.frontier.store import script_source

#: One observation: an op of ``lua/learn.lua`` and its two values.
Observation = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class LearnLimits:
    """How much evidence decides (see ``crawler/settings.py``, ``LEARN_*``)."""

    min_evidence: int = 2
    max_fields: int = 512
    alike_pages: int = 15
    alike_share: float = 0.5
    distance: int = 8


class News(NamedTuple):
    """A decision ``lua/learn.lua`` just took: ``kind`` is ``learned`` or
    ``withdrawn`` (a noise parameter, ``name``) or ``trap`` (a pattern)."""

    host: str
    kind: str
    name: str
    detail: str


class SiteFacts:
    """The workers' side of the hosts' facts: send observations, read rules."""

    def __init__(self, client: Redis, keys: Keys, limits: LearnLimits) -> None:
        self.client = client
        self.keys = keys
        self.limits = limits
        self._learn = client.register_script(script_source("learn"))

    async def observe(self, observations: Mapping[str, Iterable[Observation]]
                      ) -> tuple[list[News], dict[str, tuple[str, str, str]]]:
        """Weigh observations by host; one script call per partition, all in one
        round trip. The news, and each host's rules as they stand (noise,
        patterns, fetched)."""
        groups: dict[int, list[str | int]] = defaultdict(list)
        for host, items in observations.items():
            flat = [value for item in items for value in item]
            if flat:
                groups[partition_of(host, self.keys.partitions)] += [host, len(flat) // 3, *flat]
        news: list[News] = []
        rules: dict[str, tuple[str, str, str]] = {}
        limits = learn_args(self.limits)
        calls: list[Call] = [(self._learn, [self.keys.counts(part)],
                              [self.keys.prefix(part), limits, *args])
                             for part, args in groups.items()]
        for said, now in await run_per_partition(self.client, calls):
            values, current = _texts(said), _texts(now)
            news += [News(*values[i:i + 4]) for i in range(0, len(values), 4)]
            rules |= {current[i]: (current[i + 1], current[i + 2], current[i + 3])
                      for i in range(0, len(current), 4)}
        return news, rules

    async def rules(self, hosts: Iterable[str]) -> dict[str, tuple[Any, Any, Any]]:
        """Each host's stored rules: (noise parameters, refused patterns,
        identities fetched as a spelling with a noise parameter)."""
        hosts = list(hosts)
        async with self.client.pipeline(transaction=False) as pipe:
            for host in hosts:
                pipe.hmget(self.keys.facts(partition_of(host, self.keys.partitions), host),
                           FACTS.noise, FACTS.traps, FACTS.fetched)
            replies = await pipe.execute()
        return {host: tuple(reply) for host, reply in zip(hosts, replies, strict=True)}


def _texts(values: list[Any]) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What an operator sees of a host's learned facts."""

    noise: list[str]
    patterns: list[str]
    #: Parameters with evidence either way: name -> (agreeing, against).
    evidence: dict[str, tuple[int, int]]
    canonical_unreliable: bool

    def as_dict(self) -> dict[str, Any]:
        return {"noise": self.noise, "patterns": self.patterns,
                "evidence": {k: list(v) for k, v in self.evidence.items()},
                "canonical_unreliable": self.canonical_unreliable}


#: The fields of evidence about a parameter P: FACTS.dropped + P, and so on.
_EVIDENCE = (FACTS.dropped, FACTS.same, FACTS.kept)


def facts_of(client: Any, keys: Keys, host: str) -> HostFacts:
    """A host's learned facts (a blocking client: the operator's commands)."""
    raw = client.hgetall(keys.facts(partition_of(host, keys.partitions), host))
    fields = {k.decode(): v.decode("utf-8", "replace") for k, v in raw.items()}
    evidence: dict[str, list[int]] = {}
    for field, value in fields.items():
        kind, colon, name = field.partition(":")
        kind += colon
        if kind in _EVIDENCE and name:
            agree, against = evidence.setdefault(name, [0, 0])
            if kind == FACTS.kept:
                evidence[name] = [agree, int(value)]
            else:
                evidence[name] = [agree + (len(value.split()) if kind == FACTS.dropped
                                           else int(value)), against]
    return HostFacts(fields.get(FACTS.noise, "").split(),
                     [p for p in fields.get(FACTS.traps, "").split("\n") if p],
                     {k: (v[0], v[1]) for k, v in sorted(evidence.items())},
                     fields.get(FACTS.canonical_one) == "1")


def forget(client: Any, keys: Keys, host: str, *, param: str | None = None,
           pattern: str | None = None) -> bool:
    """Remove a learned noise parameter or refused pattern from a host (both
    None: everything the host taught, evidence included). The evidence for a
    removed parameter goes too, and a later counter-evidence-free page may
    teach it again. Whether anything was removed."""
    key = keys.facts(partition_of(host, keys.partitions), host)
    if param is None and pattern is None:
        return bool(client.delete(key))
    raw = client.hmget(key, FACTS.noise, FACTS.traps)
    noise = (raw[0] or b"").decode().split()
    patterns = [p for p in (raw[1] or b"").decode().split("\n") if p]
    if param is not None and param in noise:
        noise.remove(param)
        client.hset(key, FACTS.noise, " ".join(noise))
        # its evidence goes, and what the rules covered may be fetched again
        client.hdel(key, *(kind + param for kind in _EVIDENCE), FACTS.fetched)
        return True
    if pattern is not None and pattern in patterns:
        patterns.remove(pattern)
        client.hset(key, FACTS.traps, "\n".join(patterns))
        return True
    return False
