"""Building a script's source from its parts, once, when it is registered.

Redis runs a script's whole chunk on every call, definitions included: each
``local function`` of the shared helpers (``lua/common.lua`` and its part
``common_gates.lua``) is a closure made again on each call, and a closure
costs in proportion to the locals it captures (a tenth of a microsecond
each). With every helper in front of every script, a script that runs one
command cost 13-44 µs a call before its first command. So a script gets
only the helpers it names, and the helpers those name: the shared file is
cut at its top-level ``local`` statements (it holds nothing else), and the
cuts a script needs are kept, in their order.
"""

from __future__ import annotations

import functools
import pkgutil
import re

from crawler.frontier.schema import LUA_NOT_CODE, resolve_fields

_INCLUDE = re.compile(r"^--#include (\w+)$", re.MULTILINE)
_NAME = re.compile(r"(?<![\w.:])[A-Za-z_]\w*")
_TOP_LOCAL = re.compile(r"^local (?:function (\w+)|([\w, ]+?)\s*=)", re.M)
#: A line at the top level after a definition's first: only its ``end``, a
#: comment or a blank line may stand there.
_STRAY = re.compile(r"(?<=\n)(?!end\b|--|\s|$)[^\n]+")


def lua_file(name: str) -> str:
    data = pkgutil.get_data("crawler.frontier", f"lua/{name}.lua")
    assert data is not None, name
    return data.decode("utf-8")


def _expanded(name: str) -> str:
    return _INCLUDE.sub(lambda m: lua_file(m.group(1)), lua_file(name))


def names_in(code: str) -> set[str]:
    """The names a piece of Lua uses (not fields after a dot or colon)."""
    return set(_NAME.findall(LUA_NOT_CODE.sub(" ", code)))


@functools.cache
def helpers() -> tuple[tuple[frozenset[str], str], ...]:
    """The shared file's top-level statements: (the names each defines, its
    text up to the next one)."""
    common = _expanded("common")
    starts = [m.start() for m in _TOP_LOCAL.finditer(common)]
    cuts = []
    for m, end in zip(_TOP_LOCAL.finditer(common), [*starts[1:], len(common)], strict=True):
        defined, text = m.group(1) or m.group(2), common[m.start():end]
        stray = _STRAY.search(text)
        if stray:  # (it would go with whichever helper it follows)
            raise ValueError(f"common.lua: a top-level statement that is no `local`: "
                             f"{stray.group().strip()!r}")
        cuts.append((frozenset(n.strip() for n in defined.split(",")), text))
    return tuple(cuts)


def needed_helpers(body: str) -> str:
    """The shared statements ``body`` needs, directly or through one another."""
    cuts = helpers()
    wanted = names_in(body)
    keep = [False] * len(cuts)
    changed = True
    while changed:
        changed = False
        for i, (defines, text) in enumerate(cuts):
            if not keep[i] and defines & wanted:
                keep[i] = changed = True
                wanted |= names_in(text)
    return "".join(text for i, (_, text) in enumerate(cuts) if keep[i])


def script_source(name: str) -> str:
    """A script's source: the shared helpers it needs in front, each
    ``--#include PART`` line replaced by ``lua/PART.lua`` (Redis runs one
    chunk per script, and a long one is kept in parts of a readable size),
    and the records' fields by their stored names
    (:func:`schema.resolve_fields`)."""
    body = _expanded(name)
    return resolve_fields(needed_helpers(body) + body)
