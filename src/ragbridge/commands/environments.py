"""``ragbridge environments``: the library versions a backend can run at in an environment of its own
(``--backend NAME==VERSION``), the environments made so far, building one ahead of a run, removing
them (docs/environments.md).
"""

from __future__ import annotations

from typing import List

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import cli_text
from ..run import RunError
from .output import err, fail, out, print_json, print_lines, print_table

__all__ = ["register"]


def register(cli: typer.Typer) -> None:
    group = typer.Typer(help="Library versions in environments of their own: list, build, remove.",
                        cls=cli.info.cls, no_args_is_help=True, rich_markup_mode=None)
    group.command("list")(environments_list)
    group.command("build")(environments_build)
    group.command("remove")(environments_remove)
    cli.add_typer(group, name="environments")


def _versions() -> list[tuple[str, list[str]]]:
    """Per backend whose plugin ships locks: its name and the versions."""
    from ..plugins import get_backends
    from ..run.isolated import shipped_versions

    found = [(name, shipped_versions(backend)) for name, backend in sorted(get_backends().items())]
    return [(name, versions) for name, versions in found if versions]


def environments_list(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of tables."),
) -> None:
    """The versions each backend can run at (NAME==VERSION) and the environments made so far."""
    from ..run.environments import envs_root, installed

    versions = _versions()
    made = installed()
    for env in made:  # made from the lock its plugin ships now, or from an older one
        env["current"] = _current(env)
    if as_json:
        print_json({"versions": {name: v for name, v in versions}, "folder": str(envs_root()),
                    "environments": made})
        return
    table = Table(title="Versions", title_justify="default")
    table.add_column("backend")
    table.add_column("versions")
    for name, v in versions:
        table.add_row(escape(name), escape(", ".join(v)))
    print_table(out, table, [f"{name}: {', '.join(v)}" for name, v in versions])
    out.print("[dim]run one with --backend NAME==VERSION[/]", highlight=False)
    if not made:
        out.print(f"no environment made yet (they go to {escape(str(envs_root()))})", highlight=False)
        return
    table = Table(title=f"Environments in {envs_root()}", title_justify="default")
    for col in ("backend", "version", "lock", "files", "built"):
        table.add_column(col, justify="right" if col == "files" else "left")
    lines = []
    for env in made:
        size = f"{env['bytes'] / 2**20:,.0f} MiB"
        lock = "current" if env["current"] else "older"
        table.add_row(escape(env["backend"]), escape(env["version"]), lock, size,
                      escape(env.get("built") or ""))
        lines.append(f"{env['backend']}=={env['version']}: {lock} lock, {size}, built {env.get('built')}, "
                     f"{env['path']}")
    print_table(out, table, lines)
    for env in made:  # what a user runs the library's own code with, in full (a table would cut it)
        out.print(f"{escape(env['backend'])}=={escape(env['version'])}: python {escape(env['executable'])}",
                  highlight=False, soft_wrap=True)
    out.print("[dim]lock: made from the lock the plugin ships now, or an older one (remove it: a run "
              "builds the current one); files: their size, linked from uv's cache, where environments "
              "share them[/]", highlight=False)


def _current(env: dict) -> bool:
    """Whether an environment was made from the lock its backend's plugin ships now."""
    from ..run.isolated import IsolatedBackend, backend_named

    try:
        backend = backend_named(f"{env['backend']}=={env['version']}")
        return isinstance(backend, IsolatedBackend) and backend.environment_spec().digest == env.get("digest")
    except RunError:
        return False


def environments_build(
    backend: List[str] = typer.Argument(..., help="NAME==VERSION (repeatable), e.g. mylib==1.2."),
) -> None:
    """Build the environments of these backends now (a run builds them when it first needs them)."""
    from ..run.isolated import IsolatedBackend, backend_named, prepare

    for name in backend:
        try:
            if not isinstance(backend_named(name), IsolatedBackend):
                fail(f"{name!r} names no version: give NAME==VERSION (ragbridge environments list shows "
                     "them)")
            env = prepare([name], note=lambda text: print_lines(err, [text]))[name]
        except RunError as exc:
            fail(cli_text(exc))
        print_lines(out, [f"{name}: ready in {env.path}"])


def environments_remove(
    backend: List[str] = typer.Argument(
        None, help="NAME==VERSION (repeatable); every environment of that version is removed."),
    every: bool = typer.Option(False, "--all", help="Remove every environment."),
) -> None:
    """Remove environments (a run builds them again when it needs them)."""
    from pathlib import Path

    from ..run.environments import installed, remove
    from ..run.isolated import split_name

    if not backend and not every:
        fail("name the environments to remove (NAME==VERSION), or pass --all")
    wanted = set()
    shipped = dict(_versions())
    made = installed()
    for name in backend or ():
        try:
            base, version = split_name(name)
        except RunError as exc:
            fail(cli_text(exc))
        if version is None:
            fail(f"{name!r} names no version: give NAME==VERSION")
        if version not in shipped.get(base, []) and not any(
                (e["backend"], e["version"]) == (base, version) for e in made):
            there = "; ".join(f"{b}: {', '.join(v)}" for b, v in shipped.items()
                              if base not in shipped or b == base) or "none"
            fail(f"{name!r}: no such version to remove (no lock, no environment); the versions there are: "
                 f"{there}")
        wanted.add((base, version))
    removed = 0
    for env in made:
        if every or (env["backend"], env["version"]) in wanted:
            remove(Path(env["path"]))
            removed += 1
            out.print(f"removed {escape(env['backend'])}=={escape(env['version'])} ({escape(env['path'])})",
                      highlight=False)
    if not removed:
        out.print("no environment to remove", highlight=False)
