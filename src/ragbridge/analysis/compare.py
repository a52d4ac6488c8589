"""``compare``: how far backends agree with each other on the metrics they share.

For every canonical metric scored by two or more backends, the agreement of each pair of backends on
the cases both scored: Spearman and Kendall (tau-b) rank correlation, Pearson correlation, mean
absolute difference, and at a threshold per backend (``value >= threshold`` passes; default 0.5)
Cohen's kappa, percent agreement and the 2x2 confusion table, each figure with its bootstrap
interval (`ragbridge.analysis.stats`). `disagreements` lists the cases where the backends differ
most, with every backend's value and reason; `coverage` counts what each backend scored.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from ..metrics import half_of
from ..run import Run
from . import stats
from .table import AnalysisError, ScoreTable, open_run
from .thresholds import Thresholds

__all__ = ["compare", "coverage", "disagreements", "FIGURES", "FIGURE_NAMES", "COMPARE_COLUMNS"]

FIGURES = ("spearman", "kendall", "pearson", "mae", "kappa", "agreement")
FIGURE_NAMES = {"spearman": "Spearman", "kendall": "Kendall", "pearson": "Pearson", "mae": "MAE",
                "kappa": "kappa", "agreement": "agreement"}
#: figure -> (point estimate, its form on resampled rows); kappa and agreement take pass/fail verdicts
_ESTIMATORS = {
    "spearman": (stats.spearman, stats.spearman_rows), "kendall": (stats.kendall, stats.kendall_rows),
    "pearson": (stats.pearson, stats.pearson_rows), "mae": (stats.mae, stats.mae_rows),
    "kappa": (stats.kappa, stats.kappa_rows), "agreement": (stats.agreement, stats.agreement_rows),
}
COMPARE_COLUMNS = (
    ["metric", "half", "backend_a", "backend_b", "n_cases", "n_paired"]
    + [f"{side}_{k}" for side in ("a", "b") for k in ("scored", "undefined", "errored", "missing")]
    + ["threshold_a", "threshold_b"]
    + [c for f in FIGURES for c in (f, f"{f}_low", f"{f}_high")]
    + ["both_pass", "a_pass_b_fail", "a_fail_b_pass", "both_fail", "mean_a", "mean_b"]
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
    bootstrap interval (``<figure>_low``, ``<figure>_high``), the thresholds used and the confusion
    table ``both_pass``, ``a_pass_b_fail``, ``a_fail_b_pass``, ``both_fail``, and the means of each
    side over the paired cases. ``thresholds``: see `Thresholds.parse`.
    """
    import pandas as pd

    table = ScoreTable.of(open_run(run))
    wanted = table.select_metrics(metrics)
    only = table.check_backends(backends)
    th = Thresholds.parse(thresholds, table.backends())
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
    va, vb = table.values(metric, a), table.values(metric, b)
    ids = [cid for cid in table.case_ids if cid in va and cid in vb]
    x = np.array([va[c] for c in ids], float)
    y = np.array([vb[c] for c in ids], float)
    ta, tb = th.get(a, metric), th.get(b, metric)
    pa, pb = x >= ta, y >= tb
    row: dict[str, Any] = {
        "metric": metric, "half": half_of(metric), "backend_a": a, "backend_b": b,
        "n_cases": len(table.case_ids), "n_paired": len(ids),
    }
    for side, name in (("a", a), ("b", b)):
        for k, v in table.status_counts(metric, name).items():
            row[f"{side}_{k}"] = v
    row["threshold_a"], row["threshold_b"] = ta, tb
    for i, (name, (point, rows)) in enumerate(_ESTIMATORS.items()):
        data = (pa, pb) if name in ("kappa", "agreement") else (x, y)
        row[name] = value = point(*data)
        row[f"{name}_low"], row[f"{name}_high"] = (
            (math.nan, math.nan) if math.isnan(value)
            else stats.bootstrap_interval(rows, data, n_resamples, seed + i, confidence))
    row["both_pass"], row["a_pass_b_fail"], row["a_fail_b_pass"], row["both_fail"] = stats.confusion(pa, pb)
    row["mean_a"] = float(x.mean()) if len(x) else float("nan")
    row["mean_b"] = float(y.mean()) if len(y) else float("nan")
    return row


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
    scored the case), ``verdicts_differ`` (pass/fail at the thresholds differ), and for every
    backend ``<backend>.value``, ``<backend>.status``, ``<backend>.passed``, ``<backend>.reason``
    (the error message when it failed). Sorted by spread, then verdict flips; ``top`` cases per
    metric (None: all with a spread or a flip).
    """
    import pandas as pd

    table = ScoreTable.of(open_run(run))
    wanted = table.select_metrics(metrics)
    only = table.check_backends(backends)
    th = Thresholds.parse(thresholds, table.backends())
    rows = []
    all_backends: list[str] = []
    for metric in wanted:
        names = [b for b in table.backends_of(metric) if only is None or b in only]
        if len(names) < 2:
            continue
        all_backends.extend(n for n in names if n not in all_backends)
        found = [r for cid in table.case_ids
                 if (r := _disagreement(table, metric, cid, names, th)) is not None]
        found.sort(key=lambda r: (-r["spread"], not r["verdicts_differ"]))
        rows.extend(found[:top] if top is not None else found)
    base = ["metric", "case_id", "question", "spread", "verdicts_differ", "n_backends"]
    per = [f"{n}.{k}" for n in all_backends for k in ("value", "status", "passed", "reason")]
    return pd.DataFrame(rows, columns=base + per)


def _disagreement(table: ScoreTable, metric: str, cid: str, names: list[str],
                  th: Thresholds) -> Optional[dict[str, Any]]:
    """The row of one case, or None when fewer than two backends scored it or they agree."""
    got = {n: table.by_mb.get((metric, n), {}).get(cid) for n in names}
    values = {n: s.value for n, s in got.items() if s is not None and s.status == "scored"}
    if len(values) < 2:
        return None
    spread = max(values.values()) - min(values.values())
    differ = len({v >= th.get(n, metric) for n, v in values.items()}) > 1
    if spread <= 0 and not differ:
        return None
    row: dict[str, Any] = {
        "metric": metric, "case_id": cid, "question": table.questions.get(cid, ""),
        "spread": spread, "verdicts_differ": differ, "n_backends": len(values),
    }
    for n, s in got.items():
        scored = s is not None and s.status == "scored"
        row[f"{n}.value"] = s.value if s is not None else None
        row[f"{n}.status"] = s.status if s is not None else "missing"
        row[f"{n}.passed"] = (s.value >= th.get(n, metric)) if scored else None
        row[f"{n}.reason"] = (s.error or s.reason) if s is not None else None
    return row
