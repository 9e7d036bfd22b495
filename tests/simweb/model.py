"""Deterministic model of the simulated web: hosts, pages, links, robots rules.

Everything here is a pure function of ``(seed, n_hosts, mix)``: the server
(``server.py``) asks the model what to answer, and the tests ask the same
model what a correct crawl must have fetched.  Because both sides derive from
one source, a ledger of real requests can be checked against exact ground
truth.

Randomness only ever comes from ``random.Random(<str>)`` followed by calls to
``.random()``.  String seeding (sha512 based) and the Mersenne Twister output
are stable across processes and Python versions, unlike ``hash()`` or helpers
such as ``choices``/``sample`` whose algorithms have changed over time.

Link graph of a host: pages ``/`` (page 0) and ``/p/k`` for ``0 < k <
n_pages``; page k links its tree children 2k+1 and 2k+2, plus 1-2 other pages,
so every page is reachable from ``/``.  Some pages link to another host's
``/`` or ``/p/1``.  Every host also emits disguised duplicates of real links
(see ``DECORATIONS``; ``/`` carries each kind once), non-http links, an
``<area>`` link and a ``<link rel=canonical>``.
"""

from __future__ import annotations

import email.utils
import hashlib
import random
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TypeVar
from urllib.parse import parse_qsl

from protego import Protego

from . import bodies
from .urls import canonical_path, relative_href, split_host, url_identity

T = TypeVar("T")

ROBOTS_MODES: tuple[str, ...] = (
    "rules",
    "allow-all",
    "missing",
    "html",
    "forbidden",
    "too-many",
    "error-500",
    "error-503",
    "redirect-3",
    "redirect-6",
    "redirect-loop",
    "timeout",
    "oversized",
    "bom",
)

PAGE_MODES: tuple[str, ...] = (
    "normal",
    "nonhtml",
    "redirects",
    "redirect-loop",
    "rate-limited-seconds",
    "rate-limited-date",
    "unavailable",
    "hang",
    "reset",
    "trickle",
    "trap-calendar",
    "trap-repeat",
    "large",
    "huge",
    "dup-heavy",
)

#: Page modes that only appear when pinned to a host (never drawn by a mix):
#: ``slow`` answers every page after ``SLOW_SECONDS``; ``rate-limited-year``
#: answers each page's first request 429 with a Retry-After of a year;
#: ``internal-links`` serves normal pages that also link to the
#: ``INTERNAL_HREFS`` (a crawler must never request them).
EXTRA_PAGE_MODES: tuple[str, ...] = ("slow", "rate-limited-year", "internal-links")
SLOW_SECONDS = 2.0
#: Links to loopback, private, link-local and single-label destinations, the
#: way a hostile or careless page points a crawler at an internal network. A
#: test crawl reaches every host through the simulated web's proxy, so even a
#: crawler that wrongly followed one would send nothing off the machine; the
#: request would show up in the ledger under that host instead.
INTERNAL_HREFS: tuple[str, ...] = (
    "http://127.0.0.1/admin",
    "http://localhost:8080/",
    "http://[::1]/",
    "http://10.0.0.1/",
    "http://192.168.1.1/login",
    "http://172.16.5.4/",
    "http://169.254.169.254/latest/meta-data/",
    "http://2130706433/",
    "http://0x7f.1/",
    "http://intranet/",
    "http://[fd00::1]/",
)

#: Robots modes whose (final) robots.txt body carries the ``/private/`` rule.
#: Such hosts also link to ``/private/1`` and ``/private/2`` (which serve 200)
#: so that a crawler ignoring the rules leaves a visible trace in the ledger.
RULES_BODY_MODES: frozenset[str] = frozenset(
    {"rules", "redirect-3", "redirect-6", "oversized", "bom"}
)

#: Default meaning of each robots mode for the ground truth, after RFC 9309:
#: ``"rules"``: parse the body finally served with 200; ``"allow"``: robots
#: "unavailable" (4xx, redirect loop) so everything may be crawled;
#: ``"disallow"``: robots "unreachable" (5xx, timeout, and 429 the way Google
#: treats it) so nothing may be crawled.  ``redirect-6`` counts as "rules"
#: because following more than five redirects is allowed.  Override per call
#: with ``robots_policy=`` when a crawler deliberately chooses otherwise.
DEFAULT_ROBOTS_POLICY: Mapping[str, str] = {
    "rules": "rules",
    "allow-all": "rules",
    "html": "rules",
    "oversized": "rules",
    "bom": "rules",
    "redirect-3": "rules",
    "redirect-6": "rules",
    "missing": "allow",
    "forbidden": "allow",
    "redirect-loop": "allow",
    "too-many": "disallow",
    "error-500": "disallow",
    "error-503": "disallow",
    "timeout": "disallow",
}

_CLEAN_ROBOTS = {"rules": 0.4, "allow-all": 0.25, "missing": 0.25, "html": 0.1}
_CLEAN_PAGES = {"normal": 0.8, "nonhtml": 0.2}


def _spread(total: float, modes: Iterable[str]) -> dict[str, float]:
    """Split ``total`` weight evenly over ``modes``."""
    modes = list(modes)
    return {m: total / len(modes) for m in modes}


#: Named mixes: per-group weights (normalised when drawing; absent modes = 0).
MIXES: dict[str, dict[str, dict[str, float]]] = {
    # ~70 % of hosts are well behaved (good robots x good pages); the rest
    # is spread thinly over every misbehaviour.
    "default": {
        "robots": {
            "rules": 0.40,
            "allow-all": 0.22,
            "missing": 0.22,
            "html": 0.03,
            **_spread(0.13, ROBOTS_MODES[4:]),
        },
        "page": {"normal": 0.78, "nonhtml": 0.07, **_spread(0.15, PAGE_MODES[2:])},
    },
    # Only things that finish fast and have exactly one right answer.
    "clean": {"robots": _CLEAN_ROBOTS, "page": _CLEAN_PAGES},
    # Clean plus traps, redirects and duplicates that a bounded crawl finishes.
    "e2e": {
        "robots": {"rules": 0.5, "allow-all": 0.2, "missing": 0.2, "html": 0.1},
        "page": {
            "normal": 0.55,
            "nonhtml": 0.15,
            "trap-calendar": 0.07,
            "trap-repeat": 0.07,
            "redirects": 0.08,
            "dup-heavy": 0.08,
        },
    },
}

CRAWL_DELAYS: tuple[float, ...] = (0.2, 0.5, 1.0)
RESOURCE_TYPES: Mapping[str, str] = {
    "pdf": "application/pdf",
    "png": "image/png",
    "json": "application/json",
    "txt": "text/plain; charset=utf-8",
}
HTML_TYPE = "text/html; charset=utf-8"
#: The Last-Modified of a page's first revision (later ones are a day apart each).
REVISION_EPOCH = 1_700_000_000
TEXT_TYPE = "text/plain; charset=utf-8"
ROBOTS_TOO_MANY_RETRY_AFTER = 5
ROBOTS_HOPS: Mapping[str, int] = {"redirect-3": 3, "redirect-6": 6}
REDIRECT_LOOP_PATHS: tuple[str, str] = ("/loop/a", "/loop/b")
CALENDAR_START = "/calendar/2024/06"
#: ``(failures before success, failure status, Retry-After)`` per flaky mode;
#: Retry-After is ``("seconds", n)`` or ``("date", n seconds from now)``.
FLAKY_MODES: Mapping[str, tuple[int, int, tuple[str, int] | None]] = {
    "rate-limited-seconds": (1, 429, ("seconds", 2)),
    "rate-limited-date": (1, 429, ("date", 3)),
    "rate-limited-year": (1, 429, ("seconds", 365 * 86400)),
    "unavailable": (2, 503, None),
}
#: Page modes whose pages never deliver a body (so their links are unknown).
DEAD_PAGE_MODES: frozenset[str] = frozenset({"hang", "reset"})

#: Decorations applied once each on every host's ``/`` (so tests can rely on
#: seeing all of them) and at random on other pages.
DECORATIONS: tuple[str, ...] = (
    "utm",
    "gclid",
    "fbclid",
    "msclkid",
    "fragment",
    "upper",
    "port",
    "relative",
    "dot",
    "dotdot",
)
_DUP_DECORATIONS: tuple[str, ...] = (*DECORATIONS, "utm-campaign", "combo")

_WORD_TEXT = (
    "alpha bravo cedar delta ember fjord garnet harbor iris jasper kelp lumen "
    "maple nectar onyx pepper quartz raven saffron timber umber velvet willow "
    "xenon yarrow zephyr amber basil cobalt dune echo flint grove hazel indigo "
    "juniper kestrel lotus meadow nimbus orchid pine quill river sage thistle"
)
_WORDS: tuple[str, ...] = tuple(_WORD_TEXT.split())


# --------------------------------------------------------------------------
# Deterministic helpers
# --------------------------------------------------------------------------


def _rng(*parts: object) -> random.Random:
    """A generator keyed by ``parts`` (string seeding: stable everywhere)."""
    return random.Random("/".join(str(p) for p in parts))


def _below(rng: random.Random, n: int) -> int:
    """Uniform int in ``range(n)`` using only ``random()``."""
    return min(int(rng.random() * n), n - 1)


def _pick(rng: random.Random, seq: Sequence[T]) -> T:
    return seq[_below(rng, len(seq))]


def _weighted(rng: random.Random, weights: Sequence[tuple[str, float]]) -> str:
    """Weighted choice by cumulative sum (one ``random()`` call)."""
    x = rng.random() * sum(w for _, w in weights)
    for name, weight in weights:
        x -= weight
        if x < 0:
            return name
    return weights[-1][0]


def _token(*parts: object) -> str:
    """Short hex token hashed from ``parts`` (ids like ``sid``/``gclid``)."""
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:10]


def _words(rng: random.Random, n: int) -> str:
    return " ".join(_pick(rng, _WORDS) for _ in range(n))


def page_path(k: int) -> str:
    """Path of page ``k`` of any host (page 0 is the root)."""
    return "/" if k == 0 else f"/p/{k}"


def host_name(index: int) -> str:
    return f"h{index:05d}.test"


# --------------------------------------------------------------------------
# Value types
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostSpec:
    """The drawn attributes of one simulated host."""

    index: int
    name: str
    robots: str
    page: str
    n_pages: int
    crawl_delay: float

    @property
    def root_url(self) -> str:
        return f"http://{self.name}/"


@dataclass(frozen=True, slots=True)
class Link:
    """One link of a served page.  ``target`` is the ground-truth identity
    ``(host, canonical path)`` it leads to; ``None`` for non-http links.
    A link to a redirecting URL (``/r/3``, ``/loop/a``) targets that URL
    itself: the redirect is an edge of its own in ``Web.reachable``."""

    href: str
    target: tuple[str, str] | None
    tag: str  # "a", "area" or "link" (rel=canonical)


@dataclass(frozen=True, slots=True)
class Resource:
    """What the server should do for one request, as far as the model knows.

    ``action``: ``"respond"``, ``"hang"``, ``"reset"`` or ``"trickle"``.
    A flaky page answers its first ``fail_first`` requests with
    ``fail_status`` (the server keeps the counts) and ``retry_after``
    (``("seconds", n)`` or ``("date", n)`` = an HTTP-date n s from now).
    Large bodies come from ``stream`` (a zero-argument chunk factory) and
    have ``length`` bytes.
    """

    status: int
    content_type: str | None = None
    body: bytes = b""
    location: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    action: str = "respond"
    fail_first: int = 0
    fail_status: int = 0
    retry_after: tuple[str, int] | None = None
    stream: Callable[[], Iterable[bytes]] | None = field(default=None, compare=False)
    length: int | None = None

    @property
    def content_length(self) -> int:
        return self.length if self.length is not None else len(self.body)

    def chunks(self) -> Iterable[bytes]:
        """The body, lazily for streams."""
        if self.stream is not None:
            return self.stream()
        return [self.body] if self.body else []


@dataclass(frozen=True, slots=True)
class _Route:
    """Classification of a canonical path on one host (cheap: no bodies).

    ``num``/``num2``/``text`` carry the kind's arguments (page number, year
    and month, resource extension, origin host...).
    """

    kind: str
    num: int = 0
    num2: int = 0
    text: str = ""
    status: int = 0
    location: str = ""
    target: tuple[str, str] | None = None


_MISSING = _Route("missing")
_HTML_KINDS = frozenset({"page", "private", "late", "nofollow", "calendar", "repeat"})
_RE_PAGE = re.compile(r"/p/([1-9][0-9]{0,5})")
_RE_PRIVATE = re.compile(r"/private/([12])")
_RE_RESOURCE = re.compile(r"/f/([0-9]{1,5})\.([a-z]+)")
_RE_NOFOLLOW = re.compile(r"/nofollow/([a-z]+)-([0-9]{1,5})")
_RE_REDIRECT = re.compile(r"/r/([1-9][0-9]{0,5}|x)")
_RE_CALENDAR = re.compile(r"/calendar/([0-9]{4,6})/(0[1-9]|1[0-2])")
_RE_REPEAT = re.compile(r"/(?:[ab]/)+")
_RE_HOP = re.compile(r"/robots-hop/(h[0-9]{5,}\.test)/([1-9]|loop)")

Weights = tuple[tuple[str, float], ...]


def _normalise_mix(mix: str | Mapping[str, float]) -> tuple[Weights, Weights]:
    """Return validated (robots weights, page weights) in mode order.

    A dict mix holds ``"robots:<mode>"`` / ``"page:<mode>"`` keys; a group
    with no key at all falls back to the ``clean`` mix for that group.
    """
    if isinstance(mix, str):
        if mix not in MIXES:
            raise ValueError(f"unknown mix {mix!r}; known: {sorted(MIXES)}")
        groups = MIXES[mix]
    else:
        groups = {"robots": {}, "page": {}}
        for key, weight in mix.items():
            group, _, mode = key.partition(":")
            known = ROBOTS_MODES if group == "robots" else PAGE_MODES
            if group not in groups or mode not in known or weight < 0:
                raise ValueError(f"bad mix entry {key!r}: {weight!r}")
            groups[group][mode] = float(weight)
        groups = {
            "robots": groups["robots"] or _CLEAN_ROBOTS,
            "page": groups["page"] or _CLEAN_PAGES,
        }

    def ordered(modes: Sequence[str], weights: Mapping[str, float]) -> Weights:
        return tuple((m, weights[m]) for m in modes if weights.get(m, 0) > 0)

    robots = ordered(ROBOTS_MODES, groups["robots"])
    pages = ordered(PAGE_MODES, groups["page"])
    if not robots or not pages:
        raise ValueError("a mix needs a positive weight in both groups")
    return robots, pages


# --------------------------------------------------------------------------
# The web
# --------------------------------------------------------------------------


class Web:
    """A deterministic population of ``n_hosts`` simulated hosts."""

    def __init__(
        self,
        seed: int = 1,
        n_hosts: int = 100,
        mix: str | Mapping[str, float] = "default",
        pinned: Mapping[int, str] | None = None,
        *,
        validators: bool = False,
        epoch: int = 0,
        change_rate: float = 0.1,
        validator_share: float = 0.8,
        page_bytes: int = 0,
        page_links: int = 0,
    ) -> None:
        """``pinned`` sets attributes of chosen hosts (index -> spec), the rest
        are drawn: a page mode (``{0: "slow"}`` for a head-of-line scenario),
        ``robots:MODE`` and ``crawl-delay:SECONDS``, comma-separated
        (``{0: "robots:rules,crawl-delay:2"}``).

        The web as it is in ``epoch`` (0, 1, 2...: the same web a week later,
        and the week after): between two epochs each HTML page changes with
        probability ``change_rate`` (its body gets a new revision). With
        ``validators``, a share ``validator_share`` of the hosts (0.8) send a
        validator with every answer, five in eight of them an ``ETag`` (of the
        body), the others a ``Last-Modified`` (of the revision), and the
        server answers 304 to a request whose validator matches.
        ``page_bytes`` pads each HTML page to about that size (half to one and
        a half times it) with text that compresses like text, where real
        pages weigh tens of kilobytes and the default ones one; with
        ``page_links`` the padding also links that many pages of the same
        host (pages it has: the set of reachable pages stays the same), the
        way real pages carry dozens of navigation links."""
        if n_hosts < 1:
            raise ValueError("n_hosts must be >= 1")
        self.seed = seed
        self.n_hosts = n_hosts
        self.validators = validators
        self.epoch = epoch
        self.change_rate = change_rate
        self.validator_share = validator_share
        self.page_bytes = page_bytes
        self.page_links = page_links
        self.mix: str | dict[str, float] = mix if isinstance(mix, str) else dict(mix)
        robots_w, page_w = _normalise_mix(mix)
        self.pinned = dict(pinned or {})
        self._pins = {i: _parse_pin(spec) for i, spec in self.pinned.items()}
        self.hosts: list[HostSpec] = [self._draw_host(i, robots_w, page_w) for i in range(n_hosts)]
        self._by_name = {h.name: h for h in self.hosts}
        # Per-instance caches (bound wrappers, so they die with the instance).
        self._links_cached = lru_cache(maxsize=8192)(self._compute_links)
        self._oversized_cached = lru_cache(maxsize=64)(bodies.oversized_body)
        self._parser_cached = lru_cache(maxsize=4096)(self._parser)

    def _draw_host(self, i: int, robots_w: Weights, page_w: Weights) -> HostSpec:
        rng = random.Random(f"{self.seed}/{i}")
        robots = _weighted(rng, robots_w)
        page = _weighted(rng, page_w)
        n_pages = 3 + _below(rng, 23)  # 3..25
        crawl_delay = _pick(rng, CRAWL_DELAYS)
        pins = self._pins.get(i, {})
        return HostSpec(i, host_name(i), pins.get("robots", robots), pins.get("page", page),
                        n_pages, float(pins.get("crawl-delay", crawl_delay)))

    def __repr__(self) -> str:
        return f"Web(seed={self.seed}, n_hosts={self.n_hosts}, mix={self.mix!r})"

    def fingerprint(self) -> str:
        """sha256 over every host's attributes, robots body and page links:
        equal fingerprints mean equal webs (checks cross-process determinism)."""
        digest = hashlib.sha256(repr(self.hosts).encode())
        for spec in self.hosts:
            digest.update(self.robots_body(spec.name) or b"-")
            for k in range(spec.n_pages):
                for link in self.links(spec.name, page_path(k)):
                    digest.update(repr(link).encode())
        return digest.hexdigest()

    # ------------------------------------------------------------- lookups

    def host(self, name: str) -> HostSpec | None:
        """The host called ``name`` (case and ``:port`` ignored), if any."""
        return self._by_name.get(split_host(name))

    def hosts_where(
        self,
        robots: str | Iterable[str] | None = None,
        page: str | Iterable[str] | None = None,
    ) -> list[HostSpec]:
        """Hosts whose robots / page mode is (one of) the given value(s)."""

        def wanted(want: str | Iterable[str] | None) -> frozenset[str] | None:
            if want is None:
                return None
            return frozenset([want] if isinstance(want, str) else want)

        r, p = wanted(robots), wanted(page)
        return [
            h for h in self.hosts if (r is None or h.robots in r) and (p is None or h.page in p)
        ]

    def seed_urls(self, n: int | None = None) -> list[str]:
        """Root URLs of the first ``n`` hosts (all hosts by default)."""
        return [h.root_url for h in self.hosts[:n]]

    def page_identity(self, host: str, raw_path: str) -> tuple[str, str]:
        """Identity of a requested target: tracking parameters, fragments,
        dot segments, case and port ignored.  ``raw_path`` may also be an
        absolute URL (then ``host`` is ignored)."""
        if "://" in raw_path.split("?", 1)[0]:
            return url_identity(raw_path)
        return split_host(host), canonical_path(raw_path)

    @staticmethod
    def url_identity(url: str) -> tuple[str, str]:
        """``(host, canonical path)`` of an absolute URL."""
        return url_identity(url)

    def _other_host(self, spec: HostSpec, *key: object) -> HostSpec:
        """Another host (any index) chosen deterministically by ``key``."""
        j = _below(_rng(self.seed, spec.index, *key), self.n_hosts)
        if j == spec.index and self.n_hosts > 1:
            j = (j + 1) % self.n_hosts
        return self.hosts[j]

    def resource_ext(self, host: str, k: int) -> str | None:
        """Extension of the non-HTML resource ``/f/{k}.{ext}`` that page ``k``
        of a ``nonhtml`` host links to, or None."""
        spec = self.host(host)
        if spec is None or spec.page != "nonhtml" or not 0 <= k < spec.n_pages:
            return None
        rng = _rng(self.seed, spec.index, "res", k)
        roll = rng.random()
        ext = _pick(rng, tuple(RESOURCE_TYPES))
        return ext if k == 0 or roll < 0.6 else None

    # ------------------------------------------------------------- routing

    def _route(self, spec: HostSpec, ident: str) -> _Route:
        """What lives at canonical ``ident`` on ``spec``."""
        path, _, query = ident.partition("?")
        if path == "/robots.txt":
            return _Route("robots")
        if path == "/":
            return _Route("page", 0)
        if (m := _RE_PAGE.fullmatch(path)) and int(m[1]) < spec.n_pages:
            return _Route("page", int(m[1]))
        if m := _RE_HOP.fullmatch(path):
            return self._route_hop(spec, m[1], m[2])
        if (m := _RE_PRIVATE.fullmatch(path)) and spec.robots in RULES_BODY_MODES:
            return _Route("private", int(m[1]))
        if path == "/late/1" and spec.robots == "oversized":
            return _Route("late", 1)
        return self._route_page_mode(spec, path, query)

    def _route_page_mode(self, spec: HostSpec, path: str, query: str) -> _Route:
        """Paths that exist only on hosts of one page mode."""
        mode = spec.page
        if mode == "nonhtml":
            return self._route_nonhtml(spec, path)
        if mode == "redirects" and (m := _RE_REDIRECT.fullmatch(path)):
            return self._route_redirect(spec, m[1])
        if mode == "redirect-loop" and path in REDIRECT_LOOP_PATHS:
            other = REDIRECT_LOOP_PATHS[1 - REDIRECT_LOOP_PATHS.index(path)]
            return _Route("redirect", status=301, location=other, target=(spec.name, other))
        if mode == "trap-calendar" and (m := _RE_CALENDAR.fullmatch(path)):
            return _Route("calendar", int(m[1]), int(m[2]))
        if mode == "trap-repeat" and _RE_REPEAT.fullmatch(path):
            return _Route("repeat", text=dict(parse_qsl(query)).get("sid", ""))
        if mode == "huge" and path == "/huge":
            return _Route("huge")
        return _MISSING

    def _route_hop(self, spec: HostSpec, origin_name: str, step: str) -> _Route:
        """``/robots-hop/<origin>/<step>``: one hop of a robots redirect chain
        that only exists on the host the chain actually passes through."""
        origin = self._by_name.get(origin_name)
        if origin is None or self._hop_host(origin, step) != spec:
            return _MISSING
        if step == "loop":
            if origin.robots != "redirect-loop":
                return _MISSING
            url = f"http://{origin.name}/robots.txt"
            return _Route("hop", status=301, location=url, target=url_identity(url))
        n_hops, n = ROBOTS_HOPS.get(origin.robots, 0), int(step)
        if n > n_hops:
            return _MISSING
        if n == n_hops:
            return _Route("hop-final", text=origin.name)
        url = self._hop_url(origin, n + 1)
        return _Route("hop", status=301, location=url, target=url_identity(url))

    def _hop_host(self, origin: HostSpec, step: int | str) -> HostSpec:
        return self._other_host(origin, "hop", step)

    def _hop_url(self, origin: HostSpec, step: int | str) -> str:
        host = self._hop_host(origin, step).name
        return f"http://{host}/robots-hop/{origin.name}/{step}"

    def _route_nonhtml(self, spec: HostSpec, path: str) -> _Route:
        if m := _RE_RESOURCE.fullmatch(path):
            k, ext, kind = int(m[1]), m[2], "resource"
        elif m := _RE_NOFOLLOW.fullmatch(path):
            k, ext, kind = int(m[2]), m[1], "nofollow"
        else:
            return _MISSING
        if self.resource_ext(spec.name, k) != ext:
            return _MISSING
        return _Route(kind, k, text=ext)

    def _route_redirect(self, spec: HostSpec, which: str) -> _Route:
        """``/r/k`` -> ``/p/k`` (301 odd k, relative Location; 302 even k,
        absolute), and ``/r/x`` -> another host's ``/p/1``."""
        if which == "x":
            other = self._other_host(spec, "rx").name
            url = f"http://{other}/p/1"
            return _Route("redirect", status=302, location=url, target=(other, "/p/1"))
        k = int(which)
        if k >= spec.n_pages:
            return _MISSING
        location = f"/p/{k}" if k % 2 else f"http://{spec.name}/p/{k}"
        status = 301 if k % 2 else 302
        return _Route("redirect", status=status, location=location, target=(spec.name, f"/p/{k}"))

    # --------------------------------------------------------------- links

    def links(self, host: str, path: str) -> list[Link]:
        """Links of the HTML page at ``path`` on ``host``, in document order.

        Empty for missing pages, redirects and non-HTML resources (whose
        embedded URLs must not be followed).
        """
        spec = self.host(host)
        if spec is None:
            return []
        return list(self._links_cached(spec.index, canonical_path(path)))

    def _compute_links(self, index: int, ident: str) -> tuple[Link, ...]:
        spec = self.hosts[index]
        route = self._route(spec, ident)
        if route.kind == "page":
            return tuple(self._page_links(spec, route.num))
        if route.kind == "private":
            return tuple(self._private_links(spec, route.num))
        if route.kind in ("late", "nofollow"):
            return (_canonical(spec, ident.partition("?")[0]), _plain(spec, spec.name, "/"))
        if route.kind == "calendar":
            return tuple(self._calendar_links(spec, route.num, route.num2))
        if route.kind == "repeat":
            return tuple(self._repeat_links(spec, ident.partition("?")[0], route.text))
        return ()

    def _page_links(self, spec: HostSpec, k: int) -> list[Link]:
        """The link set of ``/`` or ``/p/k``."""
        rng = _rng(self.seed, spec.index, "page", k)
        n = spec.n_pages
        children = [c for c in (2 * k + 1, 2 * k + 2) if c < n]
        if spec.page == "trickle":  # tiny bodies so that trickling takes ~20 s
            return [_plain(spec, spec.name, page_path(c)) for c in children]
        candidates = [j for j in range(n) if j != k and j not in children]
        extras: list[int] = []
        for _ in range(1 + _below(rng, 2)):
            if candidates:
                extras.append(candidates.pop(_below(rng, len(candidates))))
        targets = [(spec.name, page_path(c)) for c in children]
        out = [_canonical(spec, page_path(k))]
        out += [_plain(spec, *t) for t in targets]
        for e in extras:
            via = f"/r/{e}" if spec.page == "redirects" else page_path(e)
            out.append(_plain(spec, spec.name, via))
            targets.append((spec.name, page_path(e)))
        out += self._special_links(spec, k, rng)
        if self.n_hosts > 1 and rng.random() < 0.35:
            cross = (self._other_host(spec, "cross", k).name, _pick(rng, ("/", "/p/1")))
            out.append(_plain(spec, *cross))
            targets.append(cross)
        if rng.random() < 0.5:
            out.append(_plain(spec, *_pick(rng, targets), tag="area"))
        out += self._decorated(spec, k, rng, targets)
        out += self._non_http(spec, k, rng)
        if spec.page == "internal-links":
            out += [Link(href, None, "a") for href in INTERNAL_HREFS]
        return out

    def _special_links(self, spec: HostSpec, k: int, rng: random.Random) -> list[Link]:
        """Mode-specific entry points: redirects, traps, resources, private."""
        paths: list[str] = []
        if k == 0:
            paths += {
                "redirects": ["/r/x"],
                "redirect-loop": [REDIRECT_LOOP_PATHS[0]],
                "trap-calendar": [CALENDAR_START],
                "huge": ["/huge"],
            }.get(spec.page, [])
            if spec.robots in RULES_BODY_MODES:
                paths.append("/private/1")
            if spec.robots == "oversized":
                paths.append("/late/1")
        elif spec.robots in RULES_BODY_MODES and rng.random() < 0.4:
            paths.append("/private/2")
        ext = self.resource_ext(spec.name, k)
        if ext is not None:
            paths.append(f"/f/{k}.{ext}")
        out = [_plain(spec, spec.name, p) for p in paths]
        if spec.page == "trap-repeat" and k == 0:
            out.append(Link("a/", (spec.name, "/a/"), "a"))
        return out

    def _decorated(
        self,
        spec: HostSpec,
        k: int,
        rng: random.Random,
        targets: Sequence[tuple[str, str]],
    ) -> list[Link]:
        """Duplicate links to real targets in disguise."""
        same = [t for t in targets if t[0] == spec.name]
        jobs: list[tuple[str, tuple[str, str]]] = []
        if k == 0:  # each decoration at least once per host
            jobs += [(kind, _pick(rng, same)) for kind in DECORATIONS]
        else:
            jobs += [
                (_pick(rng, DECORATIONS), _pick(rng, targets)) for _ in range(2 + _below(rng, 2))
            ]
        jobs.append(("relative", (spec.name, "/")))  # "./" on the root, "../" elsewhere
        if spec.page == "dup-heavy":
            for target in targets:
                jobs += [(_pick(rng, _DUP_DECORATIONS), target) for _ in range(4 + _below(rng, 5))]
        here = page_path(k)
        return [
            Link(_decorate(kind, spec.name, here, t, _token(self.seed, spec.index, k, n)), t, "a")
            for n, (kind, t) in enumerate(jobs)
        ]

    def _non_http(self, spec: HostSpec, k: int, rng: random.Random) -> list[Link]:
        """Links a crawler must ignore.  The ftp one points at loopback port 1
        so that even a crawler that wrongly follows it sends nothing outside
        127.0.0.0/8 (no DNS lookup, no off-machine packet)."""
        hrefs = (
            f"mailto:webmaster@{spec.name}",
            "javascript:void(0)",
            f"ftp://127.0.0.1:1/pub/{spec.name}/file{k}.txt",
        )
        return [Link(h, None, "a") for h in hrefs if k == 0 or rng.random() < 0.2]

    @staticmethod
    def _private_links(spec: HostSpec, k: int) -> list[Link]:
        here, other = f"/private/{k}", f"/private/{3 - k}"
        return [
            _canonical(spec, here),
            _plain(spec, spec.name, "/"),
            _plain(spec, spec.name, "/p/1"),
            Link(relative_href(here, other), (spec.name, other), "a"),
        ]

    @staticmethod
    def _calendar_links(spec: HostSpec, year: int, month: int) -> list[Link]:
        """Previous and next month, forever (up to 6-digit years)."""
        here = f"/calendar/{year:04d}/{month:02d}"
        out = [_canonical(spec, here), _plain(spec, spec.name, "/")]
        prev_ym = (year, month - 1) if month > 1 else (year - 1, 12)
        next_ym = (year, month + 1) if month < 12 else (year + 1, 1)
        for y, m in (prev_ym, next_ym):
            if 0 <= y <= 999_999:
                path = f"/calendar/{y:04d}/{m:02d}"
                out.append(Link(relative_href(here, path), (spec.name, path), "a"))
        return out

    def _repeat_links(self, spec: HostSpec, path: str, sid: str) -> list[Link]:
        """``a/`` <-> ``b/`` relative links growing the path forever, plus a
        session-id link whose value depends on the current URL."""
        child = "b/" if path.endswith("/a/") else "a/"
        new_sid = _token(self.seed, spec.index, path, sid)
        return [
            _canonical(spec, path),
            _plain(spec, spec.name, "/"),
            Link(child, (spec.name, path + child), "a"),
            Link(f"./?sid={new_sid}", (spec.name, f"{path}?sid={new_sid}"), "a"),
        ]

    # ----------------------------------------------------------- responses

    def resource(self, host: str, raw_path: str) -> Resource:
        """What to answer to ``GET raw_path`` on ``host`` (before the server
        applies per-page counters and timing)."""
        spec = self.host(host)
        if spec is None:
            return _not_found(f"unknown host {split_host(host)}")
        ident = canonical_path(raw_path)
        route = self._route(spec, ident)
        if route.kind == "robots":
            return self._robots_resource(spec)
        if route.kind == "hop":  # robots chains ignore the hop host's page mode
            return _redirect(route.status, route.location)
        if route.kind == "hop-final":
            crawl_delay = self._by_name[route.text].crawl_delay
            return Resource(200, TEXT_TYPE, bodies.rules_body(crawl_delay))
        return self._revised(spec, ident,
                             self._apply_page_mode(spec, self._static(spec, ident, route)))

    # ---------------------------------------------------- recurring crawls

    def revision(self, host: str, raw_path: str) -> int:
        """How many times the page changed from epoch 0 to this web's epoch."""
        spec = self.host(host)
        if spec is None:
            return 0
        ident = canonical_path(raw_path)
        return sum(_rng(self.seed, spec.index, "change", ident, e).random() < self.change_rate
                   for e in range(1, self.epoch + 1))

    def validator_kind(self, host: str) -> str:
        """``etag``, ``last-modified`` or ``none``: what the host's pages carry."""
        spec = self.host(host)
        if spec is None or not self.validators:
            return "none"
        draw = _rng(self.seed, spec.index, "validators").random()
        if draw >= self.validator_share:
            return "none"
        return "etag" if draw < self.validator_share * 5 / 8 else "last-modified"

    def _revised(self, spec: HostSpec, ident: str, res: Resource) -> Resource:
        """An answer as it is in this epoch (HTML pages change, and are padded),
        with its host's validator."""
        if res.status != 200 or res.stream is not None or not res.body:
            return res
        html = res.content_type == HTML_TYPE
        rev = self.revision(spec.name, ident) if self.epoch and html else 0
        body = self._padded(spec, ident, res.body) if html and self.page_bytes else res.body
        if rev:
            body += f"<!-- revision {rev} -->\n".encode()
        kind = self.validator_kind(spec.name)
        headers = res.headers
        if kind == "etag":
            headers += (("ETag", f'"{hashlib.sha1(body).hexdigest()[:16]}"'),)
        elif kind == "last-modified":
            moment = REVISION_EPOCH + rev * 86400
            headers += (("Last-Modified", email.utils.formatdate(moment, usegmt=True)),)
        return replace(res, body=body, headers=headers)

    def _padded(self, spec: HostSpec, ident: str, page: bytes) -> bytes:
        """``page`` grown to about ``page_bytes`` by paragraphs of random hex: it
        gzips to about half, as page text does (a repeated block would vanish)."""
        rng = _rng(self.seed, spec.index, "pad", ident)
        size = int(self.page_bytes * (0.5 + rng.random()))
        lines = [b'<p class="filler">%s</p>\n' % rng.randbytes(24).hex().encode()
                 for _ in range(max(0, size - len(page)) // 66)]
        for _ in range(self.page_links):
            where = _below(rng, len(lines) + 1)
            k = _below(rng, spec.n_pages)
            lines.insert(where, b'<p><a href="%s">%s</a></p>\n' % (
                page_path(k).encode(), _words(rng, 3).encode()))
        tail = bodies.HTML_TAIL
        return page[:-len(tail)] + b"".join(lines) + tail

    def _static(self, spec: HostSpec, ident: str, route: _Route) -> Resource:
        """The plain answer for a non-robots route."""
        if route.kind == "missing":
            return _not_found(f"no such page on {spec.name}")
        if route.kind == "redirect":
            return _redirect(route.status, route.location)
        if route.kind == "resource":
            body = bodies.resource_body(spec.name, route.num, route.text)
            return Resource(200, RESOURCE_TYPES[route.text], body)
        if route.kind == "huge":
            return Resource(200, HTML_TYPE, stream=bodies.huge_chunks, length=bodies.HUGE_SIZE)
        links = self._links_cached(spec.index, ident)
        rng = _rng(self.seed, spec.index, "text", ident)
        title = f"{spec.name} {ident} {_words(rng, 2)}"
        if spec.page == "trickle":
            return Resource(200, HTML_TYPE, bodies.render_compact(title, links))
        paras = [_words(rng, 12 + _below(rng, 30)) for _ in range(1 + _below(rng, 3))]
        page = bodies.render_html(title, paras, links)
        if spec.page == "large" and route.kind == "page":
            return self._large(spec, route.num, page)
        return Resource(200, HTML_TYPE, page)

    def _large(self, spec: HostSpec, k: int, page: bytes) -> Resource:
        """A 1-3 MiB version of ``page`` (filler text, streamed)."""
        size = 1024 * 1024 + _below(_rng(self.seed, spec.index, "size", k), 2 * 1024 * 1024)
        block = (_words(_rng(self.seed, spec.index, "fill", k), 600) + "\n").encode()
        length, stream = bodies.padded_html(page, size, block)
        return Resource(200, HTML_TYPE, stream=stream, length=length)

    @staticmethod
    def _apply_page_mode(spec: HostSpec, res: Resource) -> Resource:
        """Layer the host's page misbehaviour on top of a plain answer."""
        if spec.page in DEAD_PAGE_MODES:  # even for paths that do not exist
            return Resource(0, action=spec.page)
        if res.status >= 400:
            return res
        if spec.page in FLAKY_MODES:
            n, status, retry = FLAKY_MODES[spec.page]
            return replace(res, fail_first=n, fail_status=status, retry_after=retry)
        if spec.page == "trickle":
            return replace(res, action="trickle")
        if spec.page == "slow":
            return replace(res, action="slow")
        return res

    # -------------------------------------------------------------- robots

    def _robots_resource(self, spec: HostSpec) -> Resource:
        """The answer to ``/robots.txt`` for the host's robots mode."""
        mode = spec.robots
        if mode == "timeout":
            return Resource(0, action="hang")
        if mode in ROBOTS_HOPS:
            return _redirect(301, self._hop_url(spec, 1))
        if mode == "redirect-loop":
            return _redirect(301, self._hop_url(spec, "loop"))
        simple = {
            "missing": (404, HTML_TYPE, bodies.render_message("404", "no robots.txt")),
            "forbidden": (403, HTML_TYPE, bodies.render_message("403", "forbidden")),
            "error-500": (500, TEXT_TYPE, b"internal error\n"),
            "error-503": (503, TEXT_TYPE, b"service unavailable\n"),
        }
        if mode in simple:
            return Resource(*simple[mode])
        if mode == "too-many":
            retry = (("Retry-After", str(ROBOTS_TOO_MANY_RETRY_AFTER)),)
            return Resource(429, TEXT_TYPE, b"slow down\n", headers=retry)
        if mode == "html":
            return Resource(200, HTML_TYPE, self.robots_body(spec.name) or b"")
        return Resource(200, TEXT_TYPE, self.robots_body(spec.name) or b"")

    def robots_body(self, host: str) -> bytes | None:
        """The body a client finally gets with status 200 when it asks for
        ``host``'s robots.txt (following redirects), or None if no 200."""
        spec = self.host(host)
        if spec is None:
            return None
        mode = spec.robots
        if mode in ("rules", *ROBOTS_HOPS):
            return bodies.rules_body(spec.crawl_delay)
        if mode == "oversized":
            return self._oversized_cached(spec.crawl_delay)
        if mode == "bom":
            return bodies.bom_body(spec.crawl_delay)
        if mode == "allow-all":
            return b""
        if mode == "html":
            return bodies.render_message(f"{spec.name} robots", "Nothing to see here.")
        return None

    def robots_redirect_chain(self, host: str) -> list[str]:
        """URLs a client is sent to after ``/robots.txt`` in redirect modes
        (for ``redirect-loop``: one hop, then ``/robots.txt`` again)."""
        spec = self.host(host)
        if spec is None:
            return []
        if spec.robots == "redirect-loop":
            return [self._hop_url(spec, "loop"), f"http://{spec.name}/robots.txt"]
        hops = ROBOTS_HOPS.get(spec.robots, 0)
        return [self._hop_url(spec, step) for step in range(1, hops + 1)]

    def robots_effect(self, host: str, policy: Mapping[str, str] | None = None) -> str:
        """``"rules"``, ``"allow"`` or ``"disallow"`` for ``host``."""
        spec = self.host(host)
        if spec is None:
            return "allow"
        return (policy or DEFAULT_ROBOTS_POLICY)[spec.robots]

    def _parser(self, index: int, max_bytes: int | None) -> Protego:
        body = self.robots_body(self.hosts[index].name) or b""
        if max_bytes is not None:
            body = body[:max_bytes]
        return Protego.parse(body.decode("utf-8-sig", errors="replace"))

    def allowed(
        self,
        host: str,
        path: str,
        user_agent: str = "*",
        *,
        robots_policy: Mapping[str, str] | None = None,
        robots_max_bytes: int | None = None,
    ) -> bool:
        """Whether robots.txt as served (under ``robots_policy``; decoded as
        UTF-8 with the BOM stripped; optionally cut at ``robots_max_bytes``)
        lets ``user_agent`` fetch ``path`` on ``host``."""
        effect = self.robots_effect(host, robots_policy)
        spec = self.host(host)
        if effect != "rules" or spec is None:
            return effect != "disallow"
        parser = self._parser_cached(spec.index, robots_max_bytes)
        return bool(parser.can_fetch(f"http://{spec.name}{path}", user_agent))

    # ----------------------------------------------------------- reachable

    def reachable(
        self,
        seed_urls: Iterable[str],
        *,
        obey_robots: bool = True,
        max_depth: int | None = None,
        max_pages_per_host: int | None = None,
        limit: int = 100_000,
        user_agent: str = "*",
        robots_policy: Mapping[str, str] | None = None,
        robots_max_bytes: int | None = None,
        admit: Callable[[str], bool] | None = None,
        delivered: Callable[[tuple[str, str]], bool] | None = None,
    ) -> dict[tuple[str, str], int]:
        """Ground truth: every page identity a correct crawl requests, mapped
        to its shortest depth (seeds are 0).

        Follows ``<a>`` and ``<area>`` links of HTML pages only (not of
        non-HTML resources, nor of ``hang``/``reset`` hosts, which never
        deliver a body); redirects are edges to their target at the same
        depth.  Pages robots.txt forbids are never entered.  With
        ``max_pages_per_host`` the first pages in BFS order win.  Stops
        silently at ``limit`` identities, which (with ``max_depth``) keeps
        trap hosts finite.  ``admit(url)`` (e.g. a crawler's trap rules,
        passed in by a test) can refuse URLs like robots.txt does.
        ``delivered(identity)`` (e.g. "the server's ledger shows a complete
        answer") limits the walk to links a crawl could actually have seen:
        the links and redirect of a page that never arrived are not followed.
        """
        queue = deque((url_identity(u), 0) for u in seed_urls)
        found: dict[tuple[str, str], int] = {}
        per_host: dict[str, int] = {}
        while queue and len(found) < limit:
            ident, depth = queue.popleft()
            host, path = ident
            spec = self._by_name.get(host)
            if spec is None or ident in found:
                continue
            if obey_robots and not self.allowed(
                host,
                path,
                user_agent,
                robots_policy=robots_policy,
                robots_max_bytes=robots_max_bytes,
            ):
                continue
            if admit is not None and not admit(f"http://{host}{path}"):
                continue
            if max_pages_per_host is not None and per_host.get(host, 0) >= max_pages_per_host:
                continue
            found[ident] = depth
            per_host[host] = per_host.get(host, 0) + 1
            if delivered is not None and not delivered(ident):
                continue
            route = self._route(spec, path)
            if route.kind == "redirect" and route.target is not None:
                queue.appendleft((route.target, depth))  # same depth, BFS order kept
            elif (
                route.kind in _HTML_KINDS
                and spec.page not in DEAD_PAGE_MODES
                and (max_depth is None or depth < max_depth)
            ):
                queue.extend(
                    (link.target, depth + 1)
                    for link in self._links_cached(spec.index, path)
                    if link.target is not None and link.tag != "link"
                )
        return found


# --------------------------------------------------------------------------
# Module helpers
# --------------------------------------------------------------------------


def _parse_pin(spec: str) -> dict[str, str]:
    """``"slow"`` / ``"robots:rules,crawl-delay:2"`` -> {"page"|"robots"|"crawl-delay": value}."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, _, value = part.partition(":") if ":" in part else ("page", "", part)
        if key == "page" and value not in PAGE_MODES and value not in EXTRA_PAGE_MODES:
            raise ValueError(f"unknown page mode {value!r}")
        if key == "robots" and value not in ROBOTS_MODES:
            raise ValueError(f"unknown robots mode {value!r}")
        if key == "crawl-delay":
            float(value)  # raises ValueError for a bad number
        elif key not in ("page", "robots"):
            raise ValueError(f"unknown pin {part!r}")
        out[key] = value
    return out


def _plain(spec: HostSpec, host: str, path: str, tag: str = "a") -> Link:
    """Undisguised link: path-absolute on the same host, absolute otherwise."""
    href = path if host == spec.name else f"http://{host}{path}"
    return Link(href, (host, path), tag)


def _canonical(spec: HostSpec, path: str) -> Link:
    return Link(f"http://{spec.name}{path}", (spec.name, path), "link")


def _not_found(message: str) -> Resource:
    return Resource(404, HTML_TYPE, bodies.render_message("404 Not Found", message))


def _redirect(status: int, location: str) -> Resource:
    body = bodies.render_message("Moved", f"moved to {location}")
    return Resource(status, HTML_TYPE, body, location=location)


def _decorate(kind: str, host: str, here: str, target: tuple[str, str], token: str) -> str:
    """Disguise a link to ``target`` found on page ``here`` of ``host``."""
    t_host, t_path = target
    same = t_host == host
    prefix = "" if same else f"http://{t_host}"
    n = int(token[:4], 16) % 10
    if not same and kind in ("relative", "dot", "dotdot"):
        kind = "scheme-relative" if kind == "relative" else "utm"
    head, _, last = t_path.rpartition("/")
    forms = {
        "utm": f"{prefix}{t_path}?utm_source=sim&utm_medium=email",
        "utm-campaign": f"{prefix}{t_path}?utm_campaign=c{n}&utm_source=sim",
        "gclid": f"{prefix}{t_path}?gclid={token}",
        "fbclid": f"{prefix}{t_path}?fbclid={token}",
        "msclkid": f"{prefix}{t_path}?msclkid={token}",
        "combo": f"http://{t_host}:80{t_path}?fbclid={token}&utm_medium=x#top{n}",
        "fragment": f"{prefix}{t_path}#section-{n}",
        "upper": f"HTTP://{t_host.upper()}{t_path}",
        "port": f"http://{t_host}:80{t_path}",
        "scheme-relative": f"//{t_host}{t_path}",
        "relative": relative_href(here, t_path),
        "dot": f"{head}/./{last}",
        "dotdot": f"/x/..{t_path}",
    }
    return forms[kind]
