"""One HTTP exchange as the crawler sent and received it: the unit of the archive.

An :class:`Exchange` is captured by :class:`crawler.middlewares.warc.WarcCaptureMiddleware`
next to the downloader, before Scrapy decompresses bodies, follows redirects
or retries, so the archive holds what the server sent (``Content-Encoding``
kept), and redirects, error statuses and retried answers are archived too.
It is plain data (no Scrapy objects), so the writer thread can own it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: ``WARC-Truncated`` values (ISO 28500 5.13).
TRUNCATED_LENGTH = "length"
TRUNCATED_TIME = "time"
TRUNCATED_DISCONNECT = "disconnect"
TRUNCATED_UNSPECIFIED = "unspecified"


@dataclass(slots=True)
class Exchange:
    """A request and its response, as exchanged on the wire (near enough).

    Header values are ``str`` decoded as Latin-1 (HTTP's octets, losslessly).
    ``body`` is the payload after transfer decoding (de-chunked) and before
    content decoding; ``Transfer-Encoding`` is therefore left out of
    ``response_headers`` so that readers do not de-chunk it a second time.

    ``request_head`` and ``response_head``, when the download handler could
    keep them (:mod:`crawler.wiretap`), are the heads as they went over the
    wire (request line or status line, header lines, the blank line), and
    the records hold those bytes: order, case, duplicates, ``Connection``,
    folded lines. Left out of them, as of the parsed headers: the
    ``Transfer-Encoding`` lines (the body is stored de-chunked) and proxy
    credentials.
    """

    url: str  # WARC-Target-URI: the URL requested (each redirect hop is its own exchange)
    method: str
    request_headers: list[tuple[str, str]]  # as sent, Host first
    request_body: bytes
    status: int
    reason: str
    response_headers: list[tuple[str, str]]
    body: bytes = field(repr=False)
    received_at: float  # epoch seconds when the response was complete
    protocol: str = "HTTP/1.1"
    ip_address: str | None = None  # the server's, when connected directly (not via a proxy)
    truncated: str | None = None  # a TRUNCATED_* value when the body was cut
    kind: str = "page"  # "page" or "robots"
    #: A 304 to a revisit's conditional request: the payload digest of the
    #: capture it stands for, as short as the frontier kept it ("sha1:" + its
    #: first characters; the digest index knows the whole).
    not_modified_of: str | None = None
    request_head: bytes | None = None
    response_head: bytes | None = None

    @property
    def size(self) -> int:
        """Bytes this exchange holds in memory (for the writer queue's bound)."""
        return len(self.body) + len(self.request_body) + 512 + sum(
            len(k) + len(v) for k, v in (*self.request_headers, *self.response_headers)
        ) + len(self.request_head or b"") + len(self.response_head or b"")
