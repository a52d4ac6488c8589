"""Pass or fail: the one rule every output of a run answers with, and the run's own pass marks.

A score passes at a threshold when its value is at or above it (`passes`, on one value or on a
column of them). A judged score taken
``--repeats N`` times passes when at least ``pass_at_least`` of its repeats pass at that threshold
(`repeats_pass`; by default a majority of the N planned, `ragbridge.run.repeats.majority`): the
run's summary, the report (its badges, grid, threshold table and agreement), ``compare``,
``validate``, ``calibrate``, ``diff``, ``gate`` (its share rules and the cases behind a rule), the
noise figures and ``label``'s strata all ask `verdict`, so one case has one verdict everywhere. A
score that is undefined, errored or not run has no verdict (None): it is counted apart, never as a
fail.

Which threshold applies to a (backend, metric) is decided in one place too: where no
``--threshold`` or gates file sets one (`ragbridge.analysis.thresholds.pass_marks`), the run's own
(`pass_mark`): the backend's rule recorded in run.json (``pass_marks``), else the metric's default
(`ragbridge.metrics.default_pass_mark`). ``Run.to_frame``'s ``passed``, the report, ``gate``,
``compare``, ``export-scores``, ``diagnose`` and the rubric's own verdicts all read them here.
"""

from __future__ import annotations

import math
import numbers
import operator
import re
from typing import Any, Callable, Optional, Sequence

from .metrics import default_pass_mark
from .schema import Score

__all__ = ["passes", "pass_mark", "repeats_pass", "verdict", "verdicts_at", "why", "COMPARE", "against",
           "p_text"]

#: the comparisons a threshold may be read with (a gate's ``share(METRIC > 0.7)``); ``>=`` is the pass rule
COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


def passes(value: Any, threshold: float, op: str = ">=") -> Any:
    """Whether ``value`` passes ``threshold`` (``op``: the comparison, ``>=`` unless a gate rule
    says otherwise): a bool; for a NumPy array of values, an array of them (NaN never passes)."""
    got = COMPARE[op](value, threshold)
    return bool(got) if getattr(got, "ndim", 0) == 0 else got


def against(value: float, threshold: float, op: str = ">=", spec: str = ".3f") -> str:
    """``value`` as text beside the cut ``threshold`` it is compared with (``value op threshold``),
    formatted by ``spec`` (``.3f``, ``+.4f``), with more decimals where rounding to those would make
    the comparison read the other way or the value read equal to the cut: a mean of 0.84962 against
    ``>= 0.85`` shows as ``0.8496``, not ``0.850``. Every output that prints a value against a cut
    (gate's figures and details) formats it here."""
    m = re.fullmatch(r"([+]?)\.(\d+)f", spec)
    if m is None or value != value or threshold != threshold:
        return format(value, spec)
    sign, digits = m.group(1), int(m.group(2))
    holds = COMPARE[op](value, threshold)
    for d in range(digits, 18):
        text = f"{value:{sign}.{d}f}"
        shown = float(text)
        if COMPARE[op](shown, threshold) == holds and (shown != threshold or value == threshold):
            return text
    return repr(value)


def p_text(p: Any) -> str:
    """A p-value to three significant digits, ``<0.001`` below that, ``—`` when missing: the one way
    every output (the commands, the reports, gate's figures and details) prints one (``1.00``, not
    ``1``)."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "—"
    return ("1.00" if p >= 1 else f"{p:.3g}") if p >= 0.001 else "<0.001"


def count(n: Any) -> str:
    """A count as every output prints one (1,000,000); anything that is no whole number as its text."""
    return f"{n:,}" if isinstance(n, numbers.Integral) and not isinstance(n, bool) else str(n)


def pass_mark(manifest: Any, backend: str, metric: str) -> tuple[float, str]:
    """The pass mark of ``backend``'s ``metric`` in a run (``manifest``: its `RunManifest`, or None)
    where no ``--threshold`` or gates file sets one, and where it comes from: ``backend``, the
    backend's own rule recorded in run.json's ``pass_marks``; else ``default``, the metric's
    (`ragbridge.metrics.default_pass_mark`, with the run's cut-off ``k`` for a ``1/k`` mark)."""
    recorded = getattr(manifest, "pass_marks", None) or {}
    mark = (recorded.get(backend) or {}).get(metric)
    if mark is not None:
        return float(mark), "backend"
    k = (getattr(manifest, "options", None) or {}).get("k")
    return default_pass_mark(metric, k if isinstance(k, int) else None), "default"


def repeats_pass(passed: Sequence[Optional[bool]], pass_at_least: int) -> Optional[bool]:
    """The verdict of a case from the verdicts of its repeats (None where a repeat has none): it
    passes when at least ``pass_at_least`` passed; None when no repeat has a verdict."""
    judged = [p for p in passed if p is not None]
    if not judged:
        return None
    return sum(judged) >= pass_at_least


def verdict(score: Score, threshold: float, op: str = ">=") -> Optional[bool]:
    """The verdict of ``score`` at ``threshold``: None when it is not scored; for a score collapsed
    from repeats (``score.repeats``), whether at least ``pass_at_least`` of its repeats pass;
    otherwise whether its value passes."""
    if score.status != "scored":
        return None
    rep = score.repeats
    if rep is not None and rep.pass_at_least is not None and any(v is not None for v in rep.values):
        return repeats_pass([None if v is None else passes(v, threshold, op) for v in rep.values],
                            rep.pass_at_least)
    return passes(score.value, threshold, op)


def verdicts_at(scores: Sequence[Score], threshold: float, op: str = ">=") -> list[Optional[bool]]:
    """`verdict` of each score, in order."""
    return [verdict(s, threshold, op) for s in scores]


def why(score: Score, threshold: float) -> str:
    """The verdict of a scored ``score`` in words: ``0.400 < 0.5``, ``0.800 >= 0.5``, or for repeats
    ``0.600: 3 of 5 repeats >= 1, 3 needed``."""
    rep = score.repeats
    if rep is not None and rep.pass_at_least is not None and any(v is not None for v in rep.values):
        k = sum(1 for v in rep.values if v is not None and passes(v, threshold))
        return f"{score.value:.3f}: {k} of {rep.n} repeats >= {threshold:.3g}, {rep.pass_at_least} needed"
    op = ">=" if passes(score.value, threshold) else "<"
    return f"{against(score.value, threshold)} {op} {threshold:.3g}"
