"""One layer per folder: the imports between ragbridge's parts go one way, as `MAY_IMPORT` says.

Read from the source (every import, the ones inside functions and under ``if TYPE_CHECKING:``
included, and the names a module imports when first used, its ``_EXPORTS`` table): each of
ragbridge's parts (a subpackage such as ``ragbridge.run``, or a top-level module such as
``ragbridge.metrics``) imports only the parts its row of `MAY_IMPORT` names (the plugin API and the
package root also name `synthetic`'s generator types and ``synthesize``, imported when first used); a plugin
(``plugins/ragbridge_*``) imports ragbridge only through the plugin API, ``ragbridge.plugin``; no
library module imports the command line (``ragbridge.commands``; a plugin's own command module,
``rubric/commands.py``, may), and no two of ragbridge's parts import each other, directly or through
others. Within a package (ragbridge, its subpackages, each backend plugin) no two modules import each
other at run time either: a package's ``__init__`` that imports its modules is a module like the
others, so a module importing from its own package's ``__init__`` while it imports the module is a
cycle too. Imports of the package root (``from .. import __version__``) are not edges.

The floors the table makes, from the bottom (each part imports only parts of floors below it):

0. ``errors``, ``limits``, ``lexical``, ``schema``, ``hookspecs``, ``flags`` (command-line flags as
   data), ``json_text`` (plain values as indented JSON): import nothing of ragbridge;
1. ``plugins`` (the plugin manager), ``judge``, ``options`` (how an option is declared and checked);
2. ``metrics`` (the canonical list; the plugin manager for the metrics plugins register), ``stub``
   (the stub judge's answers, made in process), ``formats``;
3. ``backend``, ``traces``, ``verdicts`` (the pass rule and the run's own pass marks, which are the
   metrics' defaults where a backend records none);
4. ``judged_backend``, ``native``, ``run``;
5. ``analysis``, ``testing`` (the stub judge's server, the backend contract kit), ``plugin`` (the
   plugin API), and the package root (``ragbridge.evaluate`` and the other names it exports);
6. ``report``; 7. ``commands``, ``pytest_plugin``; 8. ``rubric`` (a built-in plugin with commands);
9. ``synthetic`` (``ragbridge synthesize``: a built-in plugin with commands, asking through the rubric's
   judge client).

The table is the import graph as it is meant to be: an import a row does not allow fails, and so does
a row that allows an import no module makes (change the two together).
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

#: which of ragbridge's parts each part may import (``ragbridge.`` left out; ``""`` is the package
#: root, whose names are imported when first used)
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "config_files": {"errors"},
    "limits": set(),
    "lexical": set(),
    "schema": set(),
    "hookspecs": set(),
    "flags": set(),
    "json_text": set(),
    "options": {"config_files", "errors", "flags"},
    "plugins": {"errors", "hookspecs"},
    "judge": {"config_files", "errors", "limits"},
    "verdicts": {"metrics", "schema"},
    "__main__": {"commands"},  # python -m ragbridge: the command line
    "metrics": {"errors", "plugins"},
    "stub": {"errors", "plugins"},
    "formats": {"errors", "hookspecs", "plugins", "schema"},
    "backend": {"judge", "limits", "metrics", "options", "plugins", "schema"},
    "judged_backend": {"backend", "judge", "options", "schema"},
    "native": {"backend", "hookspecs", "limits", "metrics", "options", "schema"},
    "traces": {"formats", "hookspecs", "metrics", "plugins", "schema"},
    "run": {"backend", "errors", "formats", "judge", "limits", "metrics", "options", "plugins", "schema",
            "stub", "traces", "verdicts"},
    "analysis": {"errors", "formats", "json_text", "metrics", "native", "run", "schema", "verdicts"},
    "report": {"analysis", "formats", "json_text", "judge", "lexical", "metrics", "run", "schema",
               "verdicts"},
    "commands": {"analysis", "backend", "errors", "flags", "formats", "judge", "limits", "metrics", "native",
                 "options", "plugins", "report", "run", "testing", "traces", "verdicts"},
    "pytest_plugin": {"analysis", "backend", "flags", "formats", "judge", "report", "run"},
    "testing": {"backend", "judge", "metrics", "plugins", "run", "schema", "stub"},
    "plugin": {"backend", "formats", "hookspecs", "judge", "judged_backend", "metrics", "options", "plugins",
               "run", "schema", "stub", "synthetic", "traces"},
    "rubric": {"analysis", "backend", "commands", "errors", "formats", "hookspecs", "judge", "judged_backend",
               "metrics", "options", "plugins", "report", "run", "schema", "stub", "verdicts"},
    "synthetic": {"commands", "formats", "hookspecs", "judge", "lexical", "plugins", "report", "rubric",
                  "run", "schema", "stub"},
    "": {"backend", "formats", "run", "schema", "synthetic"},
}
#: what a plugin (``plugins/ragbridge_*``) may import of ragbridge
PLUGIN_API = {"ragbridge.plugin"}


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
    """The modules of ragbridge and its plugins that ``source``, a module of ``package``, imports: by
    its import statements, and by its ``_EXPORTS`` table (name -> the module it is imported from when
    first used) when it has one."""
    found = set()
    tree = ast.parse(source)
    for node in _import_nodes(tree, runtime_only):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        else:
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            subs = {f"{mod}.{a.name}" for a in node.names} & EVERY_MODULE.keys()
            found.update(subs or {mod})
    for module in _lazy_exports(tree):
        found.add(".".join(package) + module if module.startswith(".") else module)
    return {m for m in found if m in EVERY_MODULE}


def _lazy_exports(tree: ast.AST) -> list[str]:
    """The module paths of a module-level ``_EXPORTS = {name: module, ...}`` table."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        elif isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        else:
            continue
        if any(getattr(t, "id", None) == "_EXPORTS" for t in targets) and isinstance(value, ast.Dict):
            return [v.value for v in value.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    return []


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


def _short(part: str) -> str:
    return part.removeprefix("ragbridge").removeprefix(".")


def _part_imports() -> dict[str, set[str]]:
    """Each part of ragbridge -> the parts it imports (short names, ``""`` the package root)."""
    graph: dict[str, set[str]] = {}
    for m in MODULES:
        for t in _imports(m):
            if _part(m) != _part(t):
                graph.setdefault(_short(_part(m)), set()).add(_short(_part(t)))
    return graph


def test_each_part_imports_only_what_the_table_allows():
    graph = _part_imports()
    offenders = sorted(f"ragbridge.{p} imports ragbridge.{t}" for p, ts in graph.items()
                       for t in ts - MAY_IMPORT.get(p, set()) - {""})
    assert not offenders, "not in tests/test_layers.py's MAY_IMPORT: " + "; ".join(offenders)
    parts = {_short(_part(m)) for m in MODULES}
    assert sorted(parts - set(MAY_IMPORT)) == [], "parts without a row in MAY_IMPORT"
    assert sorted(set(MAY_IMPORT) - parts) == [], "rows of MAY_IMPORT for parts that do not exist"
    stale = sorted(f"ragbridge.{p} -> ragbridge.{t}" for p, ts in MAY_IMPORT.items()
                   for t in ts - graph.get(p, set()))
    assert not stale, "MAY_IMPORT allows imports no module makes: " + "; ".join(stale)
    # the table is layered: no part may import, through others, a part that may import it
    assert sorted(p for p in MAY_IMPORT if _reaches(MAY_IMPORT, p, p)) == []
    # nothing of the core imports the plugin API: it is for plugins
    assert not [p for p, ts in MAY_IMPORT.items() if "plugin" in ts]


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), list(graph.get(start, ()))
    while todo:
        nxt = todo.pop()
        if nxt == goal:
            return True
        if nxt not in seen:
            seen.add(nxt)
            todo.extend(graph.get(nxt, ()))
    return False


def test_plugins_import_ragbridge_only_through_the_plugin_api():
    offenders = sorted(f"{m} imports {t}" for m in EVERY_MODULE if m.startswith("ragbridge_")
                       for t in _imports(m) if t.split(".")[0] == "ragbridge" and t not in PLUGIN_API)
    assert not offenders
    # the check sees an import inside a function and a lazily exported name
    source = "def f():\n    from ragbridge.judge.clients import http_client\n"
    assert _imported(["ragbridge_x"], source, runtime_only=False) == {"ragbridge.judge.clients"}
    assert _imported(["ragbridge"], '_EXPORTS = {"a": "ragbridge.run", "b": ".schema"}\n',
                     runtime_only=True) == {"ragbridge.run", "ragbridge.schema"}


def test_the_plugin_api_lists_each_name_once_and_every_name_imports():
    """Every name of ``ragbridge.plugin`` is importable, its table, ``__all__`` and the names its
    ``TYPE_CHECKING`` block gives editors agree, and each name is documented in the module docstring."""
    import ragbridge.plugin as api

    path = EVERY_MODULE["ragbridge.plugin"]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for_editors = {a.asname or a.name for node in ast.walk(tree) if _type_checking(node)
                   for imp in node.body if isinstance(imp, ast.ImportFrom) for a in imp.names}
    assert set(api.__all__) == set(api._EXPORTS) == for_editors
    doc = ast.get_docstring(tree)
    assert [n for n in api.__all__ if f"`{n}`" not in doc] == []
    for name in api.__all__:
        assert getattr(api, name) is not None, name


def test_no_library_module_imports_the_command_line():
    library = [m for m in MODULES if _part(m) not in ("ragbridge.commands", "ragbridge.__main__")
               and not m.endswith(".commands")]
    offenders = sorted(f"{m} imports {t}" for m in library for t in _imports(m)
                       if _part(t) == "ragbridge.commands")
    assert not offenders


def test_no_import_cycle_between_ragbridges_parts():
    graph = {p: ts - {""} for p, ts in _part_imports().items()}
    assert graph["commands"] >= {"analysis", "report", "run"}
    assert sorted(p for p in graph if _reaches(graph, p, p)) == []


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
