"""A script is built with the shared helpers it needs and no others."""

from __future__ import annotations

import re
from importlib.resources import files

import pytest

from crawler.frontier.luabuild import helpers, names_in, needed_helpers, script_source

SCRIPTS = sorted(item.name[:-4] for item in files("crawler.frontier").joinpath("lua").iterdir()
                 if item.name.endswith(".lua") and not item.name.startswith("common"))


def _defined(source: str) -> set[str]:
    """The names a source defines at its top level (``local function f``,
    ``local a, b = ...``)."""
    found = set()
    for m in re.finditer(r"^local (?:function (\w+)|([\w, ]+?)\s*=)", source, re.M):
        found |= {n.strip() for n in (m.group(1) or m.group(2)).split(",")}
    return found


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_shared_name_a_script_uses_is_defined_in_it(name: str) -> None:
    """(A name used and not defined would be a global: an error when the
    line runs, not when the script loads.)"""
    source = script_source(name)
    shared = {n for defines, _ in helpers() for n in defines}
    assert names_in(source) & shared <= _defined(source)


def test_a_script_gets_the_helpers_of_its_helpers_and_no_others() -> None:
    body = "return site_key(p, host)\n"
    kept = needed_helpers(body)
    assert "local function site_key" in kept and "local function site_of" in kept
    assert "local function lease_head" not in kept and "local function num" not in kept
    assert "lease_head" not in script_source("hold")


def test_names_in_comments_and_strings_and_after_a_dot_are_not_uses() -> None:
    assert names_in("-- num\nlocal s = 'site_key' .. x.lease_head .. y:z(w)\n") == {
        "local", "s", "x", "y", "w"}


def test_a_top_level_statement_that_is_no_definition_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """(It would be kept or left out with whichever helper it follows.)"""
    from crawler.frontier import luabuild
    original = luabuild.lua_file
    monkeypatch.setattr(luabuild, "lua_file", lambda name: original(name) + (
        "\nredis.replicate_commands()\n" if name == "common" else ""))
    luabuild.helpers.cache_clear()
    try:
        with pytest.raises(ValueError, match="replicate_commands"):
            luabuild.helpers()
    finally:
        monkeypatch.undo()
        luabuild.helpers.cache_clear()
