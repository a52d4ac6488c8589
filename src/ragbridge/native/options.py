"""The native backend's options (``--option native.KEY=VALUE``, ``[backends.native]``, or the flags
``ragbridge run`` has always had for them: ``--gain``, ``--no-relevant``, ``--case-sensitive``,
``--decline-phrase``, ``--span-min-overlap``, ``--span-arithmetic``)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import field_validator

from ..limits import not_text
from ..options import BackendOptions, Bool, Number, option
from ..schema import SPAN_MIN_OVERLAP

__all__ = ["NativeOptions"]


class NativeOptions(BackendOptions):
    """How the native backend ranks and checks answers (docs/metrics.md)."""

    gain: Literal["linear", "exponential"] = option(
        "linear", "nDCG gain: linear (the grade) or exponential (2^grade - 1).", flag="--gain")
    no_relevant: Literal["undefined", "zero"] = option(
        "undefined", "Recall, MRR, nDCG and MAP of a case whose labels all have grade 0: undefined (left out "
                     "of means) or zero (trec_eval's mean).", flag="--no-relevant")
    case_sensitive: Bool = option(
        False, "Exact-case matching for must_contain, must_not_contain and abstention.",
        flag="--case-sensitive")
    decline_phrases: Optional[list[str]] = option(
        None, "A phrase that marks a declined answer (repeatable; replaces the defaults).",
        flag="--decline-phrase")
    span_min_overlap: Number = option(
        SPAN_MIN_OVERLAP, "Span rule: a chunk matches a span label when they share at least this share "
                          "(0..1) of the shorter of the two.", flag="--span-min-overlap", ge=0, le=1)
    span_arithmetic: Literal["merged", "chroma"] = option(
        "merged", "Character-level span metrics: merged (overlapping chunks counted once) or chroma "
                  "(Chroma's sums, not merged).", flag="--span-arithmetic")

    @field_validator("decline_phrases")
    @classmethod
    def _phrases(cls, phrases: Optional[list[str]]) -> Optional[list[str]]:
        for phrase in phrases or ():
            if not phrase.strip():
                raise ValueError(f"{phrase!r} is empty: every answer contains it, so every case would count "
                                 "as declined; give the words a declined answer uses")
            shown = not_text(phrase)
            if shown is not None:
                raise ValueError(f"{shown} is not UTF-8 text: give it as UTF-8")
        return phrases or None
