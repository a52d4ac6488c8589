"""Canonical cases to DeepEval test cases, and DeepEval results back to scores.

Everything that touches ``deepeval`` imports it inside the function, so importing this module is cheap
and registering the backend never loads the library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from ragbridge.backend import error_text
from ragbridge.schema import Case, Score

from .metrics import BACKEND, METRICS

__all__ = ["test_case_kwargs", "to_test_case", "Extracted", "judged_items", "to_score", "error_message"]


def test_case_kwargs(case: Case) -> dict[str, Any]:
    """The ``LLMTestCase`` fields for a canonical case (see the mapping table in the package docstring).

    Chunks without text are left out of ``retrieval_context`` (there is nothing to judge in them), and
    a chunk id repeated in ``contexts`` counts once, at its first rank (ragbridge's ranking convention).
    """
    kw: dict[str, Any] = {"input": case.question, "name": case.id}
    if case.answer is not None:
        kw["actual_output"] = case.answer
    if case.reference is not None:
        kw["expected_output"] = case.reference
    seen: set[str] = set()
    texts = []
    for c in case.contexts:
        if c.id in seen:
            continue
        seen.add(c.id)
        if c.text:
            texts.append(c.text)
    if texts:
        kw["retrieval_context"] = texts
    if case.reference_contexts:
        kw["context"] = list(case.reference_contexts)
    if case.tags:
        kw["tags"] = list(case.tags)
    return kw


def to_test_case(case: Case):
    """A DeepEval ``LLMTestCase`` for a canonical case."""
    from deepeval.test_case import LLMTestCase

    return LLMTestCase(**test_case_kwargs(case))


@dataclass
class Extracted:
    """How many items DeepEval's verdict step judged (None when the metric has no such step)."""

    n: Optional[int]
    what: str


def judged_items(metric: str, m: Any) -> Extracted:
    if metric in ("faithfulness",):
        return Extracted(_count(getattr(m, "verdicts", None)), "claims")
    if metric == "answer_relevance":
        return Extracted(_count(getattr(m, "verdicts", None)), "statements")
    if metric == "context_precision":
        return Extracted(_count(getattr(m, "verdicts", None)), "retrieval nodes")
    if metric == "context_recall":
        return Extracted(_count(getattr(m, "verdicts", None)), "reference sentences")
    if metric == "context_relevance":
        lists = getattr(m, "verdicts_list", None)
        if lists is None:
            return Extracted(None, "context statements")
        return Extracted(sum(_count(getattr(v, "verdicts", None)) or 0 for v in lists), "context statements")
    return Extracted(None, "")


def _count(verdicts: Any) -> Optional[int]:
    if verdicts is None:
        return None
    return sum(1 for v in verdicts if v is not None)


def to_score(metric: str, case_id: str, m: Any, seconds: float) -> Score:
    """The Score for a metric instance after a successful ``a_measure``."""
    native = METRICS[metric][1]
    raw = m.score
    base = dict(case_id=case_id, metric=metric, backend=BACKEND, native_metric=native, seconds=seconds)
    reason = m.reason if isinstance(getattr(m, "reason", None), str) and m.reason.strip() else None
    passed = bool(m.success) if getattr(m, "success", None) is not None else None
    if raw is None or (isinstance(raw, float) and math.isnan(raw)):
        return Score(**base, value=None, native_value=None, passed=passed,
                     reason=reason or "DeepEval returned no score")
    raw = float(raw)
    extracted = judged_items(metric, m)
    if extracted.n == 0:
        # DeepEval scores an empty extraction by convention (1 for faithfulness and answer relevancy,
        # 0 for the contextual metrics); there was nothing to judge, so the value is undefined.
        note = (f"undefined: DeepEval judged no {extracted.what} (it scores this {raw:g} by convention)")
        return Score(**base, value=None, native_value=raw, passed=passed,
                     reason=note + (f"; DeepEval's reason: {reason}" if reason else ""))
    return Score(**base, value=min(1.0, max(0.0, raw)), native_value=raw, passed=passed, reason=reason)


def error_message(exc: BaseException) -> str:
    """`ragbridge.backend.error_text` of the real cause (tenacity's RetryError unwrapped)."""
    try:
        import tenacity

        while isinstance(exc, tenacity.RetryError) and exc.last_attempt is not None:
            inner = exc.last_attempt.exception()
            if inner is None:
                break
            exc = inner
    except ImportError:  # pragma: no cover - tenacity comes with deepeval
        pass
    return error_text(exc)
