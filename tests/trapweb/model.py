"""Deterministic model of the trap web: noise parameters, canonicals and crawler traps.

A test web for two crawler skills the simulated web (``tests/simweb``) does
not isolate: learning per host which query parameters are noise (from
``<link rel="canonical">`` and identical payloads), and telling crawler traps
(endless URL spaces of near-duplicate pages) from big templates whose pages
really differ. Hosts are ``KIND-I.test``, ``per_kind`` of each kind in
``KINDS``; the docstring of each ``_KIND_site`` builder says what it plays.

Everything is a pure function of ``(seed, per_kind, today)``: the server asks
``TrapWeb.resource`` what to answer, and tests ask the same object which pages
a correct crawl must fetch (``required_pages``) and which page a request showed
(``page_of``). ``today`` only places the calendar trap; the process helper
passes it to its server so both sides agree across midnight UTC.

Randomness comes only from ``random.Random(<str>)`` and ``.random()``, which are
stable across processes and Python versions (as in ``tests/simweb/model.py``).
"""

from __future__ import annotations

import calendar
import datetime as dt
import hashlib
import html
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from urllib.parse import parse_qsl, urlencode

from tests.simweb.model import HTML_TYPE, TEXT_TYPE, Resource

KINDS: tuple[str, ...] = (
    "noise", "select", "miscanon", "calendar", "session", "facet", "catalogue", "minical",
)
#: Kinds whose URL space is endless: only their real pages are required.
TRAP_KINDS: frozenset[str] = frozenset({"calendar", "session", "facet", "minical"})
#: Names for the noise and selecting parameters: none is on a static strip list
#: (crawler/urls.py DEFAULT_STRIP_PARAMS), so a crawler must learn them per host.
PARAM_POOL: tuple[str, ...] = (
    "ref_src", "shareid", "via", "cmp", "variant_tag",
    "trk", "src_page", "from_nav", "abtest", "clickref",
)
ROBOTS_BODY = b"User-agent: *\nAllow: /\n"
VOCABULARY_SIZE = 3000
NOISE_PAGES = 12  # "/" and /p/1../p/11
SELECT_VALUES = 6
SELECT_PAGES = 4
MISCANON_PAGES = 5
SESSION_PAGES = 6
CATALOGUE_SIZE = 300
CATALOGUE_ROOT_LINKS = 10
PAGE_WORDS = 120
PRODUCT_WORDS = 200
BOILERPLATE_WORDS = 120
PRODUCT_POOL = 10
PRODUCTS_SHOWN = 3
#: The placeholder for the session id in the identities of session pages.
SID = "SID"
FACETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("color", ("red", "blue", "green", "black", "white", "grey")),
    ("size", ("xs", "s", "m", "l", "xl")),
    ("brand", ("acme", "globex", "initech", "umbra", "vandel", "zorin")),
    ("sort", ("price", "name", "new")),
    ("page", ("1", "2", "3")),
)
_FACET_VALUES: dict[str, tuple[str, ...]] = dict(FACETS)
_HOST = re.compile(r"([a-z]+)-(0|[1-9][0-9]{0,5})\.test")
_EVENT = re.compile(r"/events/([0-9]{4})/([0-9]{2})/([0-9]{2})")
_DAY = re.compile(r"/cal/([0-9]{4})/([0-9]{2})/([0-9]{2})")
_SESSION = re.compile(r"/s/([^/]+)/page/([1-9])")


# ---------------------------------------------------------------- randomness and text


def _rng(*parts: object) -> random.Random:
    """A generator keyed by ``parts`` (string seeding is stable everywhere)."""
    return random.Random("/".join(map(str, parts)))


def _below(rng: random.Random, n: int) -> int:
    """Uniform int in ``range(n)`` from one ``random()`` (no version-dependent helpers)."""
    return min(int(rng.random() * n), n - 1)


def _token(length: int, *parts: object) -> str:
    """Hex token hashed from ``parts``: noise values and session ids."""
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:length]


@lru_cache(maxsize=1)
def vocabulary() -> tuple[str, ...]:
    """~3000 pseudo-words, the same for every seed, so that independent texts share
    few words while pages of one template share almost all of theirs."""
    rng = _rng("trapweb-vocabulary")
    syllables = [c + v for c in "bdfghklmnprstvz" for v in "aeiou"]
    words: dict[str, None] = {}
    while len(words) < VOCABULARY_SIZE:
        n = 2 + _below(rng, 2)
        words["".join(syllables[_below(rng, len(syllables))] for _ in range(n))] = None
    return tuple(words)


def _sentences(rng: random.Random, n_words: int) -> str:
    """``n_words`` vocabulary words as capitalised sentences of 6-13 words."""
    vocab = vocabulary()
    words = [vocab[_below(rng, len(vocab))] for _ in range(n_words)]
    out: list[str] = []
    while words:
        size = 6 + _below(rng, 8)
        out.append(" ".join(words[:size]).capitalize() + ".")
        words = words[size:]
    return " ".join(out)


def _title(rng: random.Random) -> str:
    """Two capitalised vocabulary words."""
    vocab = vocabulary()
    return " ".join(vocab[_below(rng, len(vocab))].capitalize() for _ in range(2))


def _draw(rng: random.Random, n: int, count: int, exclude: set[int]) -> list[int]:
    """``count`` distinct ints of ``range(n)`` outside ``exclude``, in drawing order."""
    drawn: list[int] = []
    while len(drawn) < count:
        j = _below(rng, n)
        if j not in exclude and j not in drawn:
            drawn.append(j)
    return drawn


def _p(k: int) -> str:
    """Path of numbered page ``k`` (0 is the root)."""
    return "/" if k == 0 else f"/p/{k}"


# ---------------------------------------------------------------- value types


@dataclass(frozen=True, slots=True)
class Page:
    """One HTML page. ``identity`` names the required page it shows (None: a trap page)."""

    identity: str | None
    title: str
    paragraphs: tuple[str, ...]
    links: tuple[str, ...]
    canonical: str | None = None

    def render(self) -> bytes:
        """A small valid document; anchor labels never depend on the hrefs."""
        esc = html.escape
        canonical = f'<link rel="canonical" href="{esc(self.canonical)}">' if self.canonical else ""
        lines = [
            "<!DOCTYPE html>",
            '<html lang="en">',
            f'<head><meta charset="utf-8"><title>{esc(self.title)}</title>{canonical}</head>',
            "<body>",
            f"<h1>{esc(self.title)}</h1>",
            *(f"<p>{esc(p)}</p>" for p in self.paragraphs),
            "<ul>",
            *(f'<li><a href="{esc(h)}">link {i}</a></li>' for i, h in enumerate(self.links)),
            "</ul>",
            "</body>",
            "</html>",
            "",
        ]
        return "\n".join(lines).encode()


@dataclass(frozen=True, slots=True)
class Target:
    """A request target split for routing: no fragment, the query parsed, not normalised."""

    path: str
    query: str
    params: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, raw: str) -> Target:
        path, _, query = raw.split("#", 1)[0].partition("?")
        return cls(path or "/", query, tuple(parse_qsl(query, keep_blank_values=True)))

    @property
    def key(self) -> str:
        """Path plus the decoded query re-encoded: how static pages are looked up."""
        return self.path + ("?" + urlencode(self.params) if self.params else "")


def _not_found(what: str) -> Resource:
    return Resource(404, TEXT_TYPE, f"404 not found: {what}\n".encode())


# ---------------------------------------------------------------- the web


class TrapWeb:
    """``per_kind`` hosts of each of ``KINDS``; duck-types ``simweb.model.Web`` for the server."""

    mix = "trapweb"

    def __init__(self, seed: int = 1, per_kind: int = 2, *, today: dt.date | None = None) -> None:
        if per_kind < 1:
            raise ValueError("per_kind must be at least 1")
        self.seed = seed
        self.per_kind = per_kind
        self.n_hosts = per_kind * len(KINDS)
        self.today = today or dt.datetime.now(dt.UTC).date()
        self.years = range(self.today.year - 1, self.today.year + 2)
        self._static: dict[str, dict[str, Page]] = {}
        self._builders: dict[str, Callable[[str], list[Page]]] = {
            kind: getattr(self, f"_{kind}_site") for kind in KINDS}
        self._dynamic: dict[str, Callable[[str, Target], Page | None]] = {
            "calendar": self._calendar_day, "session": self._session_page,
            "facet": self._facet_page, "minical": self._minical_day}

    # ------------------------------------------------------------ hosts

    def hosts(self, kind: str | None = None) -> list[str]:
        """Host names, kind by kind in ``KINDS`` order (only ``kind``'s when given)."""
        if kind is not None and kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; known: {KINDS}")
        kinds = KINDS if kind is None else (kind,)
        return [f"{k}-{i}.test" for k in kinds for i in range(self.per_kind)]

    def seed_urls(self) -> list[str]:
        return [f"http://{host}/" for host in self.hosts()]

    def _locate(self, host: str) -> tuple[str, int] | None:
        """``(kind, index)`` of a host of this web, else None."""
        m = _HOST.fullmatch(host)
        if m is None or m[1] not in KINDS or int(m[2]) >= self.per_kind:
            return None
        return m[1], int(m[2])

    def kind_of(self, host: str) -> str:
        """The kind of ``host``; KeyError for a host not in this web."""
        found = self._locate(host)
        if found is None:
            raise KeyError(host)
        return found[0]

    def param_of(self, host: str) -> str:
        """The pool name ``host`` uses: by index, so ``noise-0`` and ``select-0`` share it."""
        if (found := self._locate(host)) is None:
            raise KeyError(host)
        return PARAM_POOL[found[1] % len(PARAM_POOL)]

    def is_trap(self, host: str) -> bool:
        return self.kind_of(host) in TRAP_KINDS

    # ------------------------------------------------------------ ground truth

    def required_pages(self, host: str) -> set[str]:
        """Identities of the pages a correct crawl fetches (in at least one spelling)."""
        kind = self.kind_of(host)
        pages = set(self._site(host))
        if kind == "session":
            pages |= {f"/s/{SID}/page/{k}" for k in range(1, SESSION_PAGES + 1)}
        if kind == "facet":
            pages.add("/shop")
        return pages

    def page(self, host: str, target: str) -> Page | None:
        """The HTML page at ``target`` (path+query as sent), or None (404, robots.txt)."""
        found = self._locate(host)
        if found is None:
            return None
        t = Target.parse(target)
        static = self._site(host).get(t.path if found[0] == "noise" else t.key)
        if static is not None:
            return static
        dynamic = self._dynamic.get(found[0])
        return dynamic(host, t) if dynamic else None

    def page_of(self, host: str, target: str) -> str | None:
        """Which required page ``target`` shows; None for trap pages and 404s."""
        page = self.page(host, target)
        return None if page is None else page.identity

    def page_identity(self, host: str, target: str) -> tuple[str, str]:
        """For ``simweb.ledger.Ledger.pages``: the required page, else the target itself."""
        return host, self.page_of(host, target) or target.split("#", 1)[0]

    def resource(self, host: str, path: str) -> Resource:
        """What the server answers to ``GET path`` on ``host``."""
        if self._locate(host) is None:
            return _not_found(f"unknown host {host}")
        if Target.parse(path).path == "/robots.txt":
            return Resource(200, TEXT_TYPE, ROBOTS_BODY)
        page = self.page(host, path)
        if page is None:
            return _not_found(path)
        return Resource(200, HTML_TYPE, page.render())

    # ------------------------------------------------------------ page builders

    def _site(self, host: str) -> dict[str, Page]:
        """The host's fixed pages by identity, built once."""
        if host not in self._static:
            pages = self._builders[self.kind_of(host)](host)
            self._static[host] = {p.identity or "": p for p in pages}
        return self._static[host]

    def _distinct(self, host: str, ident: str, links: Sequence[str],
                  canonical: str | None = None, words: int = PAGE_WORDS) -> Page:
        """A page with its own text, drawn from ``ident``: unlike any other page."""
        rng = _rng(self.seed, host, "page", ident)
        title = _title(rng)
        paras = (_sentences(rng, words // 2), _sentences(rng, words - words // 2))
        return Page(ident, title, paras, tuple(links), canonical)

    def _boilerplate(self, host: str) -> str:
        """The host's template text, shared by all its trap pages."""
        return _sentences(_rng(self.seed, host, "boilerplate"), BOILERPLATE_WORDS)

    def _noise_site(self, host: str) -> list[Page]:
        """12 tree-linked pages; a third of links add ``?NAME=token``, which the
        host ignores (same bytes) and every page's canonical leaves out."""
        name = self.param_of(host)
        pages = []
        for k in range(NOISE_PAGES):
            links = [_p(j) + (f"?{name}={_token(6, self.seed, host, k, i)}" if (k + i) % 3 == 0
                              else "") for i, j in enumerate(self._noise_targets(host, k))]
            pages.append(self._distinct(host, _p(k), links, f"http://{host}{_p(k)}"))
        return pages

    def _noise_targets(self, host: str, k: int) -> list[int]:
        """Tree children ``2k+1``, ``2k+2`` then one or two other pages."""
        targets = [j for j in (2 * k + 1, 2 * k + 2) if j < NOISE_PAGES]
        rng = _rng(self.seed, host, "extra", k)
        return targets + _draw(rng, NOISE_PAGES, 1 + (rng.random() < 0.5), {k, *targets})

    def _select_site(self, host: str) -> list[Page]:
        """``/list?NAME=v`` are distinct pages with self canonicals that keep NAME."""
        name = self.param_of(host)
        values = [f"/list?{name}={v}" for v in range(1, SELECT_VALUES + 1)]
        others = [_p(k) for k in range(1, SELECT_PAGES + 1)]
        pages = [self._distinct(host, "/", [*values, "/list", *others], f"http://{host}/"),
                 self._distinct(host, "/list", ["/", values[0]], f"http://{host}/list")]
        pages += [self._distinct(host, v, ["/", values[(i + 1) % len(values)]], f"http://{host}{v}")
                  for i, v in enumerate(values)]
        pages += [self._distinct(host, p, ["/", "/list"], f"http://{host}{p}") for p in others]
        return pages

    def _miscanon_site(self, host: str) -> list[Page]:
        """Distinct pages (``/?NAME=v`` included) that all claim ``/`` as canonical."""
        name, root = self.param_of(host), f"http://{host}/"
        others = [_p(k) for k in range(1, MISCANON_PAGES + 1)]
        others += [f"/?{name}={v}" for v in range(1, MISCANON_PAGES + 1)]
        pages = [self._distinct(host, "/", others, root)]
        pages += [self._distinct(host, p, ["/", others[(i + 1) % len(others)]], root)
                  for i, p in enumerate(others)]
        return pages

    def _calendar_site(self, host: str, entry: str = "") -> list[Page]:
        """Four real pages; ``/`` also enters the endless day pages at today."""
        real = ["/about", "/p/1", "/p/2"]
        pages = [self._distinct(host, "/", [*real, entry or _event_path(self.today)])]
        return pages + [self._distinct(host, p, ["/", *(r for r in real if r != p)]) for p in real]

    def _day(self, pattern: re.Pattern[str], t: Target) -> dt.date | None:
        """The valid day in the year window a calendar's target names, if any."""
        if t.query or (m := pattern.fullmatch(t.path)) is None:
            return None
        try:
            day = dt.date(int(m[1]), int(m[2]), int(m[3]))
        except ValueError:
            return None
        return day if day.year in self.years else None

    def _calendar_day(self, host: str, t: Target) -> Page | None:
        """Any valid day in the year window: boilerplate plus one sentence naming it."""
        if (day := self._day(_EVENT, t)) is None:
            return None
        near = (day - dt.timedelta(days=1), day + dt.timedelta(days=1), _months_away(day, 1))
        links = [_event_path(d) for d in near if d.year in self.years] + ["/"]
        paras = (self._boilerplate(host), f"No events on {day.isoformat()}.")
        return Page(None, f"Events on {day.isoformat()}", paras, tuple(links))

    def _minical_site(self, host: str) -> list[Page]:
        """Like the calendar's, but its endless day pages are near-empty."""
        return self._calendar_site(host, _day_path(self.today))

    def _minical_day(self, host: str, t: Target) -> Page | None:
        """Any valid day in the year window: its date as the title, and six links,
        to the day before and after, and the same day a month and a year
        before and after (the last day of a shorter month)."""
        if (day := self._day(_DAY, t)) is None:
            return None
        near = (day - dt.timedelta(days=1), day + dt.timedelta(days=1),
                _months_away(day, -1), _months_away(day, 1),
                _months_away(day, -12), _months_away(day, 12))
        links = tuple(_day_path(d) for d in near if d.year in self.years)
        return Page(None, f"{day.day} {calendar.month_name[day.month]} {day.year}", (), links)

    def _session_site(self, host: str) -> list[Page]:
        """``/`` enters the session pages with one session id."""
        sid = _token(12, self.seed, host, "session-root")
        links = [f"/s/{sid}/page/{k}" for k in range(1, SESSION_PAGES + 1)]
        return [self._distinct(host, "/", links)]

    def _session_page(self, host: str, t: Target) -> Page | None:
        """Page K of any session: same bytes but links, each of those with a new id."""
        if t.query or (m := _SESSION.fullmatch(t.path)) is None or int(m[2]) > SESSION_PAGES:
            return None
        k = int(m[2])
        siblings = [j for j in range(1, SESSION_PAGES + 1) if j != k]
        links = [f"/s/{_token(12, self.seed, host, t.path, i)}/page/{j}"
                 for i, j in enumerate(siblings)]
        return replace(self._distinct(host, f"/s/{SID}/page/{k}", ()), links=(*links, "/"))

    def _facet_site(self, host: str) -> list[Page]:
        """``/`` links the shop, whose facet links multiply into thousands of URLs."""
        return [self._distinct(host, "/", ["/shop"])]

    def _facet_page(self, host: str, t: Target) -> Page | None:
        """``/shop?...``: boilerplate plus 3 products by the query, links to each unset facet."""
        names = [name for name, _ in t.params]
        if t.path != "/shop" or len(set(names)) != len(names) or not all(
                value in _FACET_VALUES.get(name, ()) for name, value in t.params):
            return None
        links = ["/shop?" + urlencode([*t.params, (name, value)])
                 for name, values in FACETS if name not in names for value in values]
        shown = ", ".join(self._products(host, urlencode(sorted(t.params))))
        paras = (self._boilerplate(host), f"Products: {shown}.")
        return Page(None if t.params else "/shop", "Shop", paras, (*links, "/"))

    def _products(self, host: str, key: str) -> list[str]:
        """``PRODUCTS_SHOWN`` of the host's ``PRODUCT_POOL`` names, picked by ``key``."""
        pool_rng = _rng(self.seed, host, "products")
        pool = [_title(pool_rng) for _ in range(PRODUCT_POOL)]
        rng = _rng(self.seed, host, "shown", key)
        return [pool.pop(_below(rng, len(pool))) for _ in range(PRODUCTS_SHOWN)]

    def _catalogue_site(self, host: str) -> list[Page]:
        """300 products of one template whose texts really differ: all required."""
        first = [f"/product/{n}" for n in range(1, CATALOGUE_ROOT_LINKS + 1)]
        return [self._distinct(host, "/", first),
                *(self._product(host, n) for n in range(1, CATALOGUE_SIZE + 1))]

    def _product(self, host: str, n: int) -> Page:
        """Product ``n`` links ``n+1``, ``n+2``, two others by hash, and ``/``."""
        rng = _rng(self.seed, host, "related", n)
        near = [m for m in (n + 1, n + 2) if m <= CATALOGUE_SIZE]
        others = [m + 1 for m in _draw(rng, CATALOGUE_SIZE, 2, {n - 1, *(m - 1 for m in near)})]
        links = [f"/product/{m}" for m in [*near, *others]]
        return self._distinct(host, f"/product/{n}", [*links, "/"], words=PRODUCT_WORDS)


def _event_path(day: dt.date) -> str:
    return f"/events/{day.year:04d}/{day.month:02d}/{day.day:02d}"


def _day_path(day: dt.date) -> str:
    return f"/cal/{day.year:04d}/{day.month:02d}/{day.day:02d}"


def _months_away(day: dt.date, months: int) -> dt.date:
    """The same day ``months`` away, or that month's last day when it is shorter."""
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    month += 1
    return dt.date(year, month, min(day.day, calendar.monthrange(year, month)[1]))

