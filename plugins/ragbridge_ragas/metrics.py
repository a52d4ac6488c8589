"""The canonical metrics the RAGAS backend offers, and the RAGAS class and inputs behind each.

The formulas, ranges and normalisation are documented in the package docstring
(:mod:`ragbridge_ragas`). Each entry (a `ragbridge.plugin.JudgedMetric`) names the canonical
metric, the name RAGAS reports, the case inputs it needs (``MetricSpec.requires``), a class of
``ragas.metrics.collections`` (scored by ``await metric.ascore(**inputs(case))``), the inputs RAGAS is
given, the embedding model it asks for unless the judge names one (`EMBEDDING_MODEL`), and what an
undefined (NaN) result means.

`REPLY_VALUES` and `check_reply`: RAGAS types the judge's verdicts in its reply models as plain
``int`` and takes any integer (``noncommittal`` 7 zeroes answer_relevance, ``verdict`` 2 or -1
counts as faithful, as ``sum(verdicts)``); the values its own field descriptions allow are checked
here, on every reply, and any other is an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ragbridge.plugin import Case, JudgedMetric

from .translate import retrieved_texts

__all__ = ["RagasMetric", "METRICS", "REPLY_VALUES", "REPLY_VALUES_0_2", "OutOfRangeReply", "check_reply",
           "EMBEDDING_MODEL"]

#: the embedding model RAGAS asks for when none is named (``ragas.embeddings.OpenAIEmbeddings``'
#: ``DEFAULT_MODEL``): what a metric that embeds uses unless the judge sets ``embedding_model``
EMBEDDING_MODEL = "text-embedding-3-small"


@dataclass(frozen=True, kw_only=True)
class RagasMetric(JudgedMetric):
    cls: str  # class name in ragas.metrics.collections
    inputs: Callable[[Case], dict[str, Any]]
    kwargs: tuple[tuple[str, Any], ...] = ()
    undefined: str = "RAGAS returned NaN"


def _question_answer_contexts(c: Case) -> dict[str, Any]:
    return {"user_input": c.question, "response": c.answer, "retrieved_contexts": retrieved_texts(c)}


def _question_reference_contexts(c: Case) -> dict[str, Any]:
    return {"user_input": c.question, "reference": c.reference, "retrieved_contexts": retrieved_texts(c)}


METRICS: dict[str, RagasMetric] = {
    m.name: m
    for m in (
        RagasMetric(
            name="faithfulness", native_name="faithfulness", requires=("answer", "context_text"),
            description="share of the answer's statements supported by the retrieved contexts",
            cls="Faithfulness", inputs=_question_answer_contexts,
            undefined="RAGAS found no statements in the answer (NaN)",
        ),
        RagasMetric(
            name="answer_relevance", native_name="answer_relevancy", requires=("answer",),
            description="mean cosine of questions generated from the answer to the question; "
                        "0 if noncommittal",
            cls="AnswerRelevancy", inputs=lambda c: {"user_input": c.question, "response": c.answer},
            embedding_model=EMBEDDING_MODEL,
        ),
        RagasMetric(
            name="context_precision", native_name="context_precision_with_reference",
            requires=("reference", "context_text"),
            description="average precision of the contexts judged useful for the reference answer",
            cls="ContextPrecisionWithReference", inputs=_question_reference_contexts,
        ),
        RagasMetric(
            name="context_recall", native_name="context_recall", requires=("reference", "context_text"),
            description="share of the reference's statements attributable to the retrieved contexts",
            cls="ContextRecall", inputs=_question_reference_contexts,
            undefined="RAGAS found no statements in the reference (NaN)",
        ),
        RagasMetric(
            name="context_relevance", native_name="context_relevance", requires=("context_text",),
            description="mean of two judges' 0/1/2 relevance ratings of the contexts, / 2",
            cls="ContextRelevance",
            inputs=lambda c: {"user_input": c.question, "retrieved_contexts": retrieved_texts(c)},
            undefined="RAGAS' two relevance judges gave no valid rating (NaN)",
        ),
        RagasMetric(
            name="answer_correctness", native_name="factual_correctness(mode=f1)",
            requires=("answer", "reference"),
            description="F1 of the answer's claims supported by the reference and vice versa",
            cls="FactualCorrectness", inputs=lambda c: {"response": c.answer, "reference": c.reference},
            kwargs=(("mode", "f1"),),
        ),
    )
}


#: the integers each verdict field of RAGAS' reply models may hold, by model and field, as the field's
#: own description in RAGAS states them ("the verdict(0/1) of the faithfulness", "Relevance rating (0,
#: 1, or 2)"); the models are those the metrics above ask the judge for
REPLY_VALUES: dict[tuple[str, str], tuple[int, ...]] = {
    ("StatementFaithfulnessAnswer", "verdict"): (0, 1),  # faithfulness, answer_correctness
    ("AnswerRelevanceOutput", "noncommittal"): (0, 1),  # answer_relevance
    ("ContextPrecisionOutput", "verdict"): (0, 1),  # context_precision
    ("ContextRecallClassification", "attributed"): (0, 1),  # context_recall
    ("ContextRelevanceOutput", "rating"): (0, 1, 2),  # context_relevance
}
#: the same for RAGAS 0.2.15's reply models of other names (`ragas02`), as its prompts state them
REPLY_VALUES_0_2: dict[tuple[str, str], tuple[int, ...]] = {
    ("ResponseRelevanceOutput", "noncommittal"): (0, 1),  # "Give noncommittal as 1 ... and 0 ..."
    ("Verification", "verdict"): (0, 1),  # "Binary (0/1) verdict of verification"
}


class OutOfRangeReply(ValueError):
    """A judge reply RAGAS would take, with a verdict outside what its reply model allows."""


def check_reply(reply: Any) -> None:
    """Raise `OutOfRangeReply` when a verdict in ``reply`` (a RAGAS reply model, as the judge filled
    it) is not one of `REPLY_VALUES`."""
    from pydantic import BaseModel

    stack = [reply]
    while stack:
        item = stack.pop()
        if isinstance(item, BaseModel):
            model = type(item).__name__
            for name, value in item:
                allowed = REPLY_VALUES.get((model, name)) or REPLY_VALUES_0_2.get((model, name))
                if allowed is not None and not (type(value) is int and value in allowed):
                    raise OutOfRangeReply(
                        f"the judge replied {name} = {value!r}, where RAGAS' {model} allows "
                        f"{' or '.join(map(str, allowed))}; an out-of-range verdict is not scored")
                stack.append(value)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
