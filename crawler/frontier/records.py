"""Requests as they cross Redis: a small JSON record, never pickle.

A record is a JSON object with short keys::

    {"u": "/p/1?b=2&a=1",        # the URL to send (crawler.urls.request_url),
                                 # without its origin when stored with its host
                                 # (always, in the frontier); its identity, the
                                 # canonical form, is the fingerprint beside it
     "d": 2,                     # depth
     "p": -2,                    # priority (omitted when 0)
     "cb": "parse",              # spider method for the callback (omitted: parse)
     "eb": "on_error",           # spider method for the errback (omitted: the
                                 # spider's ``frontier_errback``, else none;
                                 # "" for none when the spider has one)
     "k": {...},                 # cb_kwargs (omitted when empty)
     "r": "/",                   # meta "referrer" on the same origin, relative
     "m": {...},                 # whitelisted meta (FRONTIER_META_KEYS)
     "lm": 1717200000}           # when the page last changed, by its sitemap
                                 # (Unix s; crawler.sitemaps.LASTMOD_META)

Host queues hold millions of records, and every one of them would repeat
its host: writing URLs (and same-site referrers) relative to the host's
origin keeps a typical record under 64 bytes, the size up to which Redis
keeps a sorted set in its compact encoding (about half the memory).

What a user gives up against an in-memory scheduler: callbacks must be
methods of the spider (no lambdas or functions of other objects), only
GET requests without a body, no per-request headers or cookies, and only the
meta keys listed in ``FRONTIER_META_KEYS`` survive, with JSON values. A request
that breaks one of these is refused with an error that names the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from scrapy import Request, Spider

from crawler.sitemaps import LASTMOD_META
from crawler.urls import VERBATIM_META, host_key, host_origin

#: Meta keys that survive the trip through Redis by default.
DEFAULT_META_KEYS: tuple[str, ...] = (
    "depth",
    "referrer",
    "retry_times",
    "download_timeout",
    "dont_redirect",
    "dont_retry",
    "handle_httpstatus_list",
    "handle_httpstatus_all",
    "dont_obey_robotstxt",
    "max_retry_times",
    "redirect_times",
    "redirect_urls",
    "redirect_reasons",
    # links off the crawl's scope (crawler/middlewares/scope.py HOPS_META)
    "scope_hops",
    # a seed stays one once claimed (crawler/seeds.py SEED_META): the crawl
    # report says what became of it, a refusal of it is a seed's
    "broad_seed",
)


class RecordError(ValueError):
    """A request that cannot cross Redis; the message names the field."""


def to_record(
    request: Request, url: str, spider: Spider, meta_keys: Iterable[str], host: str | None = None
) -> str:
    """Serialize ``request`` (with ``url``, the form to send) to a JSON record.

    With ``host`` (the URL's host key) the URL and a same-origin referrer
    are written relative to the host's origin; :func:`from_record` must then
    be given the same host.
    """
    if request.method != "GET":
        raise RecordError(f"field 'method': only GET requests can be queued, not {request.method}")
    if request.body:
        raise RecordError("field 'body': requests with a body cannot be queued")
    origin = host_origin(host) + "/" if host else None
    record: dict[str, Any] = {"u": _relative(url, origin), "d": int(request.meta.get("depth", 0))}
    if request.priority:
        record["p"] = int(request.priority)
    _add_callback(record, "cb", request.callback, spider, default="parse")
    default_eb = getattr(spider, "frontier_errback", None)
    if request.errback is None and default_eb:
        record["eb"] = ""
    _add_callback(record, "eb", request.errback, spider, default=default_eb)
    if request.cb_kwargs:
        record["k"] = _jsonable("cb_kwargs", request.cb_kwargs)
    meta = {k: request.meta[k] for k in meta_keys if k in request.meta and k != "depth"}
    referrer = meta.get("referrer")
    if origin and isinstance(referrer, str) and referrer.startswith(origin):
        record["r"] = _relative(meta.pop("referrer"), origin)
    if meta:
        record["m"] = {k: _jsonable(f"meta[{k!r}]", v) for k, v in meta.items()}
    lastmod = request.meta.get(LASTMOD_META)
    if isinstance(lastmod, int) and not isinstance(lastmod, bool):
        record["lm"] = lastmod  # (last: lua/claim_back.lua reads "d" and "p" in place)
    written = _dumps(record)
    if len(written) > MAX_RECORD_CHARS:
        raise RecordError(f"record: {len(written):,} characters (cb_kwargs and meta), over "
                          f"{MAX_RECORD_CHARS:,}")
    return written


def _dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def with_field(record: str, key: str, value: Any) -> str:
    """``record`` with ``key`` set to ``value`` (JSON), written as records are."""
    data = json.loads(record)
    data[key] = value
    return _dumps(data)


def _relative(url: str, origin: str | None) -> str:
    return url[len(origin) - 1:] if origin and url.startswith(origin) else url


def _add_callback(
    record: dict[str, Any], key: str, func: Any, spider: Spider, default: str | None
) -> None:
    if func is None:
        return
    name = getattr(func, "__name__", None)
    if getattr(func, "__self__", None) is not spider or name is None:
        field = "callback" if key == "cb" else "errback"
        raise RecordError(f"field '{field}': {func!r} is not a method of the spider")
    if name != default:
        record[key] = name


def _jsonable(field: str, value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise RecordError(f"field '{field}': not JSON-serializable ({exc})") from None
    return value


def record_url(data: dict[str, Any], host: str | None = None) -> str:
    """The absolute URL of a decoded record (stored with ``host``)."""
    return _absolute(str(data.get("u", "")), host)


def _absolute(url: str, host: str | None) -> str:
    if url.startswith("/"):
        if not host:
            raise RecordError("field 'u': a relative URL needs its host")
        return host_origin(host) + url
    return url


#: The largest record a worker writes or reads: far above a real one (under
#: 64 bytes for a link), far below what would hurt a worker that reads it.
MAX_RECORD_CHARS = 65536
#: Fields a record may have, and the JSON types of their values ("v": a done
#: URL's revisit state, :mod:`crawler.revisit`).
_FIELDS: dict[str, tuple[type, ...]] = {
    "u": (str,), "d": (int,), "p": (int,), "cb": (str,), "eb": (str,), "k": (dict,),
    "r": (str,), "m": (dict,), "v": (str,), "lm": (int,),
}
_MAX_DEPTH = 1_000_000
_MAX_PRIORITY = 2**31
#: Names on every Scrapy spider that are not callbacks (``start``, ``close``,
#: ``crawler``...): a record may name the spider's own methods only.
_NOT_CALLBACKS = frozenset(name for name in dir(Spider) if name != "parse")


def decode(record: str | bytes, host: str | None = None,
           meta_keys: Iterable[str] | None = None) -> dict[str, Any]:
    """A record's fields, checked: anyone who can write to the frontier's Redis
    can plant one, and a worker must not turn it into a request the frontier
    would never have queued (another host, another scheme, a ``file:`` URL,
    meta the frontier does not carry such as ``proxy``). Raises
    :class:`RecordError` naming the field."""
    if len(record) > MAX_RECORD_CHARS:
        raise RecordError(f"record: {len(record):,} characters, over {MAX_RECORD_CHARS:,}")
    try:
        data = json.loads(record)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError(f"record: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RecordError(f"record: not a JSON object but {type(data).__name__}")
    for key, value in data.items():
        types = _FIELDS.get(key)
        if types is None:
            raise RecordError(f"field {key!r}: unknown")
        if not isinstance(value, types) or isinstance(value, bool):
            raise RecordError(f"field {key!r}: {type(value).__name__}, not "
                              + " or ".join(t.__name__ for t in types))
    if not 0 <= data.get("d", 0) <= _MAX_DEPTH:
        raise RecordError(f"field 'd': depth {data['d']} out of range")
    if not -_MAX_PRIORITY <= data.get("p", 0) <= _MAX_PRIORITY:
        raise RecordError(f"field 'p': priority {data['p']} out of range")
    if not data.get("v", "").isprintable():  # its validator becomes a request header
        raise RecordError("field 'v': control characters")
    _check_url("u", data.get("u", ""), host, same_host=True)
    if "r" in data:
        _check_url("r", data["r"], host, same_host=False)
    if meta_keys is not None and "m" in data:
        unknown = data["m"].keys() - meta_keys
        if unknown:
            raise RecordError(f"field 'm': keys not in FRONTIER_META_KEYS: {sorted(unknown)}")
    return data


def _check_url(field: str, url: str, host: str | None, same_host: bool) -> None:
    """A stored URL (relative to ``host``'s origin when it starts with ``/``)
    must be http(s), and with ``same_host`` of ``host`` when one is given. A
    relative one is the host's by construction: only an absolute one is parsed."""
    absolute = _absolute(url, host)
    if absolute.partition(":")[0].lower() not in ("http", "https"):
        raise RecordError(f"field {field!r}: not an http(s) URL")
    if same_host and host is not None and absolute is url and host_key(url) != host:
        raise RecordError(f"field {field!r}: not a URL of its queue's host {host}")


def _method(spider: Spider, field: str, name: str) -> Any:
    method = None if name.startswith("_") or name in _NOT_CALLBACKS \
        else getattr(spider, name, None)
    if not callable(method):
        raise RecordError(f"field {field!r}: {name!r} is not a method of the spider")
    return method


def from_record(record: str | bytes, spider: Spider, host: str | None = None,
                meta_keys: Iterable[str] | None = None) -> Request:
    """Rebuild the request of a record (callbacks looked up on the spider),
    checked by :func:`decode`."""
    data = decode(record, host, meta_keys)
    meta = dict(data.get("m", {}))
    meta["depth"] = data.get("d", 0)
    meta[VERBATIM_META] = True  # (a record holds the URL's sent form)
    if "r" in data:
        meta["referrer"] = _absolute(data["r"], host)
    if "lm" in data:
        meta[LASTMOD_META] = data["lm"]
    eb = data.get("eb", getattr(spider, "frontier_errback", None))
    return Request(
        record_url(data, host),
        callback=_method(spider, "cb", data.get("cb", "parse")),
        errback=_method(spider, "eb", eb) if eb else None,
        priority=data.get("p", 0),
        meta=meta,
        cb_kwargs=data.get("k"),
        dont_filter=True,  # the frontier deduplicated it already
    )
