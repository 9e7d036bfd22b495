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
     "m": {...}}                 # whitelisted meta (FRONTIER_META_KEYS)

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

from crawler.urls import host_origin

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
    return _dumps(record)


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


def from_record(record: str, spider: Spider, host: str | None = None) -> Request:
    """Rebuild the request of a record (callbacks looked up on the spider)."""
    data = json.loads(record)
    meta = dict(data.get("m", {}))
    meta["depth"] = data.get("d", 0)
    if "r" in data:
        meta["referrer"] = _absolute(data["r"], host)
    eb = data.get("eb", getattr(spider, "frontier_errback", None))
    errback = getattr(spider, eb) if eb else None
    return Request(
        record_url(data, host),
        callback=getattr(spider, data.get("cb", "parse")),
        errback=errback,
        priority=data.get("p", 0),
        meta=meta,
        cb_kwargs=data.get("k"),
        dont_filter=True,  # the frontier deduplicated it already
    )
