"""Sites and margins the real-socket web's crawl tests share."""

from __future__ import annotations

from .spec import Page, links_to

#: A robots.txt that allows everything.
ALLOW_ALL = "User-agent: *\nAllow: /\n"

#: The start gate (crawler/frontier/lua/start.lua) spaces the moments requests
#: pass it; the server stamps a request when its head has arrived. A request
#: on a fresh connection (TCP, TLS) reaches the server a little later after its
#: gate than one on a kept-alive connection, which shortens the gap seen at the
#: server by up to the handler's stale-turn limit (50 ms,
#: crawler/middlewares/pacing.py STALE_AFTER_S) plus a few ms of writing.
SLACK = 0.06


def chain_site(n_pages: int, *, slow: frozenset[int] = frozenset(),
               delay: float = 0.0) -> dict[str | bytes, Page]:
    """``/`` linking to ``/1`` ... ``/n_pages-1`` (so the whole site is queued after
    one page), each page linking on to the next; pages in ``slow`` answer after
    ``delay`` seconds (a slow server, so that two requests open at once overlap)."""
    pages: dict[str | bytes, Page] = {"/": links_to(*(f"/{k}" for k in range(1, n_pages)))}
    for k in range(1, n_pages):
        pages[f"/{k}"] = links_to(f"/{k + 1}" if k + 1 < n_pages else "/",
                                  title=f"page {k}", delay=delay if k in slow else 0.0)
    return pages


def site_targets(n_pages: int) -> list[bytes]:
    """Every target of a :func:`chain_site` and robots.txt, sorted."""
    return sorted([b"/robots.txt", b"/", *(f"/{k}".encode() for k in range(1, n_pages))])
