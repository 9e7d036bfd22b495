"""URL identity helpers shared by the model, the server and ledger analysis.

A crawler may request the same page under many spellings (tracking
parameters, fragments, ``:80``, upper-case host, dot segments).  These helpers
map every spelling the simulated web emits back to one identity
``(host, canonical path)`` so that tests can count fetches per real page.
"""

from __future__ import annotations

import posixpath
from urllib.parse import parse_qsl, urlencode, urlsplit

#: Query parameters that carry no page identity (besides every ``utm_*``).
TRACKING_PARAMS: frozenset[str] = frozenset(
    {
        "gclid",
        "fbclid",
        "msclkid",
        "dclid",
        "gbraid",
        "wbraid",
        "yclid",
        "mc_cid",
        "mc_eid",
        "igshid",
        "_ga",
        "_gl",
    }
)


def is_tracking_param(name: str) -> bool:
    """True for ``utm_*`` and the click-id parameters in ``TRACKING_PARAMS``."""
    name = name.lower()
    return name.startswith("utm_") or name in TRACKING_PARAMS


def remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4 (``posixpath.normpath`` would eat slashes)."""
    out: list[str] = []
    segments = path.split("/")
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if seg in (".", ".."):
            if seg == ".." and len(out) > 1:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(seg)
    result = "/".join(out)
    if path.startswith("/") and not result.startswith("/"):
        result = "/" + result
    return result or "/"


def canonical_path(raw: str) -> str:
    """Path+query with fragment, dot segments and tracking parameters removed
    and the remaining parameters sorted."""
    raw = raw.split("#", 1)[0]
    path, _, query = raw.partition("?")
    if not path.startswith("/"):
        path = "/" + path
    path = remove_dot_segments(path)
    params = sorted(
        (k, v) for k, v in parse_qsl(query, keep_blank_values=True) if not is_tracking_param(k)
    )
    return path + ("?" + urlencode(params) if params else "")


def split_host(netloc: str) -> str:
    """Lower-cased host name of ``[userinfo@]host[:port]``."""
    netloc = netloc.rsplit("@", 1)[-1]
    if netloc.startswith("["):
        return netloc[: netloc.find("]") + 1].lower()
    return netloc.split(":", 1)[0].lower().rstrip(".")


def url_identity(url: str) -> tuple[str, str]:
    """``(host, canonical path)`` of an absolute http URL."""
    parts = urlsplit(url)
    raw = parts.path or "/"
    if parts.query:
        raw += "?" + parts.query
    return split_host(parts.netloc), canonical_path(raw)


def relative_href(base_path: str, target_path: str) -> str:
    """A relative reference that resolves from ``base_path`` to ``target_path``
    (``p/3``, ``../p/4``, ``./`` ...)."""
    base_dir = base_path[: base_path.rfind("/") + 1]
    cut = target_path.rfind("/") + 1
    target_dir, name = target_path[:cut], target_path[cut:]
    rel = posixpath.relpath(target_dir, base_dir)
    if rel == ".":
        return name or "./"
    return f"{rel}/{name}"
