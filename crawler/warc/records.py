"""warcio records for one :class:`~crawler.warc.exchange.Exchange` (WARC/1.1).

Pure functions: they build records and write nothing, so
:mod:`crawler.warc.files` decides where the bytes go and can measure them.
The writer they take is a ``warcio.WARCWriter(..., warc_version="1.1")``;
only its record-building half is used here.

Two things warcio does not do the way an archive of the wire needs:

- HTTP header values are Latin-1 text (the octets as received); warcio would
  percent-encode any non-ASCII value, so the archived block would no longer
  be what the server sent. :class:`WireHeaders` writes them back as the
  original octets.
- warcio links a request to its response only in
  ``write_request_response_pair``, which also fixes the order of writing;
  :func:`exchange_records` links them here (``WARC-Concurrent-To`` on the
  request, as warcio's ``capture_http`` and Heritrix do).
"""

from __future__ import annotations

import datetime as dt
from io import BytesIO
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from warcio.statusandheaders import StatusAndHeaders, StatusAndHeadersParser
from warcio.timeutils import datetime_to_iso_date
from warcio.utils import Digester

if TYPE_CHECKING:
    from warcio.recordloader import ArcWarcRecord
    from warcio.warcwriter import BaseWARCWriter

    from crawler.warc.exchange import Exchange

#: WARC-Profile of a revisit whose payload is identical to an earlier capture's.
REVISIT_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
#: WARC-Profile of a revisit the server answered 304 Not Modified.
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"

#: Revisit target: ``(WARC-Refers-To-Target-URI, WARC-Refers-To-Date)`` of the first capture.
RevisitOf = tuple[str, str]


class WireHeaders(StatusAndHeaders):
    """HTTP status line and headers serialised as the octets they came from.

    :class:`~crawler.warc.exchange.Exchange` keeps header values as Latin-1
    decoded text, so encoding back to Latin-1 restores the wire bytes. warcio's
    own serialisation (ASCII, else percent-encoding) is kept as the fallback
    for text that never came from the wire (non-Latin-1 characters).
    """

    def compute_headers_buffer(self, header_filter: object = None) -> None:
        try:
            self.headers_buff = self.to_str(header_filter).encode("latin-1") + b"\r\n"
        except UnicodeEncodeError:
            super().compute_headers_buffer(header_filter)


class RawHeaders(StatusAndHeaders):
    """A head as it went over the wire (its first line, header lines and the
    blank line), written as exactly those bytes; read, for whoever asks
    warcio, as warcio's parser reads it."""

    def __init__(self, raw: bytes, *, is_http_request: bool = False) -> None:
        parsed = StatusAndHeadersParser([], verify=False).parse(BytesIO(raw))
        super().__init__(parsed.statusline, parsed.headers, parsed.protocol,
                         is_http_request=is_http_request)
        self.raw = raw

    def compute_headers_buffer(self, header_filter: object = None) -> None:
        self.headers_buff = self.raw


def payload_digest(body: bytes) -> str:
    """``sha1:BASE32`` of ``body``, byte for byte what warcio writes as WARC-Payload-Digest.

    Computed with warcio's own ``Digester`` so that a digest taken before
    writing (to find an earlier identical payload) equals the record's.
    """
    digester = Digester("sha1")
    digester.update(body)
    return str(digester)


def warc_date(timestamp: float) -> str:
    """The WARC-Date of epoch ``timestamp``: UTC ISO 8601 with microseconds (WARC/1.1)."""
    moment = dt.datetime.fromtimestamp(timestamp, dt.UTC).replace(tzinfo=None)
    return datetime_to_iso_date(moment, use_micros=True)


def new_record_id() -> str:
    """A fresh ``<urn:uuid:...>`` WARC-Record-ID, made the way warcio makes its own."""
    return StatusAndHeadersParser.make_warc_id()


def record_id(record: ArcWarcRecord) -> str:
    """The WARC-Record-ID of ``record``."""
    return record.rec_headers.get_header("WARC-Record-ID")


def request_target(url: str) -> str:
    """The request-target of ``url`` in origin form: ``/path?query`` (``/`` when empty)."""
    parts = urlsplit(url)
    target = parts.path or "/"
    return f"{target}?{parts.query}" if parts.query else target


def request_record(writer: BaseWARCWriter, exchange: Exchange,
                   concurrent_to: str | None = None) -> ArcWarcRecord:
    """A ``request`` record: request line, headers and body as sent.

    ``concurrent_to`` is the record id of the response (or revisit) that
    answered it; the request shares that record's WARC-Date.
    """
    http_headers: StatusAndHeaders
    if exchange.request_head:
        http_headers = RawHeaders(exchange.request_head, is_http_request=True)
    else:
        line = f"{exchange.method} {request_target(exchange.url)} {exchange.protocol}"
        http_headers = WireHeaders(line, list(exchange.request_headers), is_http_request=True)
    fields = _warc_fields("request", exchange)
    if concurrent_to:
        fields["WARC-Concurrent-To"] = concurrent_to
    return writer.create_warc_record(
        exchange.url, "request", payload=BytesIO(exchange.request_body),
        length=len(exchange.request_body), http_headers=http_headers,
        warc_headers_dict=fields)


def response_record(writer: BaseWARCWriter, exchange: Exchange,
                    record_id: str | None = None, digest: str | None = None) -> ArcWarcRecord:
    """A ``response`` record: status line, headers and payload as received.

    ``digest``, the body's :func:`payload_digest` when the caller has it
    already, is written as WARC-Payload-Digest as it is; without it warcio
    computes it here. warcio computes WARC-Block-Digest when the record is
    written. ``WARC-Truncated`` is set when the body was cut.
    """
    fields = _warc_fields("response", exchange, record_id)
    if digest:
        fields["WARC-Payload-Digest"] = digest
    if exchange.ip_address:
        fields["WARC-IP-Address"] = exchange.ip_address
    if exchange.truncated:
        fields["WARC-Truncated"] = exchange.truncated
    return writer.create_warc_record(
        exchange.url, "response", payload=BytesIO(exchange.body), length=len(exchange.body),
        http_headers=_response_headers(exchange), warc_headers_dict=fields)


def revisit_record(writer: BaseWARCWriter, exchange: Exchange, refers_to_uri: str,
                   refers_to_date: str, digest: str,
                   record_id: str | None = None) -> ArcWarcRecord:
    """A ``revisit`` record: status line and headers, no payload.

    ``digest`` is the payload digest shared with the capture it refers to.
    An identical payload is an ``identical-payload-digest`` revisit; a 304
    to a conditional request (``exchange.not_modified_of``) a
    ``server-not-modified`` one, whose headers are the 304's and whose
    WARC-Payload-Digest is the capture's, so replay tools resolve it by
    digest like the other kind (pywb does). ``refers_to_date`` "" leaves
    WARC-Refers-To-Date out, and ``digest`` "" WARC-Payload-Digest (the
    capture is not known any more).
    No WARC-Truncated: the record holds no payload that could have been cut;
    its block digest (computed when written) covers the HTTP headers only.
    """
    fields = _warc_fields("revisit", exchange, record_id)
    if exchange.ip_address:
        fields["WARC-IP-Address"] = exchange.ip_address
    record = writer.create_revisit_record(
        exchange.url, digest or "-", refers_to_uri, refers_to_date,
        http_headers=_response_headers(exchange), warc_headers_dict=fields)
    # warcio picks the profile by the writer's version; WARC/1.1 is what we write.
    record.rec_headers.replace_header(
        "WARC-Profile", NOT_MODIFIED_PROFILE if exchange.not_modified_of else REVISIT_PROFILE)
    if not refers_to_date:
        record.rec_headers.remove_header("WARC-Refers-To-Date")
    if not digest:
        record.rec_headers.remove_header("WARC-Payload-Digest")
    return record


def exchange_records(writer: BaseWARCWriter, exchange: Exchange,
                     revisit_of: RevisitOf | None = None,
                     digest: str | None = None) -> tuple[ArcWarcRecord, ArcWarcRecord]:
    """``(response or revisit, request)`` of one exchange, linked by WARC-Concurrent-To.

    A revisit is made when ``revisit_of`` names the earlier capture; its
    digest is ``digest``, else the body's (identical by definition). A
    response's ``digest``, when given, must be its body's: it is not computed
    again.
    """
    answer_id = new_record_id()
    if revisit_of is None:
        answer = response_record(writer, exchange, answer_id, digest)
    else:
        refers_to_uri, refers_to_date = revisit_of
        answer = revisit_record(writer, exchange, refers_to_uri, refers_to_date,
                                (digest or "") if exchange.not_modified_of
                                else digest or payload_digest(exchange.body), answer_id)
    return answer, request_record(writer, exchange, concurrent_to=answer_id)


def warcinfo_record(writer: BaseWARCWriter, filename: str,
                    fields: dict[str, str]) -> ArcWarcRecord:
    """The ``warcinfo`` record (``application/warc-fields``) that starts a file.

    Empty values are left out (warcio skips them).
    """
    return writer.create_warcinfo_record(filename, fields)


def _warc_fields(record_type: str, exchange: Exchange,
                 record_id: str | None = None) -> dict[str, str]:
    """The WARC headers every record of ``exchange`` has, in the usual order."""
    return {
        "WARC-Type": record_type,
        "WARC-Record-ID": record_id or new_record_id(),
        "WARC-Date": warc_date(exchange.received_at),
        "WARC-Target-URI": exchange.url,
    }


def _response_headers(exchange: Exchange) -> StatusAndHeaders:
    """The head as received, else made from the parsed headers: status line
    (``protocol status reason``; the space stays when reason is empty)."""
    if exchange.response_head:
        return RawHeaders(exchange.response_head)
    return WireHeaders(f"{exchange.status} {exchange.reason}", list(exchange.response_headers),
                       protocol=exchange.protocol)
