"""``calibrate``: for a migration, the threshold in a target backend that best reproduces the source
backend's pass/fail at its threshold (maximum kappa), the agreement it reaches and the cases that
still flip (`calibration_flips`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Union

import numpy as np

from ..run import Run
from . import stats
from .table import AnalysisError, ScoreTable, open_run
from .thresholds import DEFAULT_THRESHOLD, check_threshold

__all__ = ["calibrate", "calibration_flips"]

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


def _cuts(values: np.ndarray) -> list[tuple[float, float, float]]:
    """``(representative, low exclusive, high inclusive)`` for every distinct set of verdicts a
    threshold can give on ``values``: below the lowest, between each two, above the highest."""
    uniq = np.unique(values)
    if not len(uniq):
        return []
    first, last = float(uniq[0]), float(uniq[-1])
    cuts = [(min(first, 0.0) if first > 0 else first, -math.inf, first)]
    cuts += [((float(lo) + float(hi)) / 2, float(lo), float(hi)) for lo, hi in zip(uniq[:-1], uniq[1:])]
    above = (last + 1.0) / 2 if last < 1.0 else float(np.nextafter(last, math.inf))
    return cuts + [(above, last, math.inf)]


def calibrate(
    run: Union[Run, str, Path],
    source: str,
    target: str,
    metric: str,
    threshold: float = DEFAULT_THRESHOLD,
    n_resamples: int = stats.DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = stats.CONFIDENCE,
):
    """The target threshold that best reproduces the source's pass/fail at ``threshold``.

    Returns one row per distinct target cut: ``threshold`` (a representative value: the midpoint of
    the interval of thresholds that give the same verdicts, ``threshold_low`` exclusive to
    ``threshold_high`` inclusive), ``kappa``, ``agreement``, ``flips`` (cases whose verdict still
    differs: ``source_pass_target_fail`` + ``source_fail_target_pass``) and ``target_pass_rate``;
    ``best`` marks the maximum kappa (ties: higher agreement, then the threshold closest to the
    source's). The best row also carries the bootstrap interval of its kappa and agreement
    (``kappa_low`` ...; computed on the same cases the threshold was chosen on, so optimistic).
    ``frame.attrs`` holds ``source``, ``target``, ``metric``, ``source_threshold``, ``n_paired``
    and the per-side counts of cases not scored.
    """
    import pandas as pd

    table = ScoreTable.of(open_run(run))
    metric = table.select_metrics([metric])[0]
    if source == target:
        raise AnalysisError("--from and --to name the same backend")
    ids, xs, xt = _paired_values(table, metric, source, target)
    threshold = check_threshold(float(threshold), str(threshold))
    src_pass = xs >= threshold
    rows = []
    for rep, lo, hi in _cuts(xt):
        tgt_pass = xt >= rep
        spass_tfail = int(np.sum(src_pass & ~tgt_pass))
        sfail_tpass = int(np.sum(~src_pass & tgt_pass))
        rows.append({
            "threshold": rep, "threshold_low": lo, "threshold_high": hi,
            "kappa": stats.kappa(src_pass, tgt_pass), "agreement": stats.agreement(src_pass, tgt_pass),
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
        tgt_pass = xt >= frame.loc[best, "threshold"]
        data = (src_pass, tgt_pass)
        if not math.isnan(frame.loc[best, "kappa"]):
            frame.loc[best, ["kappa_low", "kappa_high"]] = stats.bootstrap_interval(
                stats.kappa_rows, data, n_resamples, seed, confidence)
        frame.loc[best, ["agreement_low", "agreement_high"]] = stats.bootstrap_interval(
            stats.agreement_rows, data, n_resamples, seed + 1, confidence)
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
        sp, tp = bool(a >= source_threshold), bool(b >= target_threshold)
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
