"""The scripts' named arguments: one JSON object per call (or per item), read
by name in Lua (``cjson.decode``), so that an argument added or dropped
shifts no other one and a script reads ``a.ttl_ms``, not ``ARGV[4]``.

Binary values (a robots.txt blob, a lease's member, a queue entry or a
fingerprint) stay positional: JSON holds text only. So do lists of variable
length (the hosts to look at, the members that ended): each item one
positional value after the object, or one object of its own when an item has
several values. A value left unset is left out of the object, never sent as
``null`` (it would reach Lua as ``cjson.null``, which is not ``nil``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from crawler.frontier.values import Limits, Release, RobotsRetry

if TYPE_CHECKING:
    from crawler.frontier.control import Change
    from crawler.frontier.dnsstate import DNSRetry
    from crawler.frontier.ipgates import DnsNote
    from crawler.frontier.sitefacts import LearnLimits


def admit_limits(limits: Limits) -> str:
    """The crawl's limits as ``lua/admit.lua`` reads them (ARGV[2])."""
    return json.dumps({"concurrency": limits.concurrency, "delay_ms": limits.delay_ms,
                       "admit_max": limits.admit_max, "inlink_boost": limits.inlink_boost,
                       "await_first": limits.adaptive_factor > 0})


def claim_args(want: int, rnd: float, window_ms: int, later: int) -> str:
    """What ``lua/claim.lua`` reads from ARGV[3] (the prefix and the worker are
    ARGV[1] and ARGV[2]): ``want`` URLs, ``rnd`` in [0, 1) for jitter, its
    start window, ``later`` URLs due later at most."""
    return json.dumps({"want": int(want), "rnd": rnd, "start_window_ms": int(window_ms),
                       "later": int(later)})


def claim_limits(limits: Limits) -> str:
    """The crawl's limits as ``lua/claim.lua`` reads them from ARGV[4]: one
    text a round, shared by its calls to every partition."""
    return json.dumps({
        "lease_ms": limits.lease_ms, "jitter": limits.jitter, "move_max": limits.move_max,
        "robots_ms": limits.robots_ms, "domain_concurrency": limits.domain_concurrency,
        "domain_delay_ms": limits.domain_delay_ms,
        "ip_scope": limits.ip_concurrency > 0 or limits.ip_delay_ms > 0,
        "ip_fallback_ms": limits.ip_fallback_ms, "dns_job_ms": limits.dns_job_ms,
        "dns_job_max": limits.dns_job_max, "revisit_new_first": limits.revisit_new_first,
        "reserve_ms": limits.reserve_ms, "budget": limits.budgets.script_args(),
        "inlinks": limits.inlink_boost > 0})


def robots_args(host: str, ok: bool, ttl_ms: int, concurrency: int, delay_ms: int,
                floor_ms: int, first_gap_ms: int, retry: RobotsRetry, wait_ms: int) -> str:
    """What ``lua/robots.lua`` reads from ARGV[3] (the prefix is ARGV[1], its
    blob ARGV[2])."""
    return json.dumps({
        "host": host, "outcome": "ok" if ok else "fail", "ttl_ms": int(ttl_ms),
        "concurrency": int(concurrency), "delay_ms": int(delay_ms), "floor_ms": int(floor_ms),
        "first_gap_ms": int(first_gap_ms), "retry_base_ms": int(retry.base_ms),
        "retry_cap_ms": int(retry.cap_ms), "max_attempts": int(retry.max_attempts),
        "stale_max_ms": int(retry.stale_max_ms), "wait_ms": int(wait_ms)})


def start_args(limits: Limits, earlier: tuple[int, ...] | None, worker: str,
               window_ms: int) -> str:
    """What ``lua/start.lua`` reads from ARGV[2] (the lease's member is ARGV[1]):
    ``earlier``, what an earlier pass got (wait, site turn, domain turn)."""
    args = {"jitter": limits.jitter, "domain_delay_ms": limits.domain_delay_ms,
            "worker": worker, "window_ms": int(window_ms)}
    if earlier:
        args["site_turn"], args["domain_turn"] = int(earlier[1]), int(earlier[2])
    return json.dumps(args)


def release_limits(limits: Limits) -> str:
    """The crawl's limits as ``lua/release.lua`` reads them (ARGV[3])."""
    b = limits.breaker
    return json.dumps({
        "breaker_threshold": b.threshold, "breaker_base_ms": b.base_ms,
        "breaker_cap_ms": b.cap_ms, "breaker_max_openings": b.max_openings,
        "adaptive_factor": limits.adaptive_factor, "adaptive_max_ms": limits.adaptive_max_ms,
        "jitter": limits.jitter, "domain_concurrency": limits.domain_concurrency,
        "domain_delay_ms": limits.domain_delay_ms, "domain_budget": limits.budgets.domain_on})


def release_item(rel: Release) -> str:
    """One release's values by name, as ``lua/release.lua`` reads them (its
    member and new entry, binary, go before it)."""
    item = {"op": rel.op, "arg": rel.arg, "hold_ms": int(rel.hold_ms), "health": rel.health,
            "fetch_ms": int(rel.fetch_ms), "revisit_ms": int(rel.revisit_ms),
            "bytes": int(rel.size)}
    if rel.unsent:
        item["unsent"] = True
    return json.dumps(item)


def control_args(scope: str, name: str, change: Change) -> str:
    """An operator's change as ``lua/control.lua`` reads it (ARGV[2]); what it
    leaves as it is, left out (a JSON null would reach Lua as cjson.null)."""
    values = {"concurrency": change.concurrency, "delay_ms": change.delay_ms,
              "pause": change.pause, "budget_pages": change.budget_pages,
              "budget_bytes": change.budget_bytes, "budget_ms": change.budget_ms}
    return json.dumps({"scope": scope, "name": name, "reset": bool(change.reset),
                       **{k: v for k, v in values.items() if v is not None}})


def dns_args(host: str, retry: DNSRetry, *, job: bool, count: bool, kind: str) -> str:
    """What ``lua/dns.lua`` reads from ARGV[2] (the prefix is ARGV[1]): the
    host, its retry's backoff, whether the lookup was a robots job's, whether
    the failure counts, and its kind."""
    return json.dumps({"host": host, "base_ms": int(retry.base_ms), "cap_ms": int(retry.cap_ms),
                       "max_attempts": int(retry.max_attempts), "job": bool(job),
                       "count": bool(count), "kind": kind})


def hold_args(host: str, ms: int) -> str:
    """What ``lua/hold.lua`` reads from ARGV[2] (the prefix is ARGV[1])."""
    return json.dumps({"host": host, "hold_ms": int(ms)})


def renew_args(lease_ms: int) -> str:
    """What ``lua/renew.lua`` reads from ARGV[3] (the prefix and the worker are
    ARGV[1] and ARGV[2]; the leases' members, binary, follow it)."""
    return json.dumps({"lease_ms": int(lease_ms)})


def drop_host_args(host: str, reason: str, max_moved: int, mark: str) -> str:
    """What ``lua/drop_host.lua`` reads from ARGV[2] (the prefix is ARGV[1]; the
    delayed URLs' fingerprints, binary, follow it): ``reason`` the dead
    letters' (JSON text), ``mark`` what the host's b field becomes ("" leaves
    it, and is left out)."""
    args = {"host": host, "reason": reason, "max": int(max_moved)}
    if mark:
        args["mark"] = str(mark)
    return json.dumps(args)


def requeue_args(front: bool, concurrency: int, delay_ms: int) -> str:
    """What ``lua/requeue.lua`` reads from ARGV[2] (the prefix is ARGV[1]; the
    dead letters, fingerprint and priority each, follow it)."""
    return json.dumps({"front": bool(front), "concurrency": int(concurrency),
                       "delay_ms": int(delay_ms)})


def revisit_now_args(host: str | None, batch: int) -> str:
    """What ``lua/revisit_now.lua`` reads from ARGV[2] (the prefix is ARGV[1]):
    ``host`` None (left out) for every host of the partition."""
    args: dict[str, str | int] = {"batch": int(batch)}
    if host:
        args["host"] = host
    return json.dumps(args)


def leftover_args(repair: bool, grace_ms: int) -> str:
    """What ``lua/leftover.lua`` reads from ARGV[2] (the prefix is ARGV[1]; the
    host keys to look at follow it)."""
    return json.dumps({"repair": bool(repair), "grace_ms": int(grace_ms)})


def scope_end_args(host: str, reason: str) -> str:
    """What ``lua/scope_end.lua`` reads from ARGV[2] (the prefix is ARGV[1]; the
    queue entries to end, binary, follow it): ``reason`` the dead letters'
    (JSON text)."""
    return json.dumps({"host": host, "reason": reason})


def learn_args(limits: LearnLimits) -> str:
    """What ``lua/learn.lua`` reads from ARGV[2] (the prefix is ARGV[1]; the
    hosts' observations, a list of variable length, follow it)."""
    return json.dumps({"learn_min": int(limits.min_evidence), "max_fields": int(limits.max_fields),
                       "alike_pages": int(limits.alike_pages),
                       "alike_share": round(limits.alike_share * 100),
                       "max_distance": int(limits.distance)})


def ipgate_args(limits: Limits, request: str, waiter: str, earlier: int | None,
                in_place_ms: int) -> str:
    """What ``lua/ipgate.lua`` reads from ARGV[1]: ``request`` its member of the
    address's requests in flight, ``waiter`` its host as the address's queue
    names it, ``earlier`` the turn of its earlier pass (None, left out: a
    first pass)."""
    args = {"concurrency": int(limits.ip_concurrency), "delay_ms": int(limits.ip_delay_ms),
            "jitter": limits.jitter, "request": request, "lease_ms": int(limits.lease_ms),
            "waiter": waiter, "in_place_ms": int(in_place_ms)}
    if earlier is not None:
        args["earlier"] = int(earlier)
    return json.dumps(args)


def ip_limits(limits: Limits, reserve_ms: int) -> str:
    """What ``lua/ipend.lua`` and ``lua/ipjoin.lua`` read from ARGV[1] (the
    requests that ended, or the hosts that join, follow it)."""
    return json.dumps({"concurrency": int(limits.ip_concurrency),
                       "delay_ms": int(limits.ip_delay_ms), "reserve_ms": int(reserve_ms)})


def ippark_args(host: str, address: str, wake_ms: int, known_ms: int) -> str:
    """What ``lua/ippark.lua`` reads from ARGV[2] (the prefix is ARGV[1])."""
    return json.dumps({"host": host, "address": address, "wake_ms": int(wake_ms),
                       "known_ms": int(known_ms)})


def ipwake_item(address: str, host: str, at_ms: int) -> str:
    """One wake as ``lua/ipwake.lua`` reads it, each one ARGV after the prefix
    (ARGV[1])."""
    return json.dumps({"address": address, "host": host, "at_ms": int(at_ms)})


def ipnote_item(note: DnsNote) -> str:
    """One DNS job's outcome as ``lua/ipnote.lua`` reads it, each one ARGV after
    the prefix (ARGV[1])."""
    return json.dumps({"host": note.host, "address": note.address,
                       "known_ms": int(note.known_ms), "go": bool(note.go),
                       "wake_ms": int(note.wake_ms)})
