"""The stub judge's answers to RAGAS 0.4.3's prompts (``ragbridge.testing``), registered by this plugin.

RAGAS' prompts (the collections API through instructor, or the legacy API through LangChain) end
with ``Now perform the same with the following input`` then ``input: {...}`` (the judged texts as a
JSON object under RAGAS' field names) and ``Output:``. The schema comes from the request's
``response_format`` / ``tools``, or from the prompt (instructor's JSON mode puts it in the system
message, RAGAS repeats it in the user message). `RagasResponder` reads the inputs under RAGAS' names
(`INPUTS`) and leaves the verdicts to the stub's shared lexical judge; for context precision ("was
this context useful") the verdict is the context's overlap with the answer or reference.
"""

from __future__ import annotations

from typing import Optional

from ragbridge.testing.responders import (
    INPUT_KEYS,
    JudgeReply,
    JudgeRequest,
    ctx_from_inputs,
    find_range,
    json_after,
    reply_json,
    schema_in_prompt,
    usefulness,
)

__all__ = ["RagasResponder", "INPUTS", "MARKER"]

#: the line before RAGAS' inputs object in every prompt
MARKER = "Now perform the same with the following input"
#: RAGAS' names for the judged texts, besides the generic ones
INPUTS = INPUT_KEYS.extend(query=("user_input",), context=("retrieved_contexts",), subject=("ground_truth",))


class RagasResponder:
    """Answers RAGAS' prompts (None for any other request)."""

    name = "ragas"

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        user = req.user
        if MARKER not in user:
            return None
        tail = user[user.find(MARKER):]
        inputs = json_after(tail, "input:")
        if not isinstance(inputs, dict):
            return None
        schema = req.schema or schema_in_prompt(req.system) or schema_in_prompt(user)
        if schema is None:
            return None
        cut = user.find("Please return the output")
        instruction = user[:cut] if cut >= 0 else ""
        ctx = ctx_from_inputs(inputs, req.prompt, INPUTS)
        ctx.score_range = find_range(instruction)
        if "context was useful" in instruction.lower() and ctx.context:
            # context precision: is this one context useful for the answer / reference?
            target = ctx.subject
            ctx.judge = lambda _t, c=ctx.context, a=target: usefulness(c, a) >= 0.3
        return reply_json(req, schema, ctx, self.name)
