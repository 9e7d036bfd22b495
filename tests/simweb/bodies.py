"""Byte bodies of the simulated web: HTML pages, robots files, resources.

Kept apart from ``model.py`` so that the model reads as "what exists and
links where" while this module is only "how it is spelled on the wire".
Large bodies are generators so the server never holds them in memory.
"""

from __future__ import annotations

import html
import json
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

HUGE_SIZE = 50 * 1024 * 1024
OVERSIZED_CUTOFF = 500 * 1024  # ``Disallow: /late/`` is placed after this
OVERSIZED_SIZE = 600 * 1024
HTML_TAIL = b"</body>\n</html>\n"


class LinkLike(Protocol):
    """What the renderers need of a link (``model.Link`` satisfies it)."""

    @property
    def href(self) -> str: ...

    @property
    def tag(self) -> str: ...


def render_html(title: str, paras: Sequence[str], links: Sequence[LinkLike]) -> bytes:
    """A small valid HTML document: canonical ``<link>`` in the head, ``<a>``
    links in a list, ``<area>`` links in an image map.  Always ends with
    ``HTML_TAIL`` so callers can splice filler in front of it."""
    esc = html.escape
    canon = "".join(
        f'<link rel="canonical" href="{esc(ln.href)}">' for ln in links if ln.tag == "link"
    )
    anchors = [
        f'<li><a href="{esc(ln.href)}">link {i}</a></li>'
        for i, ln in enumerate(links)
        if ln.tag == "a"
    ]
    areas = [
        f'<area shape="rect" coords="0,0,{10 + i},10" href="{esc(ln.href)}" alt="a{i}">'
        for i, ln in enumerate(links)
        if ln.tag == "area"
    ]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        f'<head><meta charset="utf-8"><title>{esc(title)}</title>{canon}</head>',
        "<body>",
        f"<h1>{esc(title)}</h1>",
        *(f"<p>{esc(p)}</p>" for p in paras[:1]),
        "<ul>",
        *anchors,
        "</ul>",
    ]
    if areas:
        parts += ['<img src="/nav.png" usemap="#nav" alt="nav">', '<map name="nav">']
        parts += [*areas, "</map>"]
    parts += [f"<p>{esc(p)}</p>" for p in paras[1:]]
    return ("\n".join(parts) + "\n").encode() + HTML_TAIL


def render_compact(title: str, links: Sequence[LinkLike]) -> bytes:
    """Minimal HTML, for trickle hosts that send a few bytes at a time."""
    anchors = "".join(f'<a href="{html.escape(ln.href)}">{i}</a>' for i, ln in enumerate(links))
    return (
        f"<!DOCTYPE html><html><head><title>{html.escape(title)}</title></head>"
        f"<body>{anchors}</body></html>\n"
    ).encode()


def render_message(title: str, message: str) -> bytes:
    """Tiny HTML page for errors and redirects."""
    esc = html.escape
    return (
        f"<!DOCTYPE html><html><head><title>{esc(title)}</title></head>"
        f"<body><p>{esc(message)}</p></body></html>\n"
    ).encode()


def repeat_bytes(block: bytes, total: int, chunk: int = 64 * 1024) -> Iterator[bytes]:
    """``total`` bytes of ``block`` repeated, in chunks (never all in memory)."""
    big = block * max(1, chunk // len(block))
    while total > 0:
        piece = big[:total]
        total -= len(piece)
        yield piece


def padded_html(page: bytes, size: int, block: bytes) -> tuple[int, Callable[[], Iterator[bytes]]]:
    """``page`` grown to about ``size`` bytes by filler text before its tail.

    Returns the exact length and a factory of lazy chunk iterators (so a
    multi-MiB page is never held in memory).
    """
    head = page[: -len(HTML_TAIL)]
    filler = max(0, size - len(page))

    def chunks() -> Iterator[bytes]:
        yield head + b"<div>\n"
        yield from repeat_bytes(block, filler)
        yield b"</div>\n" + HTML_TAIL

    return len(page) + filler + len(b"<div>\n</div>\n"), chunks


_HUGE_HEAD = b"<!DOCTYPE html><html><head><title>huge</title></head><body><pre>\n"
_HUGE_TAIL = b"</pre></body></html>\n"


def huge_chunks() -> Iterator[bytes]:
    """The ``HUGE_SIZE`` (50 MiB) body of ``/huge``, generated on the fly."""
    block = b"".join(b"%08d huge filler line of the simulated web ...\n" % i for i in range(64))
    yield _HUGE_HEAD
    yield from repeat_bytes(block, HUGE_SIZE - len(_HUGE_HEAD) - len(_HUGE_TAIL))
    yield _HUGE_TAIL


def rules_body(crawl_delay: float) -> bytes:
    """The standard rules file.  The ``*`` group comes last so that lines
    appended later (``oversized``) still belong to it."""
    return (
        "User-agent: badbot\n"
        "Disallow: /\n"
        "\n"
        "User-agent: *\n"
        "Disallow: /private/\n"
        f"Crawl-delay: {crawl_delay:g}\n"
    ).encode()


def oversized_body(crawl_delay: float) -> bytes:
    """~600 KiB: rules, filler comments, then ``Disallow: /late/`` after the
    first 500 KiB (RFC 9309 only obliges parsers to read 500 KiB)."""
    lines = [rules_body(crawl_delay)]
    size = len(lines[0])
    i = 0
    late_added = False
    while size < OVERSIZED_SIZE:
        if not late_added and size > OVERSIZED_CUTOFF + 1024:
            line = b"Disallow: /late/\n"
            late_added = True
        else:
            line = b"# filler %06d: comment lines that only make robots.txt big ....\n" % i
            i += 1
        lines.append(line)
        size += len(line)
    return b"".join(lines)


def bom_body(crawl_delay: float) -> bytes:
    """UTF-8 BOM glued to ``User-agent: *`` (a parser that keeps the BOM
    loses that line and with it the group) and a comment holding one byte
    that is not valid UTF-8."""
    return (
        b"\xef\xbb\xbf"
        + f"User-agent: *\nDisallow: /private/\nCrawl-delay: {crawl_delay:g}\n".encode()
        + b"# caf\xe9 au lait (a latin-1 byte on purpose)\n\n"
        + b"User-agent: badbot\nDisallow: /\n"
    )


def png_with_text(text: str) -> bytes:
    """A valid 1x1 PNG carrying ``text`` in a tEXt chunk."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"tEXt", b"Comment\x00" + text.encode())
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )


def resource_body(host: str, k: int, ext: str) -> bytes:
    """A non-HTML body that *contains* link-looking text to ``/nofollow/...``:
    a fetch of such a page proves a crawler followed links out of non-HTML."""
    trap = f"/nofollow/{ext}-{k}"
    anchor = f'<a href="{trap}">more</a> http://{host}{trap}'
    if ext == "pdf":
        return (
            b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\n"
            + f"% {anchor}\n".encode()
            + b"trailer << /Root 1 0 R >>\n%%EOF\n"
        )
    if ext == "png":
        return png_with_text(anchor)
    if ext == "json":
        return json.dumps({"host": host, "next": trap, "html": anchor}).encode()
    return f"Plain text resource of {host}.\n{anchor}\n".encode()
