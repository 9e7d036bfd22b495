"""Seed lists: comments, blanks, bad lines with line numbers, streaming."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.seeds import Seed, SeedError, parse_seed_lines, read_seeds


def _parse(text: bytes, **kwargs: object) -> list[Seed | SeedError]:
    return list(parse_seed_lines(io.BytesIO(text), source="s.txt", **kwargs))  # type: ignore[arg-type]


def test_comments_blanks_bom_and_crlf() -> None:
    text = b"\xef\xbb\xbfhttp://a.test/\r\n# a comment\r\n\r\n   \nHTTPS://B.test:443/x#y\n"
    assert _parse(text) == [
        Seed("http://a.test/", "s.txt", 1),
        Seed("https://b.test/x", "s.txt", 5),
    ]


def test_bad_lines_are_reported_with_line_numbers_and_the_rest_is_kept() -> None:
    text = b"http://ok1.test/\nnot a url\nexample.com\n\xff\xfe\nmailto:x@y\nhttp://ok2.test/\n"
    parsed = _parse(text)
    assert [p.url for p in parsed if isinstance(p, Seed)] == ["http://ok1.test/", "http://ok2.test/"]
    errors = [p for p in parsed if isinstance(p, SeedError)]
    assert [(e.line, e.reason) for e in errors] == [
        (2, "more than one field on the line"),
        (3, "no http:// or https:// scheme"),
        (4, "not valid UTF-8"),
        (5, "no http:// or https:// scheme"),
    ]
    assert str(errors[1]) == "s.txt:3: no http:// or https:// scheme: 'example.com'"


def test_add_scheme_only_when_asked() -> None:
    assert _parse(b"example.com/a\n", add_scheme=True) == [Seed("http://example.com/a", "s.txt", 1)]
    assert isinstance(_parse(b"example.com/a\n")[0], SeedError)


def test_overlong_line_is_an_error_not_a_crash() -> None:
    parsed = _parse(b"http://a.test/" + b"x" * 20_000 + b"\nhttp://b.test/\n")
    assert isinstance(parsed[0], SeedError) and parsed[0].reason == "line too long"
    assert parsed[1] == Seed("http://b.test/", "s.txt", 2)


def test_read_seeds_from_file(tmp_path: Path) -> None:
    path = tmp_path / "seeds.txt"
    path.write_bytes(b"http://a.test/\nbad\n")
    parsed = list(read_seeds(str(path)))
    assert parsed[0] == Seed("http://a.test/", str(path), 1)
    assert isinstance(parsed[1], SeedError) and parsed[1].source == str(path)


def test_read_seeds_from_stdin() -> None:
    code = (
        "from crawler.seeds import read_seeds\n"
        "for s in read_seeds('-'): print(s)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=b"http://a.test/\nbad\n",
        capture_output=True, check=True, timeout=60,
    ).stdout.decode()
    assert "Seed(url='http://a.test/', source='<stdin>', line=1)" in out
    assert "<stdin>:2:" in out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=60), max_size=20))
def test_any_bytes_never_raise_and_lines_are_accounted_for(lines: list[bytes]) -> None:
    clean = [line.replace(b"\n", b"").replace(b"\r", b"") for line in lines]
    parsed = _parse(b"\n".join(clean) + b"\n")
    numbers = [p.line for p in parsed]
    assert numbers == sorted(set(numbers))
    assert all(1 <= n <= max(len(clean), 1) for n in numbers)


def test_a_malformed_http_url_is_called_malformed_and_says_why() -> None:
    text = (b"http://[::1/\nhttps://a.test:99999/\nhttp://a.test:abc/\nhttp://#x\n"
            b"http://a..b/\nftp://files.test/x\nHTTP://[::1/\n")
    errors = _parse(text)
    assert [(e.line, e.reason) for e in errors if isinstance(e, SeedError)] == [
        (1, "malformed URL (Invalid IPv6 URL)"),
        (2, "malformed URL (Port out of range 0-65535)"),
        (3, "malformed URL (Port could not be cast to integer value as 'abc')"),
        (4, "malformed URL (no host name)"),
        (5, "malformed URL (bad host name 'a..b')"),
        (6, "not an http(s) URL"),  # another scheme keeps its message
        (7, "malformed URL (Invalid IPv6 URL)"),
    ]
    assert str(errors[0]) == "s.txt:1: malformed URL (Invalid IPv6 URL): 'http://[::1/'"
