"""Canonical cases to DeepEval test cases and metrics, and DeepEval results back to scores.

Everything that touches ``deepeval`` imports it inside the function, so importing this module is cheap
and registering the backend never loads the library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from ragbridge.schema import Case, Score

BACKEND = "deepeval"

#: canonical metric -> (DeepEval class name, native metric name as DeepEval reports it, case inputs)
METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "faithfulness": ("FaithfulnessMetric", "Faithfulness", ("answer", "context_text")),
    "answer_relevance": ("AnswerRelevancyMetric", "Answer Relevancy", ("answer",)),
    "context_precision": ("ContextualPrecisionMetric", "Contextual Precision", ("context_text", "reference")),
    "context_recall": ("ContextualRecallMetric", "Contextual Recall", ("context_text", "reference")),
    "context_relevance": ("ContextualRelevancyMetric", "Contextual Relevancy", ("context_text",)),
    "answer_correctness": ("GEval", "Correctness [GEval]", ("answer", "reference")),
}

# The fixed correctness rubric for GEval. Fixed evaluation steps mean DeepEval skips its
# "generate evaluation steps" call, so every run and every case is judged by the same words.
CORRECTNESS_NAME = "Correctness"
CORRECTNESS_STEPS = [
    "Compare the facts stated in 'actual output' with the facts in 'expected output', the reference "
    "answer to 'input'.",
    "Heavily penalise any fact in 'actual output' that contradicts 'expected output': a different "
    "number, time limit, price, plan, place or condition.",
    "Penalise facts of 'expected output' that 'actual output' leaves out, less for minor details than "
    "for the main point.",
    "Do not penalise extra detail, wording or style in 'actual output' that does not contradict "
    "'expected output'; a refusal to answer when 'expected output' gives an answer is incorrect.",
]
CORRECTNESS_RUBRIC = [
    ((0, 2), "Contradicts the reference on its main point, or declines although the reference answers."),
    ((3, 5), "Partly correct: the main point is right but a detail contradicts the reference, "
             "or most of the reference is missing."),
    ((6, 8), "Correct on the main point; minor details of the reference are missing or vague."),
    ((9, 10), "Fully agrees with the reference: every fact of the reference is there and nothing contradicts it."),
]

#: metric options read from ``RunOptions.backend_options["deepeval"]`` (with their defaults)
DEFAULT_OPTIONS: dict[str, Any] = {
    "threshold": 0.5,  # DeepEval's pass/fail threshold (per metric: {"faithfulness": 0.7, ...})
    "include_reason": True,  # the extra reason call; False saves one judge call per case and metric
    "strict_mode": False,
    "penalize_ambiguous_claims": False,  # faithfulness: count "borderline" claims as failing
    "truths_extraction_limit": None,  # faithfulness
    "concurrency": None,  # cases in flight at once (default: the judge's max_concurrency)
}


def options_for(backend_options: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    opts = dict(DEFAULT_OPTIONS)
    opts.update((backend_options or {}).get(BACKEND, {}) or {})
    unknown = sorted(set(opts) - set(DEFAULT_OPTIONS))
    if unknown:
        raise ValueError(
            f"unknown deepeval backend option(s): {', '.join(unknown)}; known: {', '.join(DEFAULT_OPTIONS)}"
        )
    return opts


def threshold_for(metric: str, opts: dict[str, Any]) -> float:
    t = opts.get("threshold", 0.5)
    if isinstance(t, dict):
        t = t.get(metric, 0.5)
    return float(t)


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


def make_metric(metric: str, model: Any, opts: Optional[dict[str, Any]] = None):
    """A fresh DeepEval metric instance for ``metric`` judged by ``model`` (never shared between cases:
    DeepEval keeps a measurement's state on the instance)."""
    import deepeval.metrics as dm

    opts = opts or dict(DEFAULT_OPTIONS)
    cls_name = METRICS[metric][0]
    common = dict(
        threshold=threshold_for(metric, opts),
        model=model,
        strict_mode=bool(opts.get("strict_mode")),
        async_mode=True,
        verbose_mode=False,
    )
    if cls_name == "GEval":
        from deepeval.metrics.g_eval.utils import Rubric
        from deepeval.test_case import SingleTurnParams

        return dm.GEval(
            name=CORRECTNESS_NAME,
            evaluation_params=[
                SingleTurnParams.INPUT,
                SingleTurnParams.ACTUAL_OUTPUT,
                SingleTurnParams.EXPECTED_OUTPUT,
            ],
            evaluation_steps=list(CORRECTNESS_STEPS),
            rubric=[Rubric(score_range=r, expected_outcome=o) for r, o in CORRECTNESS_RUBRIC],
            **common,
        )
    kw = dict(common, include_reason=bool(opts.get("include_reason", True)), eval_mode="llm")
    if cls_name == "FaithfulnessMetric":
        kw["penalize_ambiguous_claims"] = bool(opts.get("penalize_ambiguous_claims"))
        kw["truths_extraction_limit"] = opts.get("truths_extraction_limit")
    return getattr(dm, cls_name)(**kw)


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
    """``Type: message`` of the real cause (tenacity's RetryError unwrapped), kept to one paragraph."""
    try:
        import tenacity

        while isinstance(exc, tenacity.RetryError) and exc.last_attempt is not None:
            inner = exc.last_attempt.exception()
            if inner is None:
                break
            exc = inner
    except ImportError:  # pragma: no cover - tenacity comes with deepeval
        pass
    text = " ".join(str(exc).split())
    if len(text) > 600:
        text = text[:597] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
