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
from typing import Any, Optional, Union

import numpy as np

from ..run import Run
from . import stats
from .rows import Rows
from .table import AnalysisError, ScoreTable, open_run
from .thresholds import check_threshold, pass_marks

__all__ = ["calibrate", "calibration_flips", "flip_rows", "interval_text", "FLIP_COLUMNS"]

_CURVE_COLUMNS = ["threshold", "threshold_low", "threshold_high", "kappa", "agreement", "flips",
                  "source_pass_target_fail", "source_fail_target_pass", "target_pass_rate"]


def _paired(table: ScoreTable, metric: str, source: str, target: str) -> np.ndarray:
    """Which cases both backends scored (raises `AnalysisError` when one did not score the metric)."""
    for name in (source, target):
        if not table.has(metric, name):
            have = table.backends_of(metric)
            apart = [b for b in have if b.startswith(f"{name}@")]
            if apart:  # runs read side by side, each scoring the backend: a column per run
                raise AnalysisError(f"{name!r} scored {metric!r} in each run apart, a column per run: name "
                                    f"one of {', '.join(apart)}")
            raise AnalysisError(
                f"backend {name!r} did not score {metric!r} in this run; "
                f"backends that did: {', '.join(have) or 'none'}"
            )
    return table.column(metric, source).scored & table.column(metric, target).scored


def _cuts(values: list[float]) -> list[tuple[float, float]]:
    """``(low exclusive, high inclusive)`` for every distinct set of verdicts a threshold can give
    cases whose values (or their repeats' values) are ``values``: up to the lowest value (every case
    passes), between each two values, and above the highest (none passes)."""
    uniq = sorted(set(float(v) for v in values))
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
    """A calibration row's thresholds in words: ``(0.667, 1]``, ``<= 0.2``, ``> 1``; two ends that
    read the same at 3 significant digits get as many more as tell them apart (``(0.63096, 0.63104]``,
    not ``(0.631, 0.631]``)."""
    if math.isinf(low):
        return f"<= {high:.3g}"
    if math.isinf(high):
        return f"> {low:.3g}"
    digits = next((d for d in (3, 4, 5, 6, 8, 12) if f"{low:.{d}g}" != f"{high:.{d}g}"), 17)
    return f"({low:.{digits}g}, {high:.{digits}g}]"


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
    both = _paired(table, metric, source, target)
    if threshold is None:
        threshold = pass_marks(table.run).get(source, metric)
    threshold = check_threshold(float(threshold), str(threshold))
    src, tgt = table.column(metric, source), table.column(metric, target)
    src_pass = src.verdicts(threshold)[both]
    n = len(src_pass)
    rows = []
    n_src = int(src_pass.sum())
    for (lo, hi), tp, spass_tfail, sfail_tpass in _curve(tgt, both, src_pass):
        point = stats.counted_figures(["kappa", "agreement"], n_src - spass_tfail, spass_tfail, sfail_tpass,
                                      n - n_src - sfail_tpass)
        rows.append({
            "threshold": _representative(lo, hi), "threshold_low": lo, "threshold_high": hi,
            "kappa": point["kappa"], "agreement": point["agreement"],
            "flips": spass_tfail + sfail_tpass, "source_pass_target_fail": spass_tfail,
            "source_fail_target_pass": sfail_tpass,
            "target_pass_rate": tp / n if n else float("nan"),
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
        tgt_pass = tgt.verdicts(frame.loc[best, "threshold"])[both]
        got = stats.rater_figures(["kappa", "agreement"], src_pass, tgt_pass, n_draws=n_resamples, seed=seed,
                                  confidence=confidence)
        for name, (_, low, high) in got.items():
            frame.loc[best, [f"{name}_low", f"{name}_high"]] = low, high
    unscored = {name: {k: v for k, v in table.status_counts(metric, name).items() if k != "scored"}
                for name in (source, target)}
    frame.attrs.update({
        "source": source, "target": target, "metric": metric, "source_threshold": threshold,
        "n_paired": n, "source_pass": int(src_pass.sum()),
        "source_unscored": unscored[source], "target_unscored": unscored[target],
    })
    return frame


def _curve(tgt, both: np.ndarray, src_pass: np.ndarray):
    """Per cut of the target's values (`_cuts`): the cut, how many cases the target passes there,
    and the flips each way against ``src_pass``. Counted from the sorted values (a case passes every
    cut up to its value), or, where the target has repeats, at each cut's threshold."""
    cuts = _cuts(tgt.repeat_values(both))
    n_src = int(src_pass.sum())
    if tgt.repeats is not None and tgt.repeats.collapsed.any():
        for lo, hi in cuts:
            tgt_pass = tgt.verdicts(_representative(lo, hi))[both]
            yield ((lo, hi), int(tgt_pass.sum()), int(np.sum(src_pass & ~tgt_pass)),
                   int(np.sum(~src_pass & tgt_pass)))
        return
    values = tgt.value[both]
    his = np.array([hi for _, hi in cuts], float)
    # cases the target passes at a cut (lo, hi]: those valued hi or more (no value lies inside a cut)
    order = np.sort(values)
    passing = len(values) - np.searchsorted(order, his, side="left")
    src_values = np.sort(values[src_pass])
    both_pass = len(src_values) - np.searchsorted(src_values, his, side="left")
    for cut, tp, bp in zip(cuts, passing.tolist(), both_pass.tolist()):
        yield cut, tp, n_src - bp, tp - bp


def calibration_flips(
    run: Union[Run, str, Path], source: str, target: str, metric: str,
    source_threshold: float, target_threshold: float,
):
    """Cases whose pass/fail differs between the source at ``source_threshold`` and the target at
    ``target_threshold``: ``case_id, question, source_value, target_value, source_passed,
    target_passed, source_reason, target_reason``, sorted by how far the target value is from its
    threshold (the clearest flips first)."""
    import pandas as pd

    return pd.DataFrame(list(flip_rows(run, source, target, metric, source_threshold, target_threshold)),
                        columns=FLIP_COLUMNS)


FLIP_COLUMNS = ["case_id", "question", "source_value", "target_value", "source_passed", "target_passed",
                "source_reason", "target_reason"]


def flip_rows(run: Union[Run, str, Path], source: str, target: str, metric: str, source_threshold: float,
              target_threshold: float) -> Rows:
    """The rows of `calibration_flips`, each made as it is read (`ragbridge.analysis.rows.Rows`: the
    case's question and the reasons read then), so that every flip of a large run can be written out
    without holding them."""
    table = ScoreTable.of(open_run(run))
    metric = table.select_metrics([metric])[0]
    both = _paired(table, metric, source, target)
    gs, gt = table.column(metric, source), table.column(metric, target)
    sp, tp = gs.verdicts(source_threshold), gt.verdicts(target_threshold)
    found = np.flatnonzero(both & (sp != tp))
    distance = np.abs(gt.value[found] - target_threshold)
    found = found[np.argsort(-distance, kind="stable")]
    question = table.cases.question_of()

    def make(start: int, stop: int) -> list[dict[str, Any]]:
        part = found[start:stop]
        a, b = gs.scores(part), gt.scores(part)
        return [{"case_id": table.case_ids[i], "question": question(i),
                 "source_value": float(gs.value[i]), "target_value": float(gt.value[i]),
                 "source_passed": bool(sp[i]), "target_passed": bool(tp[i]),
                 "source_reason": x.reason, "target_reason": y.reason}
                for i, x, y in zip(part.tolist(), a, b)]

    return Rows(len(found), make)
