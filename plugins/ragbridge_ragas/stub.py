"""The stub judge's answers to RAGAS 0.4.3's prompts (``ragbridge.stub``), registered by this plugin.

A request is RAGAS' when the JSON schema it asks for is one of RAGAS' own output models
(`OUTPUT_MODELS`, the ``output_model`` of each prompt of the metrics this backend runs): instructor's
JSON mode writes that schema, titled with the model's name, into the system message (RAGAS repeats
it in the user message); a ``json_schema`` response format or a forced tool carries it in the
request. The judged texts are the last ``input: {...}`` object of the user message, under RAGAS'
field names (`INPUTS`); the verdicts are left to the stub's shared lexical judge, the scale of a
score to the schema's own field description ("Relevance rating (0, 1, or 2)"). For context
precision (``ContextPrecisionOutput``: "was this context useful") the verdict is the context's
overlap with the answer or reference.
"""

from __future__ import annotations

from typing import Optional

from ragbridge.plugin import (
    INPUT_KEYS,
    JudgeReply,
    JudgeRequest,
    ctx_from_inputs,
    json_after,
    reply_json,
    schema_in_prompt,
    usefulness,
)

__all__ = ["RagasResponder", "INPUTS", "OUTPUT_MODELS"]

#: RAGAS 0.4.3's output models of the prompts behind this backend's metrics (ragas.metrics.collections)
OUTPUT_MODELS = frozenset({
    "StatementGeneratorOutput", "NLIStatementOutput",  # faithfulness
    "AnswerRelevanceOutput",  # answer_relevancy
    "ContextPrecisionOutput",  # context_precision_with_reference
    "ContextRecallOutput",  # context_recall
    "ContextRelevanceOutput",  # context_relevance
    "ClaimDecompositionOutput",  # factual_correctness (then NLIStatementOutput)
})
#: RAGAS' names for the judged texts, besides the generic ones
INPUTS = INPUT_KEYS.extend(query=("user_input",), context=("retrieved_contexts",), subject=("ground_truth",))


def output_model(req: JudgeRequest) -> Optional[tuple[str, dict]]:
    """The RAGAS output model a request asks for (its name and JSON schema), or None."""
    schema = req.schema or schema_in_prompt(req.system) or schema_in_prompt(req.user)
    if not isinstance(schema, dict):
        return None
    name = schema.get("title") or req.schema_name
    return (name, schema) if name in OUTPUT_MODELS else None


class RagasResponder:
    """Answers RAGAS' prompts (None for any other request)."""

    name = "ragas"

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        model = output_model(req)
        if model is None:
            return None
        name, schema = model
        inputs = json_after(req.user, "input:", last=True)
        if not isinstance(inputs, dict):
            return None
        ctx = ctx_from_inputs(inputs, req.prompt, INPUTS)
        if name == "ContextPrecisionOutput" and ctx.context:
            # context precision: is this one context useful for the answer / reference?
            target = ctx.subject
            ctx.judge = lambda _t, c=ctx.context, a=target: usefulness(c, a) >= 0.3
        return reply_json(req, schema, ctx, self.name)
