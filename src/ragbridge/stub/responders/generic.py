"""The generic responder: answers any request no registered responder claims."""

from __future__ import annotations

import json
import re

from .fill import reply_json
from .judged import scaled
from .prompt_text import (
    ctx_from_inputs,
    ctx_from_sections,
    example_json,
    find_range,
    json_after,
    labelled_sections,
    schema_from_example,
    schema_in_prompt,
)
from .request import JudgeReply, JudgeRequest
from .toy_judge import content_words

__all__ = ["generic"]


def generic(req: JudgeRequest) -> JudgeReply:
    """Answers anything: schema-valid JSON when there is a schema (sent, or found in the prompt),
    ``Score: N`` when the prompt asks for a score, JSON built from an example when JSON is wanted,
    otherwise a short grounded sentence."""
    prompt = req.prompt
    user = req.user or prompt
    inputs = json_after(user, "input:", last=True)
    if isinstance(inputs, dict) and inputs:
        ctx = ctx_from_inputs(inputs, prompt)
    else:
        ctx = ctx_from_sections(labelled_sections(user), prompt)
    if not (ctx.query or ctx.context or ctx.subject):
        ctx.subject = user
    ctx.score_range = find_range(req.system, user)
    schema = req.schema or schema_in_prompt(prompt)
    if schema is None and (req.json_mode or re.search(r"\bJSON\b", prompt)):
        ex = example_json(prompt)
        if ex:
            schema = schema_from_example(ex)
    if schema is not None:
        return reply_json(req, schema, ctx, "generic")
    if req.json_mode:
        score_rng = ctx.score_range or (0, 1)
        return JudgeReply(json.dumps({"reason": ctx.reason(None),
                                      "score": scaled(ctx.fraction(), score_rng[0], score_rng[1], True)},
                                     ensure_ascii=False),
                          responder="generic")
    if re.search(r"\b(score|rate|rating|grade)\b", prompt, re.I):
        lo, hi = ctx.score_range or (0, 3)
        s = int(scaled(ctx.fraction(), lo, hi, True))
        return JudgeReply(f"Score: {s}", score=s, responder="generic")
    words = content_words(user)[:12]
    return JudgeReply("ragbridge stub reply: " + " ".join(words) + ".", responder="generic")
