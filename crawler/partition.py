"""Split a seed list into N files by host, with the frontier's own hash.

Workers on several machines each take one seed file. For politeness a host
must be fetched from one place only, so all seeds of a host have to land in
the same file; and since the frontier spreads hosts over its partitions with
:func:`crawler.frontier.keys.partition_of`, the split uses that very function
on the very same host key (:func:`crawler.urls.host_key`, ``scheme://host:port``).
Seeds and frontier therefore agree on which hosts go together, on every
machine and Python version (the hash is BLAKE2b, never ``hash()``).

The input is read as a stream and every output file is written as a stream,
so a seed list of tens of millions of lines costs no more memory than a short
one. The one thing kept per host is an 8-byte hash in a set (about 70 bytes
of Python memory a host), for the distinct-host counts of the report.

Each output line is the seed's URL as it will be sent (:func:`crawler.urls.request_url`:
the line as typed, normalised as a browser would), not the line as typed: it is what the
spider would queue anyway, a part file
is itself a clean seed file (no BOM, comments, CRLF or scheme-less lines, so
it does not depend on ``BROAD_SEEDS_ADD_SCHEME``), and anyone can check a
line's file with ``partition_of(host_key(line), N)``. Lines keep the input
order; duplicates are kept (the frontier deduplicates).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

from crawler.frontier.keys import host_hash, partition_of
from crawler.seeds import Seed, SeedError, parse_seed_lines
from crawler.urls import DEFAULT_STRIPPER, ParamStripper, canonical_host_key

#: Digits of a part number at least (``part-00000.txt``, as Hadoop and Spark
#: name theirs); more when N needs them, so names always sort in order.
MIN_DIGITS = 5
PART_NAME = re.compile(r"part-\d+\.txt")
_SPARE_FILES = 32  # descriptors beyond the N outputs: input, stdio, Python's own


class PartitionError(Exception):
    """A split that cannot be done or finished; the message is one line for the operator."""


class UnreadableInput(PartitionError):
    """The seed input cannot be read (missing, a directory, an I/O error mid-way)."""


def part_name(index: int, partitions: int) -> str:
    """File name of part ``index`` of ``partitions``, zero-padded to fit them all."""
    width = max(MIN_DIGITS, len(str(partitions - 1)))
    return f"part-{index:0{width}d}.txt"


def part_of_url(url: str, partitions: int) -> int:
    """The part of a canonical seed URL: the frontier partition of its host key."""
    return partition_of(canonical_host_key(url), partitions)


@dataclass(frozen=True, slots=True)
class Spread:
    """How evenly something is spread over the parts."""

    minimum: int
    maximum: int
    mean: float

    @property
    def ratio(self) -> float:
        """max / mean: 1.0 is perfect; the busiest part does ``ratio`` times its share."""
        return self.maximum / self.mean if self.mean else 1.0

    def __str__(self) -> str:
        return (f"min {self.minimum:,}, max {self.maximum:,}, mean {self.mean:,.1f}, "
                f"spread {self.ratio:.2f} (max/mean)")


def spread(counts: list[int]) -> Spread:
    """The :class:`Spread` of per-part counts."""
    return Spread(min(counts), max(counts), sum(counts) / len(counts))


@dataclass(slots=True)
class SplitReport:
    """What a split read and wrote: the numbers of the command's summary."""

    partitions: int
    lines: int = 0
    seeds: int = 0
    malformed: int = 0
    hosts_per_part: list[int] = field(default_factory=list)
    seeds_per_part: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.hosts_per_part = self.hosts_per_part or [0] * self.partitions
        self.seeds_per_part = self.seeds_per_part or [0] * self.partitions

    @property
    def hosts(self) -> int:
        """Distinct host keys (each counts in exactly one part)."""
        return sum(self.hosts_per_part)

    def summary(self, source: str) -> list[str]:
        """The report as lines of text, for people."""
        return [
            f"{source}: {self.lines:,} lines read, {self.seeds:,} seeds written, "
            f"{self.malformed:,} malformed, {self.hosts:,} distinct hosts",
            f"hosts per file: {spread(self.hosts_per_part)}",
            f"seeds per file: {spread(self.seeds_per_part)}",
        ]


class Splitter:
    """Assigns seeds to parts and keeps the counts of the report.

    Only hosts are balanced: the hash spreads host keys evenly, while seeds
    follow their hosts, so one host with a million seeds makes one big file.
    """

    def __init__(self, partitions: int) -> None:
        if partitions < 1:
            raise ValueError("partitions must be 1 or more")
        self.report = SplitReport(partitions)
        self._seen: set[int] = set()  # 64-bit host hashes: 8 bytes of key a host

    def add(self, seed: Seed) -> int:
        """Count ``seed`` and return its part."""
        # host_key() of a sent-form URL (its origin is the canonical one), without
        # canonicalising it a second time.
        host = canonical_host_key(seed.url)
        part = partition_of(host, self.report.partitions)
        # Distinct hosts by 64-bit hash: a wrong count needs two of ~4e9 hosts to collide.
        hashed = host_hash(host)
        if hashed not in self._seen:
            self._seen.add(hashed)
            self.report.hosts_per_part[part] += 1
        self.report.seeds_per_part[part] += 1
        self.report.seeds += 1
        return part


class CountedLines:
    """Lines of a binary stream, counted as they pass; read errors become :class:`UnreadableInput`.

    The count is the summary's "lines read", blanks and comments included,
    which the seed parser skips without a word.
    """

    def __init__(self, lines: Iterable[bytes], source: str) -> None:
        self._lines = lines
        self.source = source
        self.count = 0

    def __iter__(self) -> Iterator[bytes]:
        lines = iter(self._lines)
        while True:
            try:
                line = next(lines)
            except StopIteration:
                return
            except OSError as exc:
                raise UnreadableInput(
                    f"cannot read {self.source} after line {self.count:,}: {_reason(exc)}"
                ) from exc
            self.count += 1
            yield line


def split_lines(
    lines: Iterable[bytes],
    *,
    source: str,
    partitions: int,
    write: Callable[[int, str], object],
    on_error: Callable[[SeedError], object],
    add_scheme: bool = False,
    stripper: ParamStripper = DEFAULT_STRIPPER,
) -> SplitReport:
    """Route each valid seed of ``lines`` to ``write(part, url)``, each bad one to ``on_error``.

    The pure core of ``scrapy partition``: one pass, nothing kept per line.
    """
    counted = CountedLines(lines, source)
    splitter = Splitter(partitions)
    report = splitter.report
    for parsed in parse_seed_lines(counted, source=source, add_scheme=add_scheme,
                                   stripper=stripper):
        if isinstance(parsed, SeedError):
            report.malformed += 1
            on_error(parsed)
        else:
            write(splitter.add(parsed), parsed.url)
    report.lines = counted.count
    return report


def existing_parts(directory: Path) -> list[Path]:
    """Part files (``part-NNNNN.txt``) already in ``directory``, sorted."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if PART_NAME.fullmatch(p.name))


class PartFiles:
    """The N output files: written under a hidden folder, moved into place on success.

    A split that fails half-way (unreadable input, a full disk, Ctrl-C) leaves
    the directory as it was, never a set of truncated parts that look whole.
    Each file is opened once and written through its buffer. With ``force``,
    parts of an earlier split are replaced, and the ones this split does not
    write (an earlier, larger N) are removed, so the directory holds exactly
    one split.
    """

    def __init__(self, directory: Path, partitions: int, *, force: bool = False) -> None:
        self.directory = directory
        self.partitions = partitions
        self.force = force
        self.names = [part_name(i, partitions) for i in range(partitions)]
        self._staging: Path | None = None
        self._made_directory = False
        self._files: list[IO[str]] = []

    def __enter__(self) -> PartFiles:
        self.open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is not None:
            self.abort()

    def open(self) -> None:
        """Refuse to overwrite (unless forced), then open every part for writing."""
        old = existing_parts(self.directory)
        if old and not self.force:
            raise PartitionError(
                f"{self.directory} already holds {len(old):,} part file(s) ({old[0].name} ...); "
                "use --force to replace them")
        ensure_open_files(self.partitions)
        try:
            if not self.directory.exists():
                self.directory.mkdir(parents=True)
                self._made_directory = True
            self._staging = Path(tempfile.mkdtemp(prefix=".partition-", dir=self.directory))
            for name in self.names:
                self._files.append((self._staging / name).open("w", encoding="utf-8",
                                                               newline="\n"))
        except OSError as exc:
            self.abort()
            raise PartitionError(f"cannot write to {self.directory}: {_reason(exc)}") from exc

    def write(self, part: int, url: str) -> None:
        """Append one URL line to part ``part``."""
        try:
            self._files[part].write(url + "\n")
        except OSError as exc:
            raise PartitionError(f"cannot write to {self.directory}: {_reason(exc)}") from exc

    def commit(self) -> list[Path]:
        """Close the parts and move them into place; return stale parts removed."""
        assert self._staging is not None
        try:
            self._close()
            for name in self.names:
                (self._staging / name).replace(self.directory / name)
            written = set(self.names)
            stale = [p for p in existing_parts(self.directory) if p.name not in written]
            for path in stale:
                path.unlink()
            self._staging.rmdir()
        except OSError as exc:
            raise PartitionError(f"cannot write to {self.directory}: {_reason(exc)}") from exc
        self._staging = None
        return stale

    def abort(self) -> None:
        """Close and delete what was written; the directory stays as it was."""
        for handle in self._files:
            with contextlib.suppress(OSError):  # a full disk fails the flush too
                handle.close()
        self._files = []
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
        if self._made_directory:
            with contextlib.suppress(OSError):  # only if empty: never anyone else's files
                self.directory.rmdir()
            self._made_directory = False

    def _close(self) -> None:
        while self._files:
            self._files.pop().close()


def ensure_open_files(partitions: int) -> None:
    """Raise the open-file limit for N outputs if the hard limit allows; else say so.

    A single streaming pass needs every part open at once, and 1,024
    descriptors is a common default.
    """
    try:
        import resource  # Unix only
    except ImportError:  # pragma: no cover - Windows has no such limit to raise
        return
    needed = partitions + _SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise PartitionError(f"{partitions:,} parts need {needed:,} open files; the limit is "
                             f"{hard:,} (ulimit -n): use fewer parts or raise it")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)
