"""The canonical metrics the TruLens backend offers, the TruLens feedback function behind each, and
the backend's options.

The formulas, scales and normalisation are documented in the package docstring
(:mod:`ragbridge_trulens`); the functions that call TruLens on one case are in `translate`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from ragbridge.plugin import JudgedMetric

from . import translate

__all__ = ["TruLensMetric", "METRICS"]


@dataclass(frozen=True, kw_only=True)
class TruLensMetric(JudgedMetric):
    """A canonical metric and the TruLens feedback function behind it (``native_name``)."""

    #: ``(provider, case, settings) -> (value, native_value, reason)``, in `translate`
    scorer: Callable[..., tuple[Optional[float], Any, Optional[str]]]


METRICS: dict[str, TruLensMetric] = {
    m.name: m
    for m in (
        TruLensMetric(name="faithfulness", native_name="groundedness_measure_with_cot_reasons",
                      requires=("answer", "context_text"),
                      description="TruLens groundedness: mean per-sentence support, 0-3 scale / 3",
                      scorer=translate.faithfulness),
        TruLensMetric(name="context_relevance", native_name="context_relevance_with_cot_reasons",
                      requires=("context_text",),
                      description="TruLens context relevance per chunk (0-3 / 3), mean (or max)",
                      scorer=translate.context_relevance),
        TruLensMetric(name="answer_relevance", native_name="relevance_with_cot_reasons", requires=("answer",),
                      description="TruLens answer relevance, 0-3 scale / 3",
                      scorer=translate.answer_relevance),
        TruLensMetric(name="answer_correctness", native_name="GroundTruthAgreement.agreement_measure",
                      requires=("answer", "reference"),
                      description="TruLens ground-truth agreement, 0-10 scale / 10",
                      scorer=translate.answer_correctness),
    )
}
