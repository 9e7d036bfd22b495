"""The directly written records are byte for byte what warcio writes for the same exchange."""

from __future__ import annotations

from io import BytesIO
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from warcio.archiveiterator import ArchiveIterator
from warcio.warcwriter import WARCWriter

from crawler.warc.cdxj import CdxjEntry, entry_for_record, read_record
from crawler.warc.exchange import TRUNCATED_LENGTH, Exchange
from crawler.warc.files import WarcFiles
from crawler.warc.records import exchange_records, payload_digest, record_id
from crawler.warc.wire import exchange_bytes
from tests.warc_samples import INFO, RECEIVED, exchange

# Header names are tokens; values any Latin-1 text without line breaks (the
# octets as received, decoded losslessly).
_TOKEN = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
_NAMES = st.text(st.sampled_from(_TOKEN), min_size=1, max_size=20)
_VALUES = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF,
                                exclude_characters="\x7f"), max_size=40)
_HEADERS = st.lists(st.tuples(_NAMES, _VALUES), max_size=8)


def _warcio_bytes(ex: Exchange, digest: str) -> tuple[bytes, bytes, str, str]:
    """The response and request records as warcio writes them, and their ids."""
    out = []
    builder = WARCWriter(BytesIO(), warc_version="1.1")
    answer, request = exchange_records(builder, ex, None, digest)
    for record in (answer, request):
        buffer = BytesIO()
        WARCWriter(buffer, gzip=False, warc_version="1.1").write_record(record)
        out.append(buffer.getvalue())
    return out[0], out[1], record_id(answer), record_id(request)


@settings(max_examples=150, deadline=None)
@given(status=st.integers(100, 599), reason=st.sampled_from(["OK", "", "Not Found", "caf\xe9"]),
       response_headers=_HEADERS, request_headers=_HEADERS, body=st.binary(max_size=3000),
       request_body=st.sampled_from([b"", b"a=1&b=2"]), method=st.sampled_from(["GET", "POST"]),
       protocol=st.sampled_from(["HTTP/1.1", "HTTP/1.0"]),
       ip=st.sampled_from([None, "127.0.0.9", "::1"]),
       truncated=st.sampled_from([None, TRUNCATED_LENGTH]),
       when=st.floats(1e9, 2e9, allow_nan=False))
def test_the_records_are_warcios_byte_for_byte(
        status: int, reason: str, response_headers: list[tuple[str, str]],
        request_headers: list[tuple[str, str]], body: bytes, request_body: bytes, method: str,
        protocol: str, ip: str | None, truncated: str | None, when: float) -> None:
    ex = Exchange(url="http://h1.test/p/1?a=b&c", method=method, request_headers=request_headers,
                  request_body=request_body, status=status, reason=reason,
                  response_headers=response_headers, body=body, received_at=when,
                  protocol=protocol, ip_address=ip, truncated=truncated)
    digest = payload_digest(body)
    response, request, answer_id, request_id = _warcio_bytes(ex, digest)
    wire = exchange_bytes(ex, digest, answer_id, request_id)
    assert wire is not None
    assert wire.response == response
    assert wire.request == request


def test_text_that_is_not_latin_1_is_left_to_warcio(tmp_path: Path) -> None:
    snowman = exchange("http://h1.test/", headers=[("Content-Type", "text/html"),
                                                   ("X-Note", "\u2603")])
    assert exchange_bytes(snowman, payload_digest(snowman.body), "<urn:a>", "<urn:b>") is None
    with WarcFiles(tmp_path, "T", "w", 10**9, INFO) as files:
        written = files.write(snowman)
    record = read_record(written.path, written.offset)
    assert ("X-Note", "%E2%98%83") in record.headers  # warcio's percent-encoding
    assert record.payload == snowman.body


def test_index_lines_are_those_of_the_records_written(tmp_path: Path) -> None:
    pages = [exchange(f"http://www.h{i}.test/a?z=1&a={i}", received_at=RECEIVED + i * 0.4999999,
                      headers=headers)
             for i, headers in enumerate([
                 [("content-TYPE", "Text/HTML; charset=utf-8")], [], [("Content-Type", "")],
                 [("Content-Type", "application/pdf"), ("Content-Type", "text/html")]])]
    with WarcFiles(tmp_path, "T", "w", 10**9, INFO) as files:
        for page in pages:
            files.write(page)
    [warc] = tmp_path.glob("*.warc.gz")
    [cdxj] = tmp_path.glob("*.cdxj")
    with warc.open("rb") as stream:
        iterator = ArchiveIterator(stream)
        expected = []
        for record in iterator:
            if record.rec_type == "response":
                entry = entry_for_record(record, iterator.get_record_offset(), 0, warc.name)
                assert entry is not None
                expected.append(entry)
    found = [CdxjEntry.parse(line) for line in cdxj.read_text().splitlines() if line]
    found.sort(key=lambda e: e.offset)

    def key(e: CdxjEntry) -> tuple[object, ...]:
        return e.surt, e.timestamp, e.url, e.status, e.mime, e.digest, e.offset

    assert [key(e) for e in found] == [key(e) for e in expected]
    assert [e.mime for e in found] == ["text/html", "unk", "unk", "application/pdf"]


RAW_RESPONSE = (b"HTTP/1.1 200 Fine\r\nx-dup: 1\r\nX-Dup: 2\r\nETag: \"e\"\r\n"
                b"X-Folded: a\r\n  b\r\nConnection: keep-alive\r\nContent-Type: text/html\r\n\r\n")
RAW_REQUEST = b"GET /p/1?a=b&c HTTP/1.1\r\nAccept: */*\r\nHost: h1.test\r\n\r\n"


def test_heads_kept_from_the_wire_are_written_as_they_are_by_both_writers() -> None:
    """An exchange with its heads as they went over the wire: both writers put
    those bytes in the records, and warcio reads the status, a repeated name
    and a folded value back from them."""
    ex = exchange("http://h1.test/p/1?a=b&c", b"<p>hi</p>", reason="OK",
                  response_head=RAW_RESPONSE, request_head=RAW_REQUEST)
    digest = payload_digest(ex.body)
    response, request, answer_id, request_id = _warcio_bytes(ex, digest)
    wire = exchange_bytes(ex, digest, answer_id, request_id)
    assert wire is not None
    assert (wire.response, wire.request) == (response, request)
    assert RAW_RESPONSE + b"<p>hi</p>" in response and RAW_REQUEST in request
    record = next(iter(ArchiveIterator(BytesIO(response))))
    http = record.http_headers
    assert http.get_statuscode() == "200" and http.statusline == "200 Fine"
    assert [v for k, v in http.headers if k.lower() == "x-dup"] == ["1", "2"]
    assert record.content_stream().read() == b"<p>hi</p>"
