"""One layer per folder: the imports between ragbridge's parts go one way.

Read from the source (every import, the ones inside functions included): no library module imports
the command line (``ragbridge.commands``; a plugin's own command module, ``rubric/commands.py``, may),
no two of ragbridge's parts (a subpackage such as ``ragbridge.run``, or a top-level module such as
``ragbridge.metrics``) import each other, directly or through others, and within a package (ragbridge,
its subpackages, each backend plugin) no two modules do either: a package's ``__init__`` that
imports its modules is a module like the others, so a module importing from its own package's
``__init__`` while it imports the module is a cycle too. Imports of the package root (``from .. import
__version__``) are not edges; nor are those under ``if TYPE_CHECKING:``, which never run (they name
types for annotations).
"""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "src" / "ragbridge"
PLUGINS = CORE.parent.parent / "plugins"


def _modules(root: Path) -> dict[str, Path]:
    """Module name -> file, for the packages under ``root``."""
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules(CORE.parent)
EVERY_MODULE = {**MODULES, **_modules(PLUGINS)}


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (getattr(test, "id", None) == "TYPE_CHECKING"
                                         or getattr(test, "attr", None) == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST, runtime_only: bool):
    """Every import statement of ``tree``; with ``runtime_only``, not those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif not (runtime_only and _type_checking(node)):
            yield from _import_nodes(node, runtime_only)


def _imports(name: str, runtime_only: bool = False) -> set[str]:
    """The modules (of ragbridge and its plugins) that ``name`` imports, anywhere in its source."""
    path = EVERY_MODULE[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    return _imported(package, path.read_text(encoding="utf-8"), runtime_only) - {name}


def _imported(package: list[str], source: str, runtime_only: bool) -> set[str]:
    """The modules of ragbridge and its plugins that ``source``, a module of ``package``, imports."""
    found = set()
    for node in _import_nodes(ast.parse(source), runtime_only):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        else:
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            subs = {f"{mod}.{a.name}" for a in node.names} & EVERY_MODULE.keys()
            found.update(subs or {mod})
    return {m for m in found if m in EVERY_MODULE}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


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


def test_no_import_cycle_between_modules():
    """Within ragbridge and within each plugin package, no two modules import each other, directly
    or through others (the modules of a cycle are listed)."""
    graph = {m: {t for t in _imports(m, runtime_only=True) if t != "ragbridge"} for m in EVERY_MODULE}
    assert _cycles(graph) == []
    # the check finds a cycle through three modules, and names them (not the one that only enters it)
    three = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}
    assert _cycles(three) == [["p.a", "p.b", "p.c"]]
    # an import inside a function is an edge; one under TYPE_CHECKING is not
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .folder import Run\n"
              "def f():\n    from .lifecycle import drive_job\n")
    assert _imported(["ragbridge", "run"], source, runtime_only=True) == {"ragbridge.run.lifecycle"}
    assert _imported(["ragbridge", "run"], source, runtime_only=False) == {"ragbridge.run.lifecycle",
                                                                           "ragbridge.run.folder"}


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


MODULE_LINES, CLASS_LINES = 600, 300


def _sized(doc: str | None) -> bool:
    """A docstring that gives the reason for its size: a paragraph that starts with ``Size:``."""
    return any(p.lstrip().startswith("Size:") for p in (doc or "").split("\n\n"))


def test_no_module_or_class_grows_past_its_size_without_saying_why():
    """No module of ragbridge or its plugins is over 600 lines and no class over 300, unless its
    docstring says why in a paragraph that starts with ``Size:``."""
    offenders = []
    for name, path in sorted(EVERY_MODULE.items()):
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        if len(source.splitlines()) > MODULE_LINES and not _sized(ast.get_docstring(tree)):
            offenders.append(f"{name}: {len(source.splitlines())} lines")
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > CLASS_LINES \
                    and not _sized(ast.get_docstring(node)):
                offenders.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not offenders
    assert _sized("One thing.\n\nSize: a reason.") and not _sized("One thing. Size: not a paragraph.")
