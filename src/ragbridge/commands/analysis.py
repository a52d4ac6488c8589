"""``ragbridge compare``, ``ragbridge validate`` and ``ragbridge calibrate``: the analyses of
`ragbridge.analysis` printed as tables that fit the width (or plain lines), or as one JSON document.

``compare RUN`` compares the backends of one run; ``compare RUN --with OTHER_RUN`` those of runs of
the same cases scored apart, read side by side (`ragbridge.analysis.join_runs`: a column per backend
and run); ``compare RUN_A RUN_B`` compares the same backend and metric across two runs (a change of
judge model or library version), rater against rater. ``validate`` and ``report`` take ``--with`` too.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, List, Optional, Sequence

import typer
from rich.markup import escape
from rich.table import Table

from ..analysis.calibrate import calibrate, flip_rows, interval_text
from ..analysis.compare import (FIGURE_NAMES, FIGURES, compare, compare_runs, disagreements, flip_counts,
                                run_shifts, scored_by_one)
from ..analysis.stats import DEFAULT_PERMUTATIONS, DEFAULT_RESAMPLES
from ..analysis.table import AnalysisError, ScoreTable, column_named, open_run
from ..analysis.validate import validate
from ..report.text import (MISSING, ci_text, column_lines, jsonable, missed_lines, num, one_line, p_text,
                           records, version_change_lines)
from ..run import Run
from ..run.progress import Steps
from .output import err, fail, out, print_json, print_lines, print_table

__all__ = ["register", "compare_cmd", "validate_cmd", "calibrate_cmd"]


def register(cli: typer.Typer) -> None:
    cli.command("compare")(compare_cmd)
    cli.command("validate")(validate_cmd)
    cli.command("calibrate")(calibrate_cmd)


def _unscored_note(row, side: str, name: str) -> str:
    parts = [f"{row[f'{side}_{k}']} {k}" for k in ("undefined", "errored", "missing") if row[f"{side}_{k}"]]
    return f"{name}: " + ", ".join(parts) if parts else ""


#: the characters of a reason a case block shows (``--json`` holds every reason whole)
REASON_CHARS = 140


def _case_lines(case_id: str, heading: str, question: Any, sides: Sequence[tuple[str, str, Any]]) -> list:
    """A case as a block of plain lines: id, heading, question, then each backend's verdict and reason
    (`cut_reason`)."""
    lines = [f"{case_id} ({heading})" if heading else case_id]
    if one_line(question):
        lines.append(f"  question: {one_line(question)}")
    for name, verdict, reason in sides:
        reason = cut_reason(one_line(reason))
        lines.append(f"  {name} {verdict}" + (f": {reason}" if reason else ""))
    return lines


def cut_reason(reason: str) -> str:
    """``reason`` cut after at most `REASON_CHARS` characters, at the end of a word, and marked
    `` [...]``; whole when the cut would save less than the mark's length and a word."""
    if len(reason) <= REASON_CHARS + 12:
        return reason
    cut = reason[:REASON_CHARS + 1]
    space = cut.rfind(" ")
    cut = cut[:space] if space > REASON_CHARS // 2 else cut[:REASON_CHARS]
    return cut.rstrip(" ,;:") + " [...]"


def _run_or_fail(path: Path, joined: Optional[List[Path]] = None) -> Run:
    """The run folder at ``path``; with ``joined`` (``--with``), it and those runs read side by side
    (`ragbridge.analysis.join_runs`)."""
    try:
        return open_run([path, *joined] if joined else path)
    except AnalysisError as exc:
        fail(str(exc))


def _print_columns(console, r: Run) -> None:
    """For runs read side by side: which run and judge each column comes from."""
    if getattr(r.manifest, "columns", None):
        lines = column_lines(r.manifest.columns, r.manifest.joined)
        print_lines(console, lines[:1], indent="")
        print_lines(console, [ln.strip() for ln in lines[1:]])


#: the option that reads several runs of the same cases as one, each run's backends a column
WITH_HELP = ("Another run folder of the same cases, scored apart (another judge server, day or judge): "
             "its backends join this run's as columns, BACKEND@FOLDER where two runs scored the same "
             "backend (repeatable).")


def compare_cmd(
    runs: List[Path] = typer.Argument(
        ..., metavar="RUN",
        help="Run folder (holds run.json and scores.jsonl): its backends are compared (with --with, and "
             "those of other runs); or two run folders: each backend and metric of the first against "
             "the same in the second."),
    with_runs: List[Path] = typer.Option(None, "--with", metavar="RUN", help=WITH_HELP),
    metric: List[str] = typer.Option(
        None, "--metric", "-m", help="Metric to compare (repeatable). Default: every metric two or more "
                                     "backends scored."),
    backend: List[str] = typer.Option(None, "--backend", "-b", help="Only these backends (repeatable)."),
    threshold: List[str] = typer.Option(
        None, "--threshold", "-t", help="Pass threshold: 0.7 for all, rubric=0.7 per backend, "
                                        "rubric:faithfulness=0.7 per backend and metric (repeatable; "
                                        "default: each metric's pass mark, docs/report.md)."),
    top: int = typer.Option(5, "--top", help="Disagreeing cases to show per metric."),
    resamples: int = typer.Option(
        DEFAULT_RESAMPLES, "--resamples", help="Draws (resamples) for the 95% intervals (0: none)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the intervals' draws."),
    permutations: int = typer.Option(
        DEFAULT_PERMUTATIONS, "--permutations", help="Permutation test resamples for the shift's p-value "
                                                     "(two runs)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of tables."),
) -> None:
    """Agreement between backends on each metric they share, and the cases they disagree on most (with
    --with, backends scored in other runs too); with two runs, each backend against itself in the
    other run (e.g. another judge model)."""
    if len(runs) > 2:
        fail(f"compare takes one run folder (its backends) or two (run against run), got {len(runs)}: "
             "to compare the backends of runs scored apart, name one and add the others with --with")
    if len(runs) == 2 and with_runs:
        fail("two RUN folders compare each backend with itself across runs; --with reads runs side by "
             "side as columns: give one RUN with --with, or two RUNs without it")
    if len(runs) == 2:
        _compare_two_runs(runs[0], runs[1], metric, backend, threshold, top, resamples, seed, permutations,
                          as_json)
        return
    run = runs[0]
    r = _run_or_fail(run, with_runs)
    try:
        frame = compare(r, metric or None, backend or None, threshold or None, resamples, seed)
        dis = disagreements(r, metric or None, backend or None, threshold or None, top)
        one = scored_by_one(r, metric or None, backend or None, threshold or None,
                            top=None if as_json else top)  # the text shows top, with the count of all
    except AnalysisError as exc:
        fail(str(exc))
    if frame.empty:
        table = ScoreTable.of(r)
        if not table.metrics():
            fail(f"nothing to compare: {run} holds no scores")
        fail("nothing to compare: no metric in this run is scored by two or more backends ("
             + "; ".join(f"{m}: {', '.join(table.backends_of(m))}" for m in table.metrics()) + ")")
    if as_json:
        print_json({"run": str(r.path) if not with_runs else None, **_joined_json(r),
                    "agreement": records(frame), "disagreements": records(dis),
                    "scored_by_one": records(one), "version_changes": r.manifest.version_changes})
        return
    flips = flip_counts(r, metric or None, backend or None, threshold or None)
    _print_columns(out, r)
    _print_agreement(out, r, frame, flips, one.attrs["counts"])
    if r.manifest.version_changes:
        print_lines(out, ["Library versions compared in this run"]
                    + version_change_lines(r.manifest.version_changes))
    if not dis.empty:
        _print_disagreements(out, dis)
    _print_scored_by_one(out, one, top)


def _print_scored_by_one(console, one, top: int) -> None:
    """The cases one backend scored and another errored on, per metric (the first ``top``)."""
    backends_in = [c[:-6] for c in one.columns if c.endswith(".value")]
    for m, group in one.groupby("metric", sort=False):
        n = one.attrs["counts"][m]
        shown = group.head(top)
        lines = [f"Scored by one backend, errored at another: {m}, {n} case(s)"
                 + (f" ({len(shown)} shown; --json has every one)" if len(shown) < n else "")]
        for row in shown.to_dict("records"):
            sides = [(b, num(row[f"{b}.value"]) if row[f"{b}.status"] == "scored" else row[f"{b}.status"],
                      row[f"{b}.reason"]) for b in backends_in if isinstance(row[f"{b}.status"], str)]
            lines += _case_lines(row["case_id"], f"scored by {row['scored']}, errored at {row['errored']}",
                                 row["question"], sides)
        print_lines(console, lines)


def _joined_json(r: Run) -> dict[str, Any]:
    """Where the columns of runs read side by side came from (nothing for one run)."""
    columns = getattr(r.manifest, "columns", None)
    return {"runs": r.manifest.joined["runs"], "joined": r.manifest.joined, "columns": columns} \
        if columns else {}


def _answer_lines(frame, flips: dict[str, int], one_sided: Optional[dict[str, int]] = None) -> list[str]:
    """The answer first, per metric: on how many cases the backends were compared (both scored), on
    how many of those their verdicts differ (``flips``), on how many one backend scored and another
    errored (``one_sided``, `scored_by_one`), each backend that scored none, and how far they agree at
    their thresholds (the pair that agrees least and the one that agrees most)."""
    one_sided = one_sided or {}
    lines = []
    for metric, group in frame.groupby("metric", sort=False):
        rows = group.to_dict("records")
        names = sorted({r["backend_a"] for r in rows} | {r["backend_b"] for r in rows})
        sides = {r[f"backend_{s}"]: (r, s) for r in rows for s in "ab"}
        none = [f"{name} scored none" + (f" ({note.split(': ', 1)[1]})" if note else "")
                for name in names for row, side in [sides[name]] if not row[f"{side}_scored"]
                for note in [_unscored_note(row, side, name)]]
        compared = max(r["n_paired"] for r in rows)
        head = f"{metric}: {len(names)} backends, {compared:,} of {rows[0]['n_cases']:,} cases compared"
        one = (f"; {one_sided[metric]:,} scored by one, errored at another (listed below)"
               if one_sided.get(metric) else "")
        if not compared:
            lines.append(f"{head}{one}: " + "; ".join(none or ["no case was scored by two of them"]))
            continue
        lines.append(f"{head}; their verdicts differ on {flips.get(metric, 0):,}{one}")
        lines += [f"  {text}" for text in none]
        ranked = sorted(rows, key=lambda r: (math.inf if math.isnan(r["kappa"]) else r["kappa"]))
        for label, row in (("least agreement", ranked[0]), ("most agreement", ranked[-1]))[:len(ranked)]:
            differ = row["a_pass_b_fail"] + row["a_fail_b_pass"]
            lines.append(f"  {label}: {row['backend_a']} vs {row['backend_b']}, kappa "
                         f"{ci_text(row['kappa'], row['kappa_low'], row['kappa_high'])}, verdicts differ on "
                         f"{differ:,} of {row['n_paired']:,}")
            if len(ranked) == 1:
                break
    return lines


def _print_agreement(console, r: Run, frame, flips: dict[str, int],
                     one_sided: Optional[dict[str, int]] = None) -> None:
    print_lines(console, _answer_lines(frame, flips, one_sided))
    where = str(r.path) if r.path is not None else " + ".join(r.manifest.joined["runs"])
    t = Table(title=f"Agreement between backends ({escape(where)})", title_justify="default",
              show_lines=True)
    for col in ("metric", "pair", "paired", *FIGURE_NAMES.values(), "PP PF FP FF", "not scored"):
        t.add_column(col, justify="left" if col in ("metric", "pair", "not scored") else "right",
                     no_wrap=True)
    same_thresholds = len(set(frame["threshold_a"]) | set(frame["threshold_b"])) == 1
    lines = []
    for row in frame.to_dict("records"):
        a, b = row["backend_a"], row["backend_b"]
        notes = [n for n in (_unscored_note(row, "a", a), _unscored_note(row, "b", b)) if n]
        pair = f"{a} vs {b}"
        if not same_thresholds:
            pair += f"\nat {row['threshold_a']:g} / {row['threshold_b']:g}"
        t.add_row(
            escape(row["metric"]), escape(pair), f"{row['n_paired']:,}/{row['n_cases']:,}",
            *(ci_text(row[f], row[f"{f}_low"], row[f"{f}_high"]).replace(" [", "\n[") for f in FIGURES),
            f"{row['both_pass']:,} {row['a_pass_b_fail']:,} {row['a_fail_b_pass']:,} {row['both_fail']:,}",
            escape("\n".join(notes)) or MISSING,
        )
        at = f"{row['threshold_a']:g}" + ("" if row["threshold_a"] == row["threshold_b"]
                                         else f" / {row['threshold_b']:g}")
        lines += [
            f"{row['metric']}, {a} vs {b} ({row['n_paired']:,} of {row['n_cases']:,} cases): kappa "
            f"{ci_text(row['kappa'], row['kappa_low'], row['kappa_high'])} at {at}; both pass "
            f"{row['both_pass']:,}, only {a} {row['a_pass_b_fail']:,}, only {b} {row['a_fail_b_pass']:,}, "
            f"both fail {row['both_fail']:,}",
            "  " + ", ".join(f"{name} {ci_text(row[f], row[f'{f}_low'], row[f'{f}_high'])}"
                             for f, name in FIGURE_NAMES.items() if f != "kappa"),
        ]
        lines += [f"  not scored: {'; '.join(notes)}"] if notes else []
    table = print_table(console, t, lines)
    print_lines(console, [
        "95% posterior intervals in brackets (docs/report.md)."
        + (" PP PF FP FF: cases both pass, only A passes, only B passes, both fail"
           + (f" (threshold {frame['threshold_a'].iloc[0]:g})." if same_thresholds else ".") if table else "")
        + " Only cases both backends scored enter a figure."
        + (" —: undefined (kappa when a backend passes or fails every case; a correlation when one side "
           "is constant)." if frame[list(FIGURES)].isna().any().any() else "")
    ], indent="")


def _compare_two_runs(path_a: Path, path_b: Path, metric, backend, threshold, top: int, resamples: int,
                      seed: int, permutations: int, as_json: bool) -> None:
    ra, rb = _run_or_fail(path_a), _run_or_fail(path_b)
    try:
        frame = compare_runs(ra, rb, metric or None, backend or None, threshold or None, resamples, seed,
                             n_permutations=permutations, progress=Steps("compare", "metrics"))
        moved = run_shifts(ra, rb, metric or None, backend or None, top)
    except AnalysisError as exc:
        fail(str(exc))
    a = frame.attrs
    if as_json:
        print_json({"run_a": a["run_a"], "run_b": a["run_b"], "label_a": a["label_a"],
                    "label_b": a["label_b"], "n_shared": a["n_shared"], "only_in_a": a["only_in_a"],
                    "only_in_b": a["only_in_b"], "agreement": records(frame), "moved": records(moved)})
        return
    lines = [f"A: {ra.path}" + _judge_note(frame, "a"), f"B: {rb.path}" + _judge_note(frame, "b"),
             f"{a['n_shared']:,} case(s) in both runs"
             + (f"; {a['only_in_a']:,} only in A, {a['only_in_b']:,} only in B (not compared)"
                if a["only_in_a"] or a["only_in_b"] else "")]
    print_lines(out, lines)
    t = Table(title="Each backend in run B against itself in run A", title_justify="default", show_lines=True)
    for col in ("metric", "backend", "paired", "A", "B", "shift B-A", "p", *FIGURE_NAMES.values(),
                "PP PF FP FF"):
        t.add_column(col, justify="left" if col in ("metric", "backend") else "right", no_wrap=True)
    rows = []
    for row in frame.to_dict("records"):
        shift = ci_text(row["shift"], row["shift_low"], row["shift_high"], 3, signed=True)
        t.add_row(escape(row["metric"]), escape(row["backend"]), f"{row['n_paired']:,}/{row['n_cases']:,}",
                  num(row["mean_a"]), num(row["mean_b"]), shift.replace(" [", "\n["), p_text(row["shift_p"]),
                  *(ci_text(row[f], row[f"{f}_low"], row[f"{f}_high"]).replace(" [", "\n[") for f in FIGURES),
                  f"{row['both_pass']:,} {row['a_pass_b_fail']:,} {row['a_fail_b_pass']:,} "
                  f"{row['both_fail']:,}")
        notes = [n for n in (_unscored_note(row, "a", "A"), _unscored_note(row, "b", "B")) if n]
        rows += [
            f"{row['metric']}, {row['backend']}: A {num(row['mean_a'])} -> B {num(row['mean_b'])}, "
            f"shift {shift}, p {p_text(row['shift_p'])}; {row['n_paired']:,} of {row['n_cases']:,} cases "
            "scored in both",
            "  " + ", ".join(f"{name} {ci_text(row[f], row[f'{f}_low'], row[f'{f}_high'])}"
                             for f, name in FIGURE_NAMES.items()),
            f"  verdicts at {row['threshold_a']:g}: both pass {row['both_pass']:,}, only A passes "
            f"{row['a_pass_b_fail']:,}, only B passes {row['a_fail_b_pass']:,}, both fail "
            f"{row['both_fail']:,}",
        ]
        rows += [f"  not scored: {'; '.join(notes)}"] if notes else []
    table = print_table(out, t, rows)
    print_lines(out, [
        "shift: mean in B - mean in A over the cases both scored, paired bootstrap 95% interval and "
        "permutation p; the figures compare A's values with B's case by case (95% posterior intervals)."
        + (" PP PF FP FF: cases both pass, only A passes, only B passes, both fail." if table else "")
    ], indent="")
    for (m, b), group in moved.groupby(["metric", "backend"], sort=False):
        lines = [f"Cases that moved most: {m}, {b}"]
        for row in group.to_dict("records"):
            lines += _case_lines(row["case_id"], f"change {num(row['delta'], signed=True)}", row["question"],
                                 [("A", num(row["value_a"]), row["reason_a"]),
                                  ("B", num(row["value_b"]), row["reason_b"])])
        print_lines(out, lines)


def _judge_note(frame, side: str) -> str:
    judges = sorted({j for j in frame[f"judge_{side}"] if isinstance(j, str)})
    versions = sorted({f"{b} {v}" for b, v in zip(frame["backend"], frame[f"version_{side}"])
                       if isinstance(v, str)})
    parts = ([f"judge {', '.join(judges)}"] if judges else []) + versions
    return f" ({'; '.join(parts)})" if parts else ""


def _print_disagreements(console, dis) -> None:
    backends_in = [c[:-6] for c in dis.columns if c.endswith(".value")]
    for m, group in dis.groupby("metric", sort=False):
        names = [b for b in backends_in if group[f"{b}.status"].notna().any()]
        lines = [f"Where the backends disagree most: {m} (reasons cut; --json has them whole)"]
        for row in group.to_dict("records"):
            sides = []
            for b in names:
                status = row[f"{b}.status"]
                sides.append((b, num(row[f"{b}.value"]) if status == "scored" else (status or "missing"),
                              row[f"{b}.reason"]))
            heading = f"spread {num(row['spread'])}"
            heading += ", verdicts differ" if row["verdicts_differ"] else ""
            sides = [(b, f"{v} {'pass' if row[f'{b}.passed'] else 'fail'}" if row[f"{b}.status"] == "scored"
                      else v, why) for (b, v, why) in sides]
            lines += _case_lines(row["case_id"], heading, row["question"], sides)
        print_lines(console, lines)


def validate_cmd(
    run: Path = typer.Argument(..., help="Run folder."),
    with_runs: List[Path] = typer.Option(None, "--with", metavar="RUN", help=WITH_HELP),
    labels: Path = typer.Option(
        ..., "--labels", "-l", help="Human labels: JSONL or CSV with case_id, metric, label (pass/fail or a "
                                    "grade); or signal:NAME, the user signal NAME the run's cases carry "
                                    "(thumbs, feedback) as the human side of every metric."),
    metric: List[str] = typer.Option(
        None, "--metric", "-m", help="Only these metrics (repeatable); with one metric, label lines may omit "
                                     "it."),
    backend: List[str] = typer.Option(None, "--backend", "-b", help="Only these backends (repeatable)."),
    threshold: List[str] = typer.Option(
        None, "--threshold", "-t", help="Backend pass threshold: 0.7, rubric=0.7 or rubric:faithfulness=0.7 "
                                        "(repeatable; default: each metric's pass mark, docs/report.md)."),
    label_threshold: float = typer.Option(
        0.5, "--label-threshold", help="A human grade at or above this is a pass (e.g. 3 for a 1-5 scale)."),
    resamples: int = typer.Option(DEFAULT_RESAMPLES, "--resamples",
                                  help="Draws for the 95% intervals (0: none)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the intervals' draws."),
    signal_polarity: Optional[str] = typer.Option(
        None, "--signal-polarity", help="With signal:NAME: positive (a high score or a yes is good: thumbs "
                                        "up) or negative (it is bad: escalation, follow-up, thumbs down); "
                                        "default: the signal's own, else by its name."),
    signal_labels: Optional[Path] = typer.Option(
        None, "--signal-labels", help="With signal:NAME: a table (CSV or JSONL: label, verdict pass|fail, "
                                      "optional name) of what the signal's labels mean."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of a table."),
) -> None:
    """Each backend's verdicts against human labels: TPR, TNR, kappa, balanced accuracy."""
    r = _run_or_fail(run, with_runs)
    human = labels
    if str(labels).startswith("signal:") and not labels.exists():
        human = _signal_labels(r, str(labels)[len("signal:"):], metric, signal_polarity, signal_labels,
                               label_threshold)
    elif signal_polarity is not None or signal_labels is not None:
        fail("--signal-polarity and --signal-labels go with --labels signal:NAME")
    try:
        frame = validate(r, human, metric or None, backend or None, threshold or None,
                         label_threshold, resamples, seed)
    except AnalysisError as exc:
        fail(str(exc))
    unknown = int(frame["labels_unknown_case"].max()) if not frame.empty else 0
    if as_json:
        print_json({"run": str(r.path) if not with_runs else None, **_joined_json(r), "labels": str(labels),
                    "validation": records(frame)})
    else:
        _print_columns(out, r)
        _print_validation(out, frame)
    if unknown:
        err.print(f"[yellow]{unknown} label(s) name a case that is not in this run[/]")


def _signal_labels(r, name: str, metrics: Optional[List[str]], polarity: Optional[str] = None,
                   table: Optional[Path] = None, threshold: float = 0.5):
    """Labels from the user signal ``name`` on the run's cases, one per metric asked for (every metric
    of the run when none is), read with its polarity and the user's table of labels
    (`ragbridge.traces.signals.human_labels`)."""
    from ..formats import DatasetError
    from ..traces.signals import human_labels

    wanted = list(metrics) if metrics else sorted(r.columns.metrics())
    cases = (c for batch in r.columns.cases.batches(range(r.columns.cases.described)) for _, c in batch)
    try:
        frame, notes = human_labels(cases, name, wanted, polarity, table, threshold)
    except DatasetError as exc:
        fail(f"{r.path}: {exc}")
    for line in notes:
        err.print(line, highlight=False, markup=False)
    return frame


def _ppi_line(row) -> str:
    labelled = row["n_paired"]
    if labelled == row["n_judged"]:  # nothing left to estimate: the set's pass rate is the labels'
        return (f"{row['metric']}, {row['backend']}: {num(row['ppi_pass_rate'], 2)}, exact: every one of "
                f"the {labelled} scored cases is labelled "
                f"({row['backend']} alone: {num(row['judge_pass_rate'], 2)})")
    rate = ci_text(row["ppi_pass_rate"], row["ppi_pass_rate_low"], row["ppi_pass_rate_high"])
    line = (f"{row['metric']}, {row['backend']}: {rate} "
            f"from {labelled} labels and {row['n_judged']} scored cases ({row['backend']} alone: "
            f"{num(row['judge_pass_rate'], 2)}; the labels alone: "
            f"[{num(row['human_pass_rate_low'], 2)}, {num(row['human_pass_rate_high'], 2)}])")
    if not math.isnan(row["ppi_mean"]):
        line += f"; mean {ci_text(row['ppi_mean'], row['ppi_mean_low'], row['ppi_mean_high'])}"
    return line


def _print_validation(console, frame) -> None:
    t = Table(title="Backends against human labels (positive = pass)", title_justify="default",
              show_lines=True)
    show_sp = bool(frame["spearman"].notna().any())
    show_claims = bool((frame["claims_answers"] > 0).any())
    cols = ["metric", "backend", "thr", "labels", "scored", "unscored", "human P/F",
            "TPR", "TNR", "missed", "kappa", "bal. acc.", "agree"]
    cols += ["Spearman"] if show_sp else []
    cols += ["unsupported"] if show_claims else []
    for col in cols:
        t.add_column(col, justify="left" if col in ("metric", "backend", "unscored") else "right",
                     no_wrap=True)
    lines = []
    for row in frame.to_dict("records"):
        unscored = [f"{row[k]:,} {k}" for k in ("undefined", "errored", "missing") if row[k]]
        ci = {f: ci_text(row[f], row[f"{f}_low"], row[f"{f}_high"])
              for f in ("tpr", "tnr", "kappa", "balanced_accuracy", "agreement", "spearman",
                        "unsupported_share")}
        cells = [
            escape(row["metric"]), escape(row["backend"]), f"{row['threshold']:g}",
            f"{row['n_labels']:,}", f"{row['n_paired']:,}",
            "[yellow]" + escape("\n".join(unscored)) + "[/]" if unscored else "0",
            f"{row['human_pass']:,}/{row['human_fail']:,}",
            *(ci[f].replace(" [", "\n[") for f in ("tpr", "tnr")),
            f"{row['fp']:,}/{row['human_fail']:,}",
            *(ci[f].replace(" [", "\n[") for f in ("kappa", "balanced_accuracy", "agreement")),
        ]
        claims = f"{ci['unsupported_share']} of {row['claims_answers']}" if row["claims_answers"] else MISSING
        if show_sp:
            cells.append(ci["spearman"].replace(" [", "\n["))
        if show_claims:
            cells.append(claims.replace(" [", "\n[").replace(" of ", "\nof "))
        t.add_row(*cells)
        lines += [
            f"{row['metric']}, {row['backend']} at {row['threshold']:g}: {row['n_labels']:,} labels, "
            f"{row['n_paired']:,} scored" + (f" ({', '.join(unscored)})" if unscored else "")
            + f"; humans pass {row['human_pass']:,}, fail {row['human_fail']:,}",
            f"  TPR {ci['tpr']}, TNR {ci['tnr']}, missed {row['fp']:,}/{row['human_fail']:,}, "
            f"kappa {ci['kappa']}, "
            f"balanced accuracy {ci['balanced_accuracy']}, agreement {ci['agreement']}"
            + (f", Spearman {ci['spearman']}" if show_sp else "")
            + (f", unsupported {claims}" if show_claims else ""),
        ]
    print_table(console, t, lines)
    print_lines(console, [
        "TPR: share of human passes the backend passes; TNR: share of human fails it fails, "
        "the failures it catches; missed: human fails the backend passed; 95% posterior intervals in "
        "brackets (docs/report.md)"
        + ("; Spearman: backend value against graded labels" if show_sp else "")
        + ("; unsupported: share of answers with at least one unsupported claim, of those whose claims "
           "the backend exposes" if show_claims else "")
        + "."
    ], indent="")
    notes = []
    for row in frame.to_dict("records"):
        where = f"{row['metric']}, {row['backend']}"
        if row["design"] == "stratified":
            notes.append(f"{where}: labels drawn by the judge's verdict ("
                         + ", ".join(f"{h} {v['labels']} of {v['cases']}" for h, v in row["strata"].items())
                         + "); every figure but the counts is weighted by stratum")
        if row["not_random"] and not any(n.startswith(f"{row['metric']}: the ") for n in notes):
            notes.append(f"{row['metric']}: {row['not_random']}")
        notes += missed_lines(row, where)
    print_lines(console, notes)
    ppi = [row for row in frame.to_dict("records")
           if row["n_judged"] and not math.isnan(row["ppi_pass_rate"])]
    if ppi:
        print_lines(console, ["The whole golden set's pass rate, from the backend's verdict on every case "
                              "corrected by its errors on the labelled ones (prediction-powered inference, "
                              "95% interval):"], indent="")
        print_lines(console, [_ppi_line(row) for row in ppi])


def calibrate_cmd(
    run: Path = typer.Argument(..., help="Run folder."),
    with_runs: List[Path] = typer.Option(None, "--with", metavar="RUN", help=WITH_HELP),
    source: str = typer.Option(..., "--from", help="Backend whose pass/fail to reproduce."),
    target: str = typer.Option(..., "--to", help="Backend whose threshold to choose."),
    metric: str = typer.Option(..., "--metric", "-m", help="Canonical metric both backends scored."),
    threshold: Optional[float] = typer.Option(
        None, "--threshold", "-t", help="The source backend's threshold (default: its pass mark, "
                                        "docs/report.md)."),
    top: int = typer.Option(10, "--top", help="Flipping cases to show."),
    resamples: int = typer.Option(DEFAULT_RESAMPLES, "--resamples",
                                  help="Draws for the 95% intervals (0: none)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the intervals' draws."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of tables."),
) -> None:
    """The threshold in one backend that best reproduces another's pass/fail (maximum kappa); with
    --with, a backend of another run of the same cases (BACKEND@FOLDER where both runs scored it)."""
    r = _run_or_fail(run, with_runs)
    source, target = column_named(r, source), column_named(r, target)  # native@runs/a: native@a
    try:
        curve = calibrate(r, source, target, metric, threshold, resamples, seed)
    except AnalysisError as exc:
        fail(str(exc))
    a = curve.attrs
    if curve.empty:
        fail(f"no case was scored by both {source} and {target} on {a['metric']}")
    best = curve[curve["best"]].iloc[0]
    flips = flip_rows(r, source, target, a["metric"], a["source_threshold"], float(best["threshold"]))
    if as_json:
        print_json({"run": str(r.path) if not with_runs else None, **_joined_json(r), **a,
                    "best": best.to_dict(), "curve": records(curve), "flips": flips.mapped(jsonable)})
        return
    _print_columns(out, r)  # runs read side by side: where each column comes from, the cases left out
    lines = [
        f"{a['metric']}: {source} at {a['source_threshold']:g} ≈ {target} at {_cut(best)} "
        f"(any threshold {interval_text(best['threshold_low'], best['threshold_high'])} gives the same "
        "verdicts)",
        f"kappa {ci_text(best['kappa'], best['kappa_low'], best['kappa_high'])}, agreement "
        f"{ci_text(best['agreement'], best['agreement_low'], best['agreement_high'])} on "
        f"{a['n_paired']:,} case(s) both scored; {int(best['flips']):,} still flip "
        f"({int(best['source_pass_target_fail']):,} pass→fail, "
        f"{int(best['source_fail_target_pass']):,} fail→pass)",
    ]
    for side, name in (("source_unscored", source), ("target_unscored", target)):
        miss = {k: v for k, v in a[side].items() if v}
        if miss:
            lines.append(f"{name} did not score: " + ", ".join(f"{v:,} {k}" for k, v in miss.items()))
    print_lines(out, lines)
    t = Table(title="Kappa by target threshold", title_justify="default")
    for col in ("threshold", "kappa", "agreement", "flips", "target pass rate", "best"):
        t.add_column(col, justify="right", no_wrap=True)
    rows = []
    for row in curve.to_dict("records"):
        where = interval_text(row["threshold_low"], row["threshold_high"])
        t.add_row(where, num(row["kappa"]), num(row["agreement"]),
                  f"{row['flips']:,}", num(row["target_pass_rate"], 2), "◀" if row["best"] else "")
        rows.append(f"{where}: kappa {num(row['kappa'])}, agreement "
                    f"{num(row['agreement'])}, {row['flips']:,} flips, target pass rate "
                    f"{num(row['target_pass_rate'], 2)}" + (" (best)" if row["best"] else ""))
    print_table(out, t, rows)
    if flips:
        lines = [f"Cases that still flip ({len(flips):,}"
                 + (f"; the first {top})" if len(flips) > top else ")")]
        for row in flips[:top]:
            lines += _case_lines(row["case_id"], "", row["question"], [
                (name, f"{row[f'{side}_value']:.3f} {'pass' if row[f'{side}_passed'] else 'fail'}",
                 row[f"{side}_reason"])
                for side, name in (("source", source), ("target", target))
            ])
        print_lines(out, lines)


def _cut(row) -> str:
    """The threshold a calibration row is tried at, or ``> highest`` for the row no case passes."""
    if math.isinf(row["threshold_high"]) and row["threshold"] > 1:
        return f"> {row['threshold_low']:.3g}"
    return f"{row['threshold']:.3g}"
