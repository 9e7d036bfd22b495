"""Live control of one site, domain or server address: what is in force, and an
operator's override.

``scrapy frontier host NAME`` shows a site (a host name with all its schemes
and ports), its registered domain and, once the frontier knows it, the
server address it points at: what is queued, in flight, delayed and dead,
the limits in force and where they come from, holds, the breaker, DNS
failures, hosts waiting. With ``--delay``, ``--concurrency``, ``--pause``,
``--resume`` or ``--reset`` it changes them for every worker at once
(``lua/control.lua``): the override lives in the record (for an address, in
its gate, :mod:`crawler.frontier.ipgates`), so it holds across restarts, and
the change is appended to the crawl's control log.

Synchronous, like the rest of the operator's side: it runs outside the reactor.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import redis

from crawler.addressguard import parse_ip
from crawler.frontier.controlviews import AddressView, Authority, Gate, HostView, Spend
from crawler.frontier.ipgates import end_args, gate_keys, missed, parse_wakes, wake_calls
from crawler.frontier.keys import Keys, domain_of, partition_of, site_of
from crawler.frontier.schema import DOMAIN, HOST, IP_GATE, SITE
from crawler.frontier.scriptargs import control_args
from crawler.frontier.sitefacts import facts_of, forget
from crawler.frontier.store import script_source
from crawler.frontier.values import Limits

#: Entries kept in the control log.
LOG_KEEP = 200
_SCAN = 1000
#: Rounds of waking an address's parked hosts after a change.
_WAKE_ROUNDS = 4
#: The scopes a change applies to.
SCOPES = ("site", "domain", "ip")


class UnknownTarget(LookupError):
    """The frontier has no such site, or knows no address for it."""


@dataclass(frozen=True, slots=True)
class Change:
    """What an operator asks of a site or domain (None: leave as it is)."""

    concurrency: int | None = None
    delay_ms: int | None = None
    pause: bool | None = None  # True pause, False resume
    reset: bool = False  # every override off first (back to automatic)
    #: A site's budget (0: no limit for it), replacing the BUDGET_HOST_* setting.
    budget_pages: int | None = None
    budget_bytes: int | None = None
    budget_ms: int | None = None

    def empty(self) -> bool:
        return (self.concurrency is None and self.delay_ms is None and self.pause is None
                and not self.reset and not self.budget())

    def budget(self) -> bool:
        return not (self.budget_pages is None and self.budget_bytes is None
                    and self.budget_ms is None)

    def words(self) -> str:
        said = ["reset"] if self.reset else []
        if self.concurrency is not None:
            said.append(f"concurrency {self.concurrency}")
        if self.delay_ms is not None:
            said.append(f"delay {self.delay_ms / 1000:g} s")
        if self.pause is not None:
            said.append("pause" if self.pause else "resume")
        for value, unit in ((self.budget_pages, "pages"), (self.budget_bytes, "bytes")):
            if value is not None:
                said.append(f"budget {value:,} {unit}" if value else f"no {unit} budget")
        if self.budget_ms is not None:
            said.append(f"budget {self.budget_ms / 1000:g} s" if self.budget_ms
                        else "no time budget")
        return ", ".join(said)


def _spend(raw: dict[bytes, bytes], now: int, limits: tuple[int, int, int],
           limits_from: str) -> Spend:
    first = raw.get(SITE.first_claim.encode())  # (a domain's: the same names)
    return Spend(int(_num(raw, SITE.pages)), int(_num(raw, SITE.bytes)),
                 (now - int(first)) / 1000 if first else 0.0,
                 limits[0], limits[1], limits[2] / 1000, limits_from)


_ROBOTS = {"k": "known", "f": "fetching", "u": "unreachable"}
_BREAKER = {"o": "open", "h": "half-open (probing)", "x": "parked"}


def _text(raw: dict[bytes, bytes], name: str) -> str | None:
    value = raw.get(name.encode())
    return value.decode() if value is not None else None


def _has(raw: dict[bytes, bytes], name: str) -> bool:
    return raw.get(name.encode()) is not None


def _num(raw: dict[bytes, bytes], name: str, default: float = 0) -> float:
    value = raw.get(name.encode())
    return float(value) if value is not None else default


class HostControl:
    """Show and override the limits of one site or domain of a frontier."""

    def __init__(self, client: redis.Redis, keys: Keys, limits: Limits) -> None:
        self.client = client
        self.keys = keys
        self.limits = limits
        self._control = client.register_script(script_source("control"))
        self._ip_end = client.register_script(script_source("ipend"))
        self._ip_wake = client.register_script(script_source("ipwake"))

    # --- changes

    def change(self, name: str, change: Change, *, scope: str = "site",
               who: str | None = None) -> str:
        """Apply ``change`` to site ``name``, its registered domain or its server
        address (``name`` may be an address); returns what was changed, which
        the control log keeps with ``who`` asked. Raises :class:`UnknownTarget`."""
        if scope == "ip":
            target = self.address_of(name)
            if target is None:
                raise UnknownTarget(f"no address known for {name}: the frontier learns a "
                                    "site's address at its robots.txt fetch, or when its "
                                    "server first has no room for it; name the address "
                                    "itself")
            keys, prefix = [self.keys.ip_gate(target)], self.keys.ip_prefix(target)
        else:
            site = site_of(name)
            target = domain_of(site) if scope == "domain" else site
            part = partition_of(site, self.keys.partitions)
            keys, prefix = [self.keys.counts(part)], self.keys.prefix(part)
        if change.budget() and scope != "site":
            raise ValueError("a budget override is a site's (BUDGET_DOMAIN_* set the domains')")
        if not self._control(keys=keys, args=[prefix, control_args(scope, target, change)]):
            raise UnknownTarget(f"no site {target} in the frontier {self.keys.namespace}")
        if scope == "ip":
            self._wake_parked(target)
        self.note(scope, target, change.words(), who)
        return target

    def note(self, scope: str, name: str, words: str, who: str | None = None) -> None:
        """Keep an operator's action on the control log (``host NAME`` shows it)."""
        note_action(self.client, self.keys, scope, name, words, who)

    def recent(self, limit: int = 20) -> list[dict[str, Any]]:
        """The newest operators' actions, on any site, domain, address or the crawl."""
        raw = self.client.lrange(self.keys.control_log(), 0, min(limit, LOG_KEEP) - 1)
        return [e for e in map(log_entry, raw) if e is not None]

    def _wake_parked(self, address: str) -> None:
        """Wake the hosts parked for ``address`` that it has room for now (after a
        resume or a higher limit), as the end of a request would."""
        for _ in range(_WAKE_ROUNDS):
            wakes = parse_wakes(self._ip_end(keys=gate_keys(self.keys, address),
                                             args=end_args(self.limits, [])))
            if not wakes:
                return
            left = []
            for group, keys, args in wake_calls(self.keys, address, wakes):
                left += missed(group, self._ip_wake(keys=keys, args=args))
            if not left:
                return

    def address_of(self, name: str) -> str | None:
        """``name`` if it is an address, else the address its site is known to point
        at (learned at its robots.txt fetch, or when its server had no room)."""
        literal = parse_ip(site_of(name).strip("[]"))
        if literal is not None:
            return str(literal)
        site = site_of(name)
        part = partition_of(site, self.keys.partitions)
        address = self.client.hget(self.keys.site(part, site), SITE.address)
        return address.decode() if address else None

    # --- the view

    def view(self, name: str) -> HostView | None:
        """What the frontier holds about site ``name`` and its domain (None: unknown)."""
        site = site_of(name)
        part = partition_of(site, self.keys.partitions)
        raw = self.client.hgetall(self.keys.site(part, site))
        if not raw:
            return None
        secs, micros = self.client.time()
        now = secs * 1000 + micros // 1000
        domain = _text(raw, SITE.domain) or domain_of(site)
        hosts = sorted(h.decode() for h in self.client.smembers(self.keys.site_hosts(part, site)))
        authorities = [self._authority(part, host, now) for host in hosts]
        delayed = self._count_of(self.keys.delayed_details(part), hosts)
        dead = self._count_of(self.keys.dead(part), hosts)
        address = self._address(raw, now)
        site_gate = self._site_gate(raw, now)
        return HostView(
            site=site, domain=domain, partition=part, authorities=authorities,
            delayed=delayed, dead=dead, site_gate=site_gate,
            domain_gate=self._domain_gate(part, site, now, self._alone_in_domain(raw, site_gate)),
            domain_waiting_hosts=int(self.client.zcard(self.keys.domain_waiting(part, site))),
            crawl_delay_floor_s=_num(raw, SITE.floor) / 1000,
            held_for_s=max(0.0, max(_num(raw, SITE.held), _num(raw, SITE.backoff)) - now) / 1000,
            breaker=_BREAKER.get(_text(raw, SITE.breaker) or "", "closed"),
            breaker_openings=int(_num(raw, SITE.openings)),
            dns_failures=int(_num(raw, SITE.dns_failures)),
            address=address,
            log=self._log(("site", site), ("domain", domain),
                          ("ip", address.address if address else "")),
            budget=self._site_spend(raw, now), domain_budget=self._domain_spend(part, site, now),
        )

    def forget_learned(self, name: str, *, param: str | None = None,
                       pattern: str | None = None) -> list[str]:
        """Remove what site ``name``'s pages taught (a noise parameter, a trap
        pattern, or everything) from each of its schemes and ports; the host
        keys it was removed from."""
        site = site_of(name)
        part = partition_of(site, self.keys.partitions)
        hosts = sorted(h.decode() for h in self.client.smembers(self.keys.site_hosts(part, site)))
        return [host for host in hosts
                if forget(self.client, self.keys, host, param=param, pattern=pattern)]

    def view_address(self, address: str) -> AddressView:
        """What the frontier holds about one server address's gate."""
        secs, micros = self.client.time()
        view = self._address_view(address, secs * 1000 + micros // 1000)
        view.log = self._log(("ip", address))
        return view

    def _address(self, site: dict[bytes, bytes], now: int) -> AddressView | None:
        address = _text(site, SITE.address)
        if address is None:
            return None
        view = self._address_view(address, now)
        view.known_for_s = max(0.0, _num(site, SITE.address_until) - now) / 1000
        return view

    def _address_view(self, address: str, now: int) -> AddressView:
        raw = self.client.hgetall(self.keys.ip_gate(address))
        conc, delay = self.limits.ip_concurrency, self.limits.ip_delay_ms
        conc_from, delay_from = "setting FRONTIER_IP_CONCURRENCY", "setting FRONTIER_IP_DELAY"
        if _has(raw, IP_GATE.ctl_concurrency):
            conc, conc_from = int(_num(raw, IP_GATE.ctl_concurrency)), "operator"
        if _has(raw, IP_GATE.ctl_delay):
            delay, delay_from = int(_num(raw, IP_GATE.ctl_delay)), "operator"
        in_flight = int(self.client.zcount(self.keys.ip_in_flight(address), f"({now}", "+inf"))
        gate = Gate(conc, conc_from, delay / 1000, delay_from,
                    paused=_has(raw, IP_GATE.ctl_paused), in_flight=in_flight,
                    next_start_in_s=max(0.0, _num(raw, IP_GATE.next_start) - now) / 1000)
        return AddressView(address, gate, int(self.client.zcard(self.keys.ip_waiting(address))))

    def _authority(self, part: int, host: str, now: int) -> Authority:
        raw = self.client.hgetall(self.keys.host(part, host))
        fetched = _text(raw, HOST.robots_fetched)
        blocked = _text(raw, HOST.blocked)
        return Authority(
            host=host, queued=int(_num(raw, HOST.queued)),
            robots=_ROBOTS.get(_text(raw, HOST.robots_state) or "", "none"),
            robots_fetched_ago_s=(now - int(fetched)) / 1000 if fetched else None,
            robots_version=int(_num(raw, HOST.robots_version)),
            blocked=("dropped" if blocked == "1" else
                     f"parked: {_text(raw, HOST.parked_reason) or '?'}" if blocked == "p" else
                     "budget spent: new links refused" if blocked == "q" else None),
            learned=facts_of(self.client, self.keys, host).as_dict())

    def _site_gate(self, raw: dict[bytes, bytes], now: int) -> Gate:
        conc, delay = int(_num(raw, SITE.concurrency, 1)), int(_num(raw, SITE.delay))
        adaptive = int(_num(raw, SITE.adaptive))
        if _has(raw, SITE.ctl_concurrency):
            conc_from = "operator"
            conc = int(_num(raw, SITE.ctl_concurrency))
        elif conc < self.limits.concurrency:
            conc_from = "robots.txt, or a 429 / 503 (one at a time)"
        else:
            conc_from = "setting CONCURRENT_REQUESTS_PER_DOMAIN"
        if _num(raw, SITE.floor) > 0:
            conc = min(conc, 1)
            conc_from += "; one at a time under a Crawl-delay"
        elif adaptive > delay:
            conc = min(conc, 1)
            conc_from += "; one at a time while adaptation slows it"
        elif _has(raw, SITE.first_answer):
            conc = min(conc, 1)
            conc_from += "; one at a time until its first answer (adaptive pacing)"
        delay_from = ("operator" if _has(raw, SITE.ctl_delay) else
                      "adaptation (FRONTIER_ADAPTIVE_FACTOR x its last answer's time)"
                      if adaptive > delay else
                      "setting DOWNLOAD_DELAY" if delay == self.limits.delay_ms else
                      "robots.txt Crawl-delay / Request-rate, or DOWNLOAD_SLOTS")
        delay = (int(_num(raw, SITE.ctl_delay)) if _has(raw, SITE.ctl_delay)
                 else max(delay, adaptive))
        return Gate(conc, conc_from, delay / 1000, delay_from,
                    paused=_has(raw, SITE.ctl_paused),
                    in_flight=int(_num(raw, SITE.in_flight)),
                    next_claim_in_s=max(0.0, _num(raw, SITE.next_claim) - now) / 1000,
                    next_start_in_s=max(0.0, _num(raw, SITE.next_start) - now) / 1000)

    def _alone_in_domain(self, raw: dict[bytes, bytes], site_gate: Gate) -> bool:
        """Whether the site's domain gate is not in force: the site is alone in
        its domain and its own limits are no looser (``alone_in_domain`` in
        ``lua/common.lua``, which the claims and releases follow: its delay
        before adaptation, its concurrency as in force)."""
        if not _has(raw, SITE.alone):
            return False
        delay = _num(raw, SITE.ctl_delay if _has(raw, SITE.ctl_delay) else SITE.delay)
        dconc = self.limits.domain_concurrency
        return delay >= self.limits.domain_delay_ms and (
            dconc == 0 or site_gate.concurrency <= dconc)

    def _domain_gate(self, part: int, site: str, now: int, alone: bool = False) -> Gate:
        raw = self.client.hgetall(self.keys.domain(part, site))
        in_flight = int(self.client.zcount(self.keys.domain_leases(part, site), f"({now}", "+inf"))
        conc, delay = self.limits.domain_concurrency, self.limits.domain_delay_ms
        conc_from = "setting FRONTIER_DOMAIN_CONCURRENCY"
        delay_from = "setting FRONTIER_DOMAIN_DELAY"
        if _has(raw, DOMAIN.ctl_concurrency):
            conc, conc_from = int(_num(raw, DOMAIN.ctl_concurrency)), "operator"
        if _has(raw, DOMAIN.ctl_delay):
            delay, delay_from = int(_num(raw, DOMAIN.ctl_delay)), "operator"
        if alone:
            unused = " (not in force: the site is alone in its domain, and no looser)"
            conc_from, delay_from = conc_from + unused, delay_from + unused
        return Gate(conc, conc_from, delay / 1000, delay_from,
                    paused=_has(raw, DOMAIN.ctl_paused), in_flight=in_flight,
                    next_claim_in_s=max(0.0, _num(raw, DOMAIN.next_claim) - now) / 1000,
                    next_start_in_s=max(0.0, _num(raw, DOMAIN.next_start) - now) / 1000)

    def _site_spend(self, raw: dict[bytes, bytes], now: int) -> Spend:
        b = self.limits.budgets
        limits = (b.host_pages, b.host_bytes, b.host_ms)
        overrides = [raw.get(name.encode()) for name in
                     (SITE.budget_pages, SITE.budget_bytes, SITE.budget_ms)]
        if any(value is not None for value in overrides):
            limits = tuple(limit if value is None else int(value)  # type: ignore[assignment]
                           for limit, value in zip(limits, overrides, strict=True))
            return _spend(raw, now, limits, "operator")
        return _spend(raw, now, limits, "setting BUDGET_HOST_*")

    def _domain_spend(self, part: int, site: str, now: int) -> Spend | None:
        """A domain counts what it spends only while a domain budget is on."""
        b = self.limits.budgets
        if not b.domain_on:
            return None
        raw = self.client.hgetall(self.keys.domain(part, site))
        return _spend(raw, now, (b.domain_pages, b.domain_bytes, b.domain_ms),
                      "setting BUDGET_DOMAIN_*")

    def _count_of(self, key: str, hosts: list[str]) -> int:
        """Entries of a partition hash (delayed, dead) whose value names one of ``hosts``."""
        tags = tuple(h.encode() + b"\n" for h in hosts)
        return sum(1 for _, value in self.client.hscan_iter(key, count=_SCAN)
                   if value.startswith(tags))

    def _log(self, *targets: tuple[str, str]) -> list[dict[str, Any]]:
        """The newest changes of the given (scope, name) pairs."""
        out = []
        for raw in self.client.lrange(self.keys.control_log(), 0, LOG_KEEP - 1):
            entry = log_entry(raw)
            if entry is not None and (entry.get("scope"), entry.get("name")) in targets:
                out.append(entry)
        return out[:10]


def note_action(client: Any, keys: Keys, scope: str, name: str, words: str,
                who: str | None = None) -> None:
    """Keep an operator's action on the control log: every worker of the crawl
    logs it (``scheduling/controlwatch.py``), ``host NAME`` and the console show
    it. ``scope``: site, domain, ip, or crawl (``name`` then ``*``)."""
    entry = {"time": round(time.time(), 3), "scope": scope, "name": name, "change": words}
    if who:
        entry["who"] = who
    pipe = client.pipeline(transaction=False)
    pipe.lpush(keys.control_log(), json.dumps(entry))
    pipe.ltrim(keys.control_log(), 0, LOG_KEEP - 1)
    pipe.execute()


def log_entry(raw: bytes | str) -> dict[str, Any] | None:
    """One entry of the control log (None: not one this module wrote)."""
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None
