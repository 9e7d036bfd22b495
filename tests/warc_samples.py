"""Exchanges to archive and a check of the result, for the WARC tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from warcio.cli import main as warcio_main

from crawler.warc.exchange import Exchange

INFO = {"software": "broadcrawl/test", "format": "WARC File Format 1.1", "isPartOf": "test"}
RECEIVED = 1_704_164_645.123456  # 2024-01-02T03:04:05.123456Z
HTML = b"<html><body>hello</body></html>"


def exchange(url: str, body: bytes = HTML, *, status: int = 200, reason: str = "OK",
             headers: list[tuple[str, str]] | None = None, received_at: float = RECEIVED,
             **kwargs: object) -> Exchange:
    """A GET of ``url`` as the downloader would hand it to the archive."""
    host = url.split("/")[2]
    return Exchange(
        url=url, method="GET",
        request_headers=[("Host", host), ("User-Agent", "broadcrawl/test")],
        request_body=b"", status=status, reason=reason,
        response_headers=headers if headers is not None else [
            ("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(body)))],
        body=body, received_at=received_at, **kwargs)  # type: ignore[arg-type]


def warcio_check(*paths: Path) -> int:
    """Exit status of ``warcio check`` (it verifies every block and payload digest)."""
    with pytest.raises(SystemExit) as done:
        warcio_main(["check", *map(str, paths)])
    return int(done.value.code or 0)
