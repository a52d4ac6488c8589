"""Whether a gate rule holds: one function, `decide`, for every kind of rule.

From a rule and what it measured (`ragbridge.analysis.gate.kinds.Measurement`): too few cases (fewer
than ``min_n``, none at all, or fewer runs than a slope needs) gives the rule's ``below_min_n``
verdict; else the rule holds when its figure satisfies the check. With ``significant = true`` a rule
whose figure misses the bound still holds unless the miss is significant: its interval lies wholly
on the wrong side of the bound (mean, share, slope), or its one-sided p-value is below ``alpha``
(drop). A rule that must see repeats (``min_repeats``) and did not fails whatever its figure.

The detail says the same as the verdict: a rule that passes "holds", one that fails "does not hold".
"""

from __future__ import annotations

import math
from typing import Sequence

from ...verdicts import COMPARE, against, p_text
from .kinds import KINDS, Measurement

__all__ = ["decide"]


def _figure(rule, m: Measurement) -> str:
    return against(m.figure, rule.threshold, rule.op, m.digits)


def _significant_miss(rule, m: Measurement) -> tuple[bool, str]:
    """Whether a miss of the bound is significant, and the evidence in words."""
    how = KINDS[rule.kind].significance
    if how == "p":
        if math.isnan(m.p):
            return True, "no p-value"
        sig = m.p < rule.alpha
        return sig, f"p {p_text(m.p)}, {'below' if sig else 'not below'} alpha {rule.alpha:g}"
    if how == "ci":
        lo, hi = m.ci
        if math.isnan(lo) or math.isnan(hi):
            return True, "no interval" + (" with 2 runs" if rule.kind == "slope" else "")
        end = hi if rule.op in (">=", ">") else lo
        sig = not COMPARE[rule.op](end, rule.threshold)
        conf = f"{rule.confidence:.0%} CI [{format(lo, m.digits)}, {format(hi, m.digits)}]"
        return sig, f"{conf} {'misses' if sig else 'reaches'} it"
    return True, ""


def decide(rule, m: Measurement, problems: Sequence[str] = ()) -> tuple[str, str]:
    """``(verdict, detail)`` of ``rule`` on measurement ``m``: verdict ``pass``, ``fail`` or
    ``skip``. ``problems``: requirements the run does not meet (each makes the rule fail)."""
    notes = list(m.notes)
    if m.too_few or m.n == 0 or m.n < rule.min_n:
        why = m.too_few or ("no case to measure" if m.n == 0 else f"n={m.n} is below min_n={rule.min_n}")
        verdict, detail = rule.below_min_n, why
    else:
        claim = f"{m.what} {_figure(rule, m)} {rule.op} {rule.threshold:g}"
        if COMPARE[rule.op](m.figure, rule.threshold):
            verdict, detail = "pass", f"{claim}: holds"
        elif not rule.significant:
            verdict, detail = "fail", f"{claim}: does not hold"
        else:
            sig, evidence = _significant_miss(rule, m)
            if sig:
                verdict = "fail"
                detail = f"{claim}: does not hold, the miss is significant"
                detail += f" ({evidence})" if evidence else ""
            else:
                verdict = "pass"  # the figure misses the bar: the detail must not state the bar as met
                detail = (f"{m.what} {_figure(rule, m)} misses {rule.op} {rule.threshold:g} within its "
                          f"uncertainty: the miss is not significant ({evidence})")
    if problems:
        verdict = "fail"
        notes = [*notes, *problems]
    return verdict, "; ".join([detail, *notes])

