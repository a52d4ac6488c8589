"""``ragbridge run`` and ``ragbridge rescore``: score cases into a run folder, then print its summary.

Exit codes:
  0    every planned score recorded, none errored
  2    bad input or configuration; nothing written. Also: the run folder cannot be written (read-only,
       disk full): what was scored is kept, run it again to resume
  3    the run finished, but some scores errored: run it again to retry them
  4    the judge budget (--max-calls / --max-cost) was spent: what was scored is kept, the rest is
       not run; run it again with a larger budget to resume (and retry any errored scores). This
       code, whether or not some scores also errored.
  5    the run finished but computed nothing: every score is undefined, because the cases lack
       what the metrics need (e.g. ranking metrics without relevance labels); the message says
       which fields are missing for which metrics and what to run instead
  130  interrupted (Ctrl-C, SIGTERM): run it again to resume

``--dry-run`` calls and writes nothing: it prints the judge calls and the cost the run would make,
counting what the judge cache and the run folder already hold.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..backend import RunOptions
from ..errors import cli_text
from ..formats import DatasetError, load_cases
from ..native.options import NativeOptions
from ..options import flag_spec
from ..report.text import MISSING, jsonable
from ..run import RunError, evaluate
from ..run.request import RunRequest
from ..run.summary import ALL
from ..run.unscored import nothing_computed, unscored_lines
from . import JudgeOptions, judge_options, model_options
from .output import (
    EXIT_BUDGET_SPENT,
    EXIT_INTERRUPTED,
    EXIT_NOTHING_COMPUTED,
    EXIT_SCORE_ERRORS,
    counting_progress,
    err,
    fail,
    say,
    out,
    print_json,
    print_lines,
    print_table,
    storage_error,
    warn,
)
from .summary import print_summary

__all__ = ["register", "run", "rescore"]


# The flags `run` and `rescore` build from the fields that declare them (ragbridge.options.option):
# the run's parameters (RunRequest), the options every backend reads (RunOptions) and the native
# backend's options, whose flags are kept beside the generic --option native.KEY=VALUE.
_WHAT = [flag_spec(RunRequest, name) for name in ("backends", "metrics")]
_SHARED = [flag_spec(RunOptions, name) for name in ("k", "generator_model")]
_NATIVE = [flag_spec(NativeOptions, name) for name in NativeOptions.model_fields]
_BUDGET = [flag_spec(RunRequest, name) for name in ("repeats", "pass_repeats", "max_calls", "max_cost",
                                                    "dry_run", "score_cache")]
_RUN_ONLY = [flag_spec(RunRequest, name)
             for name in ("overwrite", "batch_size", "target", "target_concurrency", "corpus")]

OPTION = typer.Option(
    None, "--option", metavar="BACKEND.KEY=VALUE",
    help="A backend's option (repeatable), e.g. --option native.gain=exponential; `ragbridge backends NAME` "
         "lists them. Over [backends.NAME] in the config file; a flag of its own (--gain) over this.")
RUBRIC = typer.Option(
    None, "--rubric", help="Rubric file (TOML) of the rubric backend (repeatable): --option "
                           "rubric.files=FILE.")
CHUNKS = typer.Option(
    None, "--chunks", help="The chunking (JSONL, one chunk a line: id, text, doc, start, end): what "
                           "precision_omega measures.")


def register(cli: typer.Typer) -> None:
    cli.command("run")(run)
    cli.command("rescore")(rescore)


@judge_options
@model_options({"what": _WHAT, "shared": _SHARED, "native": _NATIVE, "request": _RUN_ONLY, "budget": _BUDGET},
               given_only={"native"})
def run(
    dataset: Path = typer.Argument(..., help="Golden set: .jsonl, .csv, .parquet, or a datasets folder."),
    out_dir: Path = typer.Option(
        ..., "--out", "-o", help="Run folder to write (resumed if it holds a run of the same cases)."),
    what: dict = None,
    shared: dict = None,
    option: List[str] = OPTION,
    native: dict = None,
    rubric: List[Path] = RUBRIC,
    fmt: Optional[str] = typer.Option(
        None, "--format", help="Dataset format, when the suffix does not tell."),
    qrels: Optional[Path] = typer.Option(
        None, "--qrels", help="TREC qrels file of a TREC run (--format trec; default: a .qrels beside it)."),
    request: dict = None,
    chunks: Optional[Path] = CHUNKS,
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    as_json: bool = typer.Option(
        False, "--json", help="Print the summary as one JSON document (notes on stderr)."
    ),
    update: bool = typer.Option(
        False, "--update", help="--out holds a run of an earlier version of the golden set: keep the "
                                "scores of the cases that did not change, score the changed and new "
                                "ones, drop the removed ones' (default: refused)."),
    executor: str = typer.Option(
        "local", "--executor", help="Where to score: local (this process) or ray (pip install "
                                    "'ragbridge[ray]')."),
    ray_address: Optional[str] = typer.Option(
        None, "--ray-address", help="With --executor ray: an existing cluster (default: a private local "
                                    "one for the run)."),
    ray_cpus: Optional[int] = typer.Option(
        None, "--ray-cpus", min=1, help="With --executor ray: the CPUs of the private local cluster, i.e. "
                                        "the workers scoring at once (default: all of this machine's)."),
    gateway_host: Optional[str] = typer.Option(
        None, "--gateway-host", help="With --executor ray: this machine's address the workers reach the "
                                     "judge gateway at (default 127.0.0.1; needed for nodes on other "
                                     "machines)."),
    budget: dict = None,
    judge: JudgeOptions = JudgeOptions({}),
) -> None:
    """Score a golden set with one or more backends and write a run folder.

    \b
    Exit codes:
      0    every planned score recorded, none errored
      2    bad input or configuration; nothing written
      3    the run finished, but some scores errored: run it again to retry them
      4    the judge budget was spent (some scores may have errored too): run it
           again with a larger budget
      5    nothing computed (every score undefined): the message says why
      130  interrupted: run it again to resume
    """
    from ..formats.source import open_cases

    parameters = _checked({**what, **request, **budget})
    options = _run_options(shared, native, option, rubric, judge,  # checked before any file is read
                           backends=parameters.get("backends"))
    documents, chunking = _span_inputs(parameters.pop("corpus"), chunks)
    options = options.model_copy(update={"chunking": chunking})
    _offered(parameters.get("backends"), parameters.get("metrics"), options)
    batch_size = parameters.pop("batch_size")
    reading = None if no_progress else counting_progress()
    try:
        cases = open_cases(dataset, fmt, near=out_dir, progress=reading, batch_size=batch_size,
                           corpus=documents, qrels=qrels)
        if reading is not None:
            reading(cases.n_cases, done=True)
    except DatasetError as exc:
        fail(str(exc))
    except OSError as exc:
        if storage_error(exc) is None:
            raise
        fail(f"cannot check the golden set beside {out_dir}: {storage_error(exc)}; nothing was written")
    with cases:  # opened here, closed here (its scratch copy with it)
        _score_and_print(cases, out_dir, judge, as_json, dataset_path=str(dataset), options=options,
                         progress=not no_progress, batch_size=batch_size,
                         changed_cases="rescore" if update else "refuse",
                         executor=_executor(executor, ray_address, gateway_host, ray_cpus), **parameters)


def _offered(backends: Optional[list], metrics: Optional[list], options: Any) -> None:
    """Refuse a metric that no selected backend offers (or a backend not available) before the golden
    set is read (exit 2): with span labels or without, as the golden set may have them."""
    from ..run.plan import RunError, plan_metrics

    if not metrics:
        return
    try:
        plan_metrics(backends, metrics, options.k, options)
    except RunError as exc:
        try:
            plan_metrics(backends, metrics, options.k, options.model_copy(update={"span_labels": True}))
        except RunError:
            fail(cli_text(exc))


def _checked(parameters: dict) -> dict:
    """The run's parameters given on the command line, checked as `RunRequest` checks them (exit 2,
    naming the flag)."""
    from ..options import OptionError, check, flag_of

    try:
        check(RunRequest, {"cases": None, **parameters}, str,
              lambda key: flag_of(RunRequest.model_fields[key]) or key)
    except OptionError as exc:
        fail(cli_text(exc))
    return parameters


def _run_options(shared: dict, native: dict, assignments: Optional[List[str]], rubric: Optional[List[Path]],
                 judge: JudgeOptions, backends: Optional[List[str]] = None) -> RunOptions:
    """The run's options: ``k`` and ``generator_model``, and each backend's options from the config
    file's ``[backends.NAME]`` tables, then ``--option``, then a flag of its own (``--gain``,
    ``--rubric``); exit 2 naming the file or the flag, the backend and the option for what is wrong.
    A warning for an ``--option`` given twice with different values (the last is used), and, when
    ``backends`` names the run's, for one of a backend the run does not use (no backend reads it)."""
    from ..options import OptionError, check, flag_of, parse_assignment

    try:
        check(RunOptions, shared, str, lambda key: flag_of(RunOptions.model_fields[key]) or key)
        given: dict[str, dict[str, list[str]]] = {}
        for text in assignments or ():
            backend, key, value = parse_assignment(text)
            given.setdefault(backend, {}).setdefault(key, []).append(value)
        flags = [(flag_of(NativeOptions.model_fields[name]), {"native": {name: value}})
                 for name, value in native.items()]
        if rubric:
            flags.append(("--rubric", {"rubric": {"files": [str(f) for f in rubric]}}))
        loaded = RunOptions.load(config_file=judge.config, sources=[("--option", given), *flags], **shared)
    except OptionError as exc:
        fail(cli_text(exc))
    _option_warnings(given, backends)
    return loaded


def _option_warnings(given: dict[str, dict[str, list[str]]], backends: Optional[List[str]]) -> None:
    """See `_run_options`: ``given``, the ``--option`` texts by backend and key (checked)."""
    from ..options import is_list_option
    from ..plugins import get_backends

    registry = get_backends()
    running = {b.partition("==")[0].strip() for b in backends or ()}
    for name, keys in given.items():
        if running and name not in running:
            shown = ", ".join(f"--option {name}.{key}" for key in keys)
            warn(f"{shown}: the {name} backend is not in this run (its backends: "
                 f"{', '.join(sorted(running))}), so no backend reads it; add --backend {name} to use it")
        for key, texts in keys.items():
            if len(set(texts)) > 1 and not is_list_option(registry[name].Options, key):
                warn(f"--option {name}.{key} is given {len(texts)} times ({', '.join(texts)}): the last, "
                     f"{texts[-1]}, is used")


def _span_inputs(corpus: Optional[Path], chunks: Optional[Path]):
    """The corpus and the chunking the span options name, read and checked (exit 2 for bad input)."""
    from ..formats.corpus import read_chunking, read_corpus

    try:
        documents = read_corpus(corpus) if corpus is not None else None
        chunking = read_chunking(chunks, documents) if chunks is not None else None
    except DatasetError as exc:
        fail(str(exc))
    return documents, chunking


def _executor(name: str, address: Optional[str], gateway_host: Optional[str], cpus: Optional[int]):
    if name not in ("local", "ray"):
        fail(f"--executor must be 'local' or 'ray', got {name!r}")
    if name == "local":
        if address or gateway_host or cpus:
            fail("--ray-address, --ray-cpus and --gateway-host need --executor ray")
        return None
    if cpus and address not in (None, "local"):
        fail("--ray-cpus sizes the private local cluster: leave it out with --ray-address")
    from ..run.ray_executor import RayExecutor

    return RayExecutor(address=address, gateway_host=gateway_host, num_cpus=cpus)


@judge_options
@model_options({"what": _WHAT, "shared": _SHARED, "native": _NATIVE, "budget": _BUDGET},
               given_only={"native"})
def rescore(
    run_dir: Path = typer.Argument(
        ..., help="A run folder: its recorded cases are scored again, nothing is called but the judge."),
    what: dict = None,
    shared: dict = None,
    option: List[str] = OPTION,
    native: dict = None,
    rubric: List[Path] = RUBRIC,
    corpus: Optional[Path] = typer.Option(
        None, "--corpus", help="The documents, to place the chunks of --chunks that give only their text."),
    chunks: Optional[Path] = CHUNKS,
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    as_json: bool = typer.Option(
        False, "--json", help="Print the summary as one JSON document (notes on stderr)."
    ),
    budget: dict = None,
    judge: JudgeOptions = JudgeOptions({}),
) -> None:
    """Score a run's recorded cases (e.g. a --target run) with more backends or metrics, into the same folder.

    \b
    Exit codes:
      0    every planned score recorded, none errored
      2    bad input or configuration
      3    some scores errored: run it again to retry them
      4    the judge budget was spent (some scores may have errored too): run it
           again with a larger budget
      5    nothing computed (every score undefined): the message says why
      130  interrupted: run it again to resume
    """
    if not (run_dir / "cases.jsonl").exists():
        fail(f"{run_dir} is not a run folder with recorded cases (no cases.jsonl)")
    parameters = _checked({**what, **budget})
    options = _run_options(shared, native, option, rubric, judge)
    _, chunking = _span_inputs(corpus, chunks)
    options = options.model_copy(update={"chunking": chunking})
    try:
        cases = load_cases(run_dir / "cases.jsonl")
    except DatasetError as exc:
        fail(str(exc))
    _score_and_print(cases, run_dir, judge, as_json, rescoring=True,
                     dataset_path=str(run_dir / "cases.jsonl"), options=options, progress=not no_progress,
                     **parameters)


def failure_lines(failures: list) -> list[str]:
    """The run's errored scores per backend and cause: the first reason and the fix (``counts.failures``)."""
    lines = []
    for f in failures:
        lines += [f"  {f['backend']}: {f['scores']} {f['what']}, e.g. {f['metric']} of case {f['case_id']}: "
                  f"{f['reason']}", f"    fix: {f['fix']}"]
    return lines


def _score_and_print(cases, out_dir, judge_options: JudgeOptions, as_json: bool, rescoring: bool = False,
                     **parameters) -> None:
    """Run `evaluate` with ``parameters`` (its keywords) into ``out_dir`` and print what it made."""
    from ..run.target import TargetError

    judge = judge_options.load()
    # A termination (a CI job cancelled, `kill` of a background job) ends the run as Ctrl-C does:
    # the run folder records it. Also when SIGINT is ignored, as for a background job of a script.
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        result = evaluate(cases, out=out_dir, judge=judge, **{"changed_cases": "refuse", **parameters})
    except (RunError, TargetError) as exc:
        fail(cli_text(exc))
    except KeyboardInterrupt:
        _interrupted(out_dir)
    except OSError as exc:
        if storage_error(exc) is None:
            raise
        manifest = Path(out_dir) / "run.json"
        if type(exc).__name__ == "CacheUnwritable":  # the judge cache's file, not the run folder
            recorded = _recorded(manifest)
            if recorded.get("status") == "complete":
                kept = (f"every score is written to {out_dir}, but this run's judge answers are not kept "
                        "for later runs")
            elif (recorded.get("counts") or {}).get("scores"):
                kept = "what was scored is kept"
            else:
                kept = "nothing was scored"
            fail(f"cannot write the judge cache: {storage_error(exc)}; {kept}: make room (or make it "
                 "writable), or give another --cache-path (or --cache-mode off), and run the same command "
                 "again")
        kept = ("what was scored is kept: make room (or make it writable) and run the same command again "
                "to resume" if manifest.exists() else "nothing was written")
        fail(f"cannot write the run folder {out_dir}: {storage_error(exc)}; {kept}")
    finally:
        signal.signal(signal.SIGTERM, previous)
    if result.manifest.status == "dry-run":
        _print_dry_run(result, out_dir, as_json)
        return
    _print_run(result, out_dir, as_json, with_latency=parameters.get("target") is not None or rescoring)


def _recorded(manifest: Path) -> dict:
    """What a run.json records (empty when there is none, or it cannot be read)."""
    import json

    try:
        recorded = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def _interrupted(out_dir) -> None:
    """End an interrupted run now: say so, then leave without the interpreter's teardown.

    By now the run folder is written and closed (the manifest says ``interrupted``) and the judge
    gateway closed. What is left would only cost time: the backends' libraries' worker threads, which
    the interpreter joins at exit, and the collection of every module they imported (seconds on an idle
    machine, minutes on a loaded CI runner, where a cancelled job must stop within its grace period)."""
    message = f"interrupted; what was scored is kept in {out_dir}; run the same command again to resume"
    say("error", message)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(EXIT_INTERRUPTED)


def _terminate(signum, frame) -> None:
    """SIGTERM: what SIGINT's handler does (Python's KeyboardInterrupt, or asyncio's, which cancels the
    run's task); when SIGINT is ignored or left to the system, a KeyboardInterrupt all the same."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


def _money(value, currency: str) -> str:
    return MISSING if value is None else f"{value:.4f} {currency}"


def _print_dry_run(result, out_dir, as_json: bool) -> None:
    """What a ``--dry-run`` prints: the judge calls (and cache hits) and the cost, per backend and
    metric and in all."""
    counts = result.manifest.counts
    j = counts.get("judge") or {}
    cost = counts.get("cost") or {}
    currency = cost.get("currency", "USD")
    planned = counts.get("planned") or {}
    doc = {"run": str(out_dir), "dry_run": True, "calls": j.get("calls", 0),
           "cache_hits": j.get("cache_hits", 0), "prompt_tokens": j.get("prompt_tokens", 0),
           "completion_tokens": j.get("completion_tokens", 0), "cost": cost.get("total"),
           "currency": currency, "kept": counts.get("resumed_from", 0),
           "reused": (counts.get("score_cache") or {}).get("reused", 0), "by_metric": planned}
    if as_json:
        print_json(doc)
        return
    table = Table(title="Dry run: the judge calls this run would make", title_justify="default")
    for col in ("backend", "metric", "calls", "cached", "cost"):
        table.add_column(col, justify="left" if col in ("backend", "metric") else "right", no_wrap=True)
    lines = []
    for key, row in planned.items():
        b, _, m = key.partition(":")
        money = _money(row.get("cost"), currency)
        table.add_row(escape(b), escape(m), str(row["calls"]), str(row["cache_hits"]), money)
        lines.append(f"{b} {m}: {row['calls']} call(s), {row['cache_hits']} from cache, cost {money}")
    if planned:
        print_table(out, table, lines)
    out.print(f"in all: {doc['calls']} judge call(s), {doc['cache_hits']} from cache, "
              f"{doc['prompt_tokens']}+{doc['completion_tokens']} tokens, cost "
              + (_money(doc["cost"], currency) if cost.get("priced") else "unknown (no price table in "
                 "the judge config)"), highlight=False)
    if doc["kept"]:
        out.print(f"[dim]{doc['kept']} score(s) already in {escape(str(out_dir))} are kept[/]",
                  highlight=False)
    if doc["reused"]:
        out.print(f"[dim]{doc['reused']} score(s) are in the score cache: no call, no library run[/]",
                  highlight=False)
    out.print("[dim]nothing was called or written; answers the cache does not hold were simulated by the "
              "stub judge, so calls that depend on earlier answers are an estimate[/]", highlight=False)


def _print_run(result, out_dir, as_json: bool, with_latency: bool = True) -> None:
    """The summary tables and one line per note, or with ``as_json`` one JSON document (notes on stderr);
    ``with_latency``: the cases may hold a target's latencies (a run with a target, a rescore).

    Exits with `EXIT_SCORE_ERRORS` when some scores errored (after printing)."""
    counts = result.manifest.counts
    judge = result.manifest.judge or {}
    notes = []
    if judge.get("stub"):
        notes.append("judged by the stub judge: these judged scores test plumbing, not answer quality")
    changed = counts.get("cases_changed")
    if changed:
        notes.append(f"updated: {changed['changed']} changed and {changed['added']} new case(s) scored, "
                     f"{changed['removed']} removed; the scores of the {changed['kept']} unchanged kept")
    elif counts.get("resumed_from"):
        notes.append(f"resumed: {counts['resumed_from']} score(s) kept from the earlier run")
    if counts.get("judge"):
        from ..judge.audit import calls_phrase

        j = counts["judge"]
        notes.append(
            f"judge: {calls_phrase(j)}, {j['prompt_tokens']}+{j['completion_tokens']} tokens"
        )
        if j.get("invalid_usage"):
            warn(f"{j['invalid_usage']} judge call(s) reported token usage that cannot be true (negative, "
                 f"not a whole number or absurd): counted as calls, their tokens and cost as unknown")
    if (reuse := counts.get("score_cache")) and reuse.get("reused"):
        notes.append(f"score cache: {reuse['reused']} score(s) reused, the library not called for them")
    cost = counts.get("cost") or {}
    if cost.get("priced"):
        parts = ", ".join(f"{k} {_money(v, cost['currency'])}" for k, v in cost.get("by_metric", {}).items())
        notes.append(f"cost: {_money(cost.get('total'), cost['currency'])}"
                     + (f" ({parts})" if parts else "")
                     + ("; the cost of some calls is unknown (a model without a price in the judge "
                        "config, usage that cannot be true, or a request that timed out unanswered)"
                        if cost.get("total") is None else ""))
    repeats = (result.manifest.options or {}).get("repeats")
    if isinstance(repeats, int) and repeats > 1:
        m = (result.manifest.options or {}).get("pass_repeats") or repeats // 2 + 1
        notes.append(f"repeats: every judged score taken {repeats} times; a case's score is its mean over "
                     f"them and it passes when {m} of {repeats} pass")
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
    unscored = nothing_computed(result, out=str(out_dir))
    for line in result.manifest.warnings:  # the input warnings that bear on this run's metrics
        warn(line)
    if as_json:
        for note in notes:
            err.print(note, markup=False, highlight=False)
        overall = [{k: v for k, v in r.items() if k != "tag"} for r in rows if r["tag"] == ALL]
        print_json({
            "run": str(out_dir), "status": result.manifest.status, "stub_judge": bool(judge.get("stub")),
            "judge": result.manifest.judge, "counts": counts, "summary": jsonable(overall),
            "by_tag": jsonable([r for r in rows if r["tag"] != ALL]), "target_latency": latency,
            "warnings": list(result.manifest.warnings),
            "nothing_computed": unscored and {k: v for k, v in unscored.items() if k != "python"},
        })
    elif unscored is not None:  # a table of dashes says nothing: what the cases lack, and what to run
        print_lines(err, unscored_lines(unscored))
    else:
        print_summary(rows)
        for i, note in enumerate(notes):
            style = "yellow" if i == 0 and judge.get("stub") else "dim"
            out.print(f"[{style}]{escape(note)}[/]", highlight=False)
        not_run = counts.get("not_run", 0)
        made = f"{counts.get('scores', 0) - not_run:,} scores" + (f", {not_run:,} not run" if not_run else "")
        out.print(f"run written to [bold]{escape(str(out_dir))}[/] ({made})", highlight=False)
    same = judge.get("self_judging")
    if same:
        err.print(f"[yellow]warning:[/] self-judging: the judge model is the system under test's own model "
                  f"({escape(same['generator_model'])}) on {same['cases']} case(s); its scores are likely "
                  "inflated", highlight=False)
    budget = counts.get("budget") or {}
    if counts.get("not_run") or budget.get("spent"):
        # one code and one message whenever the budget stopped the run, errored scores or not: the same
        # command with the same budget would only stop again
        limits = ", ".join(f"--{k.replace('_', '-')} {v:g}" for k, v in budget.items()
                           if k in ("max_calls", "max_cost") and v is not None)
        errored = counts.get("errored", 0)
        err.print(
            f"[bold yellow]judge budget spent ({escape(limits)}): {counts.get('not_run', 0)} of "
            f"{counts.get('scores', 0)} score(s) not run[/]"
            + (f", {errored} errored" if errored else "")
            + "; what was scored is kept, run the same command with a larger budget to score the rest"
            + (" (and retry the errored ones)" if errored else ""), highlight=False, soft_wrap=True,
        )
        raise typer.Exit(EXIT_BUDGET_SPENT)
    if unscored is not None:
        if as_json:
            err.print(f"nothing was computed: all {counts.get('scores', 0)} scores are undefined (see "
                      "nothing_computed)", markup=False, highlight=False)
        raise typer.Exit(EXIT_NOTHING_COMPUTED)
    if counts.get("errored") or result.manifest.status != "complete":
        status = result.manifest.status
        overall = [r for r in rows if r["tag"] == ALL]
        by_case = ""
        if isinstance(repeats, int) and repeats > 1:  # the summary's errored: a case's repeats together
            by_case = (f" ({sum(r['n_errored'] for r in overall)} of {sum(r['n'] for r in overall)} case "
                       "score(s), a case with an errored repeat being errored)")
        failures = counts.get("failures") or []
        err.print(
            f"[bold red]{counts.get('errored', 0)} of {counts.get('scores', 0)} score(s) errored[/]{by_case}"
            + ("" if status == "complete" else f" (the run is {status})")
            + (":" if failures else "; run the same command again to retry them"),
            highlight=False, soft_wrap=True,
        )
        print_lines(err, failure_lines(failures))
        raise typer.Exit(EXIT_SCORE_ERRORS)
