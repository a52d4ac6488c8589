"""``ragbridge backends [NAME]``: every registered backend, whether its library is installed, its
metrics and its options, and the plugins that failed to load; with NAME, that backend's metrics and
options in full (type, default and help of each option).
"""

from __future__ import annotations

from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..options import describe
from ..plugins import get_backends, load_errors
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
    found = sorted(((n, b) for n, b in registry.items() if name in (None, n)),
                   key=lambda kv: (kv[0] != "native", kv[0]))
    if as_json:
        print_json({
            "backends": [
                {
                    "name": n, "available": b.available(),
                    "version": b.version() if b.available() else None, "install_hint": b.install_hint,
                    "metrics": [
                        {"name": s.name, "native_name": s.native_name, "judge": s.judge,
                         "requires": list(s.requires), "description": s.description}
                        for s in b.metrics()
                    ],
                    "options": describe(b.Options),
                }
                for n, b in found
            ],
            "load_errors": dict(load_errors) if name is None else {},
        })
        for plugin, message in load_errors.items() if name is None else ():
            err.print(f"plugin {plugin!r} failed to load: {message}", markup=False, highlight=False)
        return
    if name is not None:
        _one(name, registry[name])
        return
    table = Table(title="Backends", title_justify="left", show_lines=True)
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
        version = (b.version() or MISSING) if ok else MISSING
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
    for plugin, message in load_errors.items():
        err.print(f"[yellow]plugin {escape(plugin)!r} failed to load:[/] {escape(message)}")


def _one(name: str, b) -> None:
    """One backend: whether it is installed, its metrics, and each option's type, default and help."""
    ok = b.available()
    version = (b.version() or MISSING) if ok else MISSING
    print_lines(out, [f"{name} {version}: " + ("available" if ok else f"not installed: {b.install_hint}")])
    metrics = Table(title="Metrics", title_justify="left")
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
                    title_justify="left", show_lines=True)
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
