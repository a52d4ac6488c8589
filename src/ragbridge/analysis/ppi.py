"""The golden set's true pass rate (and mean) from the judge's verdicts on every case and human
labels on a few: prediction-powered inference (``ragbridge.analysis.stats.ppi_mean``), as ARES uses it.
"""

from __future__ import annotations

from typing import Any, Optional

from .stats import CONFIDENCE, ppi_mean

__all__ = ["ppi_estimates"]


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
