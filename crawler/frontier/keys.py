"""Where the frontier keeps things in Redis, and which partition owns a host.

A *host* is an authority, ``scheme://host:port``: it has a queue and a
robots.txt of its own (RFC 9309 scopes robots.txt to one scheme, host and
port). A *site* is a host name (or address literal) with all its schemes and
ports: ``http://a.test:80`` and ``https://a.test:443`` are one server to be
polite to, so concurrency, delays, Crawl-delay pacing, Retry-After holds, the
breaker, the page budget and DNS failures belong to the site.

A *domain* is a site's registered domain (:mod:`crawler.domains`):
``www.a.test`` and ``img.a.test`` are two sites of domain ``a.test``, paced
together too (``FRONTIER_DOMAIN_CONCURRENCY``, ``FRONTIER_DOMAIN_DELAY``).

Domains are spread over ``partitions`` by a stable hash of their name
(:func:`partition_of`): a domain's hosts and sites share a partition, one script
gates them together. Every key of a partition carries one hash tag (``{ns/p3}``):
on a Redis Cluster a partition is one slot, and a script (one partition) one node. The same
:func:`partition_of` splits seed files (``scrapy partition``), so a worker's
seeds and its share of the frontier agree.

Layout of partition ``P`` (``PP`` is its prefix ``{ns/pP}``):

==================  =========  ===============================================
key                 type       holds
==================  =========  ===============================================
``PP:n``            hash       counts, and a few numbers that are no counts
                               (:data:`~crawler.frontier.schema.COUNTS`)
``PP:ready``        zset       hosts that may be claimed, by next-allowed ms
``PP:h:HOST``       hash       host: queue length, robots.txt state, parking
                               (:data:`~crawler.frontier.schema.HOST`)
``PP:g:SITE``       hash       site: politeness, holds, breaker, DNS, live
                               control, address, budgets
                               (:data:`~crawler.frontier.schema.SITE`)
``PP:ga:SITE``      set        the site's hosts
``PP:d:DOMAIN``     hash       domain: the gate its sites share
                               (:data:`~crawler.frontier.schema.DOMAIN`)
``PP:di:DOMAIN``    zset       the domain's leases in flight (fingerprints, and
                               ``R`` + host for a robots job) by expiry ms
``PP:dw:DOMAIN``    zset       hosts waiting for the domain (taken out of the
                               ready set), by their next-allowed ms
``PP:dwake``        zset       domains with waiting hosts, by when to look again
``PP:iw:ADDR``      zset       hosts parked for their server address ADDR (the
                               IP scope), by when to look at them again
``PP:iwake``        zset       addresses with parked hosts, by when to look again
``PP:r``            hash       host -> robots rules blob (crawler/robots)
``PP:q:HOST``       zset       the host's queue: 16-byte fingerprint + record,
                               by (-priority, enqueue time)
``PP:leased``       zset       leases by expiry ms, each member
                               "HOST\nSCORE\nWORKER\nENTRY" (the entry
                               starts with the fingerprint; common.lua
                               lease_fields)
``PP:ld``           hash       (an older build's lease details: fingerprint
                               -> host, score, worker, entry; read only to
                               put its expired leases back)
``PP:delayed``      zset       delayed fingerprints by not-before ms
``PP:dd``           hash       fingerprint -> host, score, entry
``PP:dead``         hash       fingerprint -> host, reason, entry
``PP:s:BUCKET``     set        seen fingerprints (64-bit integers: intsets)
``PP:e``            zset       time marks: admission time (s) by first seq
``PP:v:HOST``       zset       the host's done URLs to fetch again (entries,
                               as in its queue, by when each is due, s)
``PP:vdue``         zset       hosts with revisits, by the earliest one's ms
``PP:vm:HOST``      hash       of the host's revisits whose record has a
                               sitemap's lastmod ("lm"): fingerprint -> its
                               entry in PP:v:HOST (a newer lastmod brings it
                               forward: admit.lua)
``PP:qm:HOST``      hash       while inlinks raise URLs (FRONTIER_INLINK_PRIORITY):
                               fingerprint -> its entry in PP:q:HOST
``PP:k:HOST``       hash       what the host's pages taught (``lua/learn.lua``,
                               :data:`~crawler.frontier.schema.FACTS`)
==================  =========  ===============================================

An IP address ``ADDR`` that names point at has a gate in a slot of its own,
``{ns/ip/ADDR}`` (names of every partition share it, so it cannot live in
theirs): ``:g`` hash (:data:`~crawler.frontier.schema.IP_GATE`), ``:f``
zset (its requests in flight by expiry ms), ``:q`` zset (hosts waiting for
room, ``P\nHOST``, by when they came), ``:r`` zset
(hosts woken or newly joined, with a place reserved, by expiry ms). The
scripts ``lua/ip*.lua`` touch one address's keys, or one partition's.

Global keys (no hash tag, never touched by scripts): ``ns:workers``
(heartbeats), ``ns:layout``, ``ns:seen`` (last heartbeat, epoch s),
``ns:crawl`` (the crawl's record: its start, runs, configuration),
``ns:control`` (live-control changes), ``ns:budgets`` and ``ns:siterules``
(an operator's), ``ns:refused`` and ``ns:refused:REASON`` (URLs refused
before the frontier, and the last few of each); the WARC digest index
``{ns/warc}:digests`` has a slot of its own, the scope ``{ns/scope}:forms``, ``:log``
and ``:rules`` another (:mod:`crawler.frontier.scopestate`, lua/scope_add.lua), and a seed
list ``LIST`` its batches in flight in ``{LIST}:taken``.

Every key the Python side uses is spelled here and nowhere else; every field
of a hash record in :mod:`crawler.frontier.schema`, for Python and Lua alike.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from crawler.domains import registered_domain
from crawler.frontier.schema import STATES, Count, add_counts  # noqa: F401 (callers import them here)

#: A crawl id: short, and safe inside Redis key names and glob patterns.
_CRAWL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def crawl_namespace(template: str, spider: str, crawl_id: str | None = None) -> str:
    """The frontier namespace of a crawl: ``FRONTIER_NAMESPACE`` for the spider,
    plus ``:CRAWL_ID`` when the crawl has one.

    The same seeds crawled again under the same id continue that crawl (its
    seen set, its queues); a new id starts afresh. Old crawls are listed and
    deleted with ``scrapy frontier crawls`` / ``delete``.
    """
    base = template % {"spider": spider}
    if not crawl_id:
        return base
    if not _CRAWL_ID.fullmatch(crawl_id):
        raise ValueError(f"crawl_id {crawl_id!r}: use 1 to 64 letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit")
    return f"{base}:{crawl_id}"


#: The hash that places a host in a partition. Never change it: frontiers,
#: seed files split by ``scrapy partition`` and running workers must agree.
def host_hash(host: str) -> int:
    """A stable 64-bit hash of a host key (same on every machine and Python)."""
    return int.from_bytes(hashlib.blake2b(host.encode("utf-8"), digest_size=8).digest(), "big")


def site_of(host: str) -> str:
    """The site of a host key: ``a.test`` of ``https://a.test:443``, ``[::1]`` of
    ``http://[::1]:80`` (what ``site_of`` in lua/common.lua computes too)."""
    netloc = host.partition("://")[2] or host
    name, colon, port = netloc.rpartition(":")
    return name if colon and port.isdigit() and name else netloc


def domain_of(host: str) -> str:
    """The registered domain of a host key's site (what ``PP:d:`` keys are named by)."""
    return registered_domain(site_of(host))


def partition_of(host: str, partitions: int) -> int:
    """The partition that owns ``host``: its domain's, shared by all its sites,
    schemes and ports."""
    return host_hash(domain_of(host)) % partitions


#: How this version lays a frontier out: politeness per host name (a site)
#: and per registered domain, every host of a domain in one partition. Stored
#: with the partitioning in ``ns:layout`` when a frontier is created.
LAYOUT_POLITENESS = "domain"


def layout_json(partitions: int, seen_buckets: int) -> str:
    """The ``ns:layout`` value this version writes, and that every worker must find."""
    return json.dumps({"partitions": partitions, "seen_buckets": seen_buckets,
                       "politeness": LAYOUT_POLITENESS})


def older_layout(stored: str) -> str | None:
    """Why a stored layout was written by an older version, or ``None`` if it was not.

    Older versions partitioned hosts per ``scheme://host:port`` (no
    ``politeness`` in the layout) or per host name (``"site"``): their hosts
    live in other partitions, so this version must neither crawl nor change
    such a frontier.
    """
    try:
        layout = json.loads(stored)
    except ValueError:
        return None
    if not isinstance(layout, dict) or layout.get("politeness") == LAYOUT_POLITENESS:
        return None
    how = ("per host name" if layout.get("politeness") == "site"
           else "per scheme://host:port")
    return (f"it was written by an older broadcrawl, whose hosts were partitioned {how}; "
            "this one partitions them per registered domain, and the two "
            "layouts cannot be mixed. Finish that crawl with the version that started it, "
            "or start afresh: a new crawl id (-a crawl_id=...), or `scrapy frontier delete "
            "--crawl-id ID` (\"\" for the default crawl)")


def glob_escape(text: str) -> str:
    """``text`` matched literally inside a Redis ``SCAN MATCH`` pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


_LAYOUT = ":layout"


def layouts_pattern(base: str) -> str:
    """A pattern for the layout keys of ``base`` and of its crawls (``base:ID``)."""
    return glob_escape(base) + "*" + _LAYOUT


def layout_namespace(key: str) -> str:
    """The namespace whose layout key ``key`` is."""
    return key.removesuffix(_LAYOUT)


def seeds_taken_key(list_key: str) -> str:
    """The hash of seed batches in flight of the seed list ``list_key``; its hash
    tag is the list's whole name, so both share a Redis Cluster slot."""
    return f"{{{list_key}}}:taken"


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names of one frontier (namespace) with ``partitions`` partitions."""

    namespace: str
    partitions: int
    seen_buckets: int = 4096

    def prefix(self, partition: int) -> str:
        return f"{{{self.namespace}/p{partition}}}"

    def counts(self, partition: int) -> str:
        return f"{self.prefix(partition)}:n"

    def ready(self, partition: int) -> str:
        return f"{self.prefix(partition)}:ready"

    def host(self, partition: int, host: str) -> str:
        return f"{self.prefix(partition)}:h:{host}"

    def site(self, partition: int, host: str) -> str:
        """The site record of a host key (politeness shared by its schemes and ports)."""
        return f"{self.prefix(partition)}:g:{site_of(host)}"

    def site_hosts(self, partition: int, host: str) -> str:
        """The set of the host keys of ``host``'s site."""
        return f"{self.prefix(partition)}:ga:{site_of(host)}"

    def domain(self, partition: int, host: str) -> str:
        """The domain record of a host key (the gates its domain's sites share)."""
        return f"{self.prefix(partition)}:d:{domain_of(host)}"

    def domain_leases(self, partition: int, host: str) -> str:
        """The leases in flight of a host key's domain, by expiry ms."""
        return f"{self.prefix(partition)}:di:{domain_of(host)}"

    def domain_waiting(self, partition: int, host: str) -> str:
        """The hosts waiting for a host key's domain, by next-allowed ms."""
        return f"{self.prefix(partition)}:dw:{domain_of(host)}"

    def ip_parked(self, partition: int, address: str) -> str:
        """The hosts of a partition parked for their server address, by wake ms."""
        return f"{self.prefix(partition)}:iw:{address}"

    def ip_prefix(self, address: str) -> str:
        """The hash tag of one server address's gate (a slot of its own)."""
        return f"{{{self.namespace}/ip/{address}}}"

    def ip_gate(self, address: str) -> str:
        """An address's next start, last wake handed out and overrides."""
        return f"{self.ip_prefix(address)}:g"

    def ip_in_flight(self, address: str) -> str:
        """An address's requests in flight, by expiry ms."""
        return f"{self.ip_prefix(address)}:f"

    def ip_reserved(self, address: str) -> str:
        """The hosts with a place reserved on an address (``P\\nHOST``), by expiry ms."""
        return f"{self.ip_prefix(address)}:r"

    def ip_waiting(self, address: str) -> str:
        """The hosts waiting for room on an address (``P\\nHOST``), first come first."""
        return f"{self.ip_prefix(address)}:q"

    def robots_rules(self, partition: int) -> str:
        """Host -> its robots rules blob."""
        return f"{self.prefix(partition)}:r"

    def queue(self, partition: int, host: str) -> str:
        return f"{self.prefix(partition)}:q:{host}"

    def leased(self, partition: int) -> str:
        return f"{self.prefix(partition)}:leased"

    def lease_details(self, partition: int) -> str:
        """An older build's lease details: fingerprint -> host, score, worker,
        entry (the host on the first line)."""
        return f"{self.prefix(partition)}:ld"

    def delayed(self, partition: int) -> str:
        return f"{self.prefix(partition)}:delayed"

    def delayed_details(self, partition: int) -> str:
        """Delayed fingerprint -> host, score, entry (the host on the first line)."""
        return f"{self.prefix(partition)}:dd"

    def dead(self, partition: int) -> str:
        return f"{self.prefix(partition)}:dead"

    def facts(self, partition: int, host: str) -> str:
        """What a host's pages taught: noise parameters, trap patterns, evidence."""
        return f"{self.prefix(partition)}:k:{host}"

    def revisits_due(self, partition: int) -> str:
        """The hosts with done URLs to fetch again, by the earliest one's ms."""
        return f"{self.prefix(partition)}:vdue"

    def marks(self, partition: int) -> str:
        """Admission time marks: epoch seconds by the first sequence number after them."""
        return f"{self.prefix(partition)}:e"

    def workers(self) -> str:
        """Worker id -> its last heartbeat (:class:`crawler.frontier.workers.Heartbeat`)."""
        return f"{self.namespace}:workers"

    def live(self, worker: str) -> str:
        """What a running worker fetched lately, host by host, and its download
        errors by kind (:mod:`crawler.frontier.live`): the console reads it."""
        return f"{self.namespace}:live:{worker}"

    def live_pattern(self) -> str:
        """Every worker's :meth:`live` hash."""
        return glob_escape(self.namespace) + ":live:*"

    def wake_channel(self) -> str:
        """The pub/sub channel on which a script tells the workers waiting for a
        partition that something there is due sooner: "PART AT_MS"
        (``wake_sleepers`` in lua/common.lua, :mod:`crawler.scheduling.wakes`)."""
        return f"{self.namespace}:wake"

    def control_log(self) -> str:
        """The operators' live-control changes, newest first (JSON lines, capped)."""
        return f"{self.namespace}:control"

    def refused(self) -> str:
        """Reason -> URLs the workers refused before the frontier (traps, the
        guard, ...): :mod:`crawler.frontier.refusals`."""
        return f"{self.namespace}:refused"

    def reports(self) -> str:
        """Worker -> its tally of the crawl's downloads, for the crawl's reports
        (:mod:`crawler.frontier.reports`)."""
        return f"{self.namespace}:reports"

    def refused_examples(self, reason: str) -> str:
        """The last URLs refused for ``reason``, newest first (a capped list)."""
        return f"{self.namespace}:refused:{reason}"

    def budgets(self) -> str:
        """The crawl's budgets an operator set for every worker (JSON;
        :mod:`crawler.frontier.budgetstate`)."""
        return f"{self.namespace}:budgets"

    def site_rules(self) -> str:
        """The site rules an operator loaded for every worker (the file's text;
        :mod:`crawler.siterules`)."""
        return f"{self.namespace}:siterules"

    def crawl(self) -> str:
        """The crawl's own record (:data:`crawler.frontier.schema.CRAWL`)."""
        return f"{self.namespace}:crawl"

    def layout(self) -> str:
        """The partitioning every worker must agree on (:func:`layout_json`)."""
        return self.namespace + _LAYOUT

    def seen_at(self) -> str:
        """When a worker of this crawl last beat (epoch seconds): how idle the crawl is."""
        return f"{self.namespace}:seen"

    def scope_forms(self) -> str:
        """What the crawl's seeds cover (set of forms, ``lua/scope_add.lua``)."""
        return f"{{{self.namespace}/scope}}:forms"

    def scope_log(self) -> str:
        """The same forms in the order they came (list), read by each worker from
        its offset; an operator's change of the rules comes in it too."""
        return f"{{{self.namespace}/scope}}:log"

    def scope_rules(self) -> str:
        """The operator's scope rules in force for every worker (JSON; none: each
        worker's settings)."""
        return f"{{{self.namespace}/scope}}:rules"

    def warc_digests(self) -> str:
        """The WARC writer's payload digest index (a slot of its own; its
        older generation is this key + ``:old``)."""
        return f"{{{self.namespace}/warc}}:digests"

    @staticmethod
    def shared_warc_digests(base: str, name: str) -> str:
        """A digest index shared by crawl ids (``WARC_DIGEST_INDEX``) of the
        spider namespace ``base``."""
        return f"{{{base}/warc/{name}}}:digests"

    def globals(self) -> list[str]:
        """The keys outside the partitions (no hash tag), and the WARC digest index."""
        return [self.workers(), self.layout(), self.seen_at(), self.warc_digests(),
                self.warc_digests() + ":old", self.control_log(), self.scope_forms(),
                self.scope_log(), self.scope_rules(), self.budgets(), self.site_rules(),
                self.refused(), self.reports(), self.crawl()]

    # --- patterns for SCAN MATCH (the namespace escaped)

    def partition_pattern(self, partition: int) -> str:
        """Every key of one partition (another crawl id's tags never match)."""
        return glob_escape(self.prefix(partition)) + "*"

    def refused_examples_pattern(self) -> str:
        """The lists of refused URLs, one per reason (:meth:`refused_examples`)."""
        return glob_escape(self.namespace) + ":refused:*"

    def ips_pattern(self) -> str:
        """Every key of every server address's gate."""
        return "{" + glob_escape(self.namespace) + "/ip/*"

    def seen_pattern(self, partition: int) -> str:
        """The seen-set buckets of one partition."""
        return glob_escape(self.prefix(partition)) + ":s:*"

    def queues_pattern(self) -> str:
        """Every host queue of every partition."""
        return "{" + glob_escape(self.namespace) + "/p*}:q:*"

    def sites_pattern(self) -> str:
        """Every site record of every partition."""
        return "{" + glob_escape(self.namespace) + "/p*}:g:*"

    @staticmethod
    def site_of_key(key: bytes) -> str:
        """The site of a site record's key (as :meth:`sites_pattern` finds)."""
        return key.split(b"}:g:", 1)[1].decode()

    @staticmethod
    def queue_of(key: bytes) -> tuple[int, bytes]:
        """The partition and host of a host queue's key (as :meth:`queues_pattern` finds)."""
        tag, _, host = key.partition(b"}:q:")
        return int(tag.rsplit(b"/p", 1)[1]), host

    def seen_slot(self, fingerprint: bytes) -> tuple[int, str]:
        """The seen-set bucket and member of a 16-byte fingerprint.

        Members are signed 64-bit integers so that Redis stores each bucket
        as an intset: 8 bytes a URL instead of ~60 in a hash table. The
        bucket comes from other bits of the fingerprint, so together they
        keep 64 + log2(buckets) bits: no false duplicates in practice.
        """
        bucket = int.from_bytes(fingerprint[8:12], "big") % self.seen_buckets
        member = int.from_bytes(fingerprint[:8], "big", signed=True)
        return bucket, str(member)
