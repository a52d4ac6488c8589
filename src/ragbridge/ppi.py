"""Prediction-powered inference: the golden set's true pass rate (or mean) from the judge's verdicts
on every case and human labels on a few, with an interval that accounts for the judge's errors.

Angelopoulos et al., "Prediction-Powered Inference" (Science, 2023), as ARES (Saad-Falcon et al.,
2024) uses it for RAG evaluation, with the power tuning of PPI++ (Angelopoulos, Duchi and Zrnic,
2023). With human labels ``y`` and the judge's ``f`` on the n labelled cases, and the judge's ``f~``
on the N other cases:

    estimate = lam * mean(f~) + mean(y - lam * f)
    variance = lam^2 * var(f~) / N + var(y - lam * f) / n

The second term (the "rectifier") corrects the judge's bias on the labelled cases; ``lam`` (0..1)
weighs how far the judge is trusted, chosen to minimise the variance (``lam = cov(y, f) / ((1 +
n / N) var(f))``, clipped); ``lam = 1`` is plain PPI and ``lam = 0`` the humans alone (the classical
interval, which PPI++ is never much wider than). The interval is the normal one at ``confidence``.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

__all__ = ["ppi_mean", "classical_mean", "ppi_estimates"]

CONFIDENCE = 0.95


def _z(confidence: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2))


def _mean(x: Sequence[float]) -> float:
    return sum(x) / len(x)


def _var(x: Sequence[float]) -> float:
    if len(x) < 2:
        return 0.0
    m = _mean(x)
    return sum((v - m) ** 2 for v in x) / (len(x) - 1)


def classical_mean(y: Sequence[float], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The humans alone: the mean of ``y`` with its normal interval."""
    n = len(y)
    if n == 0:
        return {"estimate": None, "low": None, "high": None, "se": None, "n": 0}
    est = _mean(y)
    se = math.sqrt(_var(y) / n)
    z = _z(confidence)
    return {"estimate": est, "low": est - z * se, "high": est + z * se, "se": se, "n": n}


def ppi_mean(y: Sequence[float], f: Sequence[float], f_unlabelled: Sequence[float], *,
             confidence: float = CONFIDENCE, lam: Optional[float] = None) -> dict[str, Any]:
    """The prediction-powered estimate of the mean of ``y`` over the whole set (see the module
    docstring). ``y`` and ``f``: the human label and the judge's value on each labelled case, in
    the same order; ``f_unlabelled``: the judge's value on every other case. ``lam``: fixed weight
    (default: power-tuned). Returns ``estimate``, ``low``, ``high``, ``se``, ``lam``, ``n``, ``N``,
    ``judge_only`` (the judge's mean over every case, no correction) and ``classical`` (the humans
    alone, `classical_mean`)."""
    y, f, fu = list(map(float, y)), list(map(float, f)), list(map(float, f_unlabelled))
    if len(y) != len(f):
        raise ValueError("y and f must have one value per labelled case")
    n, big_n = len(y), len(fu)
    everything = f + fu
    out: dict[str, Any] = {"n": n, "N": big_n, "confidence": confidence,
                           "judge_only": _mean(everything) if everything else None,
                           "classical": classical_mean(y, confidence)}
    if n < 2 or big_n < 1:
        out.update(estimate=out["classical"]["estimate"], low=out["classical"]["low"],
                   high=out["classical"]["high"], se=out["classical"]["se"], lam=0.0)
        return out
    if lam is None:
        var_f = _var(fu + f)
        my, mf = _mean(y), _mean(f)
        cov = sum((a - my) * (b - mf) for a, b in zip(y, f)) / (n - 1)
        lam = 0.0 if var_f == 0 else min(1.0, max(0.0, cov / ((1 + n / big_n) * var_f)))
    rect = [a - lam * b for a, b in zip(y, f)]
    est = lam * _mean(fu) + _mean(rect)
    se = math.sqrt(lam ** 2 * _var(fu) / big_n + _var(rect) / n)
    z = _z(confidence)
    out.update(estimate=est, low=est - z * se, high=est + z * se, se=se, lam=lam)
    return out


def ppi_estimates(judge: dict[str, Optional[float]], human_pass: dict[str, bool], threshold: float, *,
                  human_grade: Optional[dict[str, float]] = None,
                  confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The golden set's true pass rate (and, with ``human_grade`` on the judge's 0..1 scale, its true
    mean) from one backend's values on every case and human labels on some.

    ``judge``: case id -> the backend's value (None: not scored, left out); a case passes by the
    judge at ``value >= threshold``. ``human_pass``: case id -> the human verdict. The labelled
    cases are those with both; the others scored by the judge are the unlabelled ones. Returns
    ``{"pass_rate": ppi_mean(...), "mean": ppi_mean(...) or None}``."""
    scored = {c: v for c, v in judge.items() if v is not None}
    labelled = [c for c in scored if c in human_pass]
    rest = [c for c in scored if c not in human_pass]
    passes = {c: 1.0 if scored[c] >= threshold else 0.0 for c in scored}
    out: dict[str, Any] = {
        "pass_rate": ppi_mean([1.0 if human_pass[c] else 0.0 for c in labelled],
                              [passes[c] for c in labelled], [passes[c] for c in rest],
                              confidence=confidence),
        "mean": None,
    }
    if human_grade:
        graded = [c for c in labelled if c in human_grade]
        if graded and all(0.0 <= human_grade[c] <= 1.0 for c in graded):
            out["mean"] = ppi_mean([human_grade[c] for c in graded], [scored[c] for c in graded],
                                   [scored[c] for c in scored if c not in human_grade], confidence=confidence)
    return out
