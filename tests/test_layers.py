"""One layer per folder: the imports between ragbridge's parts go one way.

Read from the source (every import, the ones inside functions included): no library module imports
the command line (``ragbridge.commands``; a plugin's own command module, ``rubric/commands.py``, may),
and no two of ragbridge's parts (a subpackage such as ``ragbridge.run``, or a top-level module such as
``ragbridge.metrics``) import each other, directly or through others. Imports of the package root
(``from .. import __version__``) are not edges.
"""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "src" / "ragbridge"


def _module(path: Path) -> str:
    parts = list(path.relative_to(CORE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in CORE.rglob("*.py")}


def _imports(name: str) -> set[str]:
    """The ragbridge modules ``name`` imports, anywhere in its source."""
    path = MODULES[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            subs = {f"{mod}.{a.name}" for a in node.names} & MODULES.keys()
            found.update(subs or {mod})
    return {m for m in found if m in MODULES and m != name}


def _part(name: str) -> str:
    return ".".join(name.split(".")[:2])


def test_no_library_module_imports_the_command_line():
    library = [m for m in MODULES if _part(m) != "ragbridge.commands" and not m.endswith(".commands")]
    offenders = sorted(f"{m} imports {t}" for m in library for t in _imports(m)
                       if _part(t) == "ragbridge.commands")
    assert not offenders


def test_no_import_cycle_between_ragbridges_parts():
    graph: dict[str, set[str]] = {}
    for m in MODULES:
        for t in _imports(m):
            if _part(m) != _part(t) and _part(t) != "ragbridge":
                graph.setdefault(_part(m), set()).add(_part(t))

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and (seen.add(nxt) or reaches(nxt, goal, seen))):
                return True
        return False

    assert graph["ragbridge.commands"] >= {"ragbridge.analysis", "ragbridge.report", "ragbridge.run"}
    assert sorted(p for p in graph if reaches(p, p, set())) == []


def test_no_private_name_is_imported_across_modules():
    """A leading underscore means "this module's own": no other module (core or plugin) imports it."""
    root = CORE.parent.parent
    offenders = []
    for path in sorted([*CORE.rglob("*.py"), *(root / "plugins").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                offenders += [f"{path.relative_to(root)}:{node.lineno} imports {a.name}"
                              for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert not offenders
