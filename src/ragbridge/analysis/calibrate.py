"""``calibrate``: for a migration, the threshold in a target backend that best reproduces the source
backend's pass/fail at its threshold (maximum kappa), the agreement it reaches and the cases that
still flip (`calibration_flips`).

Every verdict is `ragbridge.verdicts.verdict` (a majority of repeats for a run made with
``--repeats``). The thresholds that give the target the same verdicts form intervals between the
target's distinct values; the curve has one row per interval, written ``(low, high]``: every
threshold in it gives that row's verdicts and its ``threshold`` is the interval's middle; the first
row (``<= lowest``) passes every case and the last (``> highest``) none. Every output writes a row
by its interval (`interval_text`), so a row and the range it stands for never read as two answers.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Union

import numpy as np

from ..run import Run
from ..verdicts import verdict
from . import stats
from .table import AnalysisError, ScoreTable, open_run
from .thresholds import check_threshold, pass_marks

__all__ = ["calibrate", "calibration_flips", "interval_text"]

_CURVE_COLUMNS = ["threshold", "threshold_low", "threshold_high", "kappa", "agreement", "flips",
                  "source_pass_target_fail", "source_fail_target_pass", "target_pass_rate"]


def _paired_values(table: ScoreTable, metric: str, source: str, target: str):
    for name in (source, target):
        if (metric, name) not in table.by_mb:
            have = table.backends_of(metric)
            raise AnalysisError(
                f"backend {name!r} did not score {metric!r} in this run; "
                f"backends that did: {', '.join(have) or 'none'}"
            )
    vs, vt = table.values(metric, source), table.values(metric, target)
    ids = [c for c in table.case_ids if c in vs and c in vt]
    return ids, np.array([vs[c] for c in ids], float), np.array([vt[c] for c in ids], float)


def _cuts(scores: list) -> list[tuple[float, float]]:
    """``(low exclusive, high inclusive)`` for every distinct set of verdicts a threshold can give
    ``scores``: up to the lowest value (every case passes), between each two values the scores (or
    their repeats) take, and above the highest (none passes)."""
    seen = {s.value for s in scores}
    for s in scores:
        if s.repeats is not None:
            seen.update(v for v in s.repeats.values if v is not None)
    uniq = sorted(float(v) for v in seen if v is not None)
    if not uniq:
        return []
    return ([(-math.inf, uniq[0])] + [(lo, hi) for lo, hi in zip(uniq[:-1], uniq[1:])]
            + [(uniq[-1], math.inf)])


def _representative(lo: float, hi: float) -> float:
    """The threshold a cut ``(lo, hi]`` is tried at: its middle; 0 (or the lowest value, when it is
    below 0) for the first; halfway to 1 (or just above the highest value) for the last."""
    if math.isinf(lo):
        return min(hi, 0.0)
    if math.isinf(hi):
        return (lo + 1.0) / 2 if lo < 1.0 else float(np.nextafter(lo, math.inf))
    return (lo + hi) / 2


def interval_text(low: float, high: float) -> str:
    """A calibration row's thresholds in words: ``(0.667, 1]``, ``<= 0.2``, ``> 1``."""
    if math.isinf(low):
        return f"<= {high:.3g}"
    if math.isinf(high):
        return f"> {low:.3g}"
    return f"({low:.3g}, {high:.3g}]"


def calibrate(
    run: Union[Run, str, Path],
    source: str,
    target: str,
    metric: str,
    threshold: Optional[float] = None,
    n_resamples: int = stats.DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = stats.CONFIDENCE,
):
    """The target threshold that best reproduces the source's pass/fail at ``threshold`` (default:
    the source's pass mark, `ragbridge.analysis.thresholds.pass_marks`).

    Returns one row per distinct target cut: ``threshold`` (a representative value: the midpoint of
    the interval of thresholds that give the same verdicts, ``threshold_low`` exclusive to
    ``threshold_high`` inclusive), ``kappa``, ``agreement``, ``flips`` (cases whose verdict still
    differs: ``source_pass_target_fail`` + ``source_fail_target_pass``) and ``target_pass_rate``;
    ``best`` marks the maximum kappa (ties: higher agreement, then the threshold closest to the
    source's). The best row also carries the posterior interval of its kappa and agreement
    (``kappa_low`` ..., `stats.rater_figures`; computed on the same cases the threshold was chosen on, so
    optimistic).
    ``frame.attrs`` holds ``source``, ``target``, ``metric``, ``source_threshold``, ``n_paired``
    and the per-side counts of cases not scored.
    """
    import pandas as pd

    table = ScoreTable.of(open_run(run))
    metric = table.select_metrics([metric])[0]
    if source == target:
        raise AnalysisError("--from and --to name the same backend")
    ids, xs, xt = _paired_values(table, metric, source, target)
    if threshold is None:
        threshold = pass_marks(table.run).get(source, metric)
    threshold = check_threshold(float(threshold), str(threshold))
    src = [table.by_mb[(metric, source)][c] for c in ids]
    tgt = [table.by_mb[(metric, target)][c] for c in ids]
    src_pass = np.array([bool(verdict(s, threshold)) for s in src], bool)
    rows = []
    for lo, hi in _cuts(tgt):
        rep = _representative(lo, hi)
        tgt_pass = np.array([bool(verdict(s, rep)) for s in tgt], bool)
        spass_tfail = int(np.sum(src_pass & ~tgt_pass))
        sfail_tpass = int(np.sum(~src_pass & tgt_pass))
        point = stats.rater_figures(["kappa", "agreement"], src_pass, tgt_pass, n_draws=0)
        rows.append({
            "threshold": rep, "threshold_low": lo, "threshold_high": hi,
            "kappa": point["kappa"][0], "agreement": point["agreement"][0],
            "flips": spass_tfail + sfail_tpass, "source_pass_target_fail": spass_tfail,
            "source_fail_target_pass": sfail_tpass,
            "target_pass_rate": float(np.mean(tgt_pass)) if len(tgt_pass) else float("nan"),
        })
    frame = pd.DataFrame(rows, columns=_CURVE_COLUMNS)
    frame["best"] = False
    for c in ("kappa_low", "kappa_high", "agreement_low", "agreement_high"):
        frame[c] = float("nan")
    if not frame.empty:
        key = frame.assign(
            _k=frame["kappa"].fillna(-math.inf),
            _d=-(frame["threshold"] - threshold).abs(),
        ).sort_values(["_k", "agreement", "_d"], ascending=False)
        best = key.index[0]
        frame.loc[best, "best"] = True
        tgt_pass = np.array([bool(verdict(s, frame.loc[best, "threshold"])) for s in tgt], bool)
        got = stats.rater_figures(["kappa", "agreement"], src_pass, tgt_pass, n_draws=n_resamples, seed=seed,
                                  confidence=confidence)
        for name, (_, low, high) in got.items():
            frame.loc[best, [f"{name}_low", f"{name}_high"]] = low, high
    unscored = {name: {k: v for k, v in table.status_counts(metric, name).items() if k != "scored"}
                for name in (source, target)}
    frame.attrs.update({
        "source": source, "target": target, "metric": metric, "source_threshold": threshold,
        "n_paired": len(ids), "source_pass": int(src_pass.sum()),
        "source_unscored": unscored[source], "target_unscored": unscored[target],
    })
    return frame


def calibration_flips(
    run: Union[Run, str, Path], source: str, target: str, metric: str,
    source_threshold: float, target_threshold: float,
):
    """Cases whose pass/fail differs between the source at ``source_threshold`` and the target at
    ``target_threshold``: ``case_id, question, source_value, target_value, source_passed,
    target_passed, source_reason, target_reason``, sorted by how far the target value is from its
    threshold (the clearest flips first)."""
    import pandas as pd

    table = ScoreTable.of(open_run(run))
    metric = table.select_metrics([metric])[0]
    ids, xs, xt = _paired_values(table, metric, source, target)
    gs = table.by_mb[(metric, source)]
    gt = table.by_mb[(metric, target)]
    rows = []
    for cid, a, b in zip(ids, xs, xt):
        sp, tp = bool(verdict(gs[cid], source_threshold)), bool(verdict(gt[cid], target_threshold))
        if sp == tp:
            continue
        rows.append({
            "case_id": cid, "question": table.questions.get(cid, ""),
            "source_value": float(a), "target_value": float(b),
            "source_passed": sp, "target_passed": tp,
            "source_reason": gs[cid].reason, "target_reason": gt[cid].reason,
            "distance": abs(b - target_threshold),
        })
    rows.sort(key=lambda r: -r["distance"])
    columns = ["case_id", "question", "source_value", "target_value", "source_passed",
               "target_passed", "source_reason", "target_reason", "distance"]
    return pd.DataFrame(rows, columns=columns).drop(columns="distance")
