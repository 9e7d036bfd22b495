"""``scrapy partition``: split a seed file into N files by host, for N workers.

::

    scrapy partition SEEDS -n N -o DIR [--force]
    producer | scrapy partition - -n 8 -o seeds/

writes ``DIR/part-00000.txt`` ... ``DIR/part-{N-1}.txt`` (five digits, more
if N needs them). A seed goes to file ``partition_of(host_key(url), N)``:
the function and the host key (``scheme://host:port``) with which the
frontier places hosts in its ``FRONTIER_PARTITIONS`` partitions
(:mod:`crawler.frontier.keys`), so seeds and frontier agree on which hosts go
together. With N equal to the number of worker machines, every seed of a host
lands in the same file, whatever the order of the input and on every run,
machine and Python version. When N divides ``FRONTIER_PARTITIONS``, each
frontier partition falls whole into one file (file ``p % N`` holds frontier
partition ``p``); with N equal to it, file p holds exactly partition p's hosts.
(The frontier does not pin its partitions to workers: the agreement is on the
grouping of hosts, not on who crawls them.)

Seed lines are read as the spider reads them (:mod:`crawler.seeds`: BOM,
CRLF, comments, blanks; ``BROAD_SEEDS_ADD_SCHEME`` and ``URL_STRIP_PARAMS``
honoured), as a stream: a ten-million-line file costs no more memory than a
short one. Each output line is the seed as it will be sent (see
:mod:`crawler.partition` for why), in input order. A malformed line is
reported on standard error as ``seeds.txt:12: reason: 'text'`` and left out.

A summary goes to standard output: lines read, seeds written, malformed lines,
distinct hosts, and the balance over the files of hosts (what the hash evens
out) and of seeds (which follow their hosts). Existing part files are never
overwritten without ``--force``, and a split that fails leaves DIR as it was.
Exit code 1, with a one-line error, when the input is unreadable, nothing
valid was found or DIR cannot be written; 0 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from crawler.partition import (
    PartFiles,
    PartitionError,
    SplitReport,
    UnreadableInput,
    split_lines,
)
from crawler.seeds import SeedError
from crawler.urls import stripper_from_settings

STDIN = "-"


class Command(ScrapyCommand):
    """The ``scrapy partition`` command (see the module docstring)."""

    requires_project = True
    requires_crawler_process = False

    def syntax(self) -> str:
        return "SEEDS -n N -o DIR [--force]"

    def short_desc(self) -> str:
        return "Split a seed file into N files by host, with the frontier's partition hash"

    def long_desc(self) -> str:
        return (
            "Writes DIR/part-00000.txt ... one seed URL a line, as it will be sent; all seeds "
            "of a host go to file partition_of(host_key(url), N), the frontier's hash, so with "
            "N workers a host is never split. SEEDS '-' reads standard input. Malformed lines are "
            "reported on stderr (file:line: reason) and left out. Prints lines read, seeds "
            "written, malformed, distinct hosts and the balance of hosts and seeds per file."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group(title="Partition Options")
        group.add_argument("-n", "--partitions", type=int, metavar="N",
                           help="number of files (the number of workers)")
        group.add_argument("-o", "--output-dir", metavar="DIR",
                           help="folder for part-NNNNN.txt (created if missing)")
        group.add_argument("--force", action="store_true",
                           help="replace part files already in DIR (and remove stale ones)")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        path = _parse(args, opts)
        settings = self.settings
        assert settings is not None
        try:
            with _seed_lines(path) as (lines, source), PartFiles(
                Path(opts.output_dir), opts.partitions, force=opts.force
            ) as parts:
                report = split_lines(
                    lines, source=source, partitions=opts.partitions, write=parts.write,
                    on_error=_report_error,
                    add_scheme=settings.getbool("BROAD_SEEDS_ADD_SCHEME", False),
                    stripper=stripper_from_settings(settings),
                )
                if not report.seeds:
                    raise PartitionError(
                        f"{source}: no valid seed in {report.lines:,} line(s) "
                        f"({report.malformed:,} malformed); nothing written")
                stale = parts.commit()
        except PartitionError as exc:
            self._fail(str(exc))
            return
        except KeyboardInterrupt:
            self.exitcode = 130
            return
        _print_summary(report, source, parts, stale)

    def _fail(self, message: str) -> None:
        print(message, file=sys.stderr)
        self.exitcode = 1


def _parse(args: list[str], opts: argparse.Namespace) -> str:
    """The one SEEDS argument, once the options make sense."""
    unknown = [a for a in args if a.startswith("-") and a != STDIN]
    if unknown:
        raise UsageError(f"unknown option(s): {' '.join(unknown)}")
    if len(args) != 1:
        raise UsageError("give one seed file (or - for standard input)")
    if opts.partitions is None or opts.partitions < 1:
        raise UsageError("-n N: the number of files, 1 or more")
    if not opts.output_dir:
        raise UsageError("-o DIR: the folder for the part files")
    return args[0]


@contextlib.contextmanager
def _seed_lines(path: str) -> Iterator[tuple[Iterable[bytes], str]]:
    """The raw lines of SEEDS and the name errors give them; unreadable is one clear error."""
    if path == STDIN:
        yield sys.stdin.buffer, "<stdin>"
        return
    try:
        handle = Path(path).open("rb")  # noqa: SIM115 - closed below, after the split
    except OSError as exc:
        raise UnreadableInput(f"cannot read {path}: {exc.strerror or exc}") from exc
    with handle:
        yield handle, path


def _report_error(error: SeedError) -> None:
    print(error, file=sys.stderr)


def _print_summary(report: SplitReport, source: str, parts: PartFiles,
                   stale: list[Path]) -> None:
    first, last = parts.names[0], parts.names[-1]
    names = first if first == last else f"{first} .. {last}"
    lines = report.summary(source)
    lines.insert(1, f"{report.partitions:,} file(s) in {parts.directory}: {names} "
                    "(by partition_of(host_key), the frontier's hash)")
    if stale:
        lines.append(f"removed {len(stale):,} part file(s) of an earlier split "
                     f"({stale[0].name} ...)")
    print("\n".join(lines))
