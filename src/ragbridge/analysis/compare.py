"""``compare``: how far backends agree with each other on the metrics they share.

For every canonical metric scored by two or more backends, the agreement of each pair of backends on
the cases both scored: Spearman and Kendall (tau-b) rank correlation, Pearson correlation, mean
absolute difference, and at each backend's pass mark (`ragbridge.analysis.thresholds.pass_marks`; a
case passes by `ragbridge.verdicts.verdict`) Cohen's kappa, percent agreement and the 2x2 confusion
table, each figure with its posterior interval (`ragbridge.analysis.stats.rater_figures`).
`disagreements` lists the cases where the backends differ most, with every backend's value and
reason; `scored_by_one` the cases one backend scored and another errored on (a library version that
refuses a judge's reply another version reads); `coverage` counts what each backend scored. Runs of
the same cases scored apart are compared as one (`ragbridge.analysis.table.join_runs`: a list of
runs for ``run``).

`compare_runs` compares two runs rater against rater: the same (backend, metric) in each run, on the
case ids both runs hold, with the same figures, plus the shift of the mean (run B - run A) with its
paired bootstrap interval and permutation p-value. Two runs with different judge models (or library
versions) on the same cases show how far the change of judge moves each metric. Each side is labelled
by its run folder and the judge model of its ``run.json``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from ..metrics import half_of
from ..run import Run
from . import stats
from ..run.columns import ERROR
from ..run.progress import Steps
from ..run.summary import ALL
from .table import AnalysisError, ScoreTable, judge_of, open_run
from .thresholds import Thresholds, pass_marks

__all__ = ["compare", "compare_runs", "run_shifts", "coverage", "disagreements", "scored_by_one",
           "flip_counts", "FIGURES",
           "FIGURE_NAMES",
           "COMPARE_COLUMNS", "COMPARE_RUNS_COLUMNS", "MIN_SPREAD"]

#: the smallest spread between backends' values that counts as a disagreement (half the last digit
#: the outputs print)
MIN_SPREAD = 0.0005

FIGURES = ("spearman", "kendall", "pearson", "mae", "kappa", "agreement")
FIGURE_NAMES = {"spearman": "Spearman", "kendall": "Kendall", "pearson": "Pearson", "mae": "MAE",
                "kappa": "kappa", "agreement": "agreement"}
COMPARE_COLUMNS = (
    ["metric", "half", "backend_a", "backend_b", "n_cases", "n_paired"]
    + [f"{side}_{k}" for side in ("a", "b") for k in ("scored", "undefined", "errored", "missing")]
    + ["threshold_a", "threshold_b"]
    + [c for f in FIGURES for c in (f, f"{f}_low", f"{f}_high")]
    + ["both_pass", "a_pass_b_fail", "a_fail_b_pass", "both_fail", "mean_a", "mean_b"]
)

COMPARE_RUNS_COLUMNS = (
    ["metric", "half", "backend", "run_a", "run_b", "judge_a", "judge_b", "version_a", "version_b",
     "n_cases", "n_paired"]
    + [f"{side}_{k}" for side in ("a", "b") for k in ("scored", "undefined", "errored", "missing")]
    + ["threshold_a", "threshold_b"]
    + [c for f in FIGURES for c in (f, f"{f}_low", f"{f}_high")]
    + ["both_pass", "a_pass_b_fail", "a_fail_b_pass", "both_fail", "mean_a", "mean_b",
       "shift", "shift_low", "shift_high", "shift_p"]
)


def _pairs(names: Sequence[str]) -> list[tuple[str, str]]:
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]


def compare(
    run: Union[Run, str, Path],
    metrics: Optional[Sequence[str]] = None,
    backends: Optional[Sequence[str]] = None,
    thresholds: Any = None,
    n_resamples: int = stats.DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = stats.CONFIDENCE,
):
    """Agreement of every pair of backends on every canonical metric two or more of them scored.

    One row per (metric, backend_a, backend_b): the case counts (``n_paired`` cases both scored;
    per side ``*_undefined``, ``*_errored``, ``*_missing``), each figure of `FIGURES` with its
    posterior interval (``<figure>_low``, ``<figure>_high``), the thresholds used and the confusion
    table ``both_pass``, ``a_pass_b_fail``, ``a_fail_b_pass``, ``both_fail``, and the means of each
    side over the paired cases. ``thresholds``: see `Thresholds.parse`; the run's pass marks
    (`pass_marks`) where they set none.
    """
    import pandas as pd

    table = ScoreTable.of(open_run(run))
    wanted = table.select_metrics(metrics)
    only = table.check_backends(backends)
    th = pass_marks(table.run, thresholds, backends=sorted(table.backends()))
    rows = []
    for metric in wanted:
        names = [b for b in table.backends_of(metric) if only is None or b in only]
        for a, b in _pairs(names):
            rows.append(_compare_pair(table, metric, a, b, th, n_resamples, seed, confidence))
    frame = pd.DataFrame(rows, columns=COMPARE_COLUMNS)
    if metrics and frame.empty:
        raise AnalysisError(
            "no metric asked for is scored by two or more backends: "
            + "; ".join(f"{m}: {', '.join(table.backends_of(m)) or 'none'}" for m in wanted)
        )
    return frame


def _compare_pair(table: ScoreTable, metric: str, a: str, b: str, th: Thresholds, n_resamples: int,
                  seed: int, confidence: float) -> dict[str, Any]:
    ca, cb = table.column(metric, a), table.column(metric, b)
    both = ca.scored & cb.scored
    row: dict[str, Any] = {
        "metric": metric, "half": half_of(metric), "backend_a": a, "backend_b": b,
        "n_cases": len(table.case_ids), "n_paired": int(both.sum()),
    }
    for side, name in (("a", a), ("b", b)):
        for k, v in table.status_counts(metric, name).items():
            row[f"{side}_{k}"] = v
    ta, tb = th.get(a, metric), th.get(b, metric)
    row.update(_figures(ca.value[both], cb.value[both], ca.verdicts(ta)[both], cb.verdicts(tb)[both], ta, tb,
                        n_resamples, seed, confidence))
    return row


def _figures(x: np.ndarray, y: np.ndarray, pa: np.ndarray, pb: np.ndarray, ta: float, tb: float,
             n_resamples: int, seed: int, confidence: float) -> dict[str, Any]:
    """Every figure of `FIGURES` with its posterior interval (`stats.rater_figures`), the confusion
    table and the means of two raters' values on the same cases (``x`` and ``y``, in the same order;
    ``pa`` and ``pb`` their verdicts at ``ta`` and ``tb``)."""
    row: dict[str, Any] = {"threshold_a": ta, "threshold_b": tb}
    got = stats.rater_figures(FIGURES, pa, pb, x, y, cut_x=ta, cut_y=tb, n_draws=n_resamples, seed=seed,
                              confidence=confidence)
    for name, (value, low, high) in got.items():
        row[name], row[f"{name}_low"], row[f"{name}_high"] = value, low, high
    row["both_pass"], row["a_pass_b_fail"], row["a_fail_b_pass"], row["both_fail"] = stats.confusion(pa, pb)
    row["mean_a"] = float(x.mean()) if len(x) else float("nan")
    row["mean_b"] = float(y.mean()) if len(y) else float("nan")
    return row


def _run_label(run: Run) -> str:
    return run.path.name if run.path is not None else "in memory"


def compare_runs(
    run_a: Union[Run, str, Path],
    run_b: Union[Run, str, Path],
    metrics: Optional[Sequence[str]] = None,
    backends: Optional[Sequence[str]] = None,
    thresholds: Any = None,
    n_resamples: int = stats.DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = stats.CONFIDENCE,
    n_permutations: int = stats.DEFAULT_PERMUTATIONS,
    progress: Optional[Steps] = None,
):
    """Two runs compared rater against rater: one row per (metric, backend) scored in both runs.

    Only the case ids both runs hold are counted (``n_cases``); ``n_paired`` of them were scored in
    both. The row holds the judge model and backend version of each side (``judge_a``,
    ``version_a``, ...), the counts, every figure of `FIGURES` with its posterior interval, the
    confusion table, the means, and ``shift`` = mean_b - mean_a with its paired bootstrap interval
    (``shift_low``, ``shift_high``) and paired permutation p-value (``shift_p``). The frame's
    ``attrs`` hold ``run_a``, ``run_b`` (paths), ``label_a``, ``label_b``, ``n_shared``,
    ``only_in_a`` and ``only_in_b`` (counts of case ids). Raises `AnalysisError` when the runs share
    no case id, or no (backend, metric) is scored in both.
    """
    import pandas as pd

    ra, rb = open_run(run_a, "run A"), open_run(run_b, "run B")
    ta, tb = ScoreTable.of(ra), ScoreTable.of(rb)
    at_b = _places(ta, tb)
    shared = at_b >= 0
    n_shared = int(shared.sum())
    if not n_shared:
        raise AnalysisError(
            f"the two runs share no case: {_run_label(ra)} holds {len(ta.case_ids)} case id(s), "
            f"{_run_label(rb)} {len(tb.case_ids)}, none in common (compare runs made on the same golden set)")
    keys_b = set(tb.keys())
    common = [k for k in ta.keys() if k in keys_b]
    if not common:
        raise AnalysisError(
            "no backend scored the same metric in both runs: "
            f"{_run_label(ra)} has {', '.join(sorted(f'{b}:{m}' for m, b in ta.keys())) or 'none'}; "
            f"{_run_label(rb)} has {', '.join(sorted(f'{b}:{m}' for m, b in tb.keys())) or 'none'}")
    wanted = ta.select_metrics(metrics)
    only = ta.check_backends(backends)
    names = sorted(ta.backends() | tb.backends())
    th_a, th_b = pass_marks(ra, thresholds, backends=names), pass_marks(rb, thresholds, backends=names)
    pairs = [(metric, b) for metric in wanted for b in ta.backends_of(metric)
             if (metric, b) in keys_b and (only is None or b in only)]
    rows, shifts = [], []
    # each pair's shift (its bootstrap and permutation test) is drawn in a thread beside its figures
    with stats.thread_pool(max(1, stats.threads() - 1), "shift") as pool, \
            (progress or Steps.quiet()).start(len(pairs)) as steps:
        for metric, b in pairs:
            ca, cb = ta.column(metric, b), tb.column(metric, b).on(at_b)
            both = shared & ca.scored & cb.scored
            x, y = ca.value[both], cb.value[both]
            n = int(both.sum())
            shifts.append(pool.submit(stats.mean_shift, x, y, seed, b, metric, ALL, confidence, n_resamples,
                                      n_permutations))  # as diff's
            row: dict[str, Any] = {
                "metric": metric, "half": half_of(metric), "backend": b,
                "run_a": str(ra.path), "run_b": str(rb.path),
                "judge_a": (judge_of(ra, b, metric) or {}).get("model"),
                "judge_b": (judge_of(rb, b, metric) or {}).get("model"),
                "version_a": ra.manifest.backends.get(b), "version_b": rb.manifest.backends.get(b),
                "n_cases": n_shared, "n_paired": n,
            }
            for side, col in (("a", ca), ("b", cb)):
                row.update({f"{side}_{k}": v for k, v in col.counts(shared).items()})
            gseed = stats.group_seed(seed, metric, b)
            t_a, t_b = th_a.get(b, metric), th_b.get(b, metric)
            pa, pb = ca.verdicts(t_a)[both], cb.verdicts(t_b)[both]
            row.update(_figures(x, y, pa, pb, t_a, t_b, n_resamples, gseed, confidence))
            row["shift"] = float((y - x).mean()) if n else math.nan
            rows.append(row)
            steps.advance()
        for row, shift in zip(rows, shifts):
            row["shift_low"], row["shift_high"], row["shift_p"] = shift.result()
    frame = pd.DataFrame(rows, columns=COMPARE_RUNS_COLUMNS)
    if frame.empty:
        raise AnalysisError(
            "nothing to compare: no metric asked for is scored by the same backend in both runs "
            f"(in both: {', '.join(sorted(f'{b}:{m}' for m, b in common))})")
    frame.attrs.update(
        run_a=str(ra.path), run_b=str(rb.path), label_a=_side_label(ra), label_b=_side_label(rb),
        n_shared=n_shared, only_in_a=len(ta.case_ids) - n_shared,
        only_in_b=len(tb.case_ids) - n_shared)
    return frame


def _places(ta: ScoreTable, tb: ScoreTable) -> np.ndarray:
    """For each case of ``ta``, its place among ``tb``'s cases (-1: not there)."""
    return tb.cases.find(ta.case_ids)


def _side_label(run: Run) -> str:
    """The run folder's name, with the judge model of its ``run.json`` when it had a judge."""
    model = (run.manifest.judge or {}).get("model")
    return _run_label(run) + (f" ({model})" if model else "")


def run_shifts(
    run_a: Union[Run, str, Path],
    run_b: Union[Run, str, Path],
    metrics: Optional[Sequence[str]] = None,
    backends: Optional[Sequence[str]] = None,
    top: Optional[int] = 10,
):
    """The cases whose value moved most between two runs, per (metric, backend) scored in both: one
    row per case with ``value_a``, ``value_b``, ``delta`` (b - a) and both reasons; ``top`` per
    (metric, backend), largest ``|delta|`` first (None: every case that moved)."""
    import pandas as pd

    ra, rb = open_run(run_a, "run A"), open_run(run_b, "run B")
    ta, tb = ScoreTable.of(ra), ScoreTable.of(rb)
    at_b = _places(ta, tb)
    only = ta.check_backends(backends)
    rank = None
    question = ta.cases.question_of()
    rows = []
    for metric in ta.select_metrics(metrics):
        for b in ta.backends_of(metric):
            if not tb.has(metric, b) or (only is not None and b not in only):
                continue
            ca, cb = ta.column(metric, b), tb.column(metric, b).on(at_b)
            moved = (at_b >= 0) & ca.scored & cb.scored
            moved[moved] = ca.value[moved] != cb.value[moved]
            found = np.flatnonzero(moved)
            delta = cb.value[found] - ca.value[found]
            rank = ta.cases.id_rank() if rank is None else rank
            found = found[np.lexsort((rank[found], -np.abs(delta)))]
            if top is not None:
                found = found[:top]
            sa, sb = ca.scores(found), cb.scores(found)
            for i, x, y in zip(found.tolist(), sa, sb):
                cid = ta.case_ids[i]
                q = question(i) or (tb.cases.questions([int(at_b[i])])[0] if at_b[i] >= 0 else "")
                rows.append({"metric": metric, "backend": b, "case_id": cid, "question": q,
                             "value_a": x.value, "value_b": y.value, "delta": y.value - x.value,
                             "reason_a": x.reason, "reason_b": y.reason})
    return pd.DataFrame(rows, columns=["metric", "backend", "case_id", "question", "value_a", "value_b",
                                       "delta", "reason_a", "reason_b"])


def coverage(run: Union[Run, str, Path], metrics: Optional[Sequence[str]] = None):
    """Per (metric, backend): how many cases were scored, undefined, errored or missing."""
    import pandas as pd

    table = ScoreTable.of(open_run(run))
    rows = []
    for metric in table.select_metrics(metrics):
        for b in table.backends_of(metric):
            rows.append({"metric": metric, "backend": b, **table.status_counts(metric, b)})
    return pd.DataFrame(rows, columns=["metric", "backend", "scored", "undefined", "errored", "missing"])


def disagreements(
    run: Union[Run, str, Path],
    metrics: Optional[Sequence[str]] = None,
    backends: Optional[Sequence[str]] = None,
    thresholds: Any = None,
    top: Optional[int] = 10,
):
    """The cases where backends disagree most, per metric scored by two or more backends.

    One row per (metric, case): ``spread`` (largest minus smallest value among the backends that
    scored the case), ``verdicts_differ`` (pass/fail at the pass marks differ), and for every
    backend ``<backend>.value``, ``<backend>.status``, ``<backend>.passed``, ``<backend>.reason``
    (the error message when it failed). A case disagrees when its verdicts differ or its spread is at
    least `MIN_SPREAD` (a smaller one prints as 0.000); the largest spread first, verdict flips first
    among equal spreads; ``top`` cases per metric (None: every one that disagrees).
    """
    import pandas as pd

    table = ScoreTable.of(open_run(run))
    wanted = table.select_metrics(metrics)
    only = table.check_backends(backends)
    th = pass_marks(table.run, thresholds, backends=sorted(table.backends()))
    rows = []
    all_backends: list[str] = []
    question = table.cases.question_of()
    for metric in wanted:
        names = [b for b in table.backends_of(metric) if only is None or b in only]
        if len(names) < 2:
            continue
        all_backends.extend(n for n in names if n not in all_backends)
        cols = [table.column(metric, n) for n in names]
        found, spread, differ, n_scored, passed = _disagreeing(cols, [th.get(n, metric) for n in names])
        rounded = _rounded(spread[found])
        found = found[np.lexsort((table.cases.id_rank()[found], ~differ[found], -rounded))]
        if top is not None:
            found = found[:top]
        got = [c.scores(found) for c in cols]
        for k, i in enumerate(found.tolist()):
            row: dict[str, Any] = {
                "metric": metric, "case_id": table.case_ids[i], "question": question(i),
                "spread": float(spread[i]), "verdicts_differ": bool(differ[i]),
                "n_backends": int(n_scored[i]),
            }
            for j, n in enumerate(names):
                row.update(_cells(n, got[j][k], passed[j, i]))
            rows.append(row)
    base = ["metric", "case_id", "question", "spread", "verdicts_differ", "n_backends"]
    per = [f"{n}.{k}" for n in all_backends for k in CELLS]
    return pd.DataFrame(rows, columns=base + per)


def scored_by_one(
    run: Union[Run, str, Path],
    metrics: Optional[Sequence[str]] = None,
    backends: Optional[Sequence[str]] = None,
    thresholds: Any = None,
    top: Optional[int] = None,
):
    """The cases of each metric scored by two or more backends that one backend scored and another
    errored on: no figure of `compare` counts them (only cases both scored enter a figure) and
    `disagreements` needs two values, yet they are where two versions of a library differ most (one
    refuses a judge's reply the other reads).

    One row per (metric, case), in case order: ``scored`` and ``errored`` (the backends' names, joined
    by ", "), and for every backend of the metric ``<backend>.value``, ``<backend>.status``,
    ``<backend>.passed`` (at its pass mark, as `disagreements`), ``<backend>.reason`` (the error
    message when it errored); ``top`` cases per metric (None: all).
    The frame's ``attrs["counts"]`` holds how many such cases each metric has, whatever ``top``.
    """
    import pandas as pd

    table = ScoreTable.of(open_run(run))
    only = table.check_backends(backends)
    th = pass_marks(table.run, thresholds, backends=sorted(table.backends()))
    question = table.cases.question_of()
    rows, all_backends, counts = [], [], {}
    for metric in table.select_metrics(metrics):
        names = [b for b in table.backends_of(metric) if only is None or b in only]
        if len(names) < 2:
            continue
        cols = [table.column(metric, n) for n in names]
        scored = np.array([c.scored for c in cols])
        errored = np.array([c.status == ERROR for c in cols])
        passed = np.array([c.verdicts(th.get(n, metric)) for c, n in zip(cols, names)])
        found = np.flatnonzero(scored.any(axis=0) & errored.any(axis=0))
        if not len(found):
            continue
        counts[metric] = len(found)
        all_backends.extend(n for n in names if n not in all_backends)
        found = found[np.argsort(table.cases.id_rank()[found], kind="stable")]
        if top is not None:
            found = found[:top]
        got = [c.scores(found) for c in cols]
        for k, i in enumerate(found.tolist()):
            row: dict[str, Any] = {
                "metric": metric, "case_id": table.case_ids[i], "question": question(i),
                "scored": ", ".join(n for j, n in enumerate(names) if scored[j, i]),
                "errored": ", ".join(n for j, n in enumerate(names) if errored[j, i]),
            }
            for j, n in enumerate(names):
                row.update(_cells(n, got[j][k], passed[j, i]))
            rows.append(row)
    per = [f"{n}.{k}" for n in all_backends for k in CELLS]
    frame = pd.DataFrame(rows, columns=["metric", "case_id", "question", "scored", "errored"] + per)
    frame.attrs["counts"] = counts
    return frame


#: what `disagreements` and `scored_by_one` show of each backend on a case
CELLS = ("value", "status", "passed", "reason")


def _cells(name: str, s: Any, passed: bool) -> dict[str, Any]:
    """One backend's cells of a case's row: its value, status, verdict at its pass mark (``passed``,
    shown only for a scored case) and reason (the error message when it errored)."""
    if s is None:
        return {f"{name}.value": None, f"{name}.status": "missing", f"{name}.passed": None,
                f"{name}.reason": None}
    return {f"{name}.value": s.value, f"{name}.status": s.status,
            f"{name}.passed": bool(passed) if s.status == "scored" else None,
            f"{name}.reason": s.error or s.reason}


def _disagreeing(cols: list, marks: list[float]) -> tuple:
    """Over the cases two or more of the columns ``cols`` (one metric, several backends) scored:
    ``(the places of the cases that disagree, each case's spread, whether its verdicts differ, how many
    scored it, each column's verdicts)``."""
    scored = np.array([c.scored for c in cols])
    values = np.array([c.value for c in cols])
    passed = np.array([c.verdicts(t) for c, t in zip(cols, marks)])
    n_scored = scored.sum(axis=0)
    with np.errstate(invalid="ignore"):
        spread = (np.where(scored, values, -np.inf).max(axis=0)
                  - np.where(scored, values, np.inf).min(axis=0))
    differ = (passed & scored).any(axis=0) & (~passed & scored).any(axis=0)
    keep = (n_scored >= 2) & ((spread >= MIN_SPREAD) | differ)
    return np.flatnonzero(keep), np.where(keep, spread, 0.0), differ, n_scored, passed


def flip_counts(run: Union[Run, str, Path], metrics: Optional[Sequence[str]] = None,
                backends: Optional[Sequence[str]] = None, thresholds: Any = None) -> dict[str, int]:
    """Per metric scored by two or more backends: how many cases the backends' verdicts differ on (the
    rows of `disagreements` with ``verdicts_differ``, counted without making them)."""
    table = ScoreTable.of(open_run(run))
    only = table.check_backends(backends)
    th = pass_marks(table.run, thresholds, backends=sorted(table.backends()))
    out = {}
    for metric in table.select_metrics(metrics):
        names = [b for b in table.backends_of(metric) if only is None or b in only]
        if len(names) >= 2:
            found, _, differ, _, _ = _disagreeing([table.column(metric, n) for n in names],
                                                  [th.get(n, metric) for n in names])
            if differ[found].any():
                out[metric] = int(differ[found].sum())
    return out


def _rounded(values: np.ndarray) -> np.ndarray:
    """Python's ``round(v, 3)`` of each value (NumPy's rounding can differ at a tie)."""
    uniq, inverse = np.unique(values, return_inverse=True)
    return np.array([round(float(v), 3) for v in uniq], float)[inverse.ravel()] if len(values) else values
