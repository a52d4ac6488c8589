"""The canonical metrics the DeepEval backend offers, the DeepEval class behind each, its options, and
the fixed correctness rubric for GEval.

The formulas and the normalisation are documented in the package docstring
(:mod:`ragbridge_deepeval`). `make_metric` builds a fresh DeepEval metric object for one case
(DeepEval keeps a measurement's state on the instance); it imports DeepEval, nothing else here does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ragbridge.plugin import JudgedMetric

from .options import DeepEvalOptions

__all__ = ["BACKEND", "DeepEvalMetric", "METRICS", "CORRECTNESS_NAME", "CORRECTNESS_STEPS",
           "CORRECTNESS_RUBRIC", "make_metric", "library_major", "by_version", "METRIC_KWARGS"]

BACKEND = "deepeval"


@dataclass(frozen=True, kw_only=True)
class DeepEvalMetric(JudgedMetric):
    """A canonical metric and the DeepEval metric class behind it (``native_name``: the name DeepEval
    reports for it)."""

    cls: str  # the class in deepeval.metrics


METRICS: dict[str, DeepEvalMetric] = {
    m.name: m
    for m in (
        DeepEvalMetric(name="faithfulness", native_name="Faithfulness", requires=("answer", "context_text"),
                       cls="FaithfulnessMetric",
                       description="FaithfulnessMetric: claims of the answer not contradicted by truths "
                                   "extracted from the retrieved context"),
        DeepEvalMetric(name="answer_relevance", native_name="Answer Relevancy", requires=("answer",),
                       cls="AnswerRelevancyMetric",
                       description="AnswerRelevancyMetric: statements of the answer relevant to the "
                                   "question"),
        DeepEvalMetric(name="context_precision", native_name="Contextual Precision",
                       requires=("context_text", "reference"), cls="ContextualPrecisionMetric",
                       description="ContextualPrecisionMetric: rank-weighted precision of retrieved chunks "
                                   "useful for the reference answer"),
        DeepEvalMetric(name="context_recall", native_name="Contextual Recall",
                       requires=("context_text", "reference"), cls="ContextualRecallMetric",
                       description="ContextualRecallMetric: reference sentences attributable to the "
                                   "retrieved context"),
        DeepEvalMetric(name="context_relevance", native_name="Contextual Relevancy",
                       requires=("context_text",), cls="ContextualRelevancyMetric",
                       description="ContextualRelevancyMetric: statements of the retrieved context relevant "
                                   "to the question"),
        DeepEvalMetric(name="answer_correctness", native_name="Correctness [GEval]",
                       requires=("answer", "reference"), cls="GEval",
                       description="GEval: GEval with ragbridge's fixed correctness rubric, answer against "
                                   "the reference"),
    )
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
    ((9, 10), "Fully agrees with the reference: every fact of the reference is there and nothing "
              "contradicts it."),
]


def library_major() -> int:
    """The installed DeepEval's major version (3 or 4): what the version tables here are keyed by."""
    from importlib.metadata import version

    return int(version("deepeval").split(".")[0])


def by_version(table: dict[int, Any]) -> Any:
    """The row of a table keyed by DeepEval's major version for the installed DeepEval (a version
    outside the table, unsupported, gets its nearest row)."""
    major = library_major()
    return table[min(max(major, min(table)), max(table))]


#: what the metric classes (all but GEval) take besides the common arguments, by DeepEval's major
#: version: 4.x chooses an evaluation mode (``"llm"``: the judge model, as 3.x always does)
METRIC_KWARGS: dict[int, dict[str, Any]] = {3: {}, 4: {"eval_mode": "llm"}}


def make_metric(metric: str, model: Any, opts: Optional[DeepEvalOptions] = None):
    """A fresh DeepEval metric instance for ``metric`` judged by ``model`` with the backend's options
    (never shared between cases: DeepEval keeps a measurement's state on the instance)."""
    import deepeval.metrics as dm

    opts = opts or DeepEvalOptions()
    cls_name = METRICS[metric].cls
    common = dict(
        threshold=opts.threshold_for(metric),
        model=model,
        strict_mode=opts.strict_mode,
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
    kw = dict(common, include_reason=opts.include_reason, **by_version(METRIC_KWARGS))
    if cls_name == "FaithfulnessMetric":
        kw["penalize_ambiguous_claims"] = opts.penalize_ambiguous_claims
        kw["truths_extraction_limit"] = opts.truths_extraction_limit
    return getattr(dm, cls_name)(**kw)
