"""What the soak checks once every worker has exited: the ledger, the frontier, the WARCs.

The ground truth is the web's model (``tests.simweb``), which knows every
page, link and robots rule without any crawler code, narrowed to what a crawl
could have seen: links are only followed from pages whose answer actually
arrived in full (a page behind a hanging or resetting host, or behind a
trickle the crawler gave up on, was never discoverable). Each check is a
:class:`Row`: what was measured, the target, and whether it was met.
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
import re
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from statistics import median

import redis
from warcio.archiveiterator import ArchiveIterator

from bench.soak.chaos import Event
from bench.soak.scenario import USER_AGENT
from crawler.frontier.admin import FrontierAdmin
from crawler.frontier.keys import Keys, add_counts
from crawler.frontier.schema import refused_at_lease
from crawler.warc.recovery import RecoverError, recover
from tests.simweb import Web
from tests.simweb.ledger import Entry, Ledger, is_robots_path
from tests.simweb.model import (
    DEFAULT_ROBOTS_POLICY,
    FLAKY_MODES,
    INTERNAL_HREFS,
    ROBOTS_TOO_MANY_RETRY_AFTER,
    RULES_BODY_MODES,
)

#: How late the server may stamp an arrival on two busy cores (seconds): gaps
#: between requests are measured from those stamps.
LAG = 0.1
#: Answers the crawler retries: not a page's final answer.
RETRIED = frozenset({408, 429, 500, 502, 503, 504, 522, 524})
#: The crawler's robots policy where RFC 9309 lets it choose: five redirects
#: are followed, a sixth makes robots.txt "unavailable" (allow all).
ROBOTS_POLICY = {**DEFAULT_ROBOTS_POLICY, "redirect-6": "allow"}
ROBOTS_MAX_BYTES = 512_000  # crawler.settings.ROBOTS_MAX_BYTES
#: Page modes whose links a crawl must not be expected to finish.
TRAP_MODES = ("trap-calendar", "trap-repeat")
COMPLETE = frozenset({"ok", "trickle"})


@dataclass
class Row:
    """One line of the soak's table."""

    check: str
    measured: str
    target: str
    ok: bool | None  # None: for information


def _final(entry: Entry) -> bool:
    """An answer the crawler keeps (not one it retries), delivered in full."""
    return entry["outcome"] in COMPLETE and entry["status"] not in RETRIED


class Evidence:
    """The ledger read once: page identities, their final answers, per-host request lists."""

    def __init__(self, web: Web, ledger: Ledger) -> None:
        self.web = web
        self.ledger = ledger
        self.pages = [e for e in ledger.entries if not is_robots_path(e["path"])]
        self.ident = {e["id"]: web.page_identity(e["host"], e["path"]) for e in self.pages}
        self.final = Counter(self.ident[e["id"]] for e in self.pages if _final(e))
        self.delivered = {self.ident[e["id"]] for e in self.pages
                          if e["outcome"] in COMPLETE and e["status"] and e["status"] < 400}
        self.by_host: dict[str, list[Entry]] = defaultdict(list)
        for e in sorted(ledger.entries, key=lambda e: e["arrival"]):
            if not e["path"].startswith("/robots-hop/"):  # another host's robots chain
                self.by_host[e["host"]].append(e)


# ---------------------------------------------------------------------- completeness


def wanted_pages(web: Web, seeds: list[str], evidence: Evidence) -> set[tuple[str, str]]:
    """Pages a correct crawl must finish: reachable through delivered pages, allowed
    by robots.txt, on hosts that are not traps (those stop at the per-host cap)."""
    reachable = web.reachable(seeds, user_agent=USER_AGENT, limit=1_000_000,
                              robots_policy=ROBOTS_POLICY, robots_max_bytes=ROBOTS_MAX_BYTES,
                              delivered=evidence.delivered.__contains__)
    traps = {h.name for h in web.hosts_where(page=TRAP_MODES)}
    return {ident for ident in reachable if ident[0] not in traps}


def dead_letters(admin: FrontierAdmin, web: Web) -> dict[tuple[str, str], str]:
    """Every dead URL's identity and reason."""
    return {web.url_identity(d.url): d.reason for d in admin.iter_dead() if d.url}


def completeness_rows(wanted: set[tuple[str, str]], evidence: Evidence,
                      dead: Mapping[tuple[str, str], str]) -> list[Row]:
    done = {ident for ident in wanted if evidence.final[ident]}
    died = {ident for ident in wanted - done if ident in dead}
    lost = sorted(wanted - done - died)
    no_reason = [ident for ident, reason in dead.items() if reason in ("", "?")]
    reasons = Counter(dead.values()).most_common(4)
    return [
        Row("reachable allowed pages: done / dead", f"{len(done)} / {len(died)}",
            f"all {len(wanted)}", not lost),
        Row("  ...of which lost (neither)", f"{len(lost)} {lost[:3] if lost else ''}".strip(),
            "0", not lost),
        Row("dead letters without a reason", f"{len(no_reason)} of {len(dead)} "
            f"({', '.join(f'{r} {n}' for r, n in reasons)})", "0", not no_reason),
    ]


def frontier_rows(client: redis.Redis, keys: Keys) -> list[Row]:
    """The frontier's own books: nothing left in flight, and every admitted URL ended."""
    counts: Counter[str] = Counter()
    seen = 0
    for part in range(keys.partitions):
        add_counts(counts, client.hgetall(keys.counts(part)))
        for key in client.scan_iter(match=f"{_glob(keys.prefix(part))}:s:*", count=1000):
            seen += client.scard(key)
    left = {s: counts[s] for s in ("queued", "leased", "delayed") if counts[s]}
    ended = (counts["done"] + counts["dead"] + counts["refused"]
             + sum(refused_at_lease(counts).values()))
    return [
        Row("frontier: queued + leased + delayed at the end", str(sum(left.values())), "0",
            not left),
        Row("frontier: URLs seen vs done + dead + refused", f"{seen} vs {ended}", "equal",
            seen == ended),
        Row("frontier: leases expired (killed workers' URLs back)", str(counts["expired"]),
            "> 0 when a worker held leases at a SIGKILL", None),
    ]


def _glob(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[]" else c for c in text)


# ---------------------------------------------------------------------- duplicates


def duplicate_rows(evidence: Evidence, events: Iterable[Event]) -> list[Row]:
    twice = sum(n - 1 for n in evidence.final.values() if n > 1)
    held, strikes = leased_at_strikes(events)
    return [Row("duplicate fetches (a page's final answer twice)", str(twice),
                f"<= {held} (URLs leased at the {strikes} kills/stops)", twice <= held)]


def leased_at_strikes(events: Iterable[Event]) -> tuple[int, int]:
    """URLs the struck workers held leased (each may be fetched twice), and how many
    strikes: a SIGKILL, a SIGTERM (its downloads under way are cut short) or a
    SIGSTOP (its leases run out while it stands still)."""
    strikes = [e for e in events if e.what in ("SIGKILL", "SIGTERM", "SIGSTOP")]
    return sum(e.leased for e in strikes), len(strikes)


# ---------------------------------------------------------------------- politeness


def robots_rows(web: Web, evidence: Evidence) -> list[Row]:
    bad = [e for e in evidence.pages if web.host(e["host"]) is not None
           and not web.allowed(e["host"], evidence.ident[e["id"]][1], USER_AGENT,
                               robots_policy=ROBOTS_POLICY, robots_max_bytes=ROBOTS_MAX_BYTES)]
    sample = [f"{e['host']}{e['path']}" for e in bad[:3]]
    return [Row("requests robots.txt disallowed (or unreachable robots)",
                f"{len(bad)} {sample if sample else ''}".strip(), "0", not bad)]


def _crawl_delay(web: Web, host: str) -> float | None:
    spec = web.host(host)
    if spec is None or spec.robots not in RULES_BODY_MODES:
        return None
    return spec.crawl_delay if ROBOTS_POLICY[spec.robots] == "rules" else None


def pacing_rows(web: Web, evidence: Evidence, delay_floor: float, concurrency: int,
                archived_429: Mapping[tuple[str, str], list[float]] | None = None,
                kills: Iterable[float] = (),
                server_stalls: Sequence[tuple[float, float]] = ()) -> list[Row]:
    """Crawl-delay and DOWNLOAD_DELAY gaps, Retry-After waits and requests in flight.

    A request that reaches the server after a 429 was sent but before the
    crawler had read it (``archived_429``: when a worker received it) was
    already on its way: counted, not a violation. Any later request during the
    wait is one. A 429 that no worker archived, sent just before a SIGKILL
    (``kills``, epoch seconds), died with the worker that received it: no
    worker ever knew of it, so it is counted apart.

    A short gap whose earlier arrival was stamped during one of the server's
    own measured stalls (``server_stalls``, ``simweb.server.LoopWatch``) is put
    down to that stall when the stall covers the shortfall: the request may
    have reached the socket that much earlier.
    """
    archived_429 = archived_429 or {}
    stalls = StampLateness(server_stalls)
    kills = sorted(kills)
    reaction: list[float] = []
    died_with_worker = 0
    crawl_delay_bad, delay_bad, retry_bad, conc_bad = [], [], [], []
    gaps = retry_checked = on_their_way = squeezed = server_late = 0
    for host, entries in evidence.by_host.items():
        pages = [e for e in entries if not is_robots_path(e["path"])]
        cd = _crawl_delay(web, host)
        need = cd if cd is not None else delay_floor
        previous = float("inf")
        for a, b in pairwise(pages):
            gaps += 1
            gap = b["arrival"] - a["arrival"]
            if gap >= need - LAG:
                pass
            elif gap + stalls.at(a["arrival"]) >= need - LAG:
                server_late += 1
            elif _late_stamp(previous, gap, need):
                squeezed += 1
            else:
                (crawl_delay_bad if cd is not None else delay_bad).append(
                    (host, round(gap, 3), need, a.get("client"), b.get("client")))
            previous = gap
        limit = 1 if cd is not None else concurrency
        if (peak := _max_in_flight(pages)) > limit:
            conc_bad.append((host, peak, limit))
        for i, e in enumerate(entries):
            wait = _retry_after(web, e)
            if wait is None:
                continue
            ident = web.page_identity(host, e["path"])
            if _died_with_worker(e, ident, archived_429, kills):
                died_with_worker += 1
                continue
            retry_checked += 1
            knew = _learned(e, ident, archived_429)
            reaction.append(knew - e["done"])
            later = [n["arrival"] for n in entries[i + 1:] if n["arrival"] < e["done"] + wait]
            on_their_way += sum(1 for t in later if t <= knew + LAG)
            early = [round(t - e["done"], 3) for t in later
                     if knew + LAG < t < e["done"] + wait - LAG]
            if early:
                retry_bad.append((host, e["path"], early[0], wait))
    return [
        Row("Crawl-delay violations (gap < Crawl-delay)", _some(crawl_delay_bad), "0",
            not crawl_delay_bad),
        Row("DOWNLOAD_DELAY violations (gap < delay x (1 - jitter))",
            f"{_some(delay_bad)} of {gaps} gaps ({server_late} in a measured server stall, "
            f"{squeezed} squeezed by one late stamp)",
            "0", not delay_bad),
        Row("Retry-After violations (a request sent during the wait)",
            f"{_some(retry_bad)} of {retry_checked} waits ({on_their_way} sent before the "
            f"crawler had the 429; it had it {_ms(median(reaction or [math.nan]))} after the "
            f"server sent it, at worst {_ms(max(reaction, default=0))}; {died_with_worker} "
            "429s died with a killed worker)", "0", not retry_bad),
        Row("per-host concurrency violations", _some(conc_bad),
            f"0 (1 with a Crawl-delay, else {concurrency})", not conc_bad),
    ]


class StampLateness:
    """How late the server may have stamped an arrival, from its measured loop stalls."""

    #: A stamp this soon after a stall ended was taken in the turn that ended it.
    SAME_TURN = 0.01

    def __init__(self, stalls: Sequence[tuple[float, float]]) -> None:
        self.stalls = sorted(stalls)
        self.starts = [start for start, _ in self.stalls]

    def at(self, stamp: float) -> float:
        """Seconds ``stamp`` may be late: since the start of the stall it fell in (or 0)."""
        i = bisect.bisect_right(self.starts, stamp) - 1
        if i < 0:
            return 0.0
        start, end = self.stalls[i]
        return stamp - start if stamp <= end + self.SAME_TURN else 0.0

    def summary(self) -> str:
        worst = max((end - start for start, end in self.stalls), default=0.0)
        return f"{len(self.stalls)}, at worst {_ms(worst)}"


def _late_stamp(previous: float, gap: float, need: float) -> bool:
    """Whether a short gap is one late arrival stamp, not two requests sent too close.

    A request stamped late by d (a busy server loop, or its worker's reactor
    busy between the start gate and the socket) lengthens the gap before it by
    d and shortens the gap after it by d, so their sum still holds two gaps.
    At most 2 x LAG is put down to a late stamp.
    """
    return gap >= need - 2 * LAG and previous + gap >= 2 * need - LAG


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if math.isfinite(seconds) else "-"


def _some(items: list[tuple[object, ...]]) -> str:
    return f"{len(items)} {items[:2]}" if items else "0"


def answers_archived(warc_dir: Path, web: Web, status: int) -> dict[tuple[str, str], list[float]]:
    """When a worker received each answer of ``status``: the WARC-Date of its
    response record (the capture middleware stamps it as the answer comes in),
    by page identity. This is when the crawler *knew*; answers a killed worker
    never wrote are missing."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for path in sorted(warc_dir.glob("*.warc.gz")):
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type != "response" or record.http_headers is None:
                    continue
                if record.http_headers.get_statuscode() != str(status):
                    continue
                uri = record.rec_headers.get_header("WARC-Target-URI")
                date = record.rec_headers.get_header("WARC-Date")
                when = dt.datetime.fromisoformat(date.replace("Z", "+00:00")).timestamp()
                out[web.url_identity(uri)].append(when)
    return out


def _learned(entry: Entry, ident: tuple[str, str],
             archived: Mapping[tuple[str, str], list[float]]) -> float:
    """When the crawler had this answer: its archived time (the first one from when
    the server sent it), else the server's own time."""
    times = [t for t in archived.get(ident, ()) if entry["done"] - LAG <= t <= entry["done"] + 60]
    return min(times, default=entry["done"])


#: A worker archives an answer within about a second of receiving it (the
#: writer's lag); an answer it never archived and a SIGKILL this soon after it
#: was sent means the worker died holding it.
KILL_WINDOW = 5.0


def _died_with_worker(entry: Entry, ident: tuple[str, str],
                      archived: Mapping[tuple[str, str], list[float]],
                      kills: list[float]) -> bool:
    if any(entry["done"] - LAG <= t <= entry["done"] + 60 for t in archived.get(ident, ())):
        return False
    return any(entry["done"] - LAG <= k <= entry["done"] + KILL_WINDOW for k in kills)


def _retry_after(web: Web, entry: Entry) -> float | None:
    """The Retry-After (seconds) the server sent with ``entry``, if any."""
    if entry["status"] != 429:
        return None
    spec = web.host(entry["host"])
    if spec is None:
        return None
    if is_robots_path(entry["path"]):
        return float(ROBOTS_TOO_MANY_RETRY_AFTER)
    retry = FLAKY_MODES.get(spec.page, (0, 0, None))[2]
    if retry is None:
        return None
    form, seconds = retry
    # An HTTP-date has whole seconds: "3 s from now" is 2 to 3 s away.
    return float(seconds if form == "seconds" else seconds - 1)


def _max_in_flight(entries: list[Entry]) -> int:
    """Most of ``entries`` open at one moment ([arrival, done); open ones never end)."""
    events = []
    for e in entries:
        events += [(e["arrival"], 1), (e["done"] if e["done"] is not None else float("inf"), -1)]
    best = current = 0
    for _, delta in sorted(events):
        current += delta
        best = max(best, current)
    return best


def address_rows(web: Web, evidence: Evidence) -> list[Row]:
    """No request to an internal address, while pages linking to them were read."""
    strangers = sorted(evidence.ledger.hosts() - {h.name for h in web.hosts})
    baits = {h.name for h in web.hosts_where(page="internal-links")}
    read = sum(1 for ident in evidence.delivered if ident[0] in baits)
    return [Row("pages linking to internal addresses read", str(read),
                f"> 0 ({len(INTERNAL_HREFS)} such links each)", read > 0),
            Row("requests to blocked addresses (hosts not in the web)",
                f"{len(strangers)} {strangers[:3] if strangers else ''}".strip(), "0",
                not strangers)]


# ---------------------------------------------------------------------- workers and WARC


_REACTOR_STALL = re.compile(r"Reactor stalled ([0-9.]+) s \(free at ([0-9.]+), ran again at "
                            r"([0-9.]+)\)")


def stall_rows(server_stalls: Sequence[tuple[float, float]],
               logs: Mapping[str, str]) -> list[Row]:
    """How often the server's loop and the workers' reactors ran late (for information:
    the pacing checks read arrival stamps, and a worker's stall delays its sends)."""
    worker = [(name, float(m[1])) for name, text in logs.items()
              for m in _REACTOR_STALL.finditer(text)]
    worst = max(worker, key=lambda x: x[1], default=("-", 0.0))
    return [
        Row("web server loop stalls over 20 ms (arrival stamps late)",
            StampLateness(server_stalls).summary(), "-", None),
        Row("worker reactor stalls logged (LOOPLAG_LOG)",
            f"{len(worker)}, at worst {_ms(worst[1])} ({worst[0]})", "-", None),
    ]


def worker_rows(exits: list[tuple[str, int, str]], logs: Mapping[str, str]) -> list[Row]:
    """Every exit explained: SIGKILLed by the driver, or a clean exit (SIGTERM included)."""
    bad = [(wid, code) for wid, code, how in exits if how != "SIGKILL" and code != 0]
    tracebacks = {wid: log.count("Traceback") for wid, log in logs.items() if "Traceback" in log}
    # The frontier's watchdog woke a host that waited for nothing: a lost wake.
    repairs = {wid: log.count("Frontier watchdog:") for wid, log in logs.items()
               if "Frontier watchdog:" in log}
    return [
        Row("workers exiting with an error", _some(bad), "0", not bad),
        Row("tracebacks in worker logs", f"{sum(tracebacks.values())} {list(tracebacks)[:3]}"
            if tracebacks else "0", "0", not tracebacks),
        Row("watchdog repairs (frontier/stalls_repaired) in worker logs",
            f"{sum(repairs.values())} {list(repairs)[:3]}" if repairs else "0", "0",
            not repairs),
    ]


def warc_rows(warc_dir: Path) -> list[Row]:
    """Recover what killed writers left open, then ``warcio check`` every file."""
    recovered, unrecoverable = 0, []
    for path in sorted(warc_dir.glob("*.warc.gz.open")):
        try:
            recover(path)
            recovered += 1
        except RecoverError as exc:
            unrecoverable.append(f"{path.name}: {exc}")
    files = sorted(warc_dir.glob("*.warc.gz"))
    check = subprocess.run([sys.executable, "-m", "warcio.cli", "check", *map(str, files)],
                           capture_output=True, text=True, check=False) if files else None
    valid = check is not None and check.returncode == 0
    problems = unrecoverable + ([check.stdout[-300:]] if check is not None and not valid else [])
    return [Row("WARC files valid (warcio check), killed writers' recovered",
                f"{len(files)} files, {recovered} recovered"
                + (f"; {problems[:2]}" if problems else ""), "all valid",
                valid and not unrecoverable)]
