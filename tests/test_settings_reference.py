"""The settings reference is derived from crawler/settings.py, and every setting is in it.

``docs/settings.md`` is what :mod:`tests.settings_reference` makes of
``crawler/settings.py``; a setting the code reads must be declared there
(with its default and a comment that says what it means), or be Scrapy's own.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from scrapy.settings import default_settings

from tests.settings_reference import SOURCE, declared, groups, render

REPO = Path(__file__).resolve().parent.parent
#: Upper-case words in the code that are no settings: WSGI environ keys, errno
#: names, an environment variable, module constants named in docstrings, and
#: the flag ``scrapy crawl`` sets for the crawl's own use.
NOT_SETTINGS = frozenset({
    "CONTENT_LENGTH", "CONTENT_TYPE", "HTTP_AUTHORIZATION", "HTTP_HOST", "HTTP_ORIGIN",
    "HTTP_X_CSRF_TOKEN", "PATH_INFO", "QUERY_STRING", "REMOTE_ADDR", "REMOTE_USER",
    "REQUEST_METHOD", "EAI_NODATA", "BROADCRAWL_REDIS_URL", "ALIVE_SECONDS", "MAX_CNAME_HOPS",
    "WAIT_IN_PLACE_MS", "FRONTIER_CRAWL_CHANGED",
})
SETTING_WORD = re.compile(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)+")


def test_the_reference_is_what_the_settings_module_says() -> None:
    assert (REPO / "docs" / "settings.md").read_text() == render(SOURCE.read_text()), (
        "docs/settings.md is out of date: .venv/bin/python -m tests.settings_reference "
        "> docs/settings.md")


def test_every_setting_the_code_reads_is_declared_with_its_meaning() -> None:
    ours = declared(SOURCE.read_text())
    scrapy = {name for name in dir(default_settings) if name.isupper()}
    named: dict[str, str] = {}
    for path in sorted((REPO / "crawler").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and SETTING_WORD.fullmatch(node.value)):
                named.setdefault(node.value, str(path.relative_to(REPO)))
    undeclared = {name: where for name, where in named.items()
                  if name not in ours and name not in scrapy and name not in NOT_SETTINGS}
    assert undeclared == {}, "declare these in crawler/settings.py, with a comment"
    assert [g.settings for g in groups(SOURCE.read_text()) if not g.comment] == []


def test_a_setting_added_to_the_module_appears_in_the_reference() -> None:
    source = SOURCE.read_text() + (
        "\n# --- Gates ---\n# A new gate's pace, in seconds between two requests to one thing.\n"
        "GATE_THING_DELAY = 2.5\nGATE_THING_ENABLED = True\n")
    page = render(source)
    assert page.endswith("## Gates\n\nA new gate's pace, in seconds between two requests to one "
                         "thing.\n\n| Setting | Default |\n|---|---|\n"
                         "| `GATE_THING_DELAY` | `2.5` |\n| `GATE_THING_ENABLED` | `True` |\n")
    assert declared(source)["GATE_THING_DELAY"] == "2.5"
