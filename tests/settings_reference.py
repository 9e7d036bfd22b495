"""The settings reference (``docs/settings.md``), derived from ``crawler/settings.py``.

``crawler/settings.py`` is the one place a setting of the project is declared:
its default, and above it the comment that says what it means and why it
differs from Scrapy's. The reference is that file read as documentation:
its sections (``# --- Name ---``), each comment and the settings under it
with their defaults. ``tests/test_settings_reference.py`` fails when the
reference is out of date, and when the code reads a setting that the file
does not declare. Write it again with::

    .venv/bin/python -m tests.settings_reference > docs/settings.md
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "crawler" / "settings.py"
SECTION = re.compile(r"^# -{3} (.+?) -+$")
MAX_DEFAULT = 70


@dataclass
class Group:
    """Settings declared together under one comment."""

    section: str
    comment: list[str]
    settings: list[tuple[str, str]] = field(default_factory=list)  # (name, default's source)


def declared(source: str) -> dict[str, str]:
    """Every setting a settings module declares, with its default's source."""
    return {name: default for group in groups(source) for name, default in group.settings}


def groups(source: str) -> list[Group]:
    """The settings of a settings module, grouped by the comment above them."""
    lines = source.splitlines()
    out: list[Group] = []
    section, last_end = "", 0
    for node in ast.parse(source).body:
        target = (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1
                  else node.target if isinstance(node, ast.AnnAssign) else None)
        if not isinstance(target, ast.Name) or not target.id.isupper() or node.value is None:
            continue
        above = _comment_above(lines, node.lineno - 1, last_end)
        for line in lines[last_end:node.lineno - 1]:
            header = SECTION.match(line)
            if header:
                section = header.group(1)
        default = " ".join((ast.get_source_segment(source, node.value) or "").split())
        if len(default) > MAX_DEFAULT:
            default = default[:MAX_DEFAULT - 1] + "…"
        if above or not out or out[-1].section != section:
            out.append(Group(section, above))
        out[-1].settings.append((target.id, default))
        last_end = node.end_lineno or node.lineno
    return out


def _comment_above(lines: list[str], start: int, floor: int) -> list[str]:
    """The comment lines right above line index ``start`` (none past ``floor``),
    without their ``#``; a section header ends them."""
    found: list[str] = []
    i = start - 1
    while i >= floor and lines[i].startswith("#") and not SECTION.match(lines[i]):
        found.append(lines[i][1:].strip())
        i -= 1
    return found[::-1]


def render(source: str) -> str:
    """The reference, as Markdown."""
    out = [
        "# Settings reference", "",
        "Every setting of the project, its default and what it means, in the order of",
        "`crawler/settings.py`, which declares them; this page is generated from it",
        "(`.venv/bin/python -m tests.settings_reference > docs/settings.md`, checked by",
        "`tests/test_settings_reference.py`). Give one with `-s NAME=VALUE`, in a",
        "spider's `custom_settings` or in your own settings module. Scrapy's own settings",
        "not listed here keep Scrapy's defaults.", ""]
    section = None
    for group in groups(source):
        if group.section != section:
            section = group.section
            out += [f"## {section or 'Project'}", ""]
        if group.comment:
            out += [" ".join(group.comment), ""]
        out += ["| Setting | Default |", "|---|---|"]
        out += [f"| `{name}` | `{default.replace('|', '¦')}` |"
                for name, default in group.settings]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(render(SOURCE.read_text()), end="")
