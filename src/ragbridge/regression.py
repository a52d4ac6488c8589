"""Regression testing: ``ragbridge diff`` and ``ragbridge gate``.

From Python::

    from ragbridge.regression import diff_runs, run_gates

    d = diff_runs("runs/main", "runs/pr")      # RunDiff: .summary, .items (DataFrames), .worse(), .better()
    report = run_gates("runs/pr", "gates.toml", baseline="runs/main")
    report.passed, report.to_frame(), report.to_junit(), report.to_markdown()

The item-level diff lives in `ragbridge.diff`, the gates in `ragbridge.gate` (the gates file syntax is
documented there), JUnit XML and Markdown in `ragbridge.gate_reports`. This module registers the two
commands with the ``ragbridge_register_commands`` hook.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

from .diff import IncompleteRunError, RegressionError, RunDiff, diff_runs, paired_bootstrap_ci, paired_permutation_pvalue, run_problems
from .gate import GateConfig, GateConfigError, GateReport, GateResult, load_gates, parse_gates, run_gates
from .hookspecs import hookimpl
from .io import atomic_path, write_atomic
from .summary import ALL

__all__ = [
    "RegressionError",
    "IncompleteRunError",
    "GateConfigError",
    "RunDiff",
    "GateConfig",
    "GateReport",
    "GateResult",
    "diff_runs",
    "run_gates",
    "load_gates",
    "parse_gates",
    "run_problems",
    "paired_bootstrap_ci",
    "paired_permutation_pvalue",
    "print_diff",
    "print_gate",
]


def esc(text: str) -> str:
    from rich.markup import escape

    return escape(str(text))


def _f(x, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def _p(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.3g}" if x >= 0.001 else "<0.001"


def print_diff(d: RunDiff, console=None, top: int = 10, by_tag: bool = True) -> None:
    """The diff as rich tables: change in mean per metric (and per tag), then the cases that moved."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    console.print(f"base: [bold]{esc(str(d.base.path))}[/]  ({len(d.base.cases)} cases, status {d.base.manifest.status})", highlight=False)
    console.print(f"new:  [bold]{esc(str(d.new.path))}[/]  ({len(d.new.cases)} cases, status {d.new.manifest.status})", highlight=False)
    for w in d.warnings:
        console.print(f"[yellow]warning:[/] {esc(w)}", highlight=False)
    for ids, where in ((d.only_in_base, "base"), (d.only_in_new, "new")):
        if ids:
            console.print(
                f"[yellow]{len(ids)} case(s) only in the {where} run (not paired):[/] " + esc(", ".join(ids)), highlight=False
            )
    for keys, where in ((d.metrics_only_in_base, "base"), (d.metrics_only_in_new, "new")):
        if keys:
            console.print(
                f"[yellow]scored only in the {where} run (not compared):[/] " + ", ".join(f"{b}:{m}" for b, m in keys),
                highlight=False,
            )
    conf = f"{d.confidence:.0%}"
    frames = [("Change in mean (new - base) over paired cases", d.summary[d.summary["tag"] == ALL], False)]
    if by_tag:
        tagged = d.summary[(d.summary["tag"] != ALL) & (d.summary["n_paired"] + d.summary["n_status_changed"] > 0)]
        frames.append(("Per tag", tagged, True))
    multi = d.summary["backend"].nunique() > 1
    for title, frame, with_tag in frames:
        if frame.empty:
            continue
        t = Table(title=f"{title}: paired bootstrap {conf} CI, permutation p", title_justify="left")
        cols = (["tag"] if with_tag else []) + ["backend", "metric", "n", "base", "new", "change", f"{conf} CI", "p", "worse", "better", "status changed"]
        for c in cols:
            t.add_column(c, justify="left" if c in ("tag", "backend", "metric") else "right")
        for r in frame.itertuples():
            sig = not math.isnan(r.p_value) and r.p_value < 0.05 and r.delta != 0
            colour = ("red" if r.delta < 0 else "green") if sig else None
            delta = _f(r.delta, True)
            cells = ([esc(r.tag)] if with_tag else []) + [
                esc(r.backend), esc(r.metric), str(r.n_paired), _f(r.base_mean), _f(r.new_mean),
                f"[{colour}]{delta}[/]" if colour else delta,
                "—" if math.isnan(r.ci_low) else f"[{r.ci_low:+.3f}, {r.ci_high:+.3f}]",
                _p(r.p_value), str(r.n_worse), str(r.n_better),
                f"[yellow]{r.n_status_changed}[/]" if r.n_status_changed else "0",
            ]
            t.add_row(*cells)
        console.print(t)
    for label, frame in (("got worse", d.worse()), ("got better", d.better())):
        if frame.empty:
            continue
        t = Table(title=f"Cases that {label} ({len(frame)}; the {min(top, len(frame))} largest)", title_justify="left")
        for c in (["backend"] if multi else []) + ["metric", "case", "base", "new", "change"]:
            t.add_column(c, justify="right" if c in ("base", "new", "change") else "left")
        for r in frame.head(top).itertuples():
            t.add_row(*([esc(r.backend)] if multi else []), esc(r.metric), esc(r.case_id), _f(r.base_value), _f(r.new_value), _f(r.delta, True))
        console.print(t)
    changes = d.status_changes()
    if not changes.empty:
        t = Table(title=f"Cases whose score changed status ({len(changes)})", title_justify="left")
        for c in (["backend"] if multi else []) + ["metric", "case", "base", "new", "error"]:
            t.add_column(c)
        for r in changes.head(max(top, 20)).itertuples():
            t.add_row(
                *([esc(r.backend)] if multi else []), esc(r.metric), esc(r.case_id),
                r.base_status if r.base_status != "scored" else _f(r.base_value),
                r.new_status if r.new_status != "scored" else _f(r.new_value),
                esc((r.new_error or r.base_error or "")[:80]),
            )
        console.print(t)
    n_worse = int((d.items["change"] == "worse").sum())
    n_better = int((d.items["change"] == "better").sum())
    console.print(
        f"{len(d.items)} paired scores: {n_worse} worse, {n_better} better, "
        f"{len(changes)} changed status; {len(d.only_in_base)} case(s) only in base, {len(d.only_in_new)} only in new",
        highlight=False,
    )


def print_gate(report: GateReport, console=None, top: int = 5) -> None:
    """Every rule with its figure and verdict, then the cases behind each failure."""
    from rich.console import Console
    from rich.table import Table

    from .gate_reports import _item_line

    console = console or Console()
    console.print(
        f"run: [bold]{esc(str(report.run.path))}[/]"
        + (f"  baseline: [bold]{esc(str(report.baseline.path))}[/]" if report.baseline else ""),
        highlight=False,
    )
    for w in report.warnings:
        console.print(f"[yellow]warning:[/] {esc(w)}", highlight=False)
    t = Table(title="Gate", title_justify="left")
    for c in ("#", "backend", "rule", "figure [CI]", "n", "verdict", "detail"):
        t.add_column(c, justify="right" if c in ("#", "n") else "left")
    style = {"pass": "[green]pass[/]", "fail": "[bold red]FAIL[/]", "skip": "[yellow]skip[/]"}
    for r in report.results:
        t.add_row(str(r.rule.index), esc(r.backend), esc(r.rule.label), r.figure_text(), str(r.n), style[r.verdict], esc(r.detail))
    console.print(t)
    for r in report.failed:
        if r.items:
            console.print(f"[red]{esc(r.label)}[/]: {min(top, len(r.items))} of {len(r.items)} case(s) behind it:", highlight=False)
            for item in r.items[:top]:
                console.print(f"  {_item_line(item)}", highlight=False, markup=False)
    console.print(("[bold red]" if not report.passed else "[bold green]") + report.summary_line() + "[/]")


def _write_items(d: RunDiff, path: Path) -> None:
    frame = d.items.copy()
    frame["tags"] = frame["tags"].map(lambda ts: "|".join(ts))
    with atomic_path(path) as tmp:
        if path.suffix == ".jsonl":
            frame.to_json(tmp, orient="records", lines=True, force_ascii=False)
        else:
            frame.to_csv(tmp, index=False)


@hookimpl
def ragbridge_register_commands(cli):
    import typer

    from .cli import fail, out

    @cli.command("diff")
    def diff_command(
        base_run: Path = typer.Argument(..., help="The baseline run folder."),
        new_run: Path = typer.Argument(..., help="The run folder to compare with it."),
        backend: List[str] = typer.Option(None, "--backend", "-b", help="Only this backend (repeatable)."),
        metric: List[str] = typer.Option(None, "--metric", "-m", help="Only this metric (repeatable)."),
        tag: List[str] = typer.Option(None, "--tag", help="Only these tags in the per-tag table (repeatable)."),
        no_tags: bool = typer.Option(False, "--no-tags", help="No per-tag table."),
        top: int = typer.Option(10, "--top", help="How many worse and better cases to list."),
        confidence: float = typer.Option(0.95, "--confidence", help="Confidence level of the bootstrap interval."),
        resamples: int = typer.Option(2000, "--resamples", help="Bootstrap resamples for the interval."),
        permutations: int = typer.Option(9999, "--permutations", help="Resamples of the permutation test."),
        seed: int = typer.Option(0, "--seed", help="Random seed (results are reproducible for a given seed)."),
        items: Optional[Path] = typer.Option(None, "--items", help="Write every paired score to this file (.csv or .jsonl)."),
        allow_incomplete: bool = typer.Option(False, "--allow-incomplete", help="Diff runs that did not finish (warned)."),
    ) -> None:
        """Compare two runs case by case: change in mean with paired intervals, per tag, and the cases that moved."""
        if top < 0:
            fail(f"--top must be zero or more, got {top}")
        if items is not None and items.suffix not in (".csv", ".jsonl"):
            fail(f"--items must name a .csv or .jsonl file, got {items}")
        try:
            d = diff_runs(
                base_run, new_run, backends=backend or None, metrics=metric or None, tags=tag or None,
                by_tag=not no_tags, confidence=confidence, n_resamples=resamples, n_permutations=permutations, seed=seed,
                allow_incomplete=allow_incomplete,
            )
        except RegressionError as exc:
            fail(str(exc))
        print_diff(d, out, top=top, by_tag=not no_tags)
        if items is not None:
            _write_items(d, items)
            out.print(f"item-level diff written to {items}", highlight=False)

    @cli.command("gate")
    def gate_command(
        run: Path = typer.Argument(..., help="The run folder to gate."),
        config: Path = typer.Option(Path("gates.toml"), "--config", "-c", help="Gates file (TOML)."),
        baseline: Optional[Path] = typer.Option(None, "--baseline", help="Baseline run folder, for 'drop' rules."),
        junit: Optional[Path] = typer.Option(None, "--junit", help="Write JUnit XML here."),
        markdown: Optional[Path] = typer.Option(None, "--markdown", help="Write a Markdown summary here (e.g. for a CI job summary)."),
        seed: Optional[int] = typer.Option(None, "--seed", help="Random seed for intervals and tests (default: the file's, else 0)."),
        resamples: Optional[int] = typer.Option(None, "--resamples", help="Bootstrap resamples (default: the file's, else 2000)."),
        permutations: Optional[int] = typer.Option(None, "--permutations", help="Permutation test resamples (default: the file's, else 9999)."),
    ) -> None:
        """Check a run against thresholds: exit 0 when every rule holds, 1 when one fails, 2 for bad input."""
        for opt, value in (("--resamples", resamples), ("--permutations", permutations)):
            if value is not None and value < 100:
                fail(f"{opt} must be at least 100, got {value}")
        try:
            cfg = load_gates(config)
            report = run_gates(run, cfg, baseline=baseline, seed=seed, resamples=resamples, permutations=permutations)
        except IncompleteRunError as exc:
            from .gate_reports import incomplete_junit_xml, incomplete_markdown

            if junit is not None:
                write_atomic(junit, incomplete_junit_xml(str(exc)))
            if markdown is not None:
                write_atomic(markdown, incomplete_markdown(str(exc)))
            fail(str(exc))
        except RegressionError as exc:
            fail(str(exc))
        print_gate(report, out)
        if junit is not None:
            write_atomic(junit, report.to_junit())
        if markdown is not None:
            write_atomic(markdown, report.to_markdown())
        if not report.passed:
            raise typer.Exit(1)
