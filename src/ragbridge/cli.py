"""The ``ragbridge`` command line.

Exit codes, the same for every command: 0 success; 1 a gate or check failed; 2 bad input or
configuration (nothing written); 3 ``run``/``rescore`` finished but some scores errored (the run
folder is complete otherwise; the same command again retries them); 130 interrupted (what was
scored is kept; the same command again resumes).

Every command prints for a reader at 80 columns and in a CI log (see `ragbridge.output`); every
command that prints results takes ``--json`` and then prints exactly one JSON document on stdout.
Help is plain text (click's layout): it reads the same on a terminal, piped and in a log.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import List, Optional

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from . import __version__
from .backend import RunOptions
from .formats import DatasetError, get_formats, load_cases, write_cases
from .formats.records import input_warnings
from .output import fits, print_json, print_lines, print_table, records
from .plugins import get_backends, load_errors, register_commands
from .run import RunError, evaluate
from .summary import ALL

_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0", "y", "n", "t", "f"}


class _Group(TyperGroup):
    """Commands whose flags refuse a value (``--overwrite true``) with an error that says so.

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
    cls=_Group,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
judge_cli = typer.Typer(
    help="The judge: serve the stub judge, check a configuration.", cls=_Group, no_args_is_help=True,
    rich_markup_mode=None,
)
cli.add_typer(judge_cli, name="judge")

out = Console()
err = Console(stderr=True)


EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_SCORE_ERRORS = 3
EXIT_INTERRUPTED = 130


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(message)}", highlight=False, soft_wrap=True)


def _version(value: bool) -> None:
    if value:
        out.print(f"ragbridge {__version__}")
        raise typer.Exit()


@cli.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """One golden set, every RAG evaluation backend, one report."""


def _fmt(value: float, digits: int = 3) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _share(row) -> str:
    return f"{row.unsupported_share:.0%}" if row.n_claims else "—"


def print_summary(frame, console: Console = out) -> None:
    """Overall table (per backend and metric), then the mean per tag for each backend.

    The per-tag table has a row per tag and a column per metric; when its columns do not fit the
    width they go into as many tables as it takes, each repeating the tag column.
    """
    overall = frame[frame["tag"] == ALL]
    claims = bool((frame["n_claims"] > 0).any())  # a backend exposes claims: show the unsupported share
    table = Table(title="Summary", title_justify="left")
    columns = ("backend", "metric", "mean", "scored", "undefined", "errored", "unsup.")
    for col in columns[:7 if claims else 6]:
        table.add_column(col, justify="right" if col not in ("backend", "metric") else "left", no_wrap=True)
    lines = []
    for row in overall.itertuples():
        table.add_row(
            row.backend, row.metric, _fmt(row.mean), str(row.n_scored), str(row.n_undefined),
            f"[red]{row.n_errored}[/]" if row.n_errored else "0",
            *((_share(row),) if claims else ()),
        )
        lines.append(f"{row.backend} {row.metric}: mean {_fmt(row.mean)}, {row.n_scored} scored, "
                     f"{row.n_undefined} undefined, {row.n_errored} errored"
                     + (f", {_share(row)} with an unsupported claim" if row.n_claims else ""))
    print_table(console, table, lines)
    if claims:
        console.print("[dim]unsup.: share of answers with at least one unsupported claim (of those "
                      "with claims); per tag in brackets[/]")
    tagged = frame[frame["tag"] != ALL]
    if tagged.empty:
        return
    for b in dict.fromkeys(overall["backend"]):
        metrics = list(dict.fromkeys(overall[overall["backend"] == b]["metric"]))
        rows = [
            (tag, int(group["n"].max()), {r.metric: r.mean for r in group.itertuples()},
             {r.metric: _share(r) for r in group.itertuples() if r.n_claims})
            for tag, group in tagged[tagged["backend"] == b].groupby("tag", sort=True)
        ]
        title = "Mean per tag" + (f" ({b})" if overall["backend"].nunique() > 1 else "")
        _print_by_tag(console, title, rows, metrics)


def _cell(means: dict, shares: dict, metric: str) -> str:
    """The mean, and the unsupported-claim share in brackets where the metric has claims."""
    return _fmt(means.get(metric), 2) + (f" ({shares[metric]})" if metric in shares else "")


def _tag_table(title: Optional[str], rows, metrics: list[str]) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column("tag", no_wrap=True)
    t.add_column("n", justify="right", no_wrap=True)
    for m in metrics:
        t.add_column(escape(m), justify="right", no_wrap=True)
    for tag, n, means, shares in rows:
        t.add_row(escape(tag), str(n), *(_cell(means, shares, m) for m in metrics))
    return t


def _print_by_tag(console: Console, title: str, rows, metrics: list[str]) -> None:
    parts: list[list[str]] = [[]]
    for m in metrics:
        if parts[-1] and not fits(console, _tag_table(None, rows, parts[-1] + [m])):
            parts.append([])
        parts[-1].append(m)
    tables = [
        _tag_table(title + (f", {i} of {len(parts)}" if len(parts) > 1 else ""), rows, part)
        for i, part in enumerate(parts, 1)
    ]
    if all(fits(console, t) for t in tables):
        for t in tables:
            console.print(t)
        return
    print_lines(console, [title] + [
        f"{tag} ({n} cases): " + ", ".join(f"{m} {_cell(means, shares, m)}" for m in metrics)
        for tag, n, means, shares in rows
    ])


@cli.command()
def run(
    dataset: Path = typer.Argument(..., help="Golden set: .jsonl, .csv, .parquet, or a datasets folder."),
    out_dir: Path = typer.Option(..., "--out", "-o", help="Run folder to write (resumed if it holds a run of the same cases)."),
    backend: List[str] = typer.Option(None, "--backend", "-b", help="Backend to run (repeatable). Default: native."),
    metric: List[str] = typer.Option(None, "--metric", "-m", help="Metric to score (repeatable), e.g. recall@5, mrr, faithfulness. Default: all of each backend's."),
    k: int = typer.Option(5, "--k", help="Cut-off for the @k ranking metrics."),
    gain: str = typer.Option("linear", "--gain", help="nDCG gain: linear (the grade) or exponential (2^grade - 1)."),
    case_sensitive: bool = typer.Option(False, "--case-sensitive", help="Exact-case matching for must_contain, must_not_contain and abstention."),
    decline_phrase: List[str] = typer.Option(None, "--decline-phrase", help="A phrase that marks a declined answer (repeatable; replaces the defaults)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Dataset format, when the suffix does not tell."),
    qrels: Optional[Path] = typer.Option(None, "--qrels", help="TREC qrels file of a TREC run (--format trec)."),
    batch_size: int = typer.Option(2000, "--batch-size", min=1, help="Cases scored at a time (memory holds one batch)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the run folder instead of resuming it."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    as_json: bool = typer.Option(
        False, "--json", help="Print the summary as one JSON document (notes on stderr)."
    ),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="Judge model name."),
    judge_base_url: Optional[str] = typer.Option(None, "--judge-base-url", help="OpenAI-compatible base URL of the judge."),
    judge_api_key_env: Optional[str] = typer.Option(None, "--judge-api-key-env", help="Environment variable that holds the judge's key (default OPENAI_API_KEY)."),
    embedding_model: Optional[str] = typer.Option(None, "--embedding-model", help="Embedding model name, for metrics that embed."),
    cache_mode: Optional[str] = typer.Option(None, "--cache-mode", help="Judge cache: read-write, read-only or off."),
    cache_path: Optional[Path] = typer.Option(None, "--cache-path", help="Judge cache file (SQLite)."),
    max_concurrency: Optional[int] = typer.Option(None, "--max-concurrency", help="Judge calls in flight at once, across all backends (default 8)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Config file (default: ./ragbridge.toml, then [tool.ragbridge] in ./pyproject.toml)."),
    target: Optional[str] = typer.Option(None, "--target", help="Call the system under test for each case first: module:callable, module:object with retrieve/answer, or an http(s) URL."),
    target_concurrency: int = typer.Option(4, "--target-concurrency", help="Target calls in flight at once."),
    rubric: List[Path] = typer.Option(None, "--rubric", help="Rubric file (TOML) of the rubric backend."),
    generator_model: Optional[str] = typer.Option(None, "--generator-model", help="The system's own model."),
) -> None:
    """Score a golden set with one or more backends and write a run folder.

    \b
    Exit codes:
      0    every planned score recorded, none errored
      2    bad input or configuration; nothing written
      3    the run finished, but some scores errored: run it again to retry them
      130  interrupted: run it again to resume
    """
    if gain not in ("linear", "exponential"):
        fail(f"--gain must be 'linear' or 'exponential', got {gain!r}")
    from .formats.source import open_cases

    try:
        cases = open_cases(dataset, fmt, near=out_dir, progress=None if no_progress else _reading_bar(),
                           batch_size=batch_size, qrels=qrels)
    except DatasetError as exc:
        fail(str(exc))
    for line in cases.warnings:
        warn(line)
    _score_and_print(
        cases, out_dir, str(dataset), backend, metric, config, no_progress, overwrite,
        RunOptions(k=k, gain=gain, case_sensitive=case_sensitive, decline_phrases=decline_phrase or None,
                   backend_options=_rubric_options(rubric), generator_model=generator_model),
        dict(
            model=judge_model, base_url=judge_base_url, api_key_env=judge_api_key_env,
            embedding_model=embedding_model, cache_mode=cache_mode, cache_path=cache_path,
            max_concurrency=max_concurrency,
        ),
        target=target, target_concurrency=target_concurrency, as_json=as_json,
    )


@cli.command()
def rescore(
    run_dir: Path = typer.Argument(..., help="A run folder: its recorded cases are scored again, nothing is called but the judge."),
    backend: List[str] = typer.Option(None, "--backend", "-b", help="Backend to run (repeatable). Default: native."),
    metric: List[str] = typer.Option(None, "--metric", "-m", help="Metric to score (repeatable)."),
    k: int = typer.Option(5, "--k", help="Cut-off for the @k ranking metrics."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    as_json: bool = typer.Option(
        False, "--json", help="Print the summary as one JSON document (notes on stderr)."
    ),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="Judge model name."),
    judge_base_url: Optional[str] = typer.Option(None, "--judge-base-url", help="OpenAI-compatible base URL of the judge."),
    judge_api_key_env: Optional[str] = typer.Option(None, "--judge-api-key-env", help="Environment variable that holds the judge's key."),
    embedding_model: Optional[str] = typer.Option(None, "--embedding-model", help="Embedding model name."),
    cache_mode: Optional[str] = typer.Option(None, "--cache-mode", help="Judge cache: read-write, read-only or off."),
    cache_path: Optional[Path] = typer.Option(None, "--cache-path", help="Judge cache file (SQLite)."),
    max_concurrency: Optional[int] = typer.Option(None, "--max-concurrency", help="Judge calls in flight at once."),
    config: Optional[Path] = typer.Option(None, "--config", help="Config file."),
    rubric: List[Path] = typer.Option(None, "--rubric", help="Rubric file (TOML) of the rubric backend."),
    generator_model: Optional[str] = typer.Option(None, "--generator-model", help="The system's own model."),
) -> None:
    """Score a run's recorded cases (e.g. a --target run) with more backends or metrics, into the same folder.

    \b
    Exit codes:
      0    every planned score recorded, none errored
      2    bad input or configuration
      3    some scores errored: run it again to retry them
      130  interrupted: run it again to resume
    """
    if not (run_dir / "cases.jsonl").exists():
        fail(f"{run_dir} is not a run folder with recorded cases (no cases.jsonl)")
    try:
        cases = load_cases(run_dir / "cases.jsonl")
    except DatasetError as exc:
        fail(str(exc))
    _score_and_print(
        cases, run_dir, str(run_dir / "cases.jsonl"), backend, metric, config, no_progress, False,
        RunOptions(k=k, backend_options=_rubric_options(rubric), generator_model=generator_model),
        dict(
            model=judge_model, base_url=judge_base_url, api_key_env=judge_api_key_env,
            embedding_model=embedding_model, cache_mode=cache_mode, cache_path=cache_path,
            max_concurrency=max_concurrency,
        ),
        as_json=as_json,
    )


def _rubric_options(files: Optional[List[Path]]) -> dict:
    return {"rubric": {"files": [str(f) for f in files]}} if files else {}


def _score_and_print(cases, out_dir, dataset_path, backend, metric, config, no_progress, overwrite,
                     options, judge_overrides, target=None, target_concurrency=4, as_json=False) -> None:
    import signal

    from .run.target import TargetError
    judge = _judge_config(judge_overrides, config)
    # A termination (a CI job cancelled) ends the run as Ctrl-C does: the run folder records it.
    previous = signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
    try:
        result = evaluate(
            cases, backends=backend or None, metrics=metric or None, out=out_dir, options=options,
            judge=judge, dataset_path=dataset_path, progress=not no_progress, overwrite=overwrite,
            target=target, target_concurrency=target_concurrency,
        )
    except (RunError, TargetError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail(f"interrupted; what was scored is kept in {out_dir}; run the same command again to resume",
             EXIT_INTERRUPTED)
    finally:
        signal.signal(signal.SIGTERM, previous)
    _print_run(result, out_dir, as_json)


def _reading_bar():
    """A ``progress`` callback for `open_cases`: the cases read so far, on stderr."""
    state = {"last": 0.0}

    def show(n: int) -> None:
        import time

        if time.monotonic() - state["last"] > 0.5:
            err.print(f"reading: {n:,} cases", highlight=False)
            state["last"] = time.monotonic()

    return show


def _print_run(result, out_dir, as_json: bool) -> None:
    """The summary tables and one line per note, or with ``as_json`` one JSON document (notes on stderr).

    Exits with `EXIT_SCORE_ERRORS` when some scores errored (after printing)."""
    counts = result.manifest.counts
    judge = result.manifest.judge or {}
    notes = []
    if judge.get("stub"):
        notes.append("judged by the stub judge: these judged scores test plumbing, not answer quality")
    if counts.get("duplicate_chunk_ids"):
        notes.append(f"{counts['duplicate_chunk_ids']} repeated chunk id(s) dropped before ranking")
    if counts.get("resumed_from"):
        notes.append(f"resumed: {counts['resumed_from']} score(s) kept from the earlier run")
    if counts.get("judge"):
        j = counts["judge"]
        notes.append(
            f"judge: {j['calls']} call(s), {j['cache_hits']} from cache, "
            f"{j['prompt_tokens']}+{j['completion_tokens']} tokens"
        )
    if counts.get("redefined"):
        notes.append("rubric changed since the folder was scored, scored again: "
                     + ", ".join(counts["redefined"]))
    if counts.get("target_errors"):
        notes.append(f"target failed on {counts['target_errors']} case(s); their scores carry the error")
    latencies = sorted(
        c.metadata["target"]["seconds"] for c in (result.cases if result.manifest.dataset.get("target") else ())
        if isinstance(c.metadata.get("target"), dict)
    )
    latency = None
    if latencies:
        p50 = latencies[len(latencies) // 2]
        p95 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.95))]
        latency = {"p50": p50, "p95": p95, "n": len(latencies)}
        notes.append(f"target latency: p50 {p50:.3f}s, p95 {p95:.3f}s over {len(latencies)} call(s)")
    frame = result.summary()
    if as_json:
        for note in notes:
            err.print(note, markup=False, highlight=False)
        overall = frame[frame["tag"] == ALL].drop(columns="tag")
        print_json({
            "run": str(out_dir), "status": result.manifest.status, "stub_judge": bool(judge.get("stub")),
            "judge": result.manifest.judge, "counts": counts, "summary": records(overall),
            "by_tag": records(frame[frame["tag"] != ALL]), "target_latency": latency,
        })
    else:
        print_summary(frame)
        for i, note in enumerate(notes):
            style = "yellow" if i == 0 and judge.get("stub") else "dim"
            out.print(f"[{style}]{escape(note)}[/]", highlight=False)
        out.print(f"run written to [bold]{escape(str(out_dir))}[/] ({counts.get('scores', 0)} scores)",
                  highlight=False)
    same = judge.get("self_judging")
    if same:
        err.print(f"[yellow]warning:[/] self-judging: the judge model is the system under test's own model "
                  f"({escape(same['generator_model'])}) on {same['cases']} case(s); its scores are likely "
                  "inflated", highlight=False)
    if counts.get("errored") or result.manifest.status != "complete":
        status = result.manifest.status
        err.print(
            f"[bold red]{counts.get('errored', 0)} of {counts.get('scores', 0)} score(s) errored[/]"
            + ("" if status == "complete" else f" (the run is {status})")
            + "; run the same command again to retry them",
            highlight=False, soft_wrap=True,
        )
        raise typer.Exit(EXIT_SCORE_ERRORS)


def _judge_config(overrides: dict, config: Optional[Path]):
    """The judge configuration from the CLI and config files, or None when none is configured.

    A configuration that is present but wrong (bad URL, unknown key, unreadable file) is an error
    here; one that is merely absent only matters if a planned metric needs a judge, which the runner
    says.
    """
    from .judge import JudgeConfig, JudgeConfigError

    try:
        return JudgeConfig.load(overrides, config_file=config)
    except JudgeConfigError as exc:
        if " is not set" in str(exc) and not any(overrides.get(k) for k in ("model", "base_url")):
            return None
        fail(str(exc))


@cli.command()
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
        version = (b.version() or "—") if ok else "—"
        table.add_row(
            escape(name), "[green]yes[/]" if ok else f"[yellow]no[/]: {escape(b.install_hint)}",
            escape(version), escape(metrics),
        )
        lines.append(f"{name} {version}: " + ("available" if ok else f"not installed: {b.install_hint}")
                     + f"; metrics: {metrics}")
    print_table(out, table, lines)
    for name, message in load_errors.items():
        err.print(f"[yellow]plugin {escape(name)!r} failed to load:[/] {escape(message)}")


def _format_rows() -> list[dict]:
    """``ragbridge formats --json``'s records (their keys are documented in the README)."""
    return [
        {"name": name, "suffixes": list(f.suffixes), "folder": f.is_dir, "read": f.read is not None,
         "write": f.write is not None, "recognised": bool(f.fields), "description": f.description,
         "cannot_hold": list(f.cannot_hold)}
        for name, f in sorted(get_formats().items())
    ]


@cli.command()
def formats(
    as_json: bool = typer.Option(False, "--json", help="Print JSON: one object per format."),
) -> None:
    """List the dataset formats that ``convert`` and ``run`` read and write, and what each cannot hold."""
    rows = _format_rows()
    if as_json:
        typer.echo(json.dumps({"formats": rows}, indent=2, ensure_ascii=False))
        return
    table = Table(title="Formats (name one with --format, --from, --to)", title_justify="left",
                  box=box.SIMPLE_HEAD, show_lines=False, pad_edge=False)
    table.add_column("format", no_wrap=True)
    table.add_column("files", overflow="fold")
    table.add_column("r/w", no_wrap=True)
    table.add_column("what it is; what it cannot hold", overflow="fold", ratio=1)
    for r in rows:
        files = "folder" if r["folder"] else " ".join(r["suffixes"]) or "-"
        lost = ", ".join(r["cannot_hold"])
        text = escape(r["description"]) + "\n" + (
            f"[yellow]cannot hold: {escape(lost)}[/]" if lost else "[green]holds every field[/]")
        table.add_row(r["name"], files, ("r" if r["read"] else "") + ("w" if r["write"] else ""), text)
    out.print(table)
    recognised = [r["name"] for r in rows if r["recognised"]]
    if recognised:
        out.print(f"A .jsonl, .json, .csv or .parquet file (or datasets folder) with the fields of "
                  f"{', '.join(recognised)} is read as that format.", highlight=False)
    out.print("Each format's field mapping and losses: docs/formats.md.", highlight=False)


@cli.command()
def convert(
    source: Path = typer.Argument(..., help="Dataset to read."),
    target: Path = typer.Argument(..., help="Where to write."),
    from_format: Optional[str] = typer.Option(None, "--from", help="Format of SOURCE (default: from its suffix)."),
    to_format: Optional[str] = typer.Option(None, "--to", help="Format of TARGET (default: from its suffix)."),
) -> None:
    """Convert a dataset between formats (canonical JSONL, CSV, Parquet, datasets, and the backends' own)."""
    try:
        cases = load_cases(source, from_format)
        for line in input_warnings(cases):
            warn(line)
        lost = write_cases(cases, target, to_format)
    except DatasetError as exc:
        fail(str(exc))
    out.print(f"wrote {len(cases)} case(s) to {target}")
    if lost:
        err.print("[yellow]warning:[/] the target format cannot hold " + escape(", ".join(lost))
                  + "; those values were not kept (see ragbridge formats)", highlight=False)


@cli.command()
def sample(
    traces: Path = typer.Argument(..., help="JSONL log of production interactions."),
    n: int = typer.Option(200, "--n", help="How many interactions to draw."),
    seed: int = typer.Option(0, "--seed", help="Seed: the same log, filters and seed give the same sample."),
    where: List[str] = typer.Option(None, "--where", help="Keep only interactions with field=value (repeatable; tag=billing matches a tag)."),
    mapping: Optional[Path] = typer.Option(None, "--mapping", help="TOML file mapping log fields to the schema (see ragbridge.run.sample)."),
    out_file: Path = typer.Option(..., "--out", "-o", help="Where to write the sampled cases (.jsonl, .csv, .parquet)."),
) -> None:
    """Draw a reproducible sample of logged interactions as canonical cases, ready for reference-free metrics."""
    from .run.sample import load_mapping, sample_traces

    try:
        cases = sample_traces(traces, n, seed=seed, where=where or (), mapping=load_mapping(mapping))
        write_cases(cases, out_file)
    except DatasetError as exc:
        fail(str(exc))
    out.print(f"sampled {len(cases)} interaction(s) into {escape(str(out_file))}", highlight=False)


@judge_cli.command("serve")
def judge_serve(
    stub: bool = typer.Option(False, "--stub", help="Serve the deterministic stub judge (the only server ragbridge ships)."),
    port: int = typer.Option(8808, "--port", help="Port on 127.0.0.1."),
    latency: float = typer.Option(0.0, "--latency", help="Seconds of delay per request."),
    fault_429: float = typer.Option(0.0, "--fault-rate-429", help="Share of requests answered 429."),
    fault_500: float = typer.Option(0.0, "--fault-rate-500", help="Share of requests answered 500."),
    fault_timeout: float = typer.Option(0.0, "--fault-rate-timeout", help="Share of requests held past the client's timeout."),
    fault_malformed: float = typer.Option(0.0, "--fault-rate-malformed", help="Share of answers whose content is malformed JSON."),
    seed: int = typer.Option(0, "--seed", help="Seed of the fault draws."),
) -> None:
    """Serve an OpenAI-compatible judge on 127.0.0.1 for testing eval plumbing without a key."""
    if not stub:
        fail("only the stub judge can be served: pass --stub")
    for name, rate in (("429", fault_429), ("500", fault_500), ("timeout", fault_timeout), ("malformed", fault_malformed)):
        if not 0.0 <= rate <= 1.0:
            fail(f"--fault-rate-{name} must be between 0 and 1, got {rate}")
    from .testing.stub_judge import serve

    serve(port, latency=latency, fault_rate_429=fault_429, fault_rate_500=fault_500,
          fault_rate_timeout=fault_timeout, fault_rate_malformed=fault_malformed, seed=seed)


@judge_cli.command("check")
def judge_check(
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="Judge model name."),
    judge_base_url: Optional[str] = typer.Option(None, "--judge-base-url", help="OpenAI-compatible base URL."),
    judge_api_key_env: Optional[str] = typer.Option(None, "--judge-api-key-env", help="Environment variable holding the key."),
    config: Optional[Path] = typer.Option(None, "--config", help="Config file."),
) -> None:
    """Check the judge configuration: the key is set and the endpoint answers."""
    from .judge import JudgeGateway

    cfg = _judge_config(dict(model=judge_model, base_url=judge_base_url, api_key_env=judge_api_key_env), config)
    if cfg is None:
        fail("no judge configured: pass --judge-model and --judge-base-url, or set [judge] in ragbridge.toml")
    gateway = JudgeGateway(cfg)
    try:
        gateway.start()
        gateway.preflight()
    except Exception as exc:
        fail(str(exc))
    finally:
        gateway.close()
    out.print(escape(f"judge ok: {cfg.model} at {cfg.public_dict().get('base_url')}"), highlight=False)


def run_cli() -> None:  # console-script entry point
    register_commands(cli)
    cli(prog_name="ragbridge")


if __name__ == "__main__":  # pragma: no cover
    run_cli()
