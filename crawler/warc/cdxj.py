"""CDXJ index lines (pywb's format), SURT keys, lookups by URL and reading a record back.

A line is ``SURT TIMESTAMP {json}``, for example::

    com,example)/a/b?a=2&z=1 20240102030405 {"url": "http://www.example.com/A/b?z=1&a=2",
    "mime": "text/html", "status": "200", "digest": "sha1:...", "length": "1234",
    "offset": "5678", "filename": "CRAWL-20240102030405678-00000-vm-5510.warc.gz"}

(on one line). As in pywb, ``status``, ``length`` and ``offset`` are strings
and a revisit's ``mime`` is ``warc/revisit``. Unlike pywb's, ``digest`` keeps
its ``sha1:`` prefix, so it compares equal to
:func:`crawler.warc.records.payload_digest`.

``filename`` always names the *complete* WARC (``NAME.warc.gz``); while the
file is still written it exists as ``NAME.warc.gz.open``, and :func:`lookup`
answers with whichever of the two names exists (see :mod:`crawler.warc.files`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import surt
from warcio.archiveiterator import ArchiveIterator
from warcio.timeutils import iso_date_to_datetime

if TYPE_CHECKING:
    from warcio.recordloader import ArcWarcRecord

#: Suffix of a WARC file still being written (or left by a writer that died).
OPEN_SUFFIX = ".open"
#: The mime pywb gives revisit records in its index.
REVISIT_MIME = "warc/revisit"
#: Records that get an index line: those that answer a URL.
INDEXED_TYPES = ("response", "revisit")



def surt_key(url: str) -> str:
    """The SURT sort key of ``url``, exactly as pywb writes and looks it up.

    pywb's index key is the ``surt`` library's (``pywb.utils.canonicalize``
    calls ``surt.surt(url)``): lowercased, scheme, user info, fragment, a
    leading ``www.`` and a default port dropped, host labels reversed (an
    IPv4 address's too: ``5,0,0,127)``), escapes of unreserved characters
    decoded (``%2B`` is ``+``), a trailing slash dropped, the query's
    parameters sorted. Any spelling of a URL that canonicalises to the same
    key finds its captures.

    >>> surt_key("http://www.Example.com/A/b?z=1&a=2")
    'com,example)/a/b?a=2&z=1'
    """
    try:
        return surt.surt(url.strip())
    except Exception:  # (a URL the library cannot read: its text is its key)
        return url.strip().lower()


@dataclass(frozen=True, slots=True)
class CdxjEntry:
    """One index line: where the capture of a URL at a time is stored."""

    surt: str
    timestamp: str  # 14 digits, UTC
    url: str
    status: int | None
    mime: str  # REVISIT_MIME for a revisit
    digest: str  # "sha1:BASE32", the payload digest
    length: int  # of the record's gzip member
    offset: int  # of the record's gzip member in the file
    filename: str  # basename of the WARC file

    @property
    def revisit(self) -> bool:
        """True when the record is a revisit (its payload is stored elsewhere)."""
        return self.mime == REVISIT_MIME

    def line(self) -> str:
        """The CDXJ line, without its newline."""
        fields = {
            "url": self.url,
            "mime": self.mime,
            "status": "-" if self.status is None else str(self.status),
            "digest": self.digest,
            "length": str(self.length),
            "offset": str(self.offset),
            "filename": self.filename,
        }
        return f"{self.surt} {self.timestamp} {json.dumps(fields)}"

    @classmethod
    def parse(cls, line: str) -> CdxjEntry:
        """The entry of a CDXJ line (as :meth:`line` writes it); ValueError if malformed."""
        surt, timestamp, blob = line.rstrip("\r\n").split(" ", 2)
        fields = json.loads(blob)
        status = fields.get("status", "-")
        return cls(surt=surt, timestamp=timestamp, url=fields["url"],
                   status=None if status == "-" else int(status), mime=fields.get("mime", "unk"),
                   digest=fields.get("digest", "-"), length=int(fields["length"]),
                   offset=int(fields["offset"]), filename=fields["filename"])


def mime_of(content_type: str | None) -> str:
    """A Content-Type's media type, lowercased, as an index line's ``mime`` ("unk": none)."""
    return (content_type or "").split(";")[0].strip().lower() or "unk"


def entry_for_record(record: ArcWarcRecord, offset: int, length: int,
                     filename: str) -> CdxjEntry | None:
    """The index entry of a response or revisit record (``None`` for other types).

    Works on records read back by warcio and on records just built for writing.
    """
    if record.rec_type not in INDEXED_TYPES:
        return None
    headers = record.rec_headers
    url = headers.get_header("WARC-Target-URI")
    http = record.http_headers
    status = None
    mime = "unk"
    if http:
        code = http.get_statuscode()
        status = int(code) if code.isdigit() else None
        mime = mime_of(http.get_header("Content-Type"))
    if record.rec_type == "revisit":
        mime = REVISIT_MIME
    when = iso_date_to_datetime(headers.get_header("WARC-Date"))
    return CdxjEntry(surt=surt_key(url), timestamp=when.strftime("%Y%m%d%H%M%S"), url=url,
                     status=status, mime=mime,
                     digest=headers.get_header("WARC-Payload-Digest") or "-",
                     length=length, offset=offset, filename=filename)


def lookup(directory: Path, url: str) -> list[CdxjEntry]:
    """Captures of ``url`` indexed in ``directory``'s ``*.cdxj`` files, newest first.

    Indexes of files still written are read too; a line cut short by a
    concurrent writer is skipped. Each entry's ``filename`` is the name the
    WARC has now (``.warc.gz`` or ``.warc.gz.open``); when neither exists
    (moved away) the complete name is kept. A file may be renamed right after
    this returns: a reader that finds no ``.open`` file should try the
    complete name.
    """
    found = entries(directory, surt_key(url))
    found.sort(key=lambda e: (e.timestamp, e.filename.removesuffix(OPEN_SUFFIX), e.offset),
               reverse=True)
    return found


def entries(directory: Path, surt: str | None = None) -> list[CdxjEntry]:
    """Every complete line of ``directory``'s ``*.cdxj`` indexes (only ``surt``'s, if
    given), each naming its WARC file as it exists now."""
    prefix = None if surt is None else surt + " "
    found = []
    for index in sorted(directory.glob("*.cdxj")):
        with index.open(encoding="utf-8") as lines:
            for line in lines:
                if line.endswith("\n") and (prefix is None or line.startswith(prefix)):
                    found.append(_resolve(directory, CdxjEntry.parse(line)))
    return found


def _resolve(directory: Path, entry: CdxjEntry) -> CdxjEntry:
    """``entry`` naming the WARC file as it exists now (``.open`` or complete)."""
    complete = entry.filename.removesuffix(OPEN_SUFFIX)
    if (directory / complete).exists():
        return replace(entry, filename=complete)
    if (directory / (complete + OPEN_SUFFIX)).exists():
        return replace(entry, filename=complete + OPEN_SUFFIX)
    return replace(entry, filename=complete)  # renamed in between, or moved away


class StoredRecord(NamedTuple):
    """One record read back from a WARC file."""

    rec_type: str
    url: str | None  # WARC-Target-URI
    digest: str | None  # WARC-Payload-Digest
    status: int | None  # the HTTP status of a response or revisit
    headers: list[tuple[str, str]]  # the HTTP headers (empty when none)
    payload: bytes  # as stored: Content-Encoding not undone; empty for a revisit
    #: The HTTP status line as recorded, reason phrase included ("HTTP/1.1 404 Not
    #: Found"): the reason is the server's, not one derived from the code.
    status_line: str | None = None


def read_record(warc_path: Path, offset: int) -> StoredRecord:
    """The record whose gzip member starts at ``offset`` in ``warc_path``."""
    with warc_path.open("rb") as stream:
        stream.seek(offset)
        record = next(iter(ArchiveIterator(stream)))
        http = record.http_headers
        status = status_line = None
        if http and record.rec_type in INDEXED_TYPES:
            code = http.get_statuscode()
            status = int(code) if code.isdigit() else None
            status_line = f"{http.protocol} {http.statusline}"
        return StoredRecord(
            rec_type=record.rec_type,
            url=record.rec_headers.get_header("WARC-Target-URI"),
            digest=record.rec_headers.get_header("WARC-Payload-Digest"),
            status=status,
            headers=list(http.headers) if http else [],
            payload=record.raw_stream.read(),
            status_line=status_line)
