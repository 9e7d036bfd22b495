"""The records' schema (crawler/frontier/schema.py) is where every field is spelled:
a script or a module that spells one itself, or names one the schema does not
declare, fails here."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

import pytest
import redis

from crawler.frontier.schema import COUNTS, RECORDS, SITE, Count, resolve_fields
from crawler.frontier.store import script_source

CRAWLER = Path(__file__).resolve().parent.parent / "crawler"
LUA = CRAWLER / "frontier" / "lua"

#: Hash commands: how many arguments after the key are fields (None: all of
#: them; 2: every other one, as HSET's field-value pairs).
_HASH_COMMANDS = {"HGET": 1, "HSET": 2, "HMGET": None, "HINCRBY": 1, "HINCRBYFLOAT": 1,
                  "HDEL": None, "HEXISTS": 1, "HSETNX": 1}
_CALL = re.compile(r"redis\.p?call\(\s*'(H[A-Z]+)'\s*,")
_HINCR = re.compile(r"\bhincr\(")
_RECORD = re.compile(r"\brecord\(")
_QUOTED = re.compile(r"^'[^']*'$|^\"[^\"]*\"$")
_PRELUDE_REF = re.compile(r"(?<![\w.])(N|H|S|D|IG|K)\.(\w+)")
_LIBRARIES = {"math", "string", "table", "bit", "redis", "cjson", "cmsgpack", "struct", "os"}
#: Tables that hold no record, though they have fields of the same short
#: names (requeue.lua's rec: a URL's JSON record, whose m is its meta).
_NOT_RECORDS = {("requeue.lua", "rec")}
#: Stored names short enough to be mistaken for a record field read by hand
#: (``g.i``, ``{t = ...}``): every one of a partition record's.
_SHORT = frozenset(name for record in RECORDS if record is not COUNTS
                   for name in record.stored_names() if len(name) <= 3 and ":" not in name)


def _code(source: str) -> str:
    """Lua source without comments (line comments; the scripts use no block ones)."""
    out = []
    for line in source.splitlines():
        in_str, cut = None, len(line)
        for i, ch in enumerate(line):
            if in_str:
                if ch == in_str and line[i - 1] != "\\":
                    in_str = None
            elif ch in "'\"":
                in_str = ch
            elif line.startswith("--", i):
                cut = i
                break
        out.append(line[:cut])
    return "\n".join(out)


def _args(code: str, start: int) -> list[str]:
    """The top-level arguments of the call whose ``(`` is just before ``start``."""
    depth, args, cur, in_str = 0, [], [], None
    for ch in code[start:]:
        if in_str:
            cur.append(ch)
            if ch == in_str:
                in_str = None
            continue
        if ch in "'\"":
            in_str = ch
        elif ch in "({[":
            depth += 1
        elif ch in ")}]":
            if depth == 0:
                break
            depth -= 1
        elif ch == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    args.append("".join(cur).strip())
    return args


def lua_violations(name: str, source: str) -> Iterator[str]:
    """Fields spelled by hand in a Lua source, and record names not declared."""
    code = _code(source)
    for m in _CALL.finditer(code):
        every = _HASH_COMMANDS.get(m.group(1))
        if m.group(1) not in _HASH_COMMANDS:
            continue
        fields = _args(code, m.end())[1:]
        for j, arg in enumerate(fields):
            if arg.startswith("unpack("):
                break
            is_field = every is None or (every == 1 and j == 0) or (every == 2 and j % 2 == 0)
            if is_field and _QUOTED.match(arg):
                yield f"{name}: {m.group(1)} with the literal field {arg}"
    for m in _HINCR.finditer(code):
        args = _args(code, m.end())
        if len(args) > 1 and _QUOTED.match(args[1]):
            yield f"{name}: hincr with the literal field {args[1]}"
    for m in _RECORD.finditer(code):
        args = _args(code, m.end())
        if len(args) > 1 and re.search(r"'[^']*'", args[1]):
            yield f"{name}: record() with literal fields {args[1]}"
    for m in re.finditer(r"(?<![\w.])([A-Za-z_]\w*)\.([a-z]\w*)\b", code):
        table, field = m.groups()
        if table in {"N", "H", "S", "D", "IG", "K"} or table in _LIBRARIES \
                or (name, table) in _NOT_RECORDS:
            continue
        if field in _SHORT:
            yield f"{name}: {m.group(0)} reads a record field by its stored name"
    for table_ in re.finditer(r"\{[^{}]*\}", code):
        for m in re.finditer(r"[{,]\s*([a-z]\w*)\s*=(?!=)", table_.group(0)):
            if m.group(1) in _SHORT:
                yield f"{name}: a table key {m.group(1)} spells a record field by hand"
    for m in re.finditer(r"=\s*\{([^{}]*)\}", code):
        literals = re.findall(r"'([^']*)'", m.group(1))
        if literals and all(lit in _SHORT for lit in literals) and len(literals) > 1:
            yield f"{name}: a list of stored names {{{m.group(1)}}}"
    declared = {record.lua: record for record in RECORDS}
    for m in _PRELUDE_REF.finditer(code):
        table, attr = m.groups()
        if attr not in declared[table].fields:
            yield f"{name}: {table}.{attr} is not declared in schema.py"


def _lua_sources() -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(LUA.glob("*.lua"))}


def test_the_scripts_spell_no_field_the_schema_does_not_declare() -> None:
    found = [v for name, source in _lua_sources().items() for v in lua_violations(name, source)]
    assert found == []


@pytest.mark.parametrize("bad", [
    "redis.call('HGET', sk, 'i')",
    "redis.call('HSET', sk, S.in_flight, 1, 'dl', 5)",
    "redis.call('HMGET', p .. ':h:' .. host, H.queued, 'rw')",
    "hincr(KEYS[1], 'queued', 1)",
    "local g = record(sk, {'i', 'c'})",
    "local x = S.in_fligth",
    "if g.ip then return end",
    "hset_fields(sk, {t = 5})",
    "local READY = {'i', 'c', 't'}",
])
def test_the_scan_finds_a_field_spelled_by_hand(bad: str) -> None:
    assert list(lua_violations("bad.lua", bad)), bad


def test_the_scan_leaves_the_schemas_names_alone() -> None:
    good = ("local g = record(sk, {S.in_flight, S.concurrency})\n"
            "redis.call('HSET', sk, S.breaker, 'x', S.held, 0)  -- 'x': a value\n"
            "if g[S.address] == '-' then return math.max(1, 2) end\n"
            "redis.call('HGET', p .. ':r', host)")
    assert list(lua_violations("good.lua", good)) == []


#: Hash commands of redis-py, and how a Python module may not name a field.
_PY_HASH = {"hget", "hset", "hmget", "hincrby", "hincrbyfloat", "hdel", "hexists", "hsetnx"}
_STORED = frozenset(name for record in RECORDS for name in record.stored_names())


def python_violations(path: Path, source: str) -> Iterator[str]:
    """Literal record fields in a module's hash commands (and reads of a reply
    hash by a bytes literal that is a stored name)."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        attr = node.func.attr
        if attr in _PY_HASH:
            for arg in node.args[1:]:
                items = arg.elts if isinstance(arg, ast.Tuple | ast.List) else [arg]
                for item in items:
                    if isinstance(item, ast.Constant) and item.value in _STORED:
                        yield f"{path.name}:{item.lineno}: {attr} of the field {item.value!r}"
        elif attr == "get" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, bytes) \
                    and first.value.decode() in _STORED:
                yield f"{path.name}:{first.lineno}: .get({first.value!r})"


def test_the_modules_spell_no_field() -> None:
    found = [v for path in sorted(CRAWLER.rglob("*.py")) if path.name != "schema.py"
             for v in python_violations(path, path.read_text())]
    assert found == []


@pytest.mark.parametrize("bad", [
    'client.hget(key, "lt")',
    'pipe.hmget(key, ("i", "lt"))',
    'client.hdel(key, "b", "pr")',
    'raw.get(b"xc")',
])
def test_the_module_scan_finds_a_field_spelled_by_hand(bad: str) -> None:
    assert list(python_violations(Path("bad.py"), bad)), bad


def test_records_name_their_fields() -> None:
    assert SITE.in_flight == "i" and COUNTS.queued == Count.QUEUED == "queued"
    with pytest.raises(AttributeError, match="in_fligth"):
        SITE.in_fligth  # noqa: B018
    for record in RECORDS:
        assert len(record.stored_names()) == len(record.fields), record.name


def test_fields_resolve_to_their_stored_names_and_every_script_loads(redis_url: str) -> None:
    """A script's record fields become their stored names when it is built
    (an undeclared one stops it), and each built script compiles in Redis."""
    client = redis.Redis.from_url(redis_url)
    source = resolve_fields("local g = {[S.in_flight] = 1}\n"
                            "return S.in_flight .. N.queued .. x.S.y")
    assert source == "local g = {['i'] = 1}\nreturn 'i' .. 'queued' .. x.S.y"
    with pytest.raises(ValueError, match="in_fligth"):
        resolve_fields("return S.in_fligth")
    with pytest.raises(ValueError, match="not as a table"):
        resolve_fields("local R = (scope == 'site' and S) or D\nreturn R.ctl_delay")
    assert resolve_fields("-- S or D\nreturn 'S' .. KEYS[1]") == "-- S or D\nreturn 'S' .. KEYS[1]"
    names = sorted(item.name[:-4] for item in files("crawler.frontier").joinpath("lua").iterdir()
                   if item.name.endswith(".lua"))
    for name in names:
        assert client.script_load(script_source(name)), name


_PY_NAMES = {"counts": "COUNTS", "host": "HOST", "site": "SITE", "domain": "DOMAIN",
             "ip gate": "IP_GATE", "facts": "FACTS", "crawl": "CRAWL"}


def test_every_declared_field_is_used() -> None:
    """A field no script or module names any more is a declaration to drop
    (its stored data then goes the way a stored frontier's old fields go)."""
    lua = "\n".join(_code(source) for source in _lua_sources().values())
    py = "\n".join(path.read_text() for path in CRAWLER.rglob("*.py") if path.name != "schema.py")
    unused = [f"{record.name}.{attr}" for record in RECORDS for attr in record.fields
              if not re.search(rf"\b{record.lua}\.{attr}\b", lua)
              and not re.search(rf"\b{_PY_NAMES[record.name]}\.{attr}\b", py)
              and not (record is COUNTS and re.search(rf"\bCount\.{attr.upper()}\b", py))]
    assert unused == []
