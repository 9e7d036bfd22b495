"""The layers of docs/architecture.md, as the imports of crawler/ say they are.

Each layer imports only the layers below it. Checked here for the two
bottom layers, which everything else builds on: the pure decisions import
nothing of the crawler but each other, and the storage (``crawler/frontier``)
imports nothing but itself and the pure decisions. Above them, the parts of
a worker's frontier import neither the worker nor the scheduler that own them.
"""

from __future__ import annotations

import ast
from pathlib import Path

CRAWLER = Path(__file__).resolve().parent.parent / "crawler"

#: The pure decisions (docs/architecture.md, "Layers").
PURE = frozenset({
    "crawler.urls", "crawler.addressguard", "crawler.admission", "crawler.backoff",
    "crawler.robots.rules", "crawler.seeds", "crawler.redaction", "crawler.lease",
    "crawler.wiretap",
    "crawler.deadletter", "crawler.domains", "crawler.revisit", "crawler.warc",
    "crawler.warc.exchange",
    "crawler.warc.records", "crawler.warc.wire", "crawler.warc.cdxj", "crawler.warc.files",
    "crawler.warc.openwarc", "crawler.warc.recovery",
    "crawler.learning", "crawler.learning.variants", "crawler.learning.traps",
    "crawler.learning.rules", "crawler.diskspace", "crawler.scope", "crawler.scope.rules",
    "crawler.sitemaps", "crawler.siterules", "crawler.links",
})


def _module(path: Path) -> str:
    parts = path.relative_to(CRAWLER.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _crawler_imports(path: Path) -> set[str]:
    """The crawler modules a file imports (``from crawler.x import y`` counts x,
    or x.y when that is a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("crawler.")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("crawler"):
            module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.add(sub if _exists(sub) else module)
    return found


def _exists(module: str) -> bool:
    base = CRAWLER.parent.joinpath(*module.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _violations(modules: list[Path], allowed: frozenset[str], own: str = "") -> list[str]:
    bad = []
    for path in modules:
        for name in sorted(_crawler_imports(path)):
            if name in allowed or (own and (name == own or name.startswith(own + "."))):
                continue
            bad.append(f"{_module(path)} imports {name}")
    return bad


def test_the_pure_decisions_import_only_each_other() -> None:
    pure = [p for p in CRAWLER.rglob("*.py") if _module(p) in PURE]
    assert len(pure) >= len(PURE) - 1, "a module of the pure layer moved: update PURE"
    assert _violations(pure, PURE) == []


def test_the_frontier_storage_imports_nothing_above_it() -> None:
    storage = sorted((CRAWLER / "frontier").rglob("*.py"))
    assert _violations(storage, PURE, own="crawler.frontier") == []


def test_the_parts_of_a_workers_frontier_import_neither_it_nor_the_scheduler() -> None:
    """The worker's frontier (``scheduling/worker.py``) wires its parts with
    narrow collaborators; a part that imported it, or the scheduler above it,
    would be the service locator again (and a circle of imports)."""
    owners = {"crawler.scheduling.worker", "crawler.scheduling.scheduler"}
    parts = [p for p in sorted((CRAWLER / "scheduling").glob("*.py"))
             if _module(p) not in owners]
    assert len(parts) >= 15
    assert [f"{_module(p)} imports {name}" for p in parts
            for name in sorted(_crawler_imports(p) & owners)] == []
    assert "crawler.scheduling.scheduler" not in _crawler_imports(
        CRAWLER / "scheduling" / "worker.py")


#: The reach-ins through the worker's frontier into one of its parts
#: (``frontier.claims.window``) that are left outside ``crawler/scheduling``,
#: by file: each is to become a narrow, named port of WorkerFrontier's
#: (issue 55). A number may only go down; a file not listed has none.
REACH_INS = {
    "crawler.middlewares.pacing": 13, "crawler.middlewares.report": 5,
    "crawler.middlewares.scope": 4, "crawler.middlewares.seedfeed": 3,
    "crawler.middlewares.robots": 2, "crawler.middlewares.revisit": 1,
    "crawler.middlewares.addressguard": 1, "crawler.extensions.prometheus": 1,
    "crawler.pipelines.warc": 1,
}


def _reach_ins(path: Path) -> list[str]:
    """``frontier.PART.NAME`` (``frontier`` a name or an attribute) in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)):
            continue
        owner = node.value.value
        name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
        if name == "frontier":
            found.append(f"frontier.{node.value.attr}.{node.attr}")
    return found


def test_nothing_outside_scheduling_reaches_more_into_the_frontiers_parts() -> None:
    outside = [p for p in sorted(CRAWLER.rglob("*.py"))
               if not _module(p).startswith(("crawler.scheduling", "crawler.frontier"))]
    counts = {_module(p): n for p in outside if (n := len(_reach_ins(p)))}
    grown = {m: n for m, n in counts.items() if n > REACH_INS.get(m, 0)}
    assert grown == {}, f"new reach-ins into the frontier's parts: {grown}; add a port instead"
    assert counts == REACH_INS, "fewer reach-ins than listed: lower REACH_INS to match"
