"""The golden set's true pass rate (and mean) from the judge's verdicts on every case and human labels
on a few: prediction-powered inference, as ARES uses it, following the way the labels were drawn.

**The pass rate** (`pass_rate`). The judge's verdict is known on every case; the labels say how
often people agree with it. Each design stratum (the whole set for labels drawn uniformly; the
judge-pass and judge-fail halves for ``ragbridge label``'s stratified sample) is split by the judge's
verdict into cells; the estimate is the human pass rate of each cell's labelled cases, weighted by
the cell's share of all judged cases. For a pass/fail judge this is prediction-powered inference with
the verdict as the stratifier (stratified PPI, Fisch et al. 2024): inside a cell the judge's verdict
is constant, so its rectified estimate is the cell's human pass rate, and the judge's verdicts on
the unlabelled cases enter through the cells' sizes. A cell without a label is merged with the other
cell of its stratum (no split there); a stratum without a label leaves the rate undefined.

The interval is the normal one with each cell's variance taken at its pass rate with one pass and
one fail added (so a cell whose labels all agree still has an uncertainty) and with the finite
population correction (the labelled cases are part of the set), clipped to 0..1. A seeded simulation
(tests/test_noise.py) checks that it covers the true rate at least at its nominal level, for uniform
and stratified labels, where the plain normal interval covers it as rarely as half the time.

**The mean** of graded labels on the judge's 0..1 scale (`ppi_mean` per design stratum, the strata
weighted by their size).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Mapping, Optional

from ..verdicts import passes
from .stats import CONFIDENCE, normal_quantile, ppi_mean

__all__ = ["ppi_estimates", "pass_rate"]


def pass_rate(judge_pass: Mapping[str, bool], human_pass: Mapping[str, bool],
              strata: Optional[Mapping[str, str]] = None, *, use_judge: bool = True,
              confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The pass rate of every case of ``judge_pass`` (case id -> the judge's verdict), from the human
    verdicts ``human_pass`` on some of them (see the module docstring).

    ``strata``: case id -> the design stratum it was drawn from (None: drawn uniformly from all).
    ``use_judge=False``: the labels alone (the cells are the strata). Returns ``estimate``, ``low``,
    ``high``, ``se``, ``n`` (labels used), ``N`` (judged cases without a label), ``judge_only`` (the
    judge's own pass rate), ``cells`` (per cell: ``stratum``, ``judge``, ``size``, ``labels``,
    ``human_pass``) and ``undefined`` (why there is no estimate, else None)."""
    cases = list(judge_pass)
    total = len(cases)
    labelled = [c for c in cases if c in human_pass]
    out: dict[str, Any] = {"estimate": None, "low": None, "high": None, "se": None, "n": len(labelled),
                           "N": total - len(labelled), "confidence": confidence,
                           "judge_only": (sum(bool(judge_pass[c]) for c in cases) / total) if total else None,
                           "cells": [], "undefined": None}
    if not labelled:
        out["undefined"] = "no labelled case was judged"
        return out
    by_stratum: dict[str, list[str]] = defaultdict(list)
    for c in cases:
        by_stratum["all" if strata is None else str(strata.get(c, "?"))].append(c)
    cells: list[tuple[str, Optional[bool], list[str]]] = []
    for h, members in sorted(by_stratum.items()):
        split = ({v: [c for c in members if bool(judge_pass[c]) is v] for v in (True, False)}
                 if use_judge else {})
        split = {v: m for v, m in split.items() if m}
        if not split or any(not any(c in human_pass for c in m) for m in split.values()):
            split = {None: members}
        cells += [(h, v, m) for v, m in split.items()]
    theta, var = 0.0, 0.0
    for h, v, members in cells:
        ys = [bool(human_pass[c]) for c in members if c in human_pass]
        n, size = len(ys), len(members)
        out["cells"].append({"stratum": h, "judge": v, "size": size, "labels": n, "human_pass": sum(ys)})
        if not n:
            out["undefined"] = f"no label in stratum {h!r} ({size} case(s))"
            return out
        w = size / total
        p = sum(ys) / n
        p_adj = (sum(ys) + 1) / (n + 2)
        theta += w * p
        var += w * w * max(0.0, 1 - n / size) * p_adj * (1 - p_adj) / n
    se = math.sqrt(var)
    z = normal_quantile(0.5 + confidence / 2)
    out.update(estimate=theta, se=se, low=max(0.0, min(theta, theta - z * se)),
               high=min(1.0, max(theta, theta + z * se)))
    return out


def _stratified_mean(y: dict[str, float], f: dict[str, float], strata: Optional[Mapping[str, str]],
                     confidence: float) -> Optional[dict[str, Any]]:
    """`ppi_mean` of the graded labels ``y`` against the judge's values ``f`` (every scored case),
    per design stratum, the strata weighted by their size; None when a stratum has fewer than two
    labels."""
    groups: dict[str, list[str]] = defaultdict(list)
    for c in f:
        groups["all" if strata is None else str(strata.get(c, "?"))].append(c)
    total = len(f)
    est, var = 0.0, 0.0
    parts = []
    for members in groups.values():
        lab = [c for c in members if c in y]
        rest = [c for c in members if c not in y]
        if len(lab) < 2:
            return None
        r = ppi_mean([y[c] for c in lab], [f[c] for c in lab], [f[c] for c in rest], confidence=confidence)
        w = len(members) / total
        est += w * r["estimate"]
        var += (w * r["se"]) ** 2
        parts.append(r)
    if len(parts) == 1:
        return parts[0]
    z = normal_quantile(0.5 + confidence / 2)
    se = math.sqrt(var)
    return {"estimate": est, "low": est - z * se, "high": est + z * se, "se": se}


def ppi_estimates(judge: dict[str, Optional[float]], human_pass: dict[str, bool], threshold: float, *,
                  human_grade: Optional[dict[str, float]] = None, confidence: float = CONFIDENCE,
                  verdicts: Optional[Mapping[str, bool]] = None,
                  strata: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """The golden set's true pass rate (and, with ``human_grade`` on the judge's 0..1 scale, its true
    mean) from one backend's values on every case and human labels on some.

    ``judge``: case id -> the backend's value (None: not scored, left out); a case passes by the
    judge at ``threshold`` (`ragbridge.verdicts.passes`), or by ``verdicts`` when given
    (`ragbridge.verdicts.verdict`).
    ``human_pass``: case id -> the human verdict. ``strata``: case id -> the stratum the labels were
    drawn from (None: uniformly). Returns ``{"pass_rate": pass_rate(...), "mean": ... or None}``;
    ``pass_rate["classical"]`` is the labels alone (`pass_rate` without the judge's cells)."""
    scored = {c: v for c, v in judge.items() if v is not None}
    judged = {c: bool(verdicts[c]) if verdicts is not None else passes(scored[c], threshold) for c in scored}
    rate = pass_rate(judged, human_pass, strata, confidence=confidence)
    labelled = [c for c in scored if c in human_pass]
    alone = pass_rate(judged, human_pass, strata, use_judge=False, confidence=confidence)
    rate["classical"] = {k: alone[k] for k in ("estimate", "low", "high")}
    out: dict[str, Any] = {"pass_rate": rate, "mean": None}
    if human_grade:
        graded = {c: human_grade[c] for c in labelled if c in human_grade}
        if graded and all(0.0 <= g <= 1.0 for g in graded.values()):
            out["mean"] = _stratified_mean(graded, scored, strata, confidence)
    return out
