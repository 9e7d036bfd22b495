"""``scrapy warc``: get a page back from the crawl's archive, recover a killed writer's file.

::

    scrapy warc get URL [-o FILE] [--headers] [--decoded]
    scrapy warc recover [FILE ...]

The archive is found as the crawl finds it: ``WARC_DIR`` (default
``output/warc``, never inside ``JOBDIR``; ``-s WARC_DIR=...``). ``get`` looks
the URL up (its canonical form too) in the CDXJ indexes next to the WARC
files and prints the newest capture's payload exactly as the server sent it
(still compressed if it was sent with a ``Content-Encoding``); a revisit
record is followed to the capture it refers to. ``--headers`` puts the status
line and headers first, as recorded (the server's reason phrase too).
``--decoded`` gives the body as the spider saw it: a chunked
``Transfer-Encoding`` undone (warcio's reader; this crawler's own records are
stored de-chunked) and then the ``Content-Encoding`` (gzip, deflate, br,
zstd, several in a row) by Scrapy's ``HttpCompressionMiddleware`` itself,
within ``DOWNLOAD_MAXSIZE``; an encoding it cannot undo is an error (exit
code 1), never a body passed off as decoded. The headers stay as recorded. ``recover`` turns the
``.open`` files of workers that were killed into complete, valid files (a
file a live worker still writes is locked and left alone).
"""

from __future__ import annotations

import argparse
import sys
from io import BytesIO
from pathlib import Path

from scrapy import Request, Spider
from scrapy.commands import ScrapyCommand
from scrapy.crawler import Crawler
from scrapy.downloadermiddlewares.httpcompression import HttpCompressionMiddleware
from scrapy.exceptions import IgnoreRequest, UsageError
from scrapy.http import Headers, Response
from scrapy.settings import BaseSettings
from scrapy.statscollectors import DummyStatsCollector
from warcio.bufferedreaders import ChunkedDataReader

from crawler.pipelines.warc import warc_dir
from crawler.urls import canonical_url
from crawler.warc import cdxj
from crawler.warc.cdxj import CdxjEntry, StoredRecord, lookup, read_record
from crawler.warc.recovery import RecoverError, recover

SUBCOMMANDS = ("get", "recover")


class Command(ScrapyCommand):
    """The ``scrapy warc`` command (see the module docstring)."""

    requires_project = True
    requires_crawler_process = False

    def syntax(self) -> str:
        return "get URL [-o FILE] [--headers] [--decoded] | recover [FILE ...]"

    def short_desc(self) -> str:
        return "Get a page back from the WARC archive; recover files of killed workers"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group(title="WARC Options")
        group.add_argument("-o", "--output", metavar="FILE",
                           help="get: write the body to FILE instead of standard output")
        group.add_argument("--headers", action="store_true",
                           help="get: print the status line and headers, as recorded, "
                           "before the body")
        group.add_argument("--decoded", action="store_true",
                           help="get: undo the body's Transfer-Encoding and Content-Encoding "
                           "(gzip, deflate, br, zstd), as the spider saw it")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if not args or args[0] not in SUBCOMMANDS:
            raise UsageError(f"give one of: {', '.join(SUBCOMMANDS)}")
        assert self.settings is not None
        directory = warc_dir(self.settings)
        if args[0] == "get":
            if len(args) != 2:
                raise UsageError("get takes one URL")
            self._get(directory, args[1], opts)
        else:
            self._recover(directory, [Path(a) for a in args[1:]])

    def _get(self, directory: Path, url: str, opts: argparse.Namespace) -> None:
        entry = _newest_capture(directory, url)
        if entry is None:
            self._fail(f"{url}: not in the archive at {directory}")
            return
        record = read_record(directory / entry.filename, entry.offset)
        body = record.payload
        if opts.decoded:
            assert self.settings is not None
            try:
                body = decoded_body(record, url, self.settings)
            except DecodeError as exc:
                self._fail(f"{url}: {exc}")
                return
        head = b""
        if opts.headers:
            status_line = record.status_line or f"HTTP/1.1 {record.status}"
            lines = [status_line, *(f"{k}: {v}" for k, v in record.headers)]
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if opts.output:
            Path(opts.output).write_bytes(head + body)
        else:
            sys.stdout.buffer.write(head + body)
            sys.stdout.buffer.flush()

    def _recover(self, directory: Path, paths: list[Path]) -> None:
        paths = paths or sorted(directory.glob("*.warc.gz.open"))
        if not paths:
            print(f"nothing to recover in {directory}")
        for path in paths:
            try:
                done = recover(path)
            except (RecoverError, OSError) as exc:
                self._fail(f"{path}: {exc}")
                continue
            print(f"{path.name}: {done.records} records kept, {done.cut_bytes} bytes of an "
                  f"unfinished record cut -> {done.path.name}")

    def _fail(self, message: str) -> None:
        print(message, file=sys.stderr)
        self.exitcode = 1


class DecodeError(Exception):
    """A stored body that ``--decoded`` cannot turn into what the spider saw."""


def decoded_body(record: StoredRecord, url: str, settings: BaseSettings) -> bytes:
    """The body of ``record`` with its transfer and content codings undone.

    Content codings are undone by Scrapy's own :class:`HttpCompressionMiddleware`,
    so the body is the one the spider parsed (same encodings, same order, same
    ``DOWNLOAD_MAXSIZE``), not a second opinion. It needs a crawler: a bare one
    over the command's settings, with a stats collector that keeps nothing.
    """
    headers = Headers(record.headers)
    body = record.payload
    codings = b",".join(headers.getlist("Transfer-Encoding")).lower()
    if b"chunked" in [c.strip() for c in codings.split(b",")]:
        body = ChunkedDataReader(BytesIO(body), raise_exceptions=True).read()
        del headers["Transfer-Encoding"]
    if not headers.getlist("Content-Encoding"):
        return body
    crawler = Crawler(Spider, settings)
    crawler.stats = DummyStatsCollector(crawler)
    middleware = HttpCompressionMiddleware(crawler=crawler)
    response = Response(url, status=record.status or 200, headers=headers, body=body)
    try:
        decoded = middleware.process_response(Request(url), response)
    except IgnoreRequest as exc:  # beyond DOWNLOAD_MAXSIZE once decompressed
        raise DecodeError(str(exc)) from None
    except Exception as exc:
        # A damaged body: each decompressor has its own error class (OSError,
        # zlib.error, brotli.error, ZstdError), none shared but Exception.
        raise DecodeError(f"cannot undo Content-Encoding "
                          f"{headers.get('Content-Encoding', b'').decode('latin-1')!r}: "
                          f"{exc}") from None
    assert isinstance(decoded, Response)
    left = b", ".join(decoded.headers.getlist("Content-Encoding")).decode("latin-1")
    if left:
        raise DecodeError(f"cannot undo Content-Encoding {left!r} (Scrapy undoes gzip, "
                          "deflate, br and zstd)")
    return decoded.body


def _newest_capture(directory: Path, url: str) -> CdxjEntry | None:
    """The newest response for ``url``, or the response a newest revisit refers to."""
    entries = lookup(directory, url)
    canonical = canonical_url(url)
    if not entries and canonical and canonical != url:
        entries = lookup(directory, canonical)
    if not entries:
        return None
    newest = entries[0]
    if not newest.revisit:
        return newest
    originals = [e for e in cdxj.entries(directory) if e.digest == newest.digest and not e.revisit]
    return originals[0] if originals else None
