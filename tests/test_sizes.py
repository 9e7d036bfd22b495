"""Sizes a reader can hold in mind: no file of crawler/ over 450 lines (Python
and Lua; settings.py aside: one documented setting after another), no
function over 80 lines, Lua included."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.test_schema import _code

CRAWLER = Path(__file__).resolve().parent.parent / "crawler"
MAX_FILE, MAX_FUNCTION = 450, 80

#: Files over the limit still, each to be split: a file leaves this list once
#: it is (the test says so), and no other may join it. (None now.)
KNOWN_OVER: frozenset[str] = frozenset()


def _sources() -> list[Path]:
    return sorted([*CRAWLER.rglob("*.py"), *CRAWLER.rglob("*.lua")])


def test_no_file_is_over_450_lines() -> None:
    over, shrunk = [], []
    for path in _sources():
        name = path.relative_to(CRAWLER).as_posix()
        lines = len(path.read_text().splitlines())
        if name == "settings.py":
            continue
        if lines > MAX_FILE and name not in KNOWN_OVER:
            over.append(f"{name}: {lines} lines")
        elif name in KNOWN_OVER and lines <= MAX_FILE:
            shrunk.append(f"{name}: {lines} lines, take it off KNOWN_OVER")
    assert over == [] and shrunk == []


def test_no_python_function_is_over_80_lines() -> None:
    long = []
    for path in CRAWLER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_FUNCTION:
                    long.append(f"{path.relative_to(CRAWLER)}: {node.name}, {size} lines")
    assert long == []


#: Lua's blocks: each opener ends with an ``end`` (``repeat`` with ``until``);
#: ``for`` and ``while`` open theirs with ``do``, ``if`` once for all its arms.
_LUA_BLOCK = re.compile(r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"|\[\[.*?\]\]"
                        r"|\b(function|if|do|repeat|end|until)\b", re.S)


def lua_functions(source: str) -> list[tuple[str, int, int]]:
    """Each function of a Lua source: its name, first line and length in lines."""
    code = _code(source)
    stack: list[tuple[str, int, str]] = []
    found = []
    for m in _LUA_BLOCK.finditer(code):
        word = m.group(1)
        if not word:
            continue
        line = code.count("\n", 0, m.start()) + 1
        if word in ("end", "until"):
            kind, start, name = stack.pop()
            if kind == "function":
                found.append((name, start, line - start + 1))
        else:
            name = re.match(r"\s*([\w.:]*)", code[m.end():]).group(1) or "(anonymous)"  # type: ignore[union-attr]
            stack.append((word, line, name))
    assert not stack, f"unclosed blocks: {stack}"
    return found


def test_the_lua_parser_measures_functions() -> None:
    source = ("local function a(x)\n  if x then\n    for i = 1, 2 do x = i end\n  end\n"
              "  local s = 'end'  -- end\n  return function() return 1 end\nend\n")
    assert lua_functions(source) == [("(anonymous)", 6, 1), ("a", 1, 7)]


def test_no_lua_function_is_over_80_lines() -> None:
    long = [f"{path.name}: {name} at line {start}, {size} lines"
            for path in sorted((CRAWLER / "frontier" / "lua").glob("*.lua"))
            for name, start, size in lua_functions(path.read_text()) if size > MAX_FUNCTION]
    assert long == []
