"""``validate``: each backend's verdicts against human labels.

Human labels (pass/fail, or graded; `ragbridge.analysis.labels`) per case and metric against each
backend's verdict at its threshold. "Positive" is *pass*: ``tpr`` is the share of human-passed
answers the backend passes, ``tnr`` the share of human-failed answers the backend fails (how many
real failures it catches), so a judge that agrees 90% overall but misses half of the rare failures
shows ``tnr`` 0.5. Also Cohen's kappa, balanced accuracy, and, where a backend exposes its claims
(`ragbridge.run.summary.claim_counts`), the share of answers with at least one unsupported
claim. Rates get Wilson intervals, kappa, balanced accuracy and Spearman bootstrap intervals
(`ragbridge.analysis.stats`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from ..run import Run
from ..run.summary import claim_counts
from . import stats
from .labels import load_labels
from .ppi import ppi_estimates
from .table import AnalysisError, ScoreTable, open_run
from .thresholds import Thresholds

__all__ = ["validate", "VALIDATE_COLUMNS"]

VALIDATE_COLUMNS = [
    "metric", "backend", "threshold", "n_labels", "labels_unknown_case", "n_paired", "unscored",
    "undefined", "errored", "missing", "human_pass", "human_fail", "tp", "fn", "fp", "tn",
    "tpr", "tpr_low", "tpr_high", "tnr", "tnr_low", "tnr_high", "kappa", "kappa_low", "kappa_high",
    "balanced_accuracy", "balanced_accuracy_low", "balanced_accuracy_high", "agreement",
    "spearman", "spearman_low", "spearman_high", "claims_answers", "unsupported_answers",
    "unsupported_share", "unsupported_share_low", "unsupported_share_high",
    "n_judged", "judge_pass_rate", "ppi_pass_rate", "ppi_pass_rate_low", "ppi_pass_rate_high",
    "human_pass_rate_low", "human_pass_rate_high", "ppi_mean", "ppi_mean_low", "ppi_mean_high",
]
_NO_INTERVAL = (math.nan, math.nan)


def validate(
    run: Union[Run, str, Path],
    labels: Any,
    metrics: Optional[Sequence[str]] = None,
    backends: Optional[Sequence[str]] = None,
    thresholds: Any = None,
    label_threshold: float = 0.5,
    n_resamples: int = stats.DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = stats.CONFIDENCE,
):
    """Each backend's verdicts against human labels, per metric and backend.

    ``labels``: a path (see `load_labels`) or a DataFrame ``case_id, metric, grade[, graded]``;
    pass/fail labels are used as they are, a numeric grade at or above ``label_threshold`` is a
    human pass. Columns: ``n_labels`` (labels for this metric),
    ``n_paired`` (labelled cases the backend scored), ``unscored`` (labelled but undefined,
    errored or missing), ``human_pass``, ``human_fail``, the confusion ``tp`` (both pass), ``fn``
    (human pass, backend fail), ``fp`` (human fail, backend pass: a missed failure), ``tn``;
    ``tpr``, ``tnr`` (Wilson intervals), ``kappa``, ``balanced_accuracy`` (bootstrap intervals),
    ``agreement``; for graded labels ``spearman`` with the backend's value; and where the backend
    exposes claims, ``claims_answers`` and ``unsupported_share`` (answers with at least one
    unsupported claim, Wilson interval).
    """
    import pandas as pd

    table = ScoreTable.of(open_run(run))
    where = "" if isinstance(labels, pd.DataFrame) else f"{labels}: "
    if not isinstance(labels, pd.DataFrame):
        labels = load_labels(labels, metric=metrics[0] if metrics and len(metrics) == 1 else None,
                             label_threshold=label_threshold)
    only = table.check_backends(backends)
    th = Thresholds.parse(thresholds, table.backends())
    have = table.metrics()
    label_metrics = list(dict.fromkeys(labels["metric"]))
    if metrics:
        wanted = table.select_metrics(metrics)
        label_metrics = [m for m in label_metrics if m in wanted or m.split("@")[0] in metrics]
    matched = [m for m in label_metrics if m in have]
    if not matched:
        raise AnalysisError(
            "no labelled metric is in this run: labels name "
            + (", ".join(dict.fromkeys(labels["metric"])) or "nothing")
            + f"; the run scored {', '.join(have) or 'nothing'}"
        )
    rows = []
    for metric in matched:
        lab = labels[labels["metric"] == metric]
        grades = dict(zip(lab["case_id"], lab["grade"].astype(float)))
        is_graded = (dict(zip(lab["case_id"], lab["graded"].astype(bool))) if "graded" in lab
                     else {c: True for c in grades})
        human = {c: (g >= label_threshold) if is_graded[c] else (g >= 0.5) for c, g in grades.items()}
        graded = any(is_graded.values()) and len(set(grades.values())) > 2
        for b in table.backends_of(metric):
            if only is None or b in only:
                row = _validate_backend(table, metric, b, th.get(b, metric), grades, human, graded,
                                        n_resamples, seed, confidence)
                rows.append(row)
    if rows and not any(r["n_labels"] > r["labels_unknown_case"] for r in rows):
        first = next(iter(labels["case_id"]), None)
        raise AnalysisError(
            f"{where}no label names a case of this run ({len(labels)} label(s); the first names {first!r}, "
            f"the run's first case is {next(iter(table.case_ids), None)!r}): check that the labels belong to "
            "this run's "
            "golden set and spell its case ids")
    return pd.DataFrame(rows, columns=VALIDATE_COLUMNS)


def _validate_backend(table: ScoreTable, metric: str, backend: str, t: float, grades: dict[str, float],
                      human: dict[str, bool], graded: bool, n_resamples: int, seed: int,
                      confidence: float) -> dict[str, Any]:
    """One row of `validate`: ``backend`` at threshold ``t`` against the labels of ``metric``."""
    got = table.by_mb.get((metric, backend), {})
    known = set(table.case_ids)
    ids = [c for c in grades if c in got and got[c].status == "scored"]
    truth = np.array([human[c] for c in ids], bool)
    value = np.array([got[c].value for c in ids], float)
    pred = value >= t
    st = {"undefined": 0, "errored": 0, "missing": 0}
    for c in grades:
        s = got.get(c)
        if c in known and (s is None or s.status != "scored"):
            st["missing" if s is None else {"undefined": "undefined", "error": "errored"}[s.status]] += 1
    tp, fn, fp, tn = stats.confusion(truth, pred)
    row: dict[str, Any] = {
        "metric": metric, "backend": backend, "threshold": t, "n_labels": len(grades),
        "labels_unknown_case": sum(1 for c in grades if c not in known), "n_paired": len(ids),
        "unscored": sum(st.values()), **st,
        "human_pass": int(truth.sum()), "human_fail": int((~truth).sum()),
        "tp": tp, "fn": fn, "fp": fp, "tn": tn,
    }
    row["tpr"] = stats.class_recall(truth, pred, True)
    row["tpr_low"], row["tpr_high"] = stats.wilson_interval(tp, tp + fn, confidence)
    row["tnr"] = stats.class_recall(truth, pred, False)
    row["tnr_low"], row["tnr_high"] = stats.wilson_interval(tn, tn + fp, confidence)
    figures = [("kappa", stats.kappa, stats.kappa_rows, (truth, pred)),
               ("balanced_accuracy", stats.balanced_accuracy, stats.balanced_accuracy_rows, (truth, pred))]
    if graded:
        figures.append(("spearman", stats.spearman, stats.spearman_rows,
                        (np.array([grades[c] for c in ids], float), value)))
    else:
        row["spearman"] = math.nan
        row["spearman_low"], row["spearman_high"] = _NO_INTERVAL
    for i, (name, point, rows, data) in enumerate(figures):
        row[name] = point(*data)
        row[f"{name}_low"], row[f"{name}_high"] = (
            _NO_INTERVAL if math.isnan(row[name])
            else stats.bootstrap_interval(rows, data, n_resamples, seed + i, confidence))
    row["agreement"] = stats.agreement(truth, pred)
    found = [f for c in grades if (s := got.get(c)) is not None and (f := claim_counts(s)) is not None]
    n_claims, n_unsup = len(found), sum(1 for _, bad in found if bad > 0)
    row["claims_answers"], row["unsupported_answers"] = n_claims, n_unsup
    row["unsupported_share"] = stats.rate(n_unsup, n_claims)
    row["unsupported_share_low"], row["unsupported_share_high"] = stats.wilson_interval(
        n_unsup, n_claims, confidence)
    row.update(_ppi_columns(got, human, grades, graded, t, confidence))
    return row


def _ppi_columns(got: dict[str, Any], human: dict[str, bool], grades: dict[str, float], graded: bool,
                 t: float, confidence: float) -> dict[str, Any]:
    """The golden set's true pass rate (and mean, for grades on the 0..1 scale) by prediction-powered
    inference: the backend's verdict on every case it scored, corrected by its errors on the labelled
    ones (`ppi_estimates`); with the judge's own pass rate and the labels-alone interval beside it."""
    judge = {c: s.value for c, s in got.items() if s.status == "scored"}
    est = ppi_estimates(judge, human, t, human_grade=grades if graded else None, confidence=confidence)
    p, m = est["pass_rate"], est["mean"] or {}
    nan = math.nan
    return {
        "n_judged": p["n"] + p["N"], "judge_pass_rate": nan if p["judge_only"] is None else p["judge_only"],
        "ppi_pass_rate": _or_nan(p["estimate"]), "ppi_pass_rate_low": _clip(p["low"]),
        "ppi_pass_rate_high": _clip(p["high"]),
        "human_pass_rate_low": _or_nan(p["classical"]["low"]),
        "human_pass_rate_high": _or_nan(p["classical"]["high"]),
        "ppi_mean": _or_nan(m.get("estimate")), "ppi_mean_low": _or_nan(m.get("low")),
        "ppi_mean_high": _or_nan(m.get("high")),
    }


def _clip(v: Any) -> float:
    """A pass rate's interval end, within 0..1 (NaN stays NaN)."""
    return math.nan if v is None else min(1.0, max(0.0, float(v)))


def _or_nan(v: Any) -> float:
    return math.nan if v is None else float(v)
