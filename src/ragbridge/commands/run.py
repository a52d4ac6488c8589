"""``ragbridge run`` and ``ragbridge rescore``: score cases into a run folder, then print its summary.

Exit codes:
  0    every planned score recorded, none errored
  2    bad input or configuration; nothing written
  3    the run finished, but some scores errored: run it again to retry them
  130  interrupted: run it again to resume
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..backend import RunOptions
from ..formats import DatasetError, load_cases
from ..report.text import MISSING, jsonable, num
from ..run import RunError, evaluate
from ..run.summary import ALL
from .judge import judge_config
from .output import (
    EXIT_INTERRUPTED,
    EXIT_SCORE_ERRORS,
    err,
    fail,
    fits,
    out,
    print_json,
    print_lines,
    print_table,
    warn,
)

__all__ = ["register", "run", "rescore", "print_summary"]


def register(cli: typer.Typer) -> None:
    cli.command("run")(run)
    cli.command("rescore")(rescore)


def run(
    dataset: Path = typer.Argument(..., help="Golden set: .jsonl, .csv, .parquet, or a datasets folder."),
    out_dir: Path = typer.Option(
        ..., "--out", "-o", help="Run folder to write (resumed if it holds a run of the same cases)."),
    backend: List[str] = typer.Option(
        None, "--backend", "-b", help="Backend to run (repeatable). Default: native."),
    metric: List[str] = typer.Option(
        None, "--metric", "-m", help="Metric to score (repeatable), e.g. recall@5, mrr, faithfulness. "
                                     "Default: all of each backend's."),
    k: int = typer.Option(5, "--k", help="Cut-off for the @k ranking metrics."),
    gain: str = typer.Option(
        "linear", "--gain", help="nDCG gain: linear (the grade) or exponential (2^grade - 1)."),
    case_sensitive: bool = typer.Option(
        False, "--case-sensitive", help="Exact-case matching for must_contain, must_not_contain and "
                                        "abstention."),
    decline_phrase: List[str] = typer.Option(
        None, "--decline-phrase", help="A phrase that marks a declined answer (repeatable; replaces the "
                                       "defaults)."),
    fmt: Optional[str] = typer.Option(
        None, "--format", help="Dataset format, when the suffix does not tell."),
    qrels: Optional[Path] = typer.Option(
        None, "--qrels", help="TREC qrels file of a TREC run (--format trec; default: a .qrels beside it)."),
    batch_size: int = typer.Option(
        2000, "--batch-size", min=1, help="Cases scored at a time (memory holds one batch)."),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace the run folder instead of resuming it."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    as_json: bool = typer.Option(
        False, "--json", help="Print the summary as one JSON document (notes on stderr)."
    ),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="Judge model name."),
    judge_base_url: Optional[str] = typer.Option(
        None, "--judge-base-url", help="OpenAI-compatible base URL of the judge."),
    judge_api_key_env: Optional[str] = typer.Option(
        None, "--judge-api-key-env", help="Environment variable that holds the judge's key (default "
                                          "OPENAI_API_KEY)."),
    embedding_model: Optional[str] = typer.Option(
        None, "--embedding-model", help="Embedding model name, for metrics that embed."),
    cache_mode: Optional[str] = typer.Option(
        None, "--cache-mode", help="Judge cache: read-write, read-only or off."),
    cache_path: Optional[Path] = typer.Option(None, "--cache-path", help="Judge cache file (SQLite)."),
    max_concurrency: Optional[int] = typer.Option(
        None, "--max-concurrency", help="Judge calls in flight at once, across all backends (default 8)."),
    config: Optional[Path] = typer.Option(
        None, "--config", help="Config file (default: ./ragbridge.toml, then [tool.ragbridge] in "
                               "./pyproject.toml)."),
    target: Optional[str] = typer.Option(
        None, "--target", help="Call the system under test for each case first: module:callable, "
                               "module:object with retrieve/answer, or an http(s) URL."),
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
    from ..formats.source import open_cases

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


def rescore(
    run_dir: Path = typer.Argument(
        ..., help="A run folder: its recorded cases are scored again, nothing is called but the judge."),
    backend: List[str] = typer.Option(
        None, "--backend", "-b", help="Backend to run (repeatable). Default: native."),
    metric: List[str] = typer.Option(None, "--metric", "-m", help="Metric to score (repeatable)."),
    k: int = typer.Option(5, "--k", help="Cut-off for the @k ranking metrics."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    as_json: bool = typer.Option(
        False, "--json", help="Print the summary as one JSON document (notes on stderr)."
    ),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="Judge model name."),
    judge_base_url: Optional[str] = typer.Option(
        None, "--judge-base-url", help="OpenAI-compatible base URL of the judge."),
    judge_api_key_env: Optional[str] = typer.Option(
        None, "--judge-api-key-env", help="Environment variable that holds the judge's key."),
    embedding_model: Optional[str] = typer.Option(None, "--embedding-model", help="Embedding model name."),
    cache_mode: Optional[str] = typer.Option(
        None, "--cache-mode", help="Judge cache: read-write, read-only or off."),
    cache_path: Optional[Path] = typer.Option(None, "--cache-path", help="Judge cache file (SQLite)."),
    max_concurrency: Optional[int] = typer.Option(
        None, "--max-concurrency", help="Judge calls in flight at once."),
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
        as_json=as_json, rescoring=True,
    )


def _rubric_options(files: Optional[List[Path]]) -> dict:
    return {"rubric": {"files": [str(f) for f in files]}} if files else {}


def _score_and_print(cases, out_dir, dataset_path, backend, metric, config, no_progress, overwrite,
                     options, judge_overrides, target=None, target_concurrency=4, as_json=False,
                     rescoring=False) -> None:
    from ..run.target import TargetError

    judge = judge_config(judge_overrides, config)
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
    _print_run(result, out_dir, as_json, with_latency=target is not None or rescoring)


def _reading_bar():
    """A ``progress`` callback for `open_cases`: the cases read so far, on stderr."""
    state = {"last": 0.0}

    def show(n: int) -> None:
        import time

        if time.monotonic() - state["last"] > 0.5:
            err.print(f"reading: {n:,} cases", highlight=False)
            state["last"] = time.monotonic()

    return show


def _print_run(result, out_dir, as_json: bool, with_latency: bool = True) -> None:
    """The summary tables and one line per note, or with ``as_json`` one JSON document (notes on stderr);
    ``with_latency``: the cases may hold a target's latencies (a run with a target, a rescore).

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
    # latencies only where a target was called (reading back every case of a large run costs)
    latencies = sorted(
        c.metadata["target"]["seconds"] for c in (result.cases if with_latency else ())
        if isinstance(c.metadata.get("target"), dict)
    )
    latency = None
    if latencies:
        p50 = latencies[len(latencies) // 2]
        p95 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.95))]
        latency = {"p50": p50, "p95": p95, "n": len(latencies)}
        notes.append(f"target latency: p50 {p50:.3f}s, p95 {p95:.3f}s over {len(latencies)} call(s)")
    rows = result.summary_rows()  # a run just made: from its running totals, without pandas
    if as_json:
        for note in notes:
            err.print(note, markup=False, highlight=False)
        overall = [{k: v for k, v in r.items() if k != "tag"} for r in rows if r["tag"] == ALL]
        print_json({
            "run": str(out_dir), "status": result.manifest.status, "stub_judge": bool(judge.get("stub")),
            "judge": result.manifest.judge, "counts": counts, "summary": jsonable(overall),
            "by_tag": jsonable([r for r in rows if r["tag"] != ALL]), "target_latency": latency,
        })
    else:
        print_summary(rows)
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


def _share(row: dict) -> str:
    return f"{row['unsupported_share']:.0%}" if row["n_claims"] else MISSING


def print_summary(summary, console: Console = out) -> None:
    """Overall table (per backend and metric), then the mean per tag for each backend. ``summary``:
    a summary DataFrame, or its rows as dicts (`ragbridge.run.Run.summary_rows`).

    The per-tag table has a row per tag and a column per metric; when its columns do not fit the
    width they go into as many tables as it takes, each repeating the tag column.
    """
    rows = summary if isinstance(summary, list) else summary.to_dict("records")
    overall = [r for r in rows if r["tag"] == ALL]
    claims = any(r["n_claims"] > 0 for r in rows)  # a backend exposes claims: show their shares
    table = Table(title="Summary", title_justify="left")
    columns = ("backend", "metric", "mean", "scored", "undefined", "errored", "unsup.")
    for col in columns[:7 if claims else 6]:
        table.add_column(col, justify="left" if col in ("backend", "metric") else "right", no_wrap=True)
    lines = []
    for row in overall:
        table.add_row(
            row["backend"], row["metric"], num(row["mean"]), str(row["n_scored"]), str(row["n_undefined"]),
            f"[red]{row['n_errored']}[/]" if row["n_errored"] else "0",
            *((_share(row),) if claims else ()),
        )
        lines.append(f"{row['backend']} {row['metric']}: mean {num(row['mean'])}, {row['n_scored']} scored, "
                     f"{row['n_undefined']} undefined, {row['n_errored']} errored"
                     + (f", {_share(row)} with an unsupported claim" if row["n_claims"] else ""))
    print_table(console, table, lines)
    if claims:
        console.print("[dim]unsup.: share of answers with at least one unsupported claim (of those "
                      "with claims); per tag in brackets[/]")
    tagged = [r for r in rows if r["tag"] != ALL]
    if not tagged:
        return
    backends = list(dict.fromkeys(r["backend"] for r in overall))
    for b in backends:
        metrics = list(dict.fromkeys(r["metric"] for r in overall if r["backend"] == b))
        groups: dict[str, list[dict]] = {}
        for r in tagged:
            if r["backend"] == b:
                groups.setdefault(r["tag"], []).append(r)
        by_tag = [
            (tag, int(max(r["n"] for r in group)), {r["metric"]: r["mean"] for r in group},
             {r["metric"]: _share(r) for r in group if r["n_claims"]})
            for tag, group in sorted(groups.items())
        ]
        title = "Mean per tag" + (f" ({b})" if len(backends) > 1 else "")
        _print_by_tag(console, title, by_tag, metrics)


def _cell(means: dict, shares: dict, metric: str) -> str:
    """The mean, and the unsupported-claim share in brackets where the metric has claims."""
    return num(means.get(metric), 2) + (f" ({shares[metric]})" if metric in shares else "")


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
