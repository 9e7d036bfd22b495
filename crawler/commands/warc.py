"""``scrapy warc``: get a page back from the crawl's archive, recover a killed writer's file.

::

    scrapy warc get URL [-o FILE] [--headers]
    scrapy warc recover [FILE ...]

The archive is found as the crawl finds it: ``WARC_DIR`` (default
``output/warc``, never inside ``JOBDIR``; ``-s WARC_DIR=...``). ``get`` looks
the URL up (its canonical form too) in the CDXJ indexes next to the WARC
files and prints the newest capture's payload exactly as the server sent it
(still compressed if it was sent with a ``Content-Encoding``); a revisit
record is followed to the capture it refers to. ``recover`` turns the
``.open`` files of workers that were killed into complete, valid files (a
file a live worker still writes is locked and left alone).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from crawler.pipelines.warc import warc_dir
from crawler.urls import canonical_url
from crawler.warc import cdxj
from crawler.warc.cdxj import CdxjEntry, lookup, read_record
from crawler.warc.files import RecoverError, recover

SUBCOMMANDS = ("get", "recover")


class Command(ScrapyCommand):
    """The ``scrapy warc`` command (see the module docstring)."""

    requires_project = True
    requires_crawler_process = False

    def syntax(self) -> str:
        return "get URL [-o FILE] [--headers] | recover [FILE ...]"

    def short_desc(self) -> str:
        return "Get a page back from the WARC archive; recover files of killed workers"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group(title="WARC Options")
        group.add_argument("-o", "--output", metavar="FILE",
                           help="get: write the body to FILE instead of standard output")
        group.add_argument("--headers", action="store_true",
                           help="get: print the status line and headers before the body")

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
        head = b""
        if opts.headers:
            lines = [f"HTTP/1.1 {record.status}", *(f"{k}: {v}" for k, v in record.headers)]
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if opts.output:
            Path(opts.output).write_bytes(head + record.payload)
        else:
            sys.stdout.buffer.write(head + record.payload)
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
