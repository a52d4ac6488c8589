"""``ragbridge backends``: every registered backend, whether its library is installed, its metrics,
and the plugins that failed to load.
"""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from ..plugins import get_backends, load_errors
from ..report.text import MISSING
from .output import err, out, print_json, print_table

__all__ = ["register", "backends"]


def register(cli: typer.Typer) -> None:
    cli.command("backends")(backends)


def backends(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of a table."),
) -> None:
    """List every registered backend, whether its library is installed, and its metrics."""
    found = sorted(get_backends().items(), key=lambda kv: (kv[0] != "native", kv[0]))
    if as_json:
        print_json({
            "backends": [
                {
                    "name": name, "available": b.available(),
                    "version": b.version() if b.available() else None, "install_hint": b.install_hint,
                    "metrics": [
                        {"name": s.name, "native_name": s.native_name, "judge": s.judge,
                         "requires": list(s.requires), "description": s.description}
                        for s in b.metrics()
                    ],
                }
                for name, b in found
            ],
            "load_errors": dict(load_errors),
        })
        for name, message in load_errors.items():
            err.print(f"plugin {name!r} failed to load: {message}", markup=False, highlight=False)
        return
    table = Table(title="Backends", title_justify="left", show_lines=True)
    for col in ("backend", "available", "version", "metrics"):
        table.add_column(col)
    lines = []
    for name, b in found:
        ok = b.available()
        metrics = ", ".join(
            f"{s.name}" + (f" ({s.native_name})" if s.native_name and s.native_name != s.name else "")
            + (" [judge]" if s.judge else "")
            for s in b.metrics()
        )
        version = (b.version() or MISSING) if ok else MISSING
        table.add_row(
            escape(name), "[green]yes[/]" if ok else f"[yellow]no[/]: {escape(b.install_hint)}",
            escape(version), escape(metrics),
        )
        lines.append(f"{name} {version}: " + ("available" if ok else f"not installed: {b.install_hint}")
                     + f"; metrics: {metrics}")
    print_table(out, table, lines)
    for name, message in load_errors.items():
        err.print(f"[yellow]plugin {escape(name)!r} failed to load:[/] {escape(message)}")
