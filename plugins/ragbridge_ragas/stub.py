"""The stub judge's answers to RAGAS' prompts (``ragbridge.stub``) at every version the backend
supports (0.2.15, 0.3.9, 0.4.3), registered by this plugin.

A request is RAGAS' when the JSON schema it asks for is one of RAGAS' own output models
(`OUTPUT_MODELS`, the ``output_model`` of each prompt of the metrics this backend runs): instructor's
JSON mode writes that schema, titled with the model's name, into the system message (RAGAS repeats
it in the user message); a ``json_schema`` response format or a forced tool carries it in the
request. The judged texts are the last ``input: {...}`` object of the user message, under RAGAS'
field names (`INPUTS`); the verdicts are left to the stub's shared lexical judge, the scale of a
score to the schema's own field description ("Relevance rating (0, 1, or 2)"). For context
precision (``ContextPrecisionOutput``: "was this context useful") the verdict is the context's
overlap with the answer or reference.

RAGAS 0.3.9's context_recall prompt writes ``Input: {...}``. RAGAS 0.2 asks with its
``PydanticPrompt``: one user message holding the schema and ``input: {...}``, some output models of
other names (`OUTPUT_MODELS_0_2`), recognised only in that prompt. RAGAS 0.2's and 0.3's context
relevance use NVIDIA's two templates instead (`nv_relevance`).
"""

from __future__ import annotations

import json
import re
from typing import Optional

from ragbridge.plugin import (
    INPUT_KEYS,
    Ctx,
    JudgeReply,
    JudgeRequest,
    ctx_from_inputs,
    json_after,
    reply_json,
    scaled,
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
#: RAGAS 0.2's output models where they differ from 0.4's (its ``PydanticPrompt`` writes the schema
#: into the one user message: "Please return the output in a JSON format that complies with the
#: following schema as specified in JSON Schema: ...")
OUTPUT_MODELS_0_2 = frozenset({
    "ResponseRelevanceOutput",  # answer_relevancy
    "Verification",  # llm_context_precision_with_reference
    "ContextRecallClassifications",  # context_recall
})
#: RAGAS 0.2's and 0.3's context relevance (NVIDIA's two judge templates) asks for a rating 0, 1 or 2
#: after "### Question: ...  ### Context: ..." (0.3: JSON-quoted texts, a ``RelevanceRating`` reply
#: through instructor; 0.2: the bare digit in plain text)
NV_RELEVANCE = "the Relevance score is"
NV_SECTIONS = re.compile(
    r"### Question: (?P<query>.*?)\n\n### Context: (?P<context>.*?)\n\nDo not try to explain", re.S)
NV_REPLY_MODEL = "RelevanceRating"
_PYDANTIC_PROMPT = "Please return the output in a JSON format that complies with the following schema"
#: RAGAS' names for the judged texts, besides the generic ones
INPUTS = INPUT_KEYS.extend(query=("user_input",), context=("retrieved_contexts",), subject=("ground_truth",))


def output_model(req: JudgeRequest) -> Optional[tuple[str, dict]]:
    """The RAGAS output model a request asks for (its name and JSON schema), or None."""
    schema = req.schema or schema_in_prompt(req.system) or schema_in_prompt(req.user)
    if not isinstance(schema, dict):
        return None
    name = schema.get("title") or req.schema_name
    if name in OUTPUT_MODELS or (name in OUTPUT_MODELS_0_2 and _PYDANTIC_PROMPT in req.user):
        return name, schema
    return None


def nv_relevance(req: JudgeRequest) -> Optional[JudgeReply]:
    """RAGAS 0.2's and 0.3's context relevance prompt, answered with a rating 0, 1 or 2 (the lexical
    judge's fraction on that scale, as 0.4's ``ContextRelevanceOutput`` gets), or None for any other
    request."""
    m = NV_SECTIONS.search(req.user) if NV_RELEVANCE in req.user[-60:] else None
    if m is None:
        return None

    def text(raw: str) -> str:
        try:
            value = json.loads(raw)
        except ValueError:
            return raw
        return value if isinstance(value, str) else raw

    ctx = Ctx(prompt=req.prompt, query=text(m["query"]), context=text(m["context"]), score_range=(0, 2))
    schema = req.schema or schema_in_prompt(req.system)
    if isinstance(schema, dict) and (schema.get("title") or req.schema_name) == NV_REPLY_MODEL:
        return reply_json(req, schema, ctx, "ragas")
    return JudgeReply(str(int(scaled(ctx.fraction(), 0, 2, True))), responder="ragas")


class RagasResponder:
    """Answers RAGAS' prompts (None for any other request)."""

    name = "ragas"

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        model = output_model(req)
        if model is None:
            return nv_relevance(req)
        name, schema = model
        # 0.3.9's context_recall prompt writes "Input: {...}"
        inputs = json_after(req.user, "input:", last=True) or json_after(req.user, "Input:", last=True)
        if not isinstance(inputs, dict):
            return None
        ctx = ctx_from_inputs(inputs, req.prompt, INPUTS)
        if name in ("ContextPrecisionOutput", "Verification") and ctx.context:
            # context precision: is this one context useful for the answer / reference?
            target = ctx.subject
            ctx.judge = lambda _t, c=ctx.context, a=target: usefulness(c, a) >= 0.3
        return reply_json(req, schema, ctx, self.name)
