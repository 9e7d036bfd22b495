"""The item a broad crawl produces: one per fetched page."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class PageItem:
    """A fetched response and where it sits in the crawl.

    Pipelines decide where a page goes (JSON lines of metadata by default, WARC
    in a later issue). ``body`` is the raw body as received (after transfer
    decoding); feeds that only want metadata leave it out with their
    ``fields`` option and keep ``length``.
    """

    url: str  # the URL that was requested first (before redirects)
    final_url: str  # the URL that answered, after redirects
    status: int
    headers: dict[str, list[str]]
    body: bytes = field(repr=False)
    length: int
    content_type: str | None
    fetched_at: str  # ISO 8601, UTC
    depth: int
    referrer: str | None
    redirects: list[str] = field(default_factory=list)  # every URL of the chain, in order
