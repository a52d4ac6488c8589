"""``ragbridge diff`` and ``ragbridge gate``: the regression tests of `ragbridge.analysis.diff` and
`ragbridge.analysis.gate` on the command line.

``diff`` prints what moved between two runs (the change in mean per metric and tag with its paired
interval and p-value, then the cases), ``gate`` every rule's verdict and the cases behind each
failure, and writes the JUnit XML and Markdown summary of `ragbridge.report.ci`. Both print one JSON
document with ``--json`` (`ragbridge.report.ci.diff_json`, `ragbridge.report.ci.gate_json`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..analysis.diff import (ITEM_COLUMNS, IncompleteRunError, RegressionError, RunDiff,
                             dataset_change_message, diff_runs)
from ..analysis.gate import GateReport, load_gates, run_gates
from ..analysis.stats import DEFAULT_PERMUTATIONS, DEFAULT_RESAMPLES
from ..formats.files import atomic_path, write_atomic
from ..report import ci
from ..report.text import MISSING, interval, num, p_text
from ..run.folder import run_files
from ..run.progress import Steps
from ..run.summary import ALL
from .output import (EXIT_CHECK_FAILED, TerminalConsole, err, fail, out, print_json, print_lines, print_table,
                     refuse_overwriting)

__all__ = ["register", "diff_command", "gate_command", "print_diff", "print_gate"]


#: the paired scores written to an --items file at a time
ITEMS_BLOCK = 50_000


def register(cli: typer.Typer) -> None:
    cli.command("diff")(diff_command)
    cli.command("gate")(gate_command)




def _diff_line(r, conf: str) -> str:
    where = (f"{r.tag}, " if r.tag != ALL else "") + f"{r.backend} {r.metric}"
    brackets = interval(r.ci_low, r.ci_high, 3, signed=True)
    within = f"{conf} CI {brackets}, " if brackets else ""
    return (
        f"{where}: {num(r.base_mean)} -> {num(r.new_mean)}, "
        f"change {num(r.delta, signed=True)} ({within}p {p_text(r.p_value)}); "
        f"{r.n_paired:,} paired: {r.n_worse:,} worse, {r.n_better:,} better, {r.n_status_changed:,} changed "
        "status"
    )


def _tag_lines(frame, conf: str) -> list[str]:
    """The per-tag rows as text, one paragraph per backend and metric: each tag's change, interval and
    p-value, and its cases that moved (a significant change marked with ``*``)."""
    lines = []
    for (b, m), group in frame.groupby(["backend", "metric"], sort=False):
        parts = []
        for r in group.itertuples():
            brackets = interval(r.ci_low, r.ci_high, 3, signed=True)
            star = "*" if not math.isnan(r.p_value) and r.p_value < 0.05 and r.delta != 0 else ""
            parts.append(f"{r.tag} {num(r.delta, signed=True)}{star}" + (f" {brackets}" if brackets else "")
                         + f" p {p_text(r.p_value)} ({r.n_worse:,}-/{r.n_better:,}+"
                         + (f"/{r.n_status_changed:,} status" if r.n_status_changed else "") + ")")
        lines.append(f"{b} {m}: " + "; ".join(parts))
    return lines + [f"per tag: change in mean ({conf} CI) p (cases worse-/better+); *: p < 0.05"]


def _noise_line(r) -> str:
    """Whether a change in mean is within judge noise (measured from the runs' repeats)."""
    where = f"{r.backend} {r.metric}"
    change = num(r.delta, signed=True)
    verdict = "within judge noise" if r.within_noise else "beyond judge noise"
    return (f"judge noise, {where}: change {change} is {verdict} (noise band ±{num(r.noise_band)}; "
            f"the smallest change these {r.n_paired} cases can detect: {num(r.mde)} at power 0.8)")


def _significant(frame):
    """Rows whose change in mean is significant (permutation p < 0.05)."""
    return frame[(frame["p_value"] < 0.05) & (frame["delta"] != 0)]


def _answer(d: RunDiff) -> list[str]:
    """What moved, first: the paired scores that got worse, better or changed status, and the metrics
    (and tags) whose mean changed significantly."""
    t = d.totals()
    lines = [f"what moved: of {t['paired_scores']:,} paired scores, {t['worse']:,} got worse, "
             f"{t['better']:,} better, {t['status_changed']:,} changed status"]
    sig = _significant(d.summary)
    if sig.empty:
        lines.append("  no metric's mean changed significantly (paired permutation p < 0.05), overall or "
                     "per tag")
    for r in sig.itertuples():
        where = (f"{r.tag}, " if r.tag != ALL else "") + f"{r.backend} {r.metric}"
        lines.append(f"  {'WORSE' if r.delta < 0 else 'better'}: {where} {num(r.base_mean)} -> "
                     f"{num(r.new_mean)} ({num(r.delta, signed=True)}, p {p_text(r.p_value)})")
    return lines


def print_diff(d: RunDiff, console=None, top: int = 10, by_tag: bool = True, show_all: bool = False) -> None:
    """What changed: the answer first (what moved, what changed significantly), then the change in
    mean of each metric where a case moved, the tags whose change is significant, then the cases.

    ``show_all`` lists every metric and tag, moved or not.
    """
    console = console or TerminalConsole()
    print_lines(console, [
        f"base: {d.base.path}  ({d.base.n_cases:,} cases, status {d.base.manifest.status})",
        f"new:  {d.new.path}  ({d.new.n_cases:,} cases, status {d.new.manifest.status})",
    ])
    print_lines(console, _answer(d))
    same_golden = dataset_change_message([], 0, 0)  # only the system outputs changed: what a diff is for
    notes = [f"{'note' if w == same_golden else 'warning'}: {w}" for w in d.warnings]
    for ids, where in ((d.only_in_base, "base"), (d.only_in_new, "new")):
        if ids:
            notes.append(f"{len(ids)} case(s) only in the {where} run (not paired): " + ", ".join(ids))
    for keys, where in ((d.metrics_only_in_base, "base"), (d.metrics_only_in_new, "new")):
        if keys:
            notes.append(f"scored only in the {where} run (not compared): "
                         + ", ".join(f"{b}:{m}" for b, m in keys))
    print_lines(console, notes)
    conf = f"{d.confidence:.0%}"
    overall = d.summary[d.summary["tag"] == ALL]
    tagged = d.summary[d.summary["tag"] != ALL] if by_tag else d.summary.iloc[0:0]
    hidden = []
    if not show_all:
        still = [f"{int((~ci.moved(f)).sum())} {what}"
                 for f, what in ((overall, "metric(s)"), (tagged, "per-tag row(s)")) if (~ci.moved(f)).any()]
        hidden = still
        overall, tagged = overall[ci.moved(overall)], tagged[ci.moved(tagged)]
    multi = d.summary["backend"].nunique() > 1
    for title, frame, with_tag in (("Change in mean (new - base) over paired cases", overall, False),
                                   ("Per tag", tagged, True)):
        if frame.empty:
            continue
        t = Table(title=f"{title}: paired bootstrap {conf} CI, permutation p", title_justify="default")
        cols = (["tag"] if with_tag else []) + ["backend", "metric", "n", "base", "new", "change",
                                                f"{conf} CI", "p", "worse", "better", "status changed"]
        for c in cols:
            t.add_column(c, justify="left" if c in ("tag", "backend", "metric") else "right", no_wrap=True)
        for r in frame.itertuples():
            sig = not math.isnan(r.p_value) and r.p_value < 0.05 and r.delta != 0
            colour = ("red" if r.delta < 0 else "green") if sig else None
            delta = num(r.delta, signed=True)
            t.add_row(*([escape(r.tag)] if with_tag else []),
                      escape(r.backend), escape(r.metric), f"{r.n_paired:,}", num(r.base_mean),
                      num(r.new_mean),
                      f"[{colour}]{delta}[/]" if colour else delta,
                      interval(r.ci_low, r.ci_high, 3, signed=True) or MISSING,
                      p_text(r.p_value), f"{r.n_worse:,}", f"{r.n_better:,}",
                      f"[yellow]{r.n_status_changed:,}[/]" if r.n_status_changed else "0")
        print_table(console, t, _tag_lines(frame, conf) if with_tag else
                    [_diff_line(r, conf) for r in frame.itertuples()])
    if hidden:
        print_lines(console, [f"no case moved in {', '.join(hidden)} (--all lists them)"])
    noisy = [r for r in d.summary[d.summary["tag"] == ALL].itertuples() if r.within_noise is not None]
    if noisy:
        print_lines(console, [_noise_line(r) for r in noisy])
    import pandas as pd

    for label, rows in (("got worse", d.rows("worse")), ("got better", d.rows("better"))):
        if not rows:
            continue
        shown = pd.DataFrame(rows[:top], columns=ITEM_COLUMNS)
        more = f"; the {len(shown)} largest" if len(shown) < len(rows) else ""
        t = Table(title=f"Cases that {label} ({len(rows):,}{more})", title_justify="default")
        for c in (["backend"] if multi else []) + ["metric", "case", "base", "new", "change"]:
            t.add_column(c, justify="right" if c in ("base", "new", "change") else "left", no_wrap=True)
        lines = []
        for r in shown.itertuples():
            t.add_row(*([escape(r.backend)] if multi else []), escape(r.metric), escape(r.case_id),
                      num(r.base_value), num(r.new_value), num(r.delta, signed=True))
            lines.append(f"{r.case_id}, {r.backend} {r.metric}: {num(r.base_value)} -> {num(r.new_value)} "
                         f"({num(r.delta, signed=True)})")
        print_table(console, t, lines)
    changes = d.rows("status")
    if changes:
        shown = pd.DataFrame(list(changes) if show_all else changes[:max(top, 20)], columns=ITEM_COLUMNS)
        more = f"; the first {len(shown)}" if len(shown) < len(changes) else ""
        t = Table(title=f"Cases whose score changed status ({len(changes)}{more})", title_justify="default")
        for c in (["backend"] if multi else []) + ["metric", "case", "base", "new", "error"]:
            t.add_column(c, no_wrap=c != "error", min_width=30 if c == "error" else None)
        lines = []
        for r in shown.itertuples():
            base = r.base_status if r.base_status != "scored" else num(r.base_value)
            new = r.new_status if r.new_status != "scored" else num(r.new_value)
            error = " ".join(str(r.new_error or r.base_error or "").split())
            t.add_row(*([escape(r.backend)] if multi else []), escape(r.metric), escape(r.case_id), base, new,
                      escape(error))
            lines.append(f"{r.case_id}, {r.backend} {r.metric}: {base} -> {new}"
                         + (f": {error}" if error else ""))
        print_table(console, t, lines)
    if d.only_in_base or d.only_in_new:
        print_lines(console, [f"{len(d.only_in_base)} case(s) only in base, {len(d.only_in_new)} only in "
                              "new"])


def print_gate(report: GateReport, console=None, top: int = ci.TOP_CASES) -> None:
    """Every rule with its figure and verdict, then the ``top`` cases behind each failure.

    The same cases, in the same order, as the Markdown summary and the JUnit XML list.
    """
    console = console or TerminalConsole()
    baseline = f"  baseline: {report.baseline.path}" if report.baseline else ""
    print_lines(console, [f"run: {report.run.path}{baseline}"])
    print_lines(console, [f"warning: {w}" for w in report.warnings])
    t = Table(title="Gate", title_justify="default")
    for c in ("#", "backend", "rule", "figure [CI]", "n", "verdict", "detail"):
        t.add_column(c, justify="right" if c in ("#", "n") else "left", no_wrap=c != "detail",
                     min_width=30 if c == "detail" else None)
    style = {"pass": "[green]pass[/]", "fail": "[bold red]FAIL[/]", "skip": "[yellow]skip[/]"}
    lines = []
    for r in report.results:
        t.add_row(str(r.rule.index), escape(r.backend), escape(r.rule.label), ci.figure_text(r), f"{r.n:,}",
                  style[r.verdict], escape(r.detail))
        verdict = "FAIL" if r.verdict == "fail" else r.verdict
        lines.append(f"{verdict} #{r.rule.index} {r.backend}: {r.rule.label}: {ci.figure_text(r)}, "
                     f"n {r.n:,}; {r.detail}")
    print_table(console, t, lines)
    for r in report.failed:
        if r.items:
            shown = min(top, len(r.items))
            lines = [f"{r.label}: the {ci.behind(r)} behind it ({shown:,} of {len(r.items):,}):"]
            lines += [f"  {ci.item_line(item)}" for item in r.items[:top]]
            print_lines(console, lines)
    colour = "bold green" if report.passed else "bold red"
    console.print(f"[{colour}]{escape(report.summary_line())}[/]")


def _write_items(d: RunDiff, path: Path) -> None:
    """Every paired score, a block of rows at a time, to a CSV or JSON Lines file."""
    import pandas as pd

    rows = d.item_rows()
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as f:
        for start in range(0, max(len(rows), 1), ITEMS_BLOCK):
            frame = pd.DataFrame(rows[start:start + ITEMS_BLOCK], columns=ITEM_COLUMNS)
            frame["tags"] = frame["tags"].map(lambda ts: "|".join(ts))
            if path.suffix == ".jsonl":
                if len(frame):
                    f.write(frame.to_json(orient="records", lines=True, force_ascii=False))
            else:
                frame.to_csv(f, index=False, header=start == 0)


def diff_command(
    base_run: Path = typer.Argument(..., help="The baseline run folder."),
    new_run: Path = typer.Argument(..., help="The run folder to compare with it."),
    backend: List[str] = typer.Option(None, "--backend", "-b", help="Only this backend (repeatable)."),
    metric: List[str] = typer.Option(None, "--metric", "-m", help="Only this metric (repeatable)."),
    tag: List[str] = typer.Option(None, "--tag", help="Only these tags in the per-tag table (repeatable)."),
    no_tags: bool = typer.Option(False, "--no-tags", help="No per-tag table."),
    top: int = typer.Option(10, "--top", help="How many worse and better cases to list."),
    confidence: float = typer.Option(
        0.95, "--confidence", help="Confidence level of the bootstrap interval."),
    resamples: int = typer.Option(
        DEFAULT_RESAMPLES, "--resamples", help="Bootstrap resamples for the interval."),
    permutations: int = typer.Option(
        DEFAULT_PERMUTATIONS, "--permutations", help="Resamples of the permutation test."),
    seed: int = typer.Option(0, "--seed", help="Random seed (results are reproducible for a given seed)."),
    items: Optional[Path] = typer.Option(
        None, "--items", help="Write every paired score to this file (.csv or .jsonl)."),
    allow_incomplete: bool = typer.Option(
        False, "--allow-incomplete", help="Diff runs that did not finish (warned)."),
    show_all: bool = typer.Option(
        False, "--all", help="List every metric and tag, not only where a case moved."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document (every metric and tag)."),
) -> None:
    """Compare two runs case by case: what moved, the change in mean with paired intervals, per tag."""
    if top < 0:
        fail(f"--top must be zero or more, got {top}")
    if items is not None and items.suffix not in (".csv", ".jsonl"):
        fail(f"--items must name a .csv or .jsonl file, got {items}")
    refuse_overwriting(items, *run_files(base_run), *run_files(new_run))
    try:
        d = diff_runs(
            base_run, new_run, backends=backend or None, metrics=metric or None, tags=tag or None,
            by_tag=not no_tags, confidence=confidence, n_resamples=resamples, n_permutations=permutations,
            seed=seed, allow_incomplete=allow_incomplete, progress=Steps("diff", "shifts"),
        )
    except RegressionError as exc:
        fail(str(exc))
    if as_json:
        print_json(ci.diff_json(d))
    else:
        print_diff(d, out, top=top, by_tag=not no_tags, show_all=show_all)
    if items is not None:
        _write_items(d, items)
        (err if as_json else out).print(f"item-level diff written to {escape(str(items))}", highlight=False)


def gate_command(
    run: Path = typer.Argument(..., help="The run folder to gate."),
    config: Path = typer.Option(Path("gates.toml"), "--config", "-c", help="Gates file (TOML)."),
    baseline: Optional[Path] = typer.Option(
        None, "--baseline", help="Baseline run folder, for 'drop' rules."),
    history: List[Path] = typer.Option(
        None, "--history", help="Earlier run folders, or a folder of them, for 'slope' rules (repeatable)."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write JUnit XML here."),
    markdown: Optional[Path] = typer.Option(
        None, "--markdown", help="Write a Markdown summary here (e.g. for a CI job summary)."),
    seed: Optional[int] = typer.Option(
        None, "--seed", help="Random seed for intervals and tests (default: the file's, else 0)."),
    resamples: Optional[int] = typer.Option(
        None, "--resamples", help="Bootstrap resamples (default: the file's, else 2000)."),
    permutations: Optional[int] = typer.Option(
        None, "--permutations", help="Permutation test resamples (default: the file's, else 9999)."),
    top: int = typer.Option(
        ci.TOP_CASES, "--top", help="Cases listed behind a failed rule (terminal, Markdown and JUnit)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document (every case behind it)."),
) -> None:
    """Check a run against thresholds: exit 0 when every rule holds, 1 when one fails, 2 for bad input."""
    if top < 0:
        fail(f"--top must be zero or more, got {top}")
    for output in (junit, markdown):
        refuse_overwriting(output, config, *(f for r in (run, baseline, *(history or ())) if r
                                             for f in run_files(r)))
    for opt, value in (("--resamples", resamples), ("--permutations", permutations)):
        if value is not None and value < 100:
            fail(f"{opt} must be at least 100, got {value}")
    try:
        cfg = load_gates(config)
        report = run_gates(run, cfg, baseline=baseline, seed=seed, resamples=resamples,
                           permutations=permutations, history=history or None, progress="gate")
    except IncompleteRunError as exc:
        if junit is not None:
            write_atomic(junit, ci.incomplete_junit_xml(str(exc)))
        if markdown is not None:
            write_atomic(markdown, ci.incomplete_markdown(str(exc)))
        fail(str(exc))
    except RegressionError as exc:
        fail(str(exc))
    if as_json:
        print_json(ci.gate_json(report))
    else:
        print_gate(report, out, top=top)
    if junit is not None:
        write_atomic(junit, ci.junit_xml(report, top=top))
    if markdown is not None:
        write_atomic(markdown, ci.markdown(report, top=top))
    if not report.passed:
        raise typer.Exit(EXIT_CHECK_FAILED)
