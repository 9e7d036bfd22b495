"""Where the frontier keeps things in Redis, and which partition owns a host.

A *host* is an authority, ``scheme://host:port``: it has a queue and a
robots.txt of its own (RFC 9309 scopes robots.txt to one scheme, host and
port). A *site* is a host name (or address literal) with all its schemes and
ports: ``http://a.test:80`` and ``https://a.test:443`` are one server to be
polite to, so concurrency, delays, Crawl-delay pacing, Retry-After holds, the
breaker, the page budget and DNS failures belong to the site.

Sites are spread over ``partitions`` by a stable hash of their name
(:func:`site_of`), so all hosts of a site share a partition and one script
sees them together. Every key of a partition carries the same hash tag
(``{ns/p3}``), so on a Redis Cluster a partition lives in one slot and each
Lua script, which only touches one partition, runs on one node. The same
:func:`partition_of` splits seed files (``scrapy partition``), so a worker's
seeds and its share of the frontier agree.

Layout of partition ``P`` (``PP`` is its prefix ``{ns/pP}``):

==================  =========  ===============================================
key                 type       holds
==================  =========  ===============================================
``PP:n``            hash       counts: queued, leased, delayed, done, dead,
                               dup, refused, expired, hosts
``PP:ready``        zset       hosts that may be claimed, by next-allowed ms
``PP:h:HOST``       hash       host: n queued, b blocked (dropped) or parked,
                               pr why parked; robots: rs state (f fetching,
                               k known, u unreachable), rw held until ms
                               (fetching or unreachable: no claims), rx
                               refresh ms, ra failed tries, rt last good fetch
                               ms, rv version of the rules; rc, rdl, rfl the
                               concurrency, delay and floor its file asks for
``PP:g:SITE``       hash       site: i in flight, t next claim ms, s next
                               start ms, a admitted, c concurrency, dl delay
                               ms, fl delay floor ms (the strictest Crawl-delay
                               of its hosts), w held until ms (no claims), rj
                               a robots.txt of its hosts is being fetched
                               until ms (no claims), bk backoff until ms (no
                               starts); breaker: cf
                               failures in a row, bs state, bo openings; DNS
                               (lua/dns.lua): da failed lookups in a row, du
                               the DNS hold ends at ms
``PP:ga:SITE``      set        the site's hosts
``PP:r``            hash       host -> robots rules blob (crawler/robots)
``PP:q:HOST``       zset       the host's queue: 16-byte fingerprint + record,
                               by (-priority, enqueue time)
``PP:leased``       zset       leased fingerprints by lease expiry ms
``PP:ld``           hash       fingerprint -> host, score, worker, entry
``PP:delayed``      zset       delayed fingerprints by not-before ms
``PP:dd``           hash       fingerprint -> host, score, entry
``PP:dead``         hash       fingerprint -> host, reason, entry
``PP:s:BUCKET``     set        seen fingerprints (64-bit integers: intsets)
``PP:e``            zset       time marks: admission time (s) by first seq
==================  =========  ===============================================

Global keys (no hash tag, never touched by scripts): ``ns:workers``,
``ns:layout``, ``ns:seen`` (last heartbeat, epoch s); the WARC digest index
``{ns/warc}:digests`` has a slot of its own.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

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


def partition_of(host: str, partitions: int) -> int:
    """The partition that owns ``host``: its site's, shared by all its schemes and ports."""
    return host_hash(site_of(host)) % partitions


#: How this version lays a frontier out: politeness per host name (a site),
#: every scheme and port of a name in one partition. Stored with the
#: partitioning in ``ns:layout`` when a frontier is created.
LAYOUT_POLITENESS = "site"


def layout_json(partitions: int, seen_buckets: int) -> str:
    """The ``ns:layout`` value this version writes, and that every worker must find."""
    return json.dumps({"partitions": partitions, "seen_buckets": seen_buckets,
                       "politeness": LAYOUT_POLITENESS})


def older_layout(stored: str) -> str | None:
    """Why a stored layout was written by an older version, or ``None`` if it was not.

    Older versions paced and partitioned hosts per ``scheme://host:port``: their
    hosts live in other partitions and their host records hold what sites hold
    now, so this version must neither crawl nor change such a frontier.
    """
    try:
        layout = json.loads(stored)
    except ValueError:
        return None
    if not isinstance(layout, dict) or "politeness" in layout:
        return None
    return ("it was written by an older broadcrawl, whose hosts were paced and "
            "partitioned per scheme://host:port; this one paces per host name, and the two "
            "layouts cannot be mixed. Finish that crawl with the version that started it, "
            "or start afresh: a new crawl id (-a crawl_id=...), or `scrapy frontier delete "
            "--crawl-id ID` (\"\" for the default crawl)")


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

    def queue(self, partition: int, host: str) -> str:
        return f"{self.prefix(partition)}:q:{host}"

    def leased(self, partition: int) -> str:
        return f"{self.prefix(partition)}:leased"

    def dead(self, partition: int) -> str:
        return f"{self.prefix(partition)}:dead"

    def workers(self) -> str:
        return f"{self.namespace}:workers"

    def seen_at(self) -> str:
        """When a worker of this crawl last beat (epoch seconds): how idle the crawl is."""
        return f"{self.namespace}:seen"

    def globals(self) -> list[str]:
        """The keys outside the partitions (no hash tag), and the WARC digest index."""
        ns = self.namespace
        return [f"{ns}:workers", f"{ns}:layout", f"{ns}:seen", f"{{{ns}/warc}}:digests"]

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
