"""`fill_schema`: a value that validates against a JSON schema, filled from a `Ctx` by the field
names (a ``verdict`` gets the toy judge's verdict, a ``reason`` its reason, a ``score`` the fraction on
the field's scale, a list of objects one entry per judged item ...), and `reply_json`, the reply that
carries it."""

from __future__ import annotations

import json
import re
from typing import Any, Optional

from .judged import Ctx, scaled
from .json_schema import resolve, types_of
from .prompt_text import find_range
from .request import JudgeReply, JudgeRequest
from .toy_judge import best_sentence, content_words, is_noncommittal, make_question, short

__all__ = ["fill_schema", "reply_json"]

_VERDICT_NAMES = re.compile(
    r"^(verdict|attributed|supported|faithful|entailed|entailment|relevant|useful|is_relevant|"
    r"is_supported|grounded|correct|present|label|answerable|answerability|covered|agree|agrees)$"
)
_DECLINE_NAMES = re.compile(r"(noncommittal|non_committal|abstention|abstain|evasive|declined|refusal|idk)")
_SCORE_NAMES = re.compile(r"(score|rating|grade|rank|confidence|relevance|probability|value)")
_ITEM_TEXT_NAMES = re.compile(r"^(statement|claim|sentence|fact|criteria|node|text|truth|proposition|point)$")
_REASON_NAMES = re.compile(
    r"(reason|reasoning|explanation|rationale|justification|feedback|analysis|thought)")
_EVIDENCE_NAMES = re.compile(r"(evidence|supporting|quote|citation)")


def fill_schema(schema: dict, ctx: Ctx) -> Any:
    """A value that validates against ``schema``, filled from ``ctx`` by field-name heuristics."""
    root = schema if isinstance(schema, dict) else {}
    return _fill(root, None, ctx, root, 0)


def _fill(schema: Any, name: Optional[str], ctx: Ctx, root: dict, depth: int) -> Any:
    schema = resolve(schema, root)
    lname = (name or "").lower()
    if depth > 12:
        return None
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            options = [resolve(o, root) for o in schema[key]]
            non_null = [o for o in options if types_of(o) != ["null"]]
            return _fill(non_null[0] if non_null else options[0], name, ctx, root, depth + 1)
    types = types_of(schema)
    t = types[0]
    if "enum" in schema and schema["enum"]:
        return _pick_enum(schema["enum"], lname, ctx)
    if t == "object":
        props = schema.get("properties") or {}
        return {k: _fill(v, k, ctx, root, depth + 1) for k, v in props.items()}
    if t == "array":
        return _fill_array(schema, lname, ctx, root, depth)
    if t in ("integer", "number"):
        return _fill_number(schema, lname, ctx, t == "integer")
    if t == "boolean":
        if _DECLINE_NAMES.search(lname):
            return is_noncommittal(ctx.subject)
        return bool(ctx.verdict(ctx.item))
    if t == "null":
        return None
    return _fill_string(schema, lname, ctx)


def _pick_enum(values: list, lname: str, ctx: Ctx) -> Any:
    low = [str(v).lower() for v in values]
    if _VERDICT_NAMES.search(lname) or "verdict" in lname or set(low) & {"yes", "no"}:
        ok = ctx.verdict(ctx.item)
        for want in (["yes", "true", "1", "supported", "met", "relevant"] if ok else
                     ["no", "false", "0", "not_supported", "not_met", "irrelevant", "borderline", "idk"]):
            if want in low:
                return values[low.index(want)]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        lo, hi = min(values), max(values)
        target = scaled(ctx.fraction(), lo, hi, True)
        return min(values, key=lambda v: abs(v - target))
    return values[0]


def _fill_number(schema: dict, lname: str, ctx: Ctx, integer: bool) -> Any:
    lo = schema.get("minimum", schema.get("exclusiveMinimum"))
    hi = schema.get("maximum", schema.get("exclusiveMaximum"))
    if _DECLINE_NAMES.search(lname):
        v = 1 if is_noncommittal(ctx.subject or ctx.item or "") else 0
    elif _VERDICT_NAMES.search(lname) or "verdict" in lname:
        v = 1 if ctx.verdict(ctx.item) else 0
    elif _SCORE_NAMES.search(lname) or lname == "":
        rng = None
        if lo is not None and hi is not None:
            rng = (float(lo), float(hi))
        rng = rng or find_range(schema.get("description", "")) or ctx.score_range
        if rng is None:
            rng = (0.0, 3.0) if integer else (0.0, 1.0)
        frac = ctx.fraction()
        if ctx.item is not None:
            frac = 1.0 if ctx.verdict(ctx.item) else 0.0
        v = scaled(frac, rng[0], rng[1], integer)
    else:
        v = lo if lo is not None else 0
    if lo is not None and v < lo:
        v = lo
    if hi is not None and v > hi:
        v = hi
    return int(v) if integer else float(v)


def _fill_array(schema: dict, lname: str, ctx: Ctx, root: dict, depth: int) -> list:
    item_schema = resolve(schema.get("items") or {}, root)
    item_type = types_of(item_schema)[0] if item_schema else "string"
    if item_schema.get("anyOf") or item_schema.get("oneOf"):
        opts = [resolve(o, root) for o in (item_schema.get("anyOf") or item_schema.get("oneOf"))]
        non_null = [o for o in opts if types_of(o) != ["null"]]
        item_type = types_of(non_null[0])[0] if non_null else "string"
    out: list
    if item_type == "object" or "properties" in item_schema:
        out = []
        for it in ctx.get_items():
            sub = Ctx(**{**ctx.__dict__, "item": it})
            out.append(_fill(item_schema, None, sub, root, depth + 1))
    elif item_type == "string":
        if lname in ("steps", "evaluation_steps"):
            out = _steps(ctx)
        elif "question" in lname:
            out = [make_question(s) for s in ctx.get_items()] or [make_question(ctx.subject)]
        elif "entit" in lname:
            out = _entities(ctx.subject or ctx.context)
        else:  # statements / claims / truths / sentences / anything else: the items themselves
            out = list(ctx.get_items())
    elif item_type in ("integer", "number"):
        out = [_fill_number(item_schema, "verdict", Ctx(**{**ctx.__dict__, "item": it}),
                            item_type == "integer") for it in ctx.get_items()]
    elif item_type == "boolean":
        out = [ctx.verdict(it) for it in ctx.get_items()]
    else:
        out = []
    mn, mx = schema.get("minItems"), schema.get("maxItems")
    if isinstance(mx, int) and len(out) > mx:
        out = out[:mx]
    if isinstance(mn, int) and len(out) < mn:
        filler = _fill(item_schema, None, ctx, root, depth + 1)
        out = out + [filler] * (mn - len(out))
    return out


def _fill_string(schema: dict, lname: str, ctx: Ctx) -> str:
    item = ctx.item
    if _EVIDENCE_NAMES.search(lname):
        text = item if item is not None else ctx.subject
        if ctx.context:
            best = best_sentence(ctx.context, text or ctx.query)
            return best or "NOTHING FOUND"
        return ctx.reason(item)
    if _REASON_NAMES.search(lname):
        return ctx.reason_prefix + ctx.reason(item)
    if _ITEM_TEXT_NAMES.search(lname):
        if item is not None:
            return item
        return ctx.subject or ctx.query or "statement"
    if "question" in lname or lname in ("query", "input"):
        return make_question(item if item is not None else ctx.subject)
    if "verdict" in lname:
        return "yes" if ctx.verdict(item) else "no"
    if lname in ("answer", "response", "output"):
        return ctx.subject or item or ""
    if item is not None:
        return item
    return "ragbridge stub"


def _steps(ctx: Ctx) -> list[str]:
    crit = short(ctx.subject or ctx.query or "the criteria", 120)
    return [
        f"Read the criteria: {crit}",
        "Compare the answer with the reference and the context, word by word.",
        "Penalise statements and numbers that are not supported by the reference or the context.",
    ]


def _entities(text: str) -> list[str]:
    ents = re.findall(r"\b[A-Z][a-zA-Z0-9]+(?:\s+[A-Z][a-zA-Z0-9]+)*", text or "")
    return list(dict.fromkeys(ents))[:20] or content_words(text)[:5]


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def reply_json(req: JudgeRequest, schema: dict, ctx: Ctx, responder: str) -> JudgeReply:
    """The reply with `fill_schema`'s value for ``schema`` (as the forced tool's arguments when the
    request forced one); its integer ``score`` field, if any, is the reply's score token."""
    value = fill_schema(schema, ctx)
    score = value.get("score") if isinstance(value, dict) and isinstance(value.get("score"), int) else None
    return JudgeReply(content=_dump(value), tool_name=req.tool_name, score=score, responder=responder)
