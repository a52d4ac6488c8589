"""The ``ragbridge`` command line: the typer application, its built-in commands and plugin commands.

One module per group of commands, each with a ``register(cli)`` that adds its commands to the
application: ``run`` (run, rescore), ``data`` (formats, convert, sample), ``backends``, ``judge``
(judge serve, judge check), ``analysis`` (compare, validate, calibrate, trend), ``diagnose``,
``regression`` (diff, gate) and ``report``. They are registered here, directly; third-party
plugins (and the built-in rubric plugin) add theirs through the ``ragbridge_register_commands`` hook
when `run_cli` starts.

Exit codes and what every command prints: `ragbridge.commands.output`. Help is plain text (click's
layout): it reads the same on a terminal, piped and in a log.

Only the console script and plugins' command modules import this package; no library module
(analysis, report, the runner, formats, the judge, native, the pytest plugin) does.
"""

from __future__ import annotations

from pathlib import Path

import typer
from typer.core import TyperGroup

from .. import __version__
from ..plugins import register_commands
from . import analysis, backends, data, diagnose, judge, regression, report, run
from .output import fail, out, storage_error

__all__ = ["cli", "run_cli", "PlainHelpGroup"]

_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0", "y", "n", "t", "f"}


class PlainHelpGroup(TyperGroup):
    """A command group with plain-text help whose flags refuse a value (``--overwrite true``) with an
    error that says so.

    (click would take ``true`` as the next argument and fail with "unexpected extra argument".) A
    word that names an existing file or folder is left to be an argument.
    """

    def resolve_command(self, ctx, args):
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and not isinstance(cmd, TyperGroup):
            flags = {o for p in cmd.params if getattr(p, "is_flag", False)
                     for o in (*p.opts, *p.secondary_opts)}
            for flag, value in zip(rest, rest[1:]):
                if flag == "--":
                    break
                if flag in flags and value.lower() in _BOOL_WORDS and not Path(value).exists():
                    fail(f"{flag} is a flag and takes no value (got {flag} {value}): "
                         f"write {flag} alone to switch it on, or leave it out")
        return name, cmd, rest

    def format_commands(self, ctx, formatter) -> None:
        """Each command with the first paragraph of its help, whole and wrapped (click cuts it short)."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, " ".join((cmd.short_help or cmd.help or "").split("\n\n")[0].split())))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


cli = typer.Typer(
    name="ragbridge",
    help="One golden set, every RAG evaluation backend, one report.",
    cls=PlainHelpGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        out.print(f"ragbridge {__version__}")
        raise typer.Exit()


@cli.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """One golden set, every RAG evaluation backend, one report."""


for _module in (run, backends, data, judge, analysis, diagnose, regression, report):
    _module.register(cli)


def run_cli() -> None:
    """The console script: the built-in commands, then the plugins' commands, then the command line.
    An output that cannot be written (a read-only folder, a full disk) is one error line and exit 2,
    from whichever command met it."""
    register_commands(cli)
    try:
        cli(prog_name="ragbridge")
    except OSError as exc:
        text = storage_error(exc)
        if text is None:
            raise
        try:
            fail(f"cannot write (or read) a file: {text}")
        except typer.Exit as done:
            raise SystemExit(done.exit_code) from None
