"""The trulens backend's options (``--option trulens.KEY=VALUE``, ``[backends.trulens]`` in
ragbridge.toml, ``options={"trulens": {...}}``). Nothing here imports TruLens."""

from __future__ import annotations

from typing import Literal

from ragbridge.plugin import JudgedOptions, Number, option

__all__ = ["TruLensOptions", "VALID_SCALES"]

#: The judge scales TruLens accepts for the triad functions (``OutputSpace``): 0-3, 0-10, 0-1.
VALID_SCALES = (3, 10, 1)


class TruLensOptions(JudgedOptions):
    """How TruLens's provider asks the judge (``concurrency``: cases in flight, every judged backend's)."""

    api: Literal["auto", "responses", "chat"] = option(
        "auto", "The endpoint family: responses, chat, or auto (probe the judge once).")
    context_relevance_agg: Literal["mean", "max"] = option(
        "mean", "How context relevance combines the chunks' scores.")
    sentence_split: Literal["nltk", "llm"] = option(
        "nltk", "How faithfulness splits the answer: nltk (bundled punkt, no download) or llm (a judge "
                "call).")
    max_score: Literal[VALID_SCALES] = option(  # type: ignore[valid-type]
        3, "The judge's scale, 0..max_score: 3, 10 or 1.")
    temperature: Number = option(0.0, "Sampling temperature of every request.", ge=0, le=2)
