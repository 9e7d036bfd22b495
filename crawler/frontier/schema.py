"""The frontier's records: every field of its hashes, declared once.

A record is a Redis hash of one kind (a partition's counts, a host, a site,
a domain, a server address's gate, what a host's pages taught). Each field
has a name to read in code (``SITE.in_flight``), the short name it is stored
under (``"i"``: frontiers already written keep their fields, so nothing needs
migrating) and what it means. Python reads and writes records through these
names, and the Lua scripts through the same names (``S.in_flight``), which
:func:`resolve_fields` turns into the stored names when a script is built
(:func:`luabuild.script_source`): a field is spelled once, here, an undeclared
one stops the script from being built, and ``tests/test_schema.py`` fails
when a script or a module spells a stored name by hand.

Types: ``count`` an integer that only moves by increments; ``int`` an
integer; ``ms`` a time or length in milliseconds (server time); ``s`` the
same in seconds; ``str`` text; ``flag`` set (to ``1``, or a short state) or
missing; ``prefix`` the start of a family of fields (``d:KEY``). Where the
key layout lives, and the keys that are no hashes: :mod:`crawler.frontier.keys`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of a record: its stored name, what it means, its type."""

    stored: str
    meaning: str
    type: str = "int"


class Record:
    """A kind of hash: its key pattern, its Lua table's name and its fields.

    ``record.NAME`` is the stored name of the field ``NAME`` (an unknown
    name raises :class:`AttributeError`, never a silent typo).
    """

    def __init__(self, name: str, key: str, lua: str, doc: str, **fields: FieldSpec) -> None:
        stored = [spec.stored for spec in fields.values()]
        if len(set(stored)) != len(stored):
            raise ValueError(f"{name}: a stored name is declared twice")
        self.name, self.key, self.lua, self.doc = name, key, lua, doc
        self.fields: MappingProxyType[str, FieldSpec] = MappingProxyType(fields)

    def __getattr__(self, attr: str) -> str:
        try:
            return self.fields[attr].stored
        except KeyError:
            raise AttributeError(f"record {self.name} declares no field {attr!r}") from None

    def stored_names(self) -> frozenset[str]:
        return frozenset(spec.stored for spec in self.fields.values())

    def prefixes(self) -> tuple[str, ...]:
        """The stored starts of field families (``d:`` of ``d:KEY``)."""
        return tuple(s.stored for s in self.fields.values() if s.type == "prefix")

    def declares(self, stored: str) -> bool:
        """Whether ``stored`` names a field of this record (or one of a family)."""
        return stored in self.stored_names() or any(stored.startswith(p) for p in self.prefixes())

def F(stored: str, meaning: str, type: str = "int") -> FieldSpec:
    """A field's declaration, short enough for the tables below."""
    return FieldSpec(stored, meaning, type)


COUNTS: Final = Record(
    "counts", "PP:n", "N", "A partition's counts, and a few numbers that are no counts.",
    queued=F("queued", "URLs in the hosts' queues", "count"),
    leased=F("leased", "URLs leased to a worker", "count"),
    delayed=F("delayed", "URLs waiting for a retry time", "count"),
    done=F("done", "URLs fetched (and only those)", "count"),
    dead=F("dead", "dead letters", "count"),
    refused_by=F("r:", "r:REASON URLs admitted, then refused before their download for good "
                       "(robots, a learned trap or variant; lua/release.lua)", "prefix"),
    dead_by=F("x:", "x:REASON dead letters by their reason's label (common.lua dead_letter; "
                    "requeue.lua takes them off)", "prefix"),
    parked_by=F("p:", "p:REASON hosts parked, by their reason's label (lua/drop_host.lua; "
                      "requeue.lua takes them off)", "prefix"),
    hosts_fetched=F("hf", "hosts with at least one URL fetched (lua/release.lua)", "count"),
    seeds=F("seeds", "seed URLs admitted (a seed's redirect target not again; lua/admit.lua)",
            "count"),
    dup=F("dup", "offers refused as already seen", "count"),
    refused=F("refused", "offers over the host's page budget", "count"),
    blocked=F("blocked", "links to a dropped host", "count"),
    budget=F("budget", "links to a site or domain whose budget is spent", "count"),
    expired=F("expired", "leases that ran out and went back to the queues", "count"),
    stale=F("stale", "releases of leases that had expired", "count"),
    hosts=F("hosts", "hosts admitted", "count"),
    breaker_open=F("breaker_open", "sites whose breaker is open", "count"),
    breaker_parked=F("breaker_parked", "sites parked by their breaker", "count"),
    robots_fetched=F("robots_fetched", "robots.txt fetched", "count"),
    robots_failed=F("robots_failed", "robots.txt fetches that failed", "count"),
    robots_denied=F("robots_denied", "URLs robots.txt disallowed", "count"),
    revisit=F("revisit", "done URLs waiting for their revisit (a part of done)", "count"),
    revisited=F("revisited", "revisits that came due so far", "count"),
    rules=F("rules", "noise parameters learned (lua/learn.lua)", "count"),
    traps=F("traps", "URL patterns refused as traps (lua/learn.lua)", "count"),
    seq=F("seq", "the last admission number (no count)"),
    mark=F("em", "the time of the last admission time mark in PP:e (no count)", "s"),
    timers=F("mt", "when a claim next looks at the timed sets (common.lua timer_at; "
                   "negative: none, look again then)", "ms"),
    timer_leased=F("mt:leased", "the same, for PP:leased alone", "ms"),
    timer_delayed=F("mt:delayed", "the same, for PP:delayed alone", "ms"),
    timer_vdue=F("mt:vdue", "the same, for PP:vdue alone", "ms"),
    timer_dwake=F("mt:dwake", "the same, for PP:dwake alone", "ms"),
    timer_iwake=F("mt:iwake", "the same, for PP:iwake alone", "ms"),
    sleepers=F("sl", "the latest time a worker waits for here (common.lua wake_sleepers)",
               "ms"),
)

HOST: Final = Record(
    "host", "PP:h:HOST", "H", "An authority (scheme://host:port): its queue and robots.txt.",
    queued=F("n", "URLs in its queue", "count"),
    pages_fetched=F("pf", "its URLs fetched, revisits included (lua/release.lua)", "count"),
    woken=F("iwk", "woken from an IP park: its place at the address is its own", "flag"),
    blocked=F("b", "'1' dropped, 'p' parked by its breaker", "flag"),
    parked_reason=F("pr", "why it was parked (JSON)", "str"),
    robots_state=F("rs", "robots.txt: 'f' fetching, 'k' known, 'u' unreachable", "str"),
    robots_wait=F("rw", "no claims until (a robots.txt fetch, or unreachable)", "ms"),
    robots_refresh=F("rx", "when its robots.txt is due again", "ms"),
    robots_tries=F("ra", "failed robots.txt fetches in a row", "count"),
    robots_retry=F("rh", "the wait after the last failed fetch", "ms"),
    robots_fetched=F("rt", "the last good robots.txt fetch", "ms"),
    robots_version=F("rv", "the version of its rules (PP:r)"),
    robots_concurrency=F("rc", "the concurrency its robots.txt asks for"),
    robots_delay=F("rdl", "the delay its robots.txt asks for", "ms"),
    robots_floor=F("rfl", "the delay floor (Crawl-delay) its robots.txt asks for", "ms"),
)

SITE: Final = Record(
    "site", "PP:g:SITE", "S",
    "A host name with all its schemes and ports: politeness, holds, breaker, DNS, budget.",
    in_flight=F("i", "URLs in flight (leased, reserved included)", "count"),
    next_claim=F("t", "no claim before", "ms"),
    next_start=F("s", "no start before", "ms"),
    admitted=F("a", "URLs admitted", "count"),
    concurrency=F("c", "its concurrency (settings, robots.txt, a 429's one at a time)"),
    delay=F("dl", "its delay between claims", "ms"),
    floor=F("fl", "its delay floor: the strictest Crawl-delay of its hosts", "ms"),
    held=F("w", "held until: no claims (backoff, breaker)", "ms"),
    robots_job=F("rj", "a robots.txt of its hosts is being fetched until: no claims", "ms"),
    backoff=F("bk", "backoff until: no starts (start.lua)", "ms"),
    failures=F("cf", "breaker: failures in a row", "count"),
    breaker=F("bs", "breaker state: 'o' open, 'h' half-open, 'x' parked", "str"),
    openings=F("bo", "breaker: openings so far", "count"),
    cooldown=F("bh", "breaker: its cool-down", "ms"),
    dns_failures=F("da", "failed lookups in a row (lua/dns.lua)", "count"),
    dns_until=F("du", "the DNS hold ends at", "ms"),
    dns_kind=F("dk", "the last lookup failure's kind (servfail, timeout)", "str"),
    dns_hold=F("dh", "the DNS hold's length", "ms"),
    domain=F("d", "its registered domain", "str"),
    ctl_concurrency=F("xc", "an operator's concurrency (lua/control.lua)"),
    ctl_delay=F("xd", "an operator's delay (lua/control.lua)", "ms"),
    ctl_paused=F("xp", "paused by an operator (lua/control.lua)", "flag"),
    address=F("ip", "the server address it points at ('-': none to gate)", "str"),
    address_until=F("ipx", "until when that address holds (its TTL)", "ms"),
    dns_job=F("dj", "its name is being resolved until (the IP scope's DNS job): no claims",
              "ms"),
    adaptive=F("ad", "the adaptive delay its last answer asked for (release.lua)", "ms"),
    latency=F("lt", "its answers' mean time", "ms"),
    first_answer=F("fa", "1 until its first answer: one request at a time until then "
                         "(adaptive pacing; release.lua's adapt removes it)", "flag"),
    hosts=F("na", "how many hosts PP:ga:SITE holds (1: placed without reading it)"),
    alone=F("d1", "1 while it is alone in its domain (not gated by it)", "flag"),
    pages=F("bp", "budget: URLs handed out", "count"),
    bytes=F("bb", "budget: bytes received", "count"),
    first_claim=F("b0", "budget: its first claim", "ms"),
    budget_pages=F("qp", "an operator's page budget", "int"),
    budget_bytes=F("qb", "an operator's byte budget", "int"),
    budget_ms=F("qs", "an operator's time budget", "ms"),
    budget_job=F("bj", "a budget job under way until: no claims", "ms"),
)

DOMAIN: Final = Record(
    "domain", "PP:d:DOMAIN", "D", "A registered domain: the gate its sites share.",
    next_claim=F("t", "no claim of its sites before", "ms"),
    next_start=F("s", "no start of its sites before", "ms"),
    ctl_concurrency=F("xc", "an operator's concurrency (lua/control.lua)"),
    ctl_delay=F("xd", "an operator's delay (lua/control.lua)", "ms"),
    ctl_paused=F("xp", "paused by an operator (lua/control.lua)", "flag"),
    last_site=F("rh", "the site of its last claim", "str"),
    reserved_until=F("re", "when that claim's reservation ends", "ms"),
    turns=F("m", "1 once another site claimed: one URL per claim from then", "flag"),
    sites=F("ns", "its sites", "count"),
    first_site=F("fs", "its first site (alone while sites is 1)", "str"),
    pages=F("bp", "budget: URLs handed out (while a domain budget is on)", "count"),
    bytes=F("bb", "budget: bytes received (while a domain budget is on)", "count"),
    first_claim=F("b0", "budget: its first claim (while a domain budget is on)", "ms"),
)

IP_GATE: Final = Record(
    "ip gate", "{ns/ip/ADDR}:g", "IG", "A server address's gate (lua/ip*.lua).",
    next_start=F("s", "no start on the address before", "ms"),
    last_wake=F("wk", "the last wake handed out", "ms"),
    ctl_concurrency=F("xc", "an operator's concurrency (lua/control.lua)"),
    ctl_delay=F("xd", "an operator's delay (lua/control.lua)", "ms"),
    ctl_paused=F("xp", "paused by an operator (lua/control.lua)", "flag"),
    waiters=F("qn", "hosts queued so far: the order of its waiting set", "count"),
)

FACTS: Final = Record(
    "facts", "PP:k:HOST", "K", "What a host's pages taught (lua/learn.lua, sitefacts.py).",
    noise=F("r", "the noise parameters learned, space-separated", "str"),
    traps=F("x", "the URL patterns refused as traps, one per line", "str"),
    fetched=F("f", "identities fetched only as a spelling with a noise parameter", "str"),
    canonical_many=F("cm", "'TARGET KEY...': the first other page named, and who named it",
                     "str"),
    canonical_one=F("cu", "1 once three pages named one other page", "flag"),
    waits=F("wn", "how many w: fields there are", "count"),
    size=F("nf", "how many fields the hash holds, as learn.lua counts them", "count"),
    dropped=F("n:", "n:P the pages whose canonical link dropped P", "prefix"),
    same=F("m:", "m:P pages whose payload equals the page without P", "prefix"),
    kept=F("k:", "k:P evidence that P matters: any blocks the rule", "prefix"),
    digest=F("d:", "d:KEY a fetched page's payload digest", "prefix"),
    waiting=F("w:", "w:KEY 'P DIGEST' the first page fetched at KEY plus P", "prefix"),
    pattern=F("t:", "t:PATTERN 'PAGES ALIKE SKETCH...' a pattern's pages", "prefix"),
)

CRAWL: Final = Record(
    "crawl", "NS:crawl", "C", "The crawl itself, one per namespace (frontier/crawls.py).",
    started=F("started", "when a worker first opened the crawl (Unix ms, its clock)", "ms"),
    runs=F("runs", "how many times a worker opened it, the first time included", "count"),
    config=F("config", "the settings that define it, as its first worker had them, and "
                       "those given since (JSON; frontier/crawlconfig.py)", "str"),
)

#: Every record.
RECORDS: Final = (COUNTS, HOST, SITE, DOMAIN, IP_GATE, FACTS, CRAWL)

_BY_LUA: Final = {record.lua: record for record in RECORDS}
#: ``S.in_flight`` in a script (not ``x.S.in_flight``, not ``S.in_flightx``).
_LUA_FIELD: Final = re.compile(r"(?<![\w.])(" + "|".join(_BY_LUA) + r")\.(\w+)\b")
#: A record's name not followed by a field: the whole table, which no script has.
_LUA_TABLE: Final = re.compile(r"(?<![\w.])(?:" + "|".join(_BY_LUA) + r")\b(?!\s*\.)")
#: Lua's comments, then its strings (a word inside either is no code).
LUA_NOT_CODE: Final = re.compile(r"--\[\[.*?\]\]|--[^\n]*|'(?:\\.|[^'\\])*'"
                                 r"|\"(?:\\.|[^\"\\])*\"", re.S)


def resolve_fields(source: str) -> str:
    """A script with each record's field (``S.in_flight``) replaced by its
    stored name as a Lua string (``'i'``).

    Done once, when the script is built, rather than with tables in front of
    every script: Redis runs a script's whole chunk on each call, and a table
    of the 150 names cost about 12 µs a call, more than a claim's commands.
    An undeclared field raises :class:`ValueError` (the script is not built),
    and so does a record's name used as a table (``R = S``): there is none.
    """
    bare = _LUA_TABLE.search(LUA_NOT_CODE.sub(" ", source))
    if bare:
        raise ValueError(f"a record's fields are named one by one, not as a table: {bare.group()}")

    def stored(m: re.Match[str]) -> str:
        record, attr = _BY_LUA[m.group(1)], m.group(2)
        if attr not in record.fields:
            raise ValueError(f"record {record.name} ({record.lua}) declares no field {attr!r}")
        return f"'{record.fields[attr].stored}'"
    return _LUA_FIELD.sub(stored, source)


def _constants(record: Record, name: str, doc: str) -> type:
    return type(name, (), {"__doc__": doc} | {
        attr.upper(): spec.stored for attr, spec in record.fields.items()})


#: The counters' names as callers spell them (``Count.QUEUED``): :data:`COUNTS`.
Count: Final = _constants(COUNTS, "Count", "Names of the fields of a partition's PP:n hash.")

#: Where a URL is: every admitted URL is counted in exactly one of these, or
#: refused at its lease (:func:`refused_at_lease`), or over its host's page
#: budget (``COUNTS.refused``).
STATES: Final = (COUNTS.queued, COUNTS.leased, COUNTS.delayed, COUNTS.done, COUNTS.dead)

#: Fields of PP:n that are no counts.
NOT_COUNTS: Final = frozenset(
    spec.stored for spec in COUNTS.fields.values() if spec.type != "count")


def add_counts(total: dict[str, int], raw: Mapping[bytes, bytes]) -> None:
    """Add one partition's ``PP:n`` hash to ``total`` (its sequence number, last
    time mark and timers fields are no counts)."""
    for key, value in raw.items():
        name = key.decode()
        if name not in NOT_COUNTS and not name.startswith(COUNTS.timers + ":"):
            total[name] = total.get(name, 0) + int(value)


def by_label(counts: Mapping[str, int], prefix: str) -> dict[str, int]:
    """The ``PREFIX:LABEL`` fields of summed counts (:func:`add_counts`) by label,
    most first (a label taken off more often than counted reads as none)."""
    found = {name[len(prefix):]: int(n) for name, n in counts.items()
             if name.startswith(prefix) and int(n) > 0}
    return dict(sorted(found.items(), key=lambda item: (-item[1], item[0])))


def refused_at_lease(counts: Mapping[str, int]) -> dict[str, int]:
    """URLs admitted, then refused before their download, by reason (the
    ``r:REASON`` fields of summed counts, :func:`add_counts`)."""
    return by_label(counts, COUNTS.refused_by)
