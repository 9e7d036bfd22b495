"""The item a broad crawl produces: one per fetched page."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class PageItem:
    """A fetched response and where it sits in the crawl.

    Pipelines decide where a page goes: WARC files (the archive captures the
    exchange as received, see :mod:`crawler.middlewares.warc`) and JSON lines
    of metadata. ``body`` is the body after content decoding; feeds that only
    want metadata leave it out with their ``fields`` option and keep
    ``length``. ``warc_file`` and ``warc_offset`` say where the page's
    response record is, once :class:`crawler.pipelines.warc.WarcPipeline` has
    seen it written; ``warc`` is that pipeline's handle (never exported).
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
    #: A revisit the server answered 304 Not Modified: no body, nothing changed.
    not_modified: bool = False
    warc_file: str | None = None
    warc_offset: int | None = None
    warc: Any = field(default=None, repr=False, compare=False)
