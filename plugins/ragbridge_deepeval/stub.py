"""The stub judge's answers to DeepEval 4.3.1's prompts (``ragbridge.testing``), registered by this
plugin.

DeepEval's metric templates put each judged text under a label line (``Actual Output:``, ``Retrieval
Context:`` ..., `LABELS`) and end with ``JSON:``; with a judge model DeepEval knows, the request
carries a strict ``json_schema``, otherwise the expected keys are read from the prompt's own wording
and example. `DeepEvalResponder` works out which text is judged against which (truths, claims,
verdicts per node or statement, GEval's score) and leaves the verdicts to the stub's lexical judge.

`SectionStartResponder` comes first: the section parser ends a section at instruction-like lines
(``Return ...``, ``Respond ...``, ``Produce ...``, ``Example...``, ``IMPORTANT...``), so a judged text
that itself *starts* with such a word ("Return labels are valid for 30 days ...") would be read as an
empty section and judged as nothing. It marks such a first line with an invisible zero-width space,
lets `DeepEvalResponder` answer, and removes the mark from the answer again: the verdicts are the
same lexical ones, over the whole text.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

from ragbridge.testing.responders import (
    SECTION_LABELS,
    Ctx,
    JudgeReply,
    JudgeRequest,
    ctx_from_sections,
    example_json,
    find_range,
    is_relevant,
    is_supported,
    labelled_sections,
    parse_list,
    relevance,
    reply_json,
    schema_from_example,
    split_sentences,
    usefulness,
)

__all__ = ["DeepEvalResponder", "SectionStartResponder", "LABELS", "responders", "schema_from_prompt"]

#: DeepEval's section labels, besides the generic ones
LABELS = SECTION_LABELS.extend(
    context=("retrieval context", "retrieval contexts", "retrieved context", "retrieved contexts"),
    subject=("actual output", "ai output", "expected output"),
    other=("evaluation criteria", "evaluation steps", "test case", "faithfulness score",
           "answer relevancy score", "contextual precision score", "contextual recall score",
           "contextual relevancy score", "hallucination score", "contradictions", "supportive reasons",
           "unsupportive reasons", "additional context", "irrelevant statements"),
)


def responders() -> list:
    """This plugin's responders, in the order they are tried."""
    return [SectionStartResponder(), DeepEvalResponder()]


class DeepEvalResponder:
    """DeepEval's metric templates (structured ``json_schema`` or plain text + JSON extraction)."""

    name = "deepeval"

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        prompt = req.user or req.prompt
        stripped = prompt.rstrip()
        asks_json = any(p in prompt for p in ("return in", "Only return valid JSON", "JSON format"))
        if not stripped.endswith("JSON:") or not asks_json:
            return None
        sec = labelled_sections(prompt, LABELS)
        ctx = ctx_from_sections(sec, prompt, LABELS)
        schema = req.schema or schema_from_prompt(prompt)
        if schema is None:
            return None
        low = prompt.lower()
        props = (schema.get("properties") or {}) if isinstance(schema, dict) else {}
        if "truths" in props or '"truths"' in prompt:
            ctx.items = split_sentences(ctx.subject or ctx.context)
        elif "node in the retrieval context was remotely useful" in low:
            nodes = parse_list(_raw_section(prompt, "Retrieval Context"))
            target = sec.get("expected output", "")
            ctx.items = nodes
            ctx.judge = lambda node, t=target: usefulness(node, t) >= 0.3
        elif "each statement found in the context" in low or "statement_or_image" in low or (
                "'statement'" in prompt and "relevant to the provided input" in low):
            ctx.items = split_sentences(ctx.context)
            ctx.judge = lambda s, q=ctx.query: is_relevant(s, q)
        elif "relevant to address the input" in low:
            ctx.judge = lambda s, q=ctx.query: is_relevant(s, q)
        elif "can be attributed to the nodes of retrieval contexts" in low:
            ctx.items = split_sentences(ctx.subject)
        elif "evaluation steps" in low and "score" in props:
            _geval(prompt, ctx)
        elif "generate 3-4 concise evaluation steps" in low:
            ctx.subject = sec.get("evaluation criteria", ctx.subject)
        if set(props) == {"reason"} or (props and list(props) == ["reason"]):
            score = next((v for k, v in sec.items() if k.endswith("score")), None)
            if score is not None:
                ctx.reason_prefix = f"The score is {score.strip()} because "
                ctx.scorer = None
        return reply_json(req, schema, ctx, self.name)


def _raw_section(prompt: str, label: str) -> str:
    m = re.search(rf"^{re.escape(label)}[^\n:]*:\s*\n(.*?)(?:\n\s*\nJSON:|\nJSON:|\Z)", prompt, re.M | re.S)
    return m.group(1).strip() if m else ""


def _geval(prompt: str, ctx: Ctx) -> None:
    """GEval's score: the share of the answer's sentences supported by the reference (or context),
    else the answer's word overlap with the input, on the prompt's scale (0..10 by default)."""
    head = prompt[: prompt.find("Evaluation Steps")] if "Evaluation Steps" in prompt else prompt
    ctx.score_range = find_range(head) or (0, 10)
    sec = labelled_sections(prompt.split("Test Case:", 1)[-1], LABELS)
    actual = sec.get("actual output", "")
    ref = " ".join(v for k, v in sec.items() if k in ("expected output", "context", "retrieval context"))
    if actual and ref:
        items = split_sentences(actual) or [actual]
        ctx.scorer = lambda: sum(1 for s in items if is_supported(s, ref)) / len(items)
        ctx.subject, ctx.context = actual, ref
    elif actual and sec.get("input"):
        ctx.scorer = lambda: relevance(actual, sec["input"])
        ctx.subject, ctx.query = actual, sec["input"]


def schema_from_prompt(prompt: str) -> Optional[dict]:
    """The JSON schema a DeepEval prompt asks for in words, or from its example."""
    low = prompt.lower()
    for key in ("truths", "claims", "statements", "steps"):
        if re.search(rf"[\"']{key}[\"'] key (?:as|mapping to) a list of strings", prompt) or \
                (key == "steps" and '"steps"' in prompt):
            return {"type": "object", "properties": {key: {"type": "array", "items": {"type": "string"}}},
                    "required": [key]}
    if "'verdicts' key" in prompt or '"verdicts"' in prompt:
        item_props: dict = {}
        if "'statement'" in prompt or "`statement`" in prompt:
            item_props["statement"] = {"type": "string"}
        enum = ["yes", "no", "borderline"] if "borderline" in low else ["yes", "no"]
        if "'idk'" in low:
            enum = ["yes", "no", "idk"]
        item_props["verdict"] = {"type": "string", "enum": enum}
        item_props["reason"] = {"type": "string"}
        return {"type": "object", "properties": {"verdicts": {"type": "array", "items": {
            "type": "object", "properties": item_props, "required": list(item_props)}}},
            "required": ["verdicts"]}
    if '"score"' in prompt and '"reason"' in prompt:
        return {"type": "object", "properties": {"reason": {"type": "string"}, "score": {"type": "integer"}},
                "required": ["reason", "score"]}
    if "'reason' key" in prompt or '"reason"' in prompt:
        return {"type": "object", "properties": {"reason": {"type": "string"}}, "required": ["reason"]}
    ex = example_json(prompt)
    return schema_from_example(ex) if ex else None


_MARK = "\u200b"
_LABEL = re.compile(
    r"^(input|actual output|expected output|retrieval context|context|statements|claims|text|"
    r"statement|answer|response|output|ai output)(?:\s*\([^)]*\))?\s*:\s*$", re.I)
_TEXT_LIKE_STOP = re.compile(r"^(Respond |Return |Produce |Example|IMPORTANT)")


def _mark_section_starts(text: str) -> Optional[str]:
    lines = text.split("\n")
    changed = False
    for i in range(1, len(lines)):
        if _LABEL.match(lines[i - 1].strip()) and _TEXT_LIKE_STOP.match(lines[i].strip()):
            lines[i] = _MARK + lines[i]
            changed = True
    return "\n".join(lines) if changed else None


class SectionStartResponder:
    """DeepEval prompts whose judged text starts with an instruction-like word (see the module
    docstring); None for every other request."""

    name = "deepeval"

    def __init__(self) -> None:
        self._inner = DeepEvalResponder()

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        if not (req.user or req.prompt).rstrip().endswith("JSON:"):
            return None
        messages, changed = [], False
        for role, text in req.messages:
            marked = _mark_section_starts(text) if role == "user" else None
            changed = changed or marked is not None
            messages.append((role, marked if marked is not None else text))
        if not changed:
            return None  # nothing misread: DeepEvalResponder answers as it is
        reply = self._inner(dataclasses.replace(req, messages=messages))
        if reply is not None:
            reply.content = reply.content.replace(_MARK, "")
        return reply
