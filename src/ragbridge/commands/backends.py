"""``ragbridge backends [NAME]``: every registered backend, whether its library is installed, its
metrics and its options, and the plugins that failed to load; with NAME, that backend's metrics and
options in full (type, default and help of each option).
"""

from __future__ import annotations

from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import PluginError
from ..options import describe
from ..metrics import registered
from ..plugins import get_backends, load_errors, plugin_problem, usable_backends
from ..report.text import MISSING
from .output import err, fail, out, print_json, print_lines, print_table

__all__ = ["register", "backends"]


def register(cli: typer.Typer) -> None:
    cli.command("backends")(backends)


def _shown(value) -> str:
    """An option's default as the command line and ragbridge.toml write it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) if value else "none"
    return str(value)


def _versions(b) -> dict:
    """What ``backends`` says of a backend's library versions: the range it supports, whether the
    installed one is in it, the versions its plugin ships environments for, and what changes at each."""
    from ..run.isolated import shipped_versions

    return {"supports": b.supports, "supported": b.supported() if b.available() else None,
            "versions": shipped_versions(b), "changes": dict(b.changes)}


def _version_text(b, version: str) -> str:
    """The installed version, and whether the backend supports it."""
    v = _versions(b)
    if v["supported"] is False:
        return f"{version} (not supported: {b.library}{v['supports']})"
    if v["versions"]:
        return f"{version} (also runs at {', '.join(x for x in v['versions'] if x != version) or MISSING})"
    return version


def backends(
    name: Optional[str] = typer.Argument(None, help="A backend: its metrics and options in full."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of a table."),
) -> None:
    """List every registered backend, whether its library is installed, its metrics and its options
    (with NAME: each option's type, default and help)."""
    registry = get_backends()
    if name is not None and name not in registry and name.partition("==")[0].strip() in registry:
        base = name.partition("==")[0].strip()
        fail(f"{name} is the {base} backend at a version of its library: its metrics and options are "
             f"{base}'s (ragbridge backends {base}); the versions it runs at: ragbridge environments list")
    if name is not None and name not in registry:
        fail(f"unknown backend {name!r}; registered backends: {', '.join(sorted(registry))}")
    if name is not None:
        try:
            registry[name].Options  # a LazyBackend loads (and checks) its backend when first asked
        except PluginError as exc:
            fail(str(exc))
    usable = usable_backends() if name is None else registry
    found = sorted(((n, b) for n, b in usable.items() if name in (None, n)),
                   key=lambda kv: (kv[0] != "native", kv[0]))
    errors = dict(load_errors)
    broken = {p: f"plugin {p!r} failed to load: {m}" for p, m in errors.items()}
    if name is None:
        try:
            registered()
        except PluginError as exc:  # a metric registered wrong: the line a run stops with
            errors[exc.plugin or "?"], broken[exc.plugin or "?"] = plugin_problem(exc), str(exc)
    else:
        errors, broken = {}, {}
    if as_json:
        print_json({
            "backends": [
                {
                    "name": n, "available": b.available(),
                    "version": b.version() if b.available() else None, "install_hint": b.install_hint,
                    **_versions(b), "metrics_at": _metrics_at(b) if name is not None else None,
                    "metrics": [
                        {"name": s.name, "native_name": s.native_name, "judge": s.judge,
                         "requires": list(s.requires), "description": s.description}
                        for s in b.metrics()
                    ],
                    "options": describe(b.Options),
                }
                for n, b in found
            ],
            "load_errors": errors,
        })
        for line in broken.values():
            err.print(line, markup=False, highlight=False)
        return
    if name is not None:
        _one(name, registry[name])
        return
    table = Table(title="Backends", title_justify="default", show_lines=True)
    for col in ("backend", "available", "version", "metrics", "options"):
        table.add_column(col)
    lines = []
    for n, b in found:
        ok = b.available()
        metrics = ", ".join(
            f"{s.name}" + (f" ({s.native_name})" if s.native_name and s.native_name != s.name else "")
            + (" [judge]" if s.judge else "")
            for s in b.metrics()
        )
        options = ", ".join(b.Options.model_fields) or MISSING
        version = _version_text(b, b.version() or MISSING) if ok else MISSING
        table.add_row(
            escape(n), "[green]yes[/]" if ok else f"[yellow]no[/]: {escape(b.install_hint)}",
            escape(version), escape(metrics), escape(options),
        )
        lines.append(f"{n} {version}: " + ("available" if ok else f"not installed: {b.install_hint}")
                     + f"; metrics: {metrics}; options: {options}")
    print_table(out, table, lines)
    out.print("[dim]" + escape("a backend's options in full: ragbridge backends NAME; set one with --option "
                               "NAME.KEY=VALUE, in [backends.NAME] of ragbridge.toml, or options={NAME: "
                               "{...}} in Python") + "[/]", highlight=False)
    for line in broken.values():
        err.print(f"[yellow]{escape(line)}[/]", highlight=False)


def _one(name: str, b) -> None:
    """One backend: whether it is installed, its metrics, and each option's type, default and help."""
    ok = b.available()
    version = (b.version() or MISSING) if ok else MISSING
    print_lines(out, [f"{name} {version}: " + ("available" if ok else f"not installed: {b.install_hint}")])
    _one_versions(name, b, version if ok else None)
    metrics = Table(title="Metrics", title_justify="default")
    for col in ("metric", "native name", "judge", "requires"):
        metrics.add_column(col)
    lines = []
    for s in b.metrics():
        requires = ", ".join(s.requires) or MISSING
        metrics.add_row(escape(s.name), escape(s.native_name or MISSING), "yes" if s.judge else "no",
                        escape(requires))
        native = f" ({s.native_name})" if s.native_name and s.native_name != s.name else ""
        lines.append(f"{s.name}{native}" + (" [judge]" if s.judge else "") + f"; requires {requires}")
    print_table(out, metrics, lines)
    rows = describe(b.Options)
    if not rows:
        out.print(f"the {escape(name)} backend takes no options", highlight=False)
        return
    options = Table(title=escape(f"Options (--option {name}.KEY=VALUE, [backends.{name}] in ragbridge.toml)"),
                    title_justify="default", show_lines=True)
    for col in ("option", "type", "default", "help"):
        options.add_column(col)
    lines = []
    for row in rows:
        flag = f" ({row['flag']})" if row["flag"] else ""
        options.add_row(escape(row["name"] + flag), escape(row["type"]), escape(_shown(row["default"])),
                        escape(row["help"]))
        lines.append(f"{name}.{row['name']}{flag}: {row['type']}; default {_shown(row['default'])}; "
                     f"{row['help']}")
    print_table(out, options, lines)


def _one_versions(name: str, b, installed: Optional[str]) -> None:
    """The versions of one backend's library: the range it supports, and per version it is tested at
    whether it is installed or runs in an environment of its own, and what changes there."""
    v = _versions(b)
    if v["supports"] is None and not v["versions"] and not v["changes"]:
        return
    if v["supports"]:
        said = {True: "supported", False: "NOT supported",
                None: "not checked: " + ("its version is not a PEP 440 version" if b.available()
                                         else f"{b.library} is not importable")}[v["supported"]]
        print_lines(out, [f"supports {b.library}{v['supports']}; installed: "
                          + (f"{installed} ({said})" if installed else "none")])
    listed = [s.name for s in b.metrics()]
    differ = {version: _metrics_differ(listed, names) for version, names in _metrics_at(b).items()}
    table = Table(title="Versions", title_justify="default", show_lines=True)
    cols = ("version", "runs", "what changes at this version")
    cols += ("metrics",) if any(differ.values()) else ()
    for col in cols:
        table.add_column(col)
    lines = []
    for version in sorted(set(v["changes"]) | set(v["versions"]), key=_order):
        runs = ", ".join((["in process (installed)"] if version == installed else [])
                         + ([f"--backend {name}=={version}"] if version in v["versions"] else [])) or MISSING
        change = v["changes"].get(version) or MISSING
        metrics = [differ.get(version) or "as listed below"] if len(cols) == 4 else []
        table.add_row(escape(version), escape(runs), escape(change), *map(escape, metrics))
        lines.append(f"{version}: {runs}; {change}" + "".join(f"; metrics {m}" for m in metrics))
    print_table(out, table, lines)


def _metrics_at(b) -> dict[str, list[str]]:
    """The metrics the backend offers at each version its plugin ships an environment for."""
    from ..run.isolated import shipped_versions

    return {version: [s.name for s in b.metrics_at(version)] for version in shipped_versions(b)}


def _metrics_differ(listed: list[str], names: list[str]) -> str:
    """How the metrics of a version differ from those listed (the installed version's), or ""."""
    gone, added = [n for n in listed if n not in names], [n for n in names if n not in listed]
    return "; ".join(([f"does not offer {', '.join(gone)}"] if gone else [])
                     + ([f"also offers {', '.join(added)}"] if added else []))


def _order(version: str):
    from packaging.version import InvalidVersion, Version

    try:
        return (0, Version(version))
    except InvalidVersion:
        return (1, version)
