"""``validate``: each backend's verdicts against human labels.

Human labels (pass/fail, or graded; `ragbridge.analysis.labels`) per case and metric against each
backend's verdict at its threshold. "Positive" is *pass*: ``tpr`` is the share of human-passed
answers the backend passes, ``tnr`` the share of human-failed answers the backend fails (how many
real failures it catches), so a judge that agrees 90% overall but misses half of the rare failures
shows ``tnr`` 0.5. Also Cohen's kappa, balanced accuracy, and, where a backend exposes its claims
(`ragbridge.run.summary.claim_counts`), the share of answers with at least one unsupported
claim. Every figure has its posterior interval (`ragbridge.analysis.stats.rater_figures`, the one
method of every agreement figure). ``missed_fails`` lists the human fails the backend passed,
``missed_passes`` the human passes it failed: every case it disagrees on.

A backend's verdict is `ragbridge.verdicts.verdict` at its pass mark
(`ragbridge.analysis.thresholds.pass_marks`), as in every other output.

Labels drawn by stratum (``ragbridge label``: half from the cases the judge passed, half from those it
failed, the design carried in the labels file, `ragbridge.analysis.labels`) are weighted by it: each
labelled case stands for ``stratum_size / labels in its stratum`` cases, so TPR, TNR, kappa, balanced
accuracy, agreement and Spearman are those of the whole run, not of the over-sampled fails, and
their intervals draw each stratum apart (the backend whose verdicts made the strata passes every
case of the pass stratum and fails every case of the other: its other verdict is no corner there);
the counts ``tp``, ``fn``, ``fp``, ``tn`` stay those of the labels. The pass rate follows the
strata too (`ragbridge.analysis.ppi.pass_rate`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from ..run import Run
from ..run.case_ids import CaseIds
from ..run.columns import MISSING, UNDEFINED
from ..schema import clean_id
from . import stats
from .labels import load_labels
from .ppi import ppi_estimates
from .table import AnalysisError, ScoreTable, open_run
from .thresholds import pass_marks

__all__ = ["validate", "VALIDATE_COLUMNS", "not_random"]

VALIDATE_COLUMNS = [
    "metric", "backend", "threshold", "n_labels", "labels_unknown_case", "n_paired", "unscored",
    "undefined", "errored", "missing", "human_pass", "human_fail", "tp", "fn", "fp", "tn",
    "tpr", "tpr_low", "tpr_high", "tnr", "tnr_low", "tnr_high", "kappa", "kappa_low", "kappa_high",
    "balanced_accuracy", "balanced_accuracy_low", "balanced_accuracy_high", "agreement", "agreement_low",
    "agreement_high",
    "spearman", "spearman_low", "spearman_high", "claims_answers", "unsupported_answers",
    "unsupported_share", "unsupported_share_low", "unsupported_share_high",
    "n_judged", "judge_pass_rate", "ppi_pass_rate", "ppi_pass_rate_low", "ppi_pass_rate_high",
    "human_pass_rate_low", "human_pass_rate_high", "ppi_mean", "ppi_mean_low", "ppi_mean_high",
    "design", "strata", "not_random", "missed_fails", "missed_passes",
]


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
    ``tpr``, ``tnr``, ``kappa``, ``balanced_accuracy``, ``agreement``; for graded labels ``spearman``
    with the backend's value; where the backend exposes claims, ``claims_answers`` and
    ``unsupported_share`` (answers with at least one unsupported claim); each figure with its
    posterior interval (``<figure>_low``, ``<figure>_high``); ``missed_fails`` and
    ``missed_passes``, the case ids the backend got wrong each way.
    """
    import pandas as pd

    table = ScoreTable.of(open_run(run))
    where = "" if isinstance(labels, pd.DataFrame) else f"{labels}: "
    if not isinstance(labels, pd.DataFrame):
        labels = load_labels(labels, metric=metrics[0] if metrics and len(metrics) == 1 else None,
                             label_threshold=label_threshold)
    else:  # a frame's case ids read by the run's rule, as a file's are
        try:
            labels = labels.assign(case_id=[clean_id(str(c), "case_id") for c in labels["case_id"]])
        except ValueError as exc:
            raise AnalysisError(f"labels: {exc}") from None
    only = table.check_backends(backends)
    th = pass_marks(table.run, thresholds, backends=sorted(table.backends()))
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
        strata, drawn_by = _strata(table, metric, lab)
        in_order = None if strata is not None else not_random(table.case_ids, grades)
        for b in table.backends_of(metric):
            if only is None or b in only:
                row = _validate_backend(table, metric, b, th.get(b, metric), grades, human, graded,
                                        label_threshold, n_resamples, seed, confidence, strata, drawn_by)
                row["not_random"] = in_order
                rows.append(row)
    if rows and not any(r["n_labels"] > r["labels_unknown_case"] for r in rows):
        first = next(iter(labels["case_id"]), None)
        raise AnalysisError(
            f"{where}no label names a case of this run ({len(labels)} label(s); the first names {first!r}, "
            f"the run's first case is {next(iter(table.case_ids), None)!r}): check that the labels belong to "
            "this run's "
            "golden set and spell its case ids")
    return pd.DataFrame(rows, columns=VALIDATE_COLUMNS)


def not_random(case_ids: CaseIds, labelled: Any) -> Optional[str]:
    """Why labels said to be drawn uniformly are not a random sample, or None: the labelled cases of
    the run are consecutive in its order (the first lines of a labels file, a slice of the golden
    set), which a random draw of as many cases makes with a chance below 1%. Every interval of a
    validation and the true pass rate (prediction-powered inference) assume a random draw."""
    found = case_ids.find(list(labelled))
    at = sorted(found[found >= 0].tolist())
    n, total = len(at), len(case_ids)
    if n < 2 or n >= total or at[-1] - at[0] + 1 != n or (total - n + 1) / math.comb(total, n) >= 0.01:
        return None
    return (f"the {n} labelled cases are the run's cases {at[0] + 1} to {at[-1] + 1} of {total} in its "
            "order, not a random sample: the intervals and the true pass rate assume labels drawn at "
            "random (label a random draw, e.g. ragbridge label's, or every case)")


def _strata(table: ScoreTable, metric: str, lab) -> tuple[Optional[dict[str, str]],
                                                          Optional[tuple[str, float]]]:
    """Each case's stratum in the draw the labels of ``metric`` came from (the stratifying backend's
    verdict at the recorded threshold, for every case it scored) and that (backend, threshold), or
    ``(None, None)`` for uniform labels.
    Raises `AnalysisError` when the run cannot hold that draw (the backend did not score the metric,
    or its strata no longer have the sizes the labels were drawn from)."""
    if "stratum" not in lab or lab["stratum"].isna().all():
        return None, None
    first = lab.iloc[0]
    backend, t = str(first["stratum_backend"]), float(first["stratum_threshold"])
    col = table.column(metric, backend)
    if col is None or not col.present.any():
        raise AnalysisError(f"the labels of {metric!r} were drawn by {backend}'s verdicts, but {backend} "
                            f"did not score {metric} in this run")
    scored = np.flatnonzero(col.scored)
    passed = col.verdicts(t)[scored]
    ids = table.case_ids
    strata = {ids[i]: "pass" if p else "fail" for i, p in zip(scored.tolist(), passed.tolist())}
    recorded = dict(zip(lab["stratum"], lab["stratum_size"].astype(int)))
    sizes = {"pass": int(passed.sum()), "fail": int((~passed).sum())}
    have = {h: sizes.get(h, 0) for h in recorded}
    if have != recorded:
        raise AnalysisError(
            f"the labels of {metric!r} were drawn from {backend}'s verdicts at {t:g} with strata of "
            + ", ".join(f"{h} {n}" for h, n in sorted(recorded.items())) + "; in this run they hold "
            + ", ".join(f"{h} {n}" for h, n in sorted(have.items()))
            + ": the run was scored again since, so the labels' weights no longer fit it (draw and "
            "grade a new sample with ragbridge label)")
    return strata, (backend, t)


def _validate_backend(table: ScoreTable, metric: str, backend: str, t: float, grades: dict[str, float],
                      human: dict[str, bool], graded: bool, label_threshold: float, n_resamples: int,
                      seed: int, confidence: float, strata: Optional[dict[str, str]] = None,
                      stratified_by: Optional[tuple[str, float]] = None) -> dict[str, Any]:
    """One row of `validate`: ``backend`` at threshold ``t`` against the labels of ``metric``
    (``strata``: each case's stratum in a stratified draw, made by the verdicts of ``stratified_by``,
    a (backend, threshold); or None)."""
    col = table.column(metric, backend)
    present = col.present.copy()
    if strata is not None:  # the population: the cases the draw could pick
        drawable = np.zeros(len(present), bool)
        at = table.cases.find(list(strata))
        drawable[at[at >= 0]] = True
        present &= drawable
    scored = present & col.scored
    passed = col.verdicts(t)
    at = {c: (i if i >= 0 else None) for c, i in zip(grades, table.cases.find(list(grades)).tolist())}
    ids = [c for c in grades if at[c] is not None and scored[at[c]]]
    where = np.array([at[c] for c in ids], np.int64)
    truth = np.array([human[c] for c in ids], bool)
    value = col.value[where]
    pred = passed[where]
    st = {"undefined": 0, "errored": 0, "missing": 0}
    for c in grades:
        i = at[c]
        if i is not None and not scored[i]:
            code = int(col.status[i]) if present[i] else MISSING
            st["missing" if code == MISSING else "undefined" if code == UNDEFINED else "errored"] += 1
    tp, fn, fp, tn = stats.confusion(truth, pred)
    row: dict[str, Any] = {
        "metric": metric, "backend": backend, "threshold": t, "n_labels": len(grades),
        "labels_unknown_case": sum(1 for c in grades if at[c] is None), "n_paired": len(ids),
        "unscored": sum(st.values()), **st,
        "human_pass": int(truth.sum()), "human_fail": int((~truth).sum()),
        "tp": tp, "fn": fn, "fp": fp, "tn": tn,
    }
    design: dict[str, Any] = {}
    row["design"], row["strata"] = "uniform", None
    if strata is not None:  # each label stands for its stratum's share of the run
        of_case = [strata.get(cid) for cid in table.case_ids]
        sizes = {h: sum(1 for i in np.flatnonzero(scored).tolist() if of_case[i] == h)
                 for h in sorted(set(strata.values()))}
        total = sum(sizes.values())
        design = {"strata": [strata[c] for c in ids], "shares": {h: n / total for h, n in sizes.items()}}
        if (backend, t) == stratified_by:  # its verdicts made the strata: it passes every case of "pass"
            design["fixed_b"] = {"pass": True, "fail": False}
        row["design"] = "stratified"
        row["strata"] = {h: {"cases": sizes[h], "labels": sum(strata[c] == h for c in ids)} for h in sizes}
    names = ["tpr", "tnr", "kappa", "balanced_accuracy", "agreement"] + (["spearman"] if graded else [])
    human_grades = np.array([grades[c] for c in ids], float)
    scale = (min(0.0, float(human_grades.min(initial=0.0))), max(1.0, float(human_grades.max(initial=1.0))))
    got_figures = stats.rater_figures(
        names, truth, pred, human_grades, value, cut_x=label_threshold, cut_y=t, scale_x=scale,
        n_draws=n_resamples, seed=seed, confidence=confidence, **design)
    for name, (v, low, high) in got_figures.items():
        row[name], row[f"{name}_low"], row[f"{name}_high"] = v, low, high
    if not graded:
        row["spearman"], row["spearman_low"], row["spearman_high"] = math.nan, math.nan, math.nan
    row["missed_fails"] = [c for c, y, p in zip(ids, truth, pred) if p and not y]
    row["missed_passes"] = [c for c, y, p in zip(ids, truth, pred) if y and not p]
    claims, unsupported = col.get("claims"), col.get("unsupported")
    found = [(int(claims[i]), int(unsupported[i])) for c in grades
             if (i := at[c]) is not None and present[i] and claims[i] >= 0]
    n_claims, n_unsup = len(found), sum(1 for _, bad in found if bad > 0)
    row["claims_answers"], row["unsupported_answers"] = n_claims, n_unsup
    share = stats.rater_figures(["share"], [bad > 0 for _, bad in found], n_draws=n_resamples, seed=seed,
                                confidence=confidence)["share"]
    row["unsupported_share"], row["unsupported_share_low"], row["unsupported_share_high"] = share
    row.update(_ppi_columns(table, col, scored, passed, human, grades, graded, t, confidence, strata))
    return row


def _ppi_columns(table: ScoreTable, col, scored: np.ndarray, passed: np.ndarray, human: dict[str, bool],
                 grades: dict[str, float], graded: bool, t: float, confidence: float,
                 strata: Optional[dict[str, str]]) -> dict[str, Any]:
    """The golden set's true pass rate (and mean, for grades on the 0..1 scale) by prediction-powered
    inference: the backend's verdict on every case it scored, corrected by its errors on the labelled
    ones, following the draw (`ppi_estimates`); with the judge's own pass rate and the labels-alone
    interval beside it."""
    where = np.flatnonzero(scored)
    ids = [table.case_ids[i] for i in where.tolist()]
    judge = dict(zip(ids, col.value[where].tolist()))
    est = ppi_estimates(judge, human, t, human_grade=grades if graded else None, confidence=confidence,
                        verdicts=dict(zip(ids, passed[where].tolist())), strata=strata)
    p, m = est["pass_rate"], est["mean"] or {}
    nan = math.nan
    return {
        "n_judged": p["n"] + p["N"], "judge_pass_rate": nan if p["judge_only"] is None else p["judge_only"],
        "ppi_pass_rate": _or_nan(p["estimate"]), "ppi_pass_rate_low": _or_nan(p["low"]),
        "ppi_pass_rate_high": _or_nan(p["high"]),
        "human_pass_rate_low": _or_nan(p["classical"]["low"]),
        "human_pass_rate_high": _or_nan(p["classical"]["high"]),
        "ppi_mean": _or_nan(m.get("estimate")), "ppi_mean_low": _or_nan(m.get("low")),
        "ppi_mean_high": _or_nan(m.get("high")),
    }


def _or_nan(v: Any) -> float:
    return math.nan if v is None else float(v)
