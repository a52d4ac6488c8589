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

__all__ = ["TruLensMetric", "METRICS", "VALID_SCALES", "TruLensSettings"]


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

#: The judge scales TruLens accepts for the triad functions (``OutputSpace``): 0-3, 0-10, 0-1.
VALID_SCALES = (3, 10, 1)


@dataclass(frozen=True)
class TruLensSettings:
    """Per-run options (``RunOptions.backend_options["trulens"]``), validated."""

    api: str = "auto"  # "auto" (probe once), "responses", "chat"
    context_relevance_agg: str = "mean"  # or "max"
    sentence_split: str = "nltk"  # "nltk" (bundled punkt parameters, no download) or "llm"
    max_score: int = 3  # the judge's scale is 0..max_score: 3, 10 or 1
    temperature: float = 0.0
    concurrency: Optional[int] = None  # cases in flight (`JudgedBackend.cases_at_once` checks it)

    @classmethod
    def from_options(cls, raw: Optional[dict]) -> "TruLensSettings":
        raw = dict(raw or {})
        unknown = set(raw) - {"api", "context_relevance_agg", "sentence_split", "max_score", "temperature",
                              "concurrency", "structured_output"}
        if unknown:
            raise ValueError(f"unknown trulens option(s): {', '.join(sorted(unknown))}")
        raw.pop("structured_output", None)  # the judge gateway's (`ragbridge.plugin.JudgedBackend`)
        s = cls(**raw)
        if s.api not in ("auto", "responses", "chat"):
            raise ValueError(f"trulens option api must be auto, responses or chat, got {s.api!r}")
        if s.context_relevance_agg not in ("mean", "max"):
            raise ValueError("trulens option context_relevance_agg must be mean or max, "
                             f"got {s.context_relevance_agg!r}")
        if s.sentence_split not in ("nltk", "llm"):
            raise ValueError(f"trulens option sentence_split must be nltk or llm, got {s.sentence_split!r}")
        if s.max_score not in VALID_SCALES:
            raise ValueError(f"trulens option max_score must be one of {VALID_SCALES}, got {s.max_score!r}")
        return s
