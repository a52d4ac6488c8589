"""The stub judge's answers to DeepEval's prompts, 4.3.1's and 3.9.9's (``ragbridge.stub``), registered
by this plugin.

Which of DeepEval's requests this is (`KINDS`: DeepEval's own output models, by their class names) is
read from what DeepEval puts in the request, never from its instructions' wording:

* with a judge model DeepEval knows, the request carries a strict ``json_schema`` named after the
  model (``Truths``, ``Claims``, ``Statements``, ``*ScoreReason``), or after the list it holds
  (``Verdicts``: the item's model, ``FaithfulnessVerdict``, ``ContextualRecallVerdict`` ..., names the
  kind);
* otherwise the prompt is plain text ending with ``JSON:``, and the kind follows from the template's
  slots: the label lines that introduce each judged text (``Retrieval Context:``, ``Expected Output:``
  ..., `LABELS`) and the field the answer must hold (``truths`` or ``statements`` for a ``Text:``).
  The answer then follows `KINDS`' copy of the model's fields (checked against the installed DeepEval
  by the tests).

3.9.9's prompts have the same slots and output models (its faithfulness and answer-relevancy verdicts
are yes / no / idk, which the lexical judge's yes / no fit); they keep their template's indentation,
which the sections' reader and `_raw_section` allow.

`DeepEvalResponder` works out which text is judged against which for each kind (truths, claims,
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

from ragbridge.plugin import (
    SECTION_LABELS,
    Ctx,
    JudgeReply,
    JudgeRequest,
    ctx_from_sections,
    find_range,
    is_relevant,
    is_supported,
    labelled_sections,
    parse_list,
    relevance,
    reply_json,
    split_sentences,
    usefulness,
)

__all__ = ["DeepEvalResponder", "SectionStartResponder", "LABELS", "KINDS", "responders", "kind_of"]

#: DeepEval's section labels, besides the generic ones
LABELS = SECTION_LABELS.extend(
    context=("retrieval context", "retrieval contexts", "retrieved context", "retrieved contexts"),
    subject=("actual output", "ai output", "expected output"),
    other=("evaluation criteria", "evaluation steps", "test case", "faithfulness score",
           "answer relevancy score", "contextual precision score", "contextual recall score",
           "contextual relevancy score", "hallucination score", "contradictions", "supportive reasons",
           "unsupportive reasons", "additional context", "irrelevant statements"),
)


def _strings(key: str) -> dict:
    return {"type": "object", "properties": {key: {"type": "array", "items": {"type": "string"}}},
            "required": [key]}


def _verdicts(enum: list[str], statement: bool = False) -> dict:
    item = {"statement": {"type": "string"}} if statement else {}
    item.update(verdict={"type": "string", "enum": enum}, reason={"type": "string"})
    return {"type": "object", "properties": {"verdicts": {"type": "array", "items": {
        "type": "object", "properties": item, "required": list(item)}}}, "required": ["verdicts"]}


_REASON = {"type": "object", "properties": {"reason": {"type": "string"}}, "required": ["reason"]}
#: DeepEval 4.3.1's output models behind this backend's metrics (``deepeval.metrics.*.schema``), by
#: class name, with their fields as JSON schemas: what a plain-prompt answer holds
KINDS: dict[str, dict] = {
    "Truths": _strings("truths"),  # faithfulness
    "Claims": _strings("claims"),
    "FaithfulnessVerdict": _verdicts(["yes", "no", "borderline"]),
    "Statements": _strings("statements"),  # answer relevancy
    "AnswerRelevancyVerdict": _verdicts(["yes", "no", "borderline"]),
    "ContextualPrecisionVerdict": _verdicts(["yes", "no"]),
    "ContextualRecallVerdict": _verdicts(["yes", "no"]),
    "ContextualRelevancyVerdict": _verdicts(["yes", "no"], statement=True),
    "ScoreReason": _REASON,  # FaithfulnessScoreReason, AnswerRelevancyScoreReason, ...
    "Steps": _strings("steps"),  # GEval's evaluation steps
    "ReasonScore": {"type": "object", "required": ["reason", "score"],  # GEval's score
                    "properties": {"reason": {"type": "string"}, "score": {"type": "integer"}}},
}


def responders() -> list:
    """This plugin's responders, in the order they are tried."""
    return [SectionStartResponder(), DeepEvalResponder()]


def _schema_kind(name: Optional[str], schema: dict) -> Optional[str]:
    """The kind a ``json_schema`` request names: its model, or the model of the items it lists."""
    if name in KINDS:
        return name
    if name and name.endswith("ScoreReason"):
        return "ScoreReason"
    items = ((schema.get("properties") or {}).get("verdicts") or {}).get("items") or {}
    ref = items.get("$ref", "")
    title = ref.rsplit("/", 1)[-1] if ref else items.get("title")
    return title if title in KINDS else None


def _prompt_kind(prompt: str, sec: dict[str, str]) -> Optional[str]:
    """The kind a plain DeepEval prompt asks for, from its template's slots."""
    if any(label.endswith(" score") for label in sec):
        return "ScoreReason"
    if "evaluation steps" in sec and "test case" in sec:
        return "ReasonScore"
    if "evaluation criteria" in sec:
        return "Steps"
    if "claims" in sec and "retrieval contexts" in sec:
        return "FaithfulnessVerdict"
    if "statements" in sec and "input" in sec:
        return "AnswerRelevancyVerdict"
    if "context" in sec and "input" in sec:
        return "ContextualRelevancyVerdict"
    if "retrieval context" in sec and "expected output" in sec:
        return "ContextualPrecisionVerdict" if "input" in sec else "ContextualRecallVerdict"
    if "ai output" in sec:
        return "Claims"
    if "text" in sec:
        return "Truths" if re.search(r"[\"'`]truths[\"'`]", prompt) else "Statements"
    return None


def kind_of(req: JudgeRequest) -> Optional[tuple[str, dict, dict[str, str]]]:
    """(kind, the schema to answer, the prompt's sections) of a DeepEval request, or None."""
    prompt = req.user or req.prompt
    if not prompt.rstrip().endswith("JSON:"):
        return None
    sec = labelled_sections(prompt, LABELS)
    if req.schema is not None:
        kind = _schema_kind(req.schema_name, req.schema)
        return (kind, req.schema, sec) if kind else None
    kind = _prompt_kind(prompt, sec)
    return (kind, KINDS[kind], sec) if kind else None


class DeepEvalResponder:
    """DeepEval's metric templates (structured ``json_schema`` or plain text + JSON extraction)."""

    name = "deepeval"

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        found = kind_of(req)
        if found is None:
            return None
        kind, schema, sec = found
        prompt = req.user or req.prompt
        ctx = ctx_from_sections(sec, prompt, LABELS)
        if kind == "Truths":
            ctx.items = split_sentences(ctx.subject or ctx.context)
        elif kind == "ContextualPrecisionVerdict":  # is each node useful for the expected output?
            ctx.items = parse_list(_raw_section(prompt, "Retrieval Context"))
            ctx.judge = lambda node, t=sec.get("expected output", ""): usefulness(node, t) >= 0.3
        elif kind == "ContextualRelevancyVerdict":  # is each statement of the context relevant?
            ctx.items = split_sentences(ctx.context)
            ctx.judge = lambda s, q=ctx.query: is_relevant(s, q)
        elif kind == "AnswerRelevancyVerdict":
            ctx.judge = lambda s, q=ctx.query: is_relevant(s, q)
        elif kind == "ContextualRecallVerdict":  # is each sentence of the expected output supported?
            ctx.items = split_sentences(ctx.subject)
        elif kind == "ReasonScore":
            _geval(prompt, ctx)
        elif kind == "Steps":
            ctx.subject = sec.get("evaluation criteria", ctx.subject)
        elif kind == "ScoreReason":
            score = next((v for k, v in sec.items() if k.endswith("score")), None)
            if score is not None:
                ctx.reason_prefix = f"The score is {score.strip()} because "
        return reply_json(req, schema, ctx, self.name)


def _raw_section(prompt: str, label: str) -> str:
    """The text under ``label`` up to ``JSON:``; DeepEval 3.x's prompts keep their template's
    indentation (its ``textwrap.dedent`` finds no common indent), so labels may be indented."""
    m = re.search(rf"^[ \t]*{re.escape(label)}[^\n:]*:\s*\n(.*?)(?:\n\s*JSON:|\Z)", prompt, re.M | re.S)
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
