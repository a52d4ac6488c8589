"""The canonical metrics the Phoenix backend offers, the Phoenix evaluator behind each, how each of
its labels becomes a 0..1 value, and the backend's options.

Every metric is one of Phoenix evals 3.9.4's ``ClassificationEvaluator`` classes (``phoenix.evals.
metrics``). The judge answers one label out of the evaluator's choices, with an explanation; Phoenix
maps the label to its own score with the evaluator's ``label_score_map``, and ragbridge's ``value``
is that score, unchanged: for each metric below it is already in 0..1 with higher better.

=====================  ================================  ================================  ===========
canonical              Phoenix evaluator (Score.name)    label -> value (Phoenix's score)  calls/case
=====================  ================================  ================================  ===========
``faithfulness``       ``FaithfulnessEvaluator``         ``faithful`` -> 1.0               1
                       (``faithfulness``, maximize)      ``unfaithful`` -> 0.0
``context_relevance``  ``RetrievalRelevanceEvaluator``   per chunk: ``relevant`` -> 1.0,   1 per chunk
                       (``retrieval_relevance``,         ``irrelevant`` -> 0.0; value =
                       maximize), once per chunk         mean over the chunks (the
                                                         share judged relevant)
``abstention``         ``RefusalEvaluator``              ``refused`` -> 1.0,               1 (0 when
                       (``refusal``, neutral)            ``answered`` -> 0.0; undefined    answerable)
                                                         on an answerable case
=====================  ================================  ================================  ===========

Why these mappings:

* ``faithfulness``: Phoenix's faithful/unfaithful verdict on the whole answer against the retrieved
  chunks (joined with a blank line). One verdict, so the value is 0 or 1; there are no claims to put
  in ``Score.evidence`` (Phoenix does not split the answer).
* ``context_relevance``: Phoenix's retrieval relevance is holistic ("relevant if any meaningful part
  bears on the request"), so all chunks at once would say nothing about the ranking. Each retrieved
  chunk is judged on its own, in rank order, and the value is the share judged ``relevant``, the
  canonical meaning (share of the retrieved chunks relevant to the question). Each chunk's verdict
  and explanation is in ``Score.evidence.chunks``.
* ``abstention``: the canonical metric is defined on unanswerable cases only (1 when the answer
  declines, else 0), as the native one is. Phoenix's refusal has no direction (it only detects a
  refusal), and on an unanswerable case declining is the right behaviour, so Phoenix's score already
  points the canonical way: ``refused`` is 1.0. On an answerable case the value is undefined
  (``None``, reason "case is answerable") and no judge call is made.

The label maps are pinned here (`PhoenixMetric.labels`) and checked against the installed
evaluator when a run opens, so a Phoenix release that renames a label or changes its score fails
every case loudly instead of shifting every number. A label outside the choices is never mapped to a
default: Phoenix raises (``ValueError`` naming the valid labels) and it is that Score's ``error``.

Not offered, on purpose (the other backends cover them):

* ``answer_correctness`` (from 3.0; before, see Versions): Phoenix 3.x has no reference-based
  correctness. ``CorrectnessEvaluator``
  sees only the question and the answer (general correctness, not agreement with a reference), and
  the reference-based ``QA_PROMPT_TEMPLATE`` went with ``phoenix.evals.legacy`` in 3.0.
* ``answer_relevance``: Phoenix 3.9 has no answer-relevance evaluator.
* ``HallucinationEvaluator`` (hallucinated 1.0 / grounded 0.0, minimize) is conversation-grounded in
  3.x (``input``, ``output``: the whole record the assistant saw), not grounded in retrieved chunks;
  ``FaithfulnessEvaluator`` is Phoenix's RAG check. ``DocumentRelevanceEvaluator`` is deprecated
  since 3.7 in favour of retrieval relevance.
* Phoenix's code evaluators (``exact_match``, ``MatchesRegex``, ``PrecisionRecallFScore`` over class
  labels) compute nothing the canonical ranking metrics or answer checks mean.

Versions (`metrics_at`): the table above is Phoenix evals 3.5 and later (tested: 3.9.4). Before
3.5 (tested: 2.13.0, the last 2.x) Phoenix has no ``RetrievalRelevanceEvaluator``, and
``context_relevance`` is its ``DocumentRelevanceEvaluator`` (``document_relevance``; record
``{"input", "document_text"}``; ``relevant`` -> 1.0, ``unrelated`` -> 0.0), still once per chunk: a
stricter question, whether the chunk *contains an answer* to the question, where 3.5's asks whether
any meaningful part of it bears on the request. ``faithfulness`` and ``abstention`` send the same
prompt and labels at both (their generated configs are identical in 2.13.0 and 3.9.4). Before 3.0
(`BEFORE_3`) ``answer_correctness`` is offered too: ``phoenix.evals.legacy``'s ``QAEvaluator``, whose
template is ``QA_PROMPT_TEMPLATE``, the one ``llm_classify`` is called with for QA correctness
(``{input}``, ``{reference}``, ``{output}``; ``correct`` -> 1.0, ``incorrect`` -> 0.0, the template's
own scores). Phoenix's examples put the retrieved text in ``{reference}``; ragbridge puts the case's
reference answer there, so the metric is agreement with the reference, as ``answer_correctness`` is
in every backend. Its requests are the legacy ``OpenAIModel``'s: the template as one system message,
the label asked for through OpenAI's older ``functions``/``function_call`` (``record_response``),
and Phoenix snaps the answer to a label (``NOT_PARSABLE`` when it cannot, which is that Score's
error here, never a default).

Options: `ragbridge_phoenix.options.PhoenixOptions`. Nothing here imports Phoenix.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from typing import Optional

from ragbridge.plugin import JudgedMetric

__all__ = ["BACKEND", "PhoenixMetric", "METRICS", "BEFORE_3_5", "BEFORE_3", "metrics_at"]

BACKEND = "phoenix"


@dataclass(frozen=True, kw_only=True)
class PhoenixMetric(JudgedMetric):
    """One canonical metric and the Phoenix evaluator behind it (``native_name``: Phoenix's
    ``Score.name``)."""

    evaluator: str  # the class in phoenix.evals.metrics
    #: Phoenix's label -> score, in Phoenix's order, the passing label first
    labels: tuple[tuple[str, float], ...]
    direction: str  # Phoenix's optimization direction
    per_chunk: bool = False  # one call per retrieved chunk; value = share of chunks with the passing label
    chunk_field: str = "context"  # the record's field a per-chunk metric puts the chunk's text in
    legacy: bool = False  # a ``phoenix.evals.legacy`` evaluator (Phoenix evals before 3.0) on an OpenAIModel
    unanswerable_only: bool = False  # defined on cases with answerable: false only

    @property
    def label_scores(self) -> dict[str, float]:
        return dict(self.labels)

    @property
    def passing(self) -> str:
        """The label that means the case passes (value 1.0)."""
        return self.labels[0][0]


METRICS: dict[str, PhoenixMetric] = {
    m.name: m
    for m in (
        PhoenixMetric(name="faithfulness", native_name="faithfulness", requires=("answer", "context_text"),
                      description="FaithfulnessEvaluator: the answer is faithful to the retrieved chunks "
                                  "(1 call)",
                      evaluator="FaithfulnessEvaluator", labels=(("faithful", 1.0), ("unfaithful", 0.0)),
                      direction="maximize"),
        PhoenixMetric(name="context_relevance", native_name="retrieval_relevance", requires=("context_text",),
                      description="RetrievalRelevanceEvaluator per chunk: share of retrieved chunks judged "
                                  "relevant",
                      evaluator="RetrievalRelevanceEvaluator",
                      labels=(("relevant", 1.0), ("irrelevant", 0.0)), direction="maximize", per_chunk=True),
        PhoenixMetric(name="abstention", native_name="refusal", requires=("answer",),
                      description="RefusalEvaluator on unanswerable cases: the answer declines (1 call)",
                      evaluator="RefusalEvaluator", labels=(("refused", 1.0), ("answered", 0.0)),
                      direction="neutral", unanswerable_only=True),
    )
}


#: what differs in a metric before Phoenix evals 3.5 (no RetrievalRelevanceEvaluator there)
BEFORE_3_5: dict[str, dict] = {
    "context_relevance": dict(
        native_name="document_relevance", evaluator="DocumentRelevanceEvaluator", chunk_field="document_text",
        labels=(("relevant", 1.0), ("unrelated", 0.0)),
        description="DocumentRelevanceEvaluator per chunk (Phoenix evals before 3.5): share of retrieved "
                    "chunks judged to contain an answer to the question"),
}


#: the metrics only Phoenix evals before 3.0 has (its ``phoenix.evals.legacy``, removed in 3.0)
BEFORE_3: dict[str, PhoenixMetric] = {
    m.name: m
    for m in (
        PhoenixMetric(name="answer_correctness", native_name="qa_correctness",
                      requires=("answer", "reference"),
                      description="QAEvaluator, llm_classify's QA_PROMPT_TEMPLATE (Phoenix evals before "
                                  "3.0): the answer correctly and fully answers the question, judged "
                                  "against the reference (1 call)",
                      evaluator="QAEvaluator", labels=(("correct", 1.0), ("incorrect", 0.0)),
                      direction="maximize", legacy=True),
    )
}


@functools.lru_cache(maxsize=None)
def metrics_at(version: Optional[str]) -> dict[str, PhoenixMetric]:
    """The metrics at Phoenix evals ``version`` (`METRICS` from 3.5, and when it is not known)."""
    parts = re.match(r"(\d+)\.(\d+)", version or "")
    at = (int(parts[1]), int(parts[2])) if parts is not None else None
    if at is None or at >= (3, 5):
        return METRICS
    out = {name: replace(m, **BEFORE_3_5.get(name, {})) for name, m in METRICS.items()}
    return {**out, **BEFORE_3} if at < (3, 0) else out
