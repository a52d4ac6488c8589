"""The ``ragbridge`` command line: the typer application, its built-in commands and plugin commands.

One module per group of commands, each with a ``register(cli)`` that adds its commands to the
application: ``run`` (run, rescore), ``data`` (formats, convert, sample), ``backends``, ``judge``
(judge serve, judge check), ``analysis`` (compare, validate, calibrate), ``trend``, ``diagnose``,
``regression`` (diff, gate) and ``report``. They are registered lazily (`COMMANDS`: each command's
module and the first line of its help): ``ragbridge --help`` lists them without importing any, and a
command's module is imported when that command is run or its help shown. Third-party plugins (and
the built-in rubric plugin) add theirs through the ``ragbridge_register_commands`` hook when
`run_cli` starts.

Exit codes and what every command prints: `ragbridge.commands.output`. Help is plain text (click's
layout): it reads the same on a terminal, piped and in a log.

Only the console script and plugins' command modules import this package; no library module
(analysis, report, the runner, formats, the judge, native, the pytest plugin) does.
"""

from __future__ import annotations

import collections.abc
import contextlib
import functools
import gc
import inspect
import logging
import os
import sys
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from typer.core import TyperGroup

from .. import __version__
from ..errors import UserError, cli_text
from ..flags import JUDGE_FLAGS, JUDGE_SETTING, FlagSpec, unwrap
from ..plugins import register_commands

__all__ = ["cli", "run_cli", "PlainHelpGroup", "COMMANDS", "judge_options", "JudgeOptions", "model_options"]

#: the built-in commands, in the order ``--help`` lists them: name -> (the module under
#: ``ragbridge.commands`` whose ``register`` adds it, the first paragraph of its help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "Score a golden set with one or more backends and write a run folder."),
    "rescore": ("run", "Score a run's recorded cases (e.g. a --target run) with more backends or metrics, "
                       "into the same folder."),
    "backends": ("backends", "List every registered backend, whether its library is installed, its metrics "
                             "and its options (with NAME: each option's type, default and help)."),
    "environments": ("environments", "Library versions in environments of their own: list, build, "
                                     "remove."),
    "formats": ("data", "List the dataset formats that ``convert`` and ``run`` read and write, and what each "
                        "cannot hold."),
    "convert": ("data", "Convert a dataset between formats (canonical JSONL, CSV, Parquet, datasets, TREC, "
                        "and the backends' own)."),
    "sample": ("data", "Draw a reproducible sample of production traces (or logged interactions) as "
                       "canonical cases, ready for reference-free metrics."),
    "anchor": ("data", "Anchor chunk-id and section labels to spans of the documents, so that they survive "
                       "re-chunking."),
    "export-scores": ("data", "Write a run's scores as span evaluations (trace id, span id, name, label, "
                              "score, explanation) for the tracing tool the traces came from, or send them "
                              "to its server."),
    "compare": ("analysis", "Agreement between backends on each metric they share, and the cases they "
                            "disagree on most (with --with, backends scored in other runs too); with two "
                            "runs, each backend against itself in the other run (e.g. another judge model)."),
    "validate": ("analysis", "Each backend's verdicts against human labels: TPR, TNR, kappa, balanced "
                             "accuracy."),
    "calibrate": ("analysis", "The threshold in one backend that best reproduces another's pass/fail "
                              "(maximum kappa); with --with, a backend of another run of the same cases "
                              "(BACKEND@FOLDER where both runs scored it)."),
    "trend": ("trend", "The mean of each metric over dated runs: the series, its slope per run with a "
                       "95% interval, and the change points."),
    "diagnose": ("diagnose", "Each failing case to one layer: retrieval, generation, knowledge_base, "
                             "reference_or_judge or undetermined (with the missing evidence named), and the "
                             "evidence that decided it (docs/diagnose.md)."),
    "diff": ("regression", "Compare two runs case by case: what moved, the change in mean with paired "
                           "intervals, per tag."),
    "gate": ("regression", "Check a run against thresholds: exit 0 when every rule holds, 1 when one fails, "
                           "2 for bad input."),
    "report": ("report", "Write one report (HTML, Markdown or JSON) of a run: summary, agreement, judge "
                         "usage, every case."),
    "judge": ("judge", "The judge: serve the stub judge, check a configuration."),
}

_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0", "y", "n", "t", "f"}


#: what OpenBLAS reads for its number of threads, in the order it reads them
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


@contextlib.contextmanager
def _one_blas_thread():
    """While a command's module is imported: NumPy's OpenBLAS, when this import is what loads it,
    starts with one thread. Each worker thread it starts spins on a core for a while before it
    sleeps (about 0.1 s of CPU for a command that then makes no BLAS call), and ragbridge's own NumPy
    work is element-wise arithmetic and sorting, not BLAS. The setting is removed after the import,
    so nothing the command starts (a target's process, Ray's workers) inherits it; a thread count the
    user set is left alone."""
    if "numpy" in sys.modules or any(name in os.environ for name in _BLAS_THREADS):
        yield
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        os.environ.pop("OPENBLAS_NUM_THREADS", None)


def _check_text_options(cmd, args: list[str]) -> None:
    """Exit 2 naming the option when a text option's value (not a path's: a file name may be any
    bytes) is not UTF-8: Python gets such bytes as lone surrogates, which no output can hold."""
    from ..limits import not_text

    def is_path(param) -> bool:
        annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
        if annotation is None:  # a click parameter: its type says
            return "path" in type(getattr(param, "type", None)).__name__.lower()
        return annotation is Path or Path in typing.get_args(annotation)

    texts = {o for p in cmd.params if getattr(p, "is_flag", None) is False and not is_path(p) for o in p.opts}
    for i, arg in enumerate(args):
        if arg == "--":
            break
        option, eq, value = arg.partition("=")
        if option in texts and (eq or i + 1 < len(args)):
            shown = not_text(value if eq else args[i + 1])
            if shown is not None:
                from .output import fail

                fail(f"{option} {shown} is not UTF-8 text: give it as UTF-8")


class PlainHelpGroup(TyperGroup):
    """A command group with plain-text help whose flags refuse a value (``--overwrite true``) with an
    error that says so.

    (click would take ``true`` as the next argument and fail with "unexpected extra argument".) A
    word that names an existing file or folder is left to be an argument.
    """

    #: commands not yet imported: name -> (module under ``ragbridge.commands``, first line of help)
    lazy: dict[str, tuple[str, str]] = {}

    def list_commands(self, ctx) -> list[str]:
        return list(dict.fromkeys([*self.lazy, *super().list_commands(ctx)]))

    def get_command(self, ctx, name):
        if name not in self.commands and name in self.lazy:
            self._load(self.lazy[name][0])
        return super().get_command(ctx, name)

    def _load(self, module_name: str) -> None:
        """Import one command module and add its commands (those not added already)."""
        import importlib

        with _one_blas_thread():
            module = importlib.import_module(f"{__name__}.{module_name}")
        app = typer.Typer(cls=PlainHelpGroup, rich_markup_mode=None)
        module.register(app)
        for name, cmd in typer.main.get_group(app).commands.items():
            self.commands.setdefault(name, cmd)

    def resolve_command(self, ctx, args):
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and not isinstance(cmd, TyperGroup):
            flags = {o for p in cmd.params if getattr(p, "is_flag", False)
                     for o in (*p.opts, *p.secondary_opts)}
            for flag, value in zip(rest, rest[1:]):
                if flag == "--":
                    break
                if flag in flags and value.lower() in _BOOL_WORDS and not Path(value).exists():
                    from .output import fail

                    fail(f"{flag} is a flag and takes no value (got {flag} {value}): "
                         f"write {flag} alone to switch it on, or leave it out")
            _check_text_options(cmd, rest)
        _started()
        return name, cmd, rest

    def format_commands(self, ctx, formatter) -> None:
        """Each command with the first paragraph of its help, whole and wrapped (click cuts it short);
        a command not imported yet with its line from `lazy`."""
        rows = []
        for name in self.list_commands(ctx):
            if name not in self.commands and name in self.lazy:
                rows.append((name, self.lazy[name][1]))
                continue
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, " ".join((cmd.short_help or cmd.help or "").split("\n\n")[0].split())))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _cli_type(spec: Any, given_only: bool) -> Any:
    """The type typer reads a flag as: a choice as its values' type (the model checks the value), a
    list as a repeatable option; None allowed where the flag may be left out."""
    base, _, optional = unwrap(spec.annotation)
    origin = typing.get_origin(base)
    if origin is typing.Literal:
        base = type(typing.get_args(base)[0])
    elif origin in (list, tuple, set, collections.abc.Sequence):
        item = unwrap((typing.get_args(base) or (str,))[0])[0]
        base = typing.List[item if item in (str, int, float, Path) else str]  # type: ignore[valid-type]
    elif base not in (str, int, float, bool, Path):
        base = str
    return Optional[base] if optional or given_only or spec.default is None else base


def _typer_option(spec: Any, given_only: bool) -> Any:
    """The typer option of a flag: its spellings, its help, and its default (None with
    ``given_only``: the default is then shown in the help)."""
    default, text = spec.default, spec.help
    if given_only and default not in (None, False, [], ()):
        text += f"  [default: {default}]"
    if isinstance(default, (list, tuple)) and not default:
        default = None
    return typer.Option(None if given_only else default, *spec.flags, help=text)


def model_options(groups: dict[str, typing.Sequence[FlagSpec]], given_only: typing.Collection[str] = (),
                  wrap: Optional[dict[str, Callable[[dict[str, Any]], Any]]] = None) -> Callable:
    """Give ``command`` a flag for each `ragbridge.flags.FlagSpec` of ``groups`` (a model field's,
    `ragbridge.options.flag_spec`, or the judge's, `ragbridge.flags.JUDGE_FLAGS`): each group's flags
    in the place of ``command``'s parameter of the group's name, which receives them as one mapping
    (name -> value), or what ``wrap[group]`` makes of it. In a group of ``given_only`` each flag's
    default is None, and the mapping holds only the flags given (a flag that only switches on, when
    it is)."""
    wrap = wrap or {}

    def decorate(command: Callable) -> Callable:
        hints = typing.get_type_hints(command)
        signature = inspect.signature(command)
        params: list[inspect.Parameter] = []
        for p in signature.parameters.values():
            if p.name not in groups:
                params.append(p.replace(annotation=hints.get(p.name, p.annotation)))
                continue
            only = p.name in given_only
            params += [inspect.Parameter(f"{p.name}__{spec.name}", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                         default=_typer_option(spec, only), annotation=_cli_type(spec, only))
                       for spec in groups[p.name]]

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for group, specs in groups.items():
                values = {spec.name: kwargs.pop(f"{group}__{spec.name}", None) for spec in specs}
                if group in given_only:
                    values = {k: v for k, v in values.items() if v not in (None, False, [])}
                kwargs[group] = wrap[group](values) if group in wrap else values
            return command(*args, **kwargs)

        wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {**{p.name: p.annotation for p in params},
                                   "return": hints.get("return", None)}
        return wrapper

    return decorate


@dataclass(frozen=True)
class JudgeOptions:
    """What the judge options of one command line say: the settings given (the others None) and the
    config file."""

    overrides: dict[str, Any]
    config: Optional[Path] = None

    def load(self) -> Any:
        """The judge configuration: the command line over ``ragbridge.toml`` over ``pyproject.toml``,
        or None when none is configured.

        A configuration that is present but wrong (bad URL, unknown key, unreadable file) is an error
        here (exit 2); one that is merely absent only matters if a planned metric needs a judge,
        which the runner says."""
        from ..judge import JudgeConfig, JudgeConfigError
        from .output import fail

        try:
            return JudgeConfig.load(self.overrides, config_file=self.config)
        except JudgeConfigError as exc:
            if " is not set" in str(exc) and not any(self.overrides.get(k) for k in ("model", "base_url")):
                return None
            fail(str(exc))


def judge_options(command: Callable) -> Callable:
    """Give ``command`` the judge options (`ragbridge.flags.JUDGE_FLAGS`): its parameter ``judge``
    (a `JudgeOptions`) stands for them on the command line."""

    def judge(given: dict[str, Any]) -> JudgeOptions:
        return JudgeOptions({JUDGE_SETTING[k]: v for k, v in given.items() if JUDGE_SETTING[k]},
                            given.get("config"))

    return model_options({"judge": JUDGE_FLAGS}, wrap={"judge": judge})(command)



class _RootGroup(PlainHelpGroup):
    """The root group: the built-in commands of `COMMANDS`, imported when used."""

    lazy = COMMANDS


cli = typer.Typer(
    name="ragbridge",
    help="One golden set, every RAG evaluation backend, one report.",
    cls=_RootGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ragbridge {__version__}")
        raise typer.Exit()


@cli.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """One golden set, every RAG evaluation backend, one report."""


def _started() -> None:
    """The command is imported: the cyclic garbage collector is switched back on (`run_cli`). What
    start-up made (modules, classes, the command line) is moved out of its future passes
    (``gc.freeze``), once a process: a command's own objects are collected as always."""
    global _gc_paused, _gc_frozen
    if _gc_paused:
        _gc_paused = False
        if not _gc_frozen:
            _gc_frozen = True
            gc.freeze()
        gc.enable()


#: whether `run_cli` holds the collector off, and whether start-up's objects were frozen already
_gc_paused = False
_gc_frozen = False


class SayHandler(logging.Handler):
    """The log records of ragbridge and its plugins (``note: ...``, ``warning: ...``) printed by `say`,
    wrapped as the commands' own; any other library's records as Python prints them without a handler
    (``logging.lastResort``), when nothing else handles them."""

    def emit(self, record: logging.LogRecord) -> None:
        if not record.name.startswith("ragbridge"):
            last, root = logging.lastResort, logging.getLogger()
            if last is not None and record.levelno >= last.level and root.handlers == [self] \
                    and not _handled_below(logging.getLogger(record.name), root):
                last.handle(record)
            return
        from .output import say_record

        say_record(record.getMessage())

    @classmethod
    def install(cls) -> None:
        """On the root logger, once a process."""
        root = logging.getLogger()
        if not any(isinstance(h, cls) for h in root.handlers):
            root.addHandler(cls(logging.WARNING))


def _handled_below(logger: logging.Logger, root: logging.Logger) -> bool:
    """Whether a logger between ``logger`` and the root has a handler of its own (as Python looks)."""
    while logger is not None and logger is not root:
        if logger.handlers:
            return True
        if not logger.propagate:
            return True  # the record never reaches the root
        logger = logger.parent
    return False


def run_cli() -> None:
    """The console script: the built-in commands, then the plugins' commands, then the command line.
    An output that cannot be written (a read-only folder, a full disk) and bad input (`UserError`: a
    run folder's file holding what a run never writes, met when its scores are first read) are one
    error line and exit 2, from whichever command met them.

    Start-up (importing the command's modules) makes many objects and few cycles: the cyclic garbage
    collector is off until the command is resolved and imported (`_started`), then on for the
    command's work, as always."""
    global _gc_paused
    from ..run import progress

    progress.command_started = time.monotonic()  # the clock of the commands' progress lines
    if gc.isenabled():
        gc.disable()
        _gc_paused = True
    register_commands(cli)
    SayHandler.install()  # ragbridge's log notes and warnings wrapped as the commands' own
    try:
        cli(prog_name="ragbridge")
    except SystemExit as exc:  # Ctrl-C: the command line's exit 130 (run's says more, and exits itself)
        if exc.code == 130:
            _say_interrupted()
        raise
    except UserError as exc:  # bad input a command met past its own checks (a run's scores, read when used)
        _exit_with(cli_text(exc))
    except OSError as exc:
        from .output import storage_error

        text = storage_error(exc)
        if text is None:
            raise
        _exit_with(f"cannot write (or read) a file: {text}")
    finally:
        _started()
        progress.command_started = None


def _say_interrupted() -> None:
    """One line on stderr for a command stopped by Ctrl-C (exit 130): an output file is written whole
    or not at all, so none is left half written."""
    try:
        sys.stderr.write("error: interrupted; no output file was left half written\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _exit_with(message: str) -> None:
    """``error: message`` on stderr and exit 2 (`ragbridge.commands.output.fail`), from outside a command."""
    from .output import fail

    try:
        fail(message)
    except typer.Exit as done:
        raise SystemExit(done.exit_code) from None
