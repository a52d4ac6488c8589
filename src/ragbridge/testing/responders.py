"""What the stub judge answers: a small registry of deterministic, lexically grounded responders.

Every responder gets a :class:`JudgeRequest` (the request normalised: the messages as plain text,
the JSON schema the caller asked for, if any, and where it came from) and returns a
:class:`JudgeReply` (message text, or function-call arguments when the caller forced a tool), or
``None`` to let the next responder try. The registry is tried in order; the generic responder is
always last and always answers.

How the verdicts are made (the "toy judge"): texts are reduced to content words (lowercased, stop
words dropped, a light suffix stemmer), and

* a statement is *supported* by a context when at least half of its content words occur in the
  context and every number in it does (so "60 days" is not supported by "30 days");
* a text is *relevant* to a query when it contains at least a quarter of the query's content words
  (or two of them);
* a score on a scale ``lo..hi`` is ``lo + round(fraction * (hi - lo))`` of the matching fraction;
* an answer is *noncommittal* when it contains a decline phrase ("I don't know", "couldn't find",
  "not sure", ...).

So a faithful answer scores higher than an unfaithful one, and the same request always gets the
same answer. None of this measures judgement quality: it exercises plumbing.

Library-specific responders recognise the prompts of RAGAS 0.4.3 (``input: {...}`` JSON after
"Now perform the same with the following input"), DeepEval 4.3.1 (labelled sections ending with
``JSON:``; the expected keys are read from the prompt when no schema is sent) and TruLens 2.16
(``SOURCE:/STATEMENT:``, ``USER QUERY:/SEARCH RESULT:``, ``PROMPT:/RESPONSE:``; answered in JSON when
asked, otherwise as ``Criteria: ... Supporting Evidence: ... Score: N`` text). They only work out
*which text is judged against which*; the schema filling is shared. Plugins add responders for their
own prompts through the ``ragbridge_register_stub_responders`` hook (asked once, at the first answer).
"""

from __future__ import annotations

import ast
import json
import math
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol

__all__ = [
    "JudgeRequest",
    "JudgeReply",
    "Responder",
    "register",
    "responders",
    "respond",
    "fill_schema",
    "validate_schema",
    "SchemaError",
    "content_words",
    "support",
    "relevance",
    "is_noncommittal",
    "split_sentences",
]

# --------------------------------------------------------------------------------------------
# Text helpers
# --------------------------------------------------------------------------------------------

STOPWORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been before
    being below between both but by can can't cannot could couldn't did didn't do does doesn't doing
    don't down during each few for from further had hadn't has hasn't have haven't having he he'd
    he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into
    is isn't it it's its itself let's me more most mustn't my myself no nor not of off on once only
    or other ought our ours ourselves out over own same shan't she she'd she'll she's should
    shouldn't so some such than that that's the their theirs them themselves then there there's
    these they they'd they'll they're they've this those through to too under until up very was
    wasn't we we'd we'll we're we've were weren't what what's when when's where where's which while
    who who's whom why why's will with won't would wouldn't you you'd you'll you're you've your
    yours yourself yourselves also just may might must shall within yes does get got""".split()
)

_WORD_RE = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_NUM_RE = re.compile(r"\d+(?:[.,]\d+)?")

DECLINE_PHRASES = (
    "i don't know",
    "i do not know",
    "don't know",
    "couldn't find",
    "could not find",
    "can't find",
    "cannot find",
    "not sure",
    "unable to answer",
    "unable to find",
    "cannot answer",
    "can't answer",
    "no information",
    "not enough information",
    "i am not able",
    "i'm not able",
    "it depends",
    "i cannot help",
    "i can't help",
    "not mentioned in",
    "does not mention",
    "doesn't mention",
)


def _stem(w: str) -> str:
    if w.isdigit():
        return w
    if w.endswith("'s"):
        w = w[:-2]
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 5 and w.endswith("ing"):
        return w[:-3]
    if len(w) > 4 and w.endswith("ed"):
        return w[:-2]
    if len(w) > 3 and w.endswith("s") and not w.endswith("ss") and not w.endswith("us"):
        return w[:-1]
    return w


def _norm(text: str) -> str:
    return text.lower().replace("\u2019", "'").replace("\u2018", "'")


def content_words(text: str) -> list[str]:
    """Content words of ``text``, lowercased and lightly stemmed, stop words dropped, in order."""
    out = []
    for w in _WORD_RE.findall(_norm(text or "")):
        if w in STOPWORDS or (len(w) < 2 and not w.isdigit()):
            continue
        out.append(_stem(w))
    return out


def numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in _NUM_RE.findall(text or "")}


def support(statement: str, context: str) -> tuple[float, list[str], list[str]]:
    """Fraction of the statement's content words found in the context, the found and missing words."""
    words = list(dict.fromkeys(content_words(statement)))
    if not words:
        return 0.0, [], []
    ctx = set(content_words(context))
    found = [w for w in words if w in ctx]
    missing = [w for w in words if w not in ctx]
    return len(found) / len(words), found, missing


def is_supported(statement: str, context: str) -> bool:
    frac, _, _ = support(statement, context)
    missing_numbers = numbers(statement) - numbers(context)
    return frac >= 0.5 and not missing_numbers


def relevance(text: str, query: str) -> float:
    """Fraction of the query's content words that occur in ``text`` (1.0 when the query has none)."""
    q = list(dict.fromkeys(content_words(query)))
    if not q:
        return 1.0 if text.strip() else 0.0
    t = set(content_words(text))
    return sum(1 for w in q if w in t) / len(q)


def is_relevant(text: str, query: str) -> bool:
    q = set(content_words(query))
    t = set(content_words(text))
    inter = q & t
    return bool(q) and (len(inter) / len(q) >= 0.25 or len(inter) >= 2)


def usefulness(node: str, target: str) -> float:
    """Overlap of a retrieved node with a target text, relative to the shorter of the two."""
    a, b = set(content_words(node)), set(content_words(target))
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


def is_noncommittal(text: str) -> bool:
    t = _norm(text or "")
    return any(p in t for p in DECLINE_PHRASES)


_SENT_RE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n+")


def split_sentences(text: str) -> list[str]:
    out = []
    for part in _SENT_RE.split(text or ""):
        s = part.strip().lstrip("-*\u2022 ").strip()
        if s and any(ch.isalnum() for ch in s):
            out.append(s)
    return out


def _short(text: str, n: int = 80) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 3].rstrip() + "..."


def make_question(text: str) -> str:
    """A question built from the answer's own words (so it is lexically close to what was asked)."""
    first = split_sentences(text)[:1]
    surface = [w for w in re.findall(r"[A-Za-z0-9']+", first[0] if first else text or "")
               if _norm(w) not in STOPWORDS and len(w) > 1]
    if not surface:
        return "What is this about?"
    return "What about " + " ".join(surface[:10]) + "?"


def best_sentence(context: str, statement: str) -> Optional[str]:
    best, best_score = None, 0.0
    for s in split_sentences(context):
        score = usefulness(s, statement)
        if score > best_score:
            best, best_score = s, score
    return best


# --------------------------------------------------------------------------------------------
# The request / reply model and the registry
# --------------------------------------------------------------------------------------------


def _part_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, dict):
                if isinstance(p.get("text"), str):
                    parts.append(p["text"])
                elif isinstance(p.get("content"), (str, list)):
                    parts.append(_part_text(p["content"]))
        return "\n".join(parts)
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return content["text"]
    return str(content)


@dataclass
class JudgeRequest:
    """A chat-completions or Responses-API request, normalised for the responders."""

    endpoint: str  # "chat" or "responses"
    model: str
    messages: list[tuple[str, str]]  # (role, text)
    schema: Optional[dict] = None
    schema_name: Optional[str] = None
    schema_origin: Optional[str] = None  # "json_schema", "tool", "prompt", "example"
    json_mode: bool = False  # the caller wants JSON (json_object / json_schema / a tool)
    tool_name: Optional[str] = None  # answer as a call of this function
    body: dict = field(default_factory=dict)

    @property
    def system(self) -> str:
        return "\n\n".join(t for r, t in self.messages if r in ("system", "developer"))

    @property
    def user(self) -> str:
        """The first user message (re-asks append more; the task is in the first)."""
        for r, t in self.messages:
            if r == "user":
                return t
        return ""

    @property
    def prompt(self) -> str:
        return "\n\n".join(t for _, t in self.messages)

    @classmethod
    def from_chat(cls, body: dict) -> "JudgeRequest":
        msgs = [(str(m.get("role", "user")), _part_text(m.get("content"))) for m in body.get("messages") or []
                if isinstance(m, dict)]
        req = cls(endpoint="chat", model=str(body.get("model", "")), messages=msgs, body=body)
        rf = body.get("response_format") or {}
        tools = body.get("tools") or []
        tool_choice = body.get("tool_choice")
        if isinstance(rf, dict) and rf.get("type") == "json_schema":
            js = rf.get("json_schema") or {}
            req.schema, req.schema_name, req.schema_origin = js.get("schema") or {}, js.get("name"), "json_schema"
            req.json_mode = True
        elif tools and tool_choice != "none":
            chosen = None
            if isinstance(tool_choice, dict):
                chosen = (tool_choice.get("function") or {}).get("name") or tool_choice.get("name")
            fns = [t.get("function", t) for t in tools if isinstance(t, dict)]
            fn = next((f for f in fns if f.get("name") == chosen), fns[0] if fns else None)
            if fn is not None:
                req.schema = fn.get("parameters") or {"type": "object", "properties": {}}
                req.schema_name = fn.get("name")
                req.schema_origin = "tool"
                req.tool_name = fn.get("name")
                req.json_mode = True
        elif isinstance(rf, dict) and rf.get("type") == "json_object":
            req.json_mode = True
            sch = rf.get("schema")  # llama.cpp / vLLM extension
            if isinstance(sch, dict):
                req.schema, req.schema_origin = sch, "json_schema"
        return req

    @classmethod
    def from_responses(cls, body: dict) -> "JudgeRequest":
        msgs: list[tuple[str, str]] = []
        if body.get("instructions"):
            msgs.append(("system", _part_text(body["instructions"])))
        inp = body.get("input")
        if isinstance(inp, str):
            msgs.append(("user", inp))
        elif isinstance(inp, list):
            for m in inp:
                if isinstance(m, dict):
                    msgs.append((str(m.get("role", "user")), _part_text(m.get("content"))))
        req = cls(endpoint="responses", model=str(body.get("model", "")), messages=msgs, body=body)
        fmt = ((body.get("text") or {}).get("format") or {}) if isinstance(body.get("text"), dict) else {}
        if fmt.get("type") == "json_schema":
            req.schema, req.schema_name, req.schema_origin = fmt.get("schema") or {}, fmt.get("name"), "json_schema"
            req.json_mode = True
        elif fmt.get("type") == "json_object":
            req.json_mode = True
        return req


@dataclass
class JudgeReply:
    """What to answer: message text (or function arguments when ``tool_name`` is set)."""

    content: str
    tool_name: Optional[str] = None
    score: Optional[int] = None  # the score token, for logprobs
    responder: str = ""


class Responder(Protocol):
    name: str

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]: ...


_REGISTRY: list[Responder] = []


def register(responder: Responder, *, first: bool = True) -> Responder:
    """Add a responder; ``first=True`` puts it before the built-in ones."""
    if first:
        _REGISTRY.insert(0, responder)
    else:
        _REGISTRY.append(responder)
    return responder


_plugins_lock = threading.Lock()
_plugins_asked = False


def _plugin_responders() -> None:
    """Once per process: plugins add their responders (the ``ragbridge_register_stub_responders`` hook)."""
    global _plugins_asked
    with _plugins_lock:
        if _plugins_asked:
            return
        _plugins_asked = True
        from ragbridge.plugins import load_plugins

        load_plugins().hook.ragbridge_register_stub_responders(register=register)


def responders() -> list[Responder]:
    _plugin_responders()
    return list(_REGISTRY)


def respond(req: JudgeRequest) -> JudgeReply:
    _plugin_responders()
    for r in _REGISTRY:
        reply = r(req)
        if reply is not None:
            reply.responder = reply.responder or getattr(r, "name", type(r).__name__)
            return reply
    return generic(req)  # unreachable: generic is registered last and always answers


# --------------------------------------------------------------------------------------------
# The judging context and the schema filler
# --------------------------------------------------------------------------------------------


@dataclass
class Ctx:
    """Which texts the verdicts compare."""

    query: str = ""  # the question
    context: str = ""  # the evidence (retrieved context, source)
    subject: str = ""  # the text being analysed (answer, statement, expected output)
    items: Optional[list[str]] = None  # per-item texts (explicit list, else sentences of subject)
    judge: Optional[Callable[[str], bool]] = None  # item -> verdict
    scorer: Optional[Callable[[], float]] = None  # -> fraction 0..1 for score fields
    score_range: Optional[tuple[float, float]] = None
    prompt: str = ""
    item: Optional[str] = None
    reason_prefix: str = ""

    def get_items(self) -> list[str]:
        if self.items is not None:
            return self.items
        base = self.subject or self.context or self.query
        return split_sentences(base)

    def verdict(self, item: Optional[str]) -> bool:
        text = item if item is not None else (self.subject or self.query)
        if self.judge is not None:
            return self.judge(text)
        if is_noncommittal(text) and not self.context:
            return False
        if self.context and text:
            return is_supported(text, self.context)
        if self.query and text:
            return is_relevant(text, self.query)
        return bool(text)

    def fraction(self) -> float:
        if self.scorer is not None:
            return max(0.0, min(1.0, self.scorer()))
        if self.subject and self.context:
            items = split_sentences(self.subject) or [self.subject]
            return sum(1 for s in items if is_supported(s, self.context)) / len(items)
        if self.query and (self.subject or self.context):
            return relevance(self.subject or self.context, self.query)
        return 0.5

    def reason(self, item: Optional[str]) -> str:
        text = item if item is not None else (self.subject or self.query)
        ok = self.verdict(item)
        if self.context and text:
            frac, found, missing = support(text, self.context)
            quote = best_sentence(self.context, text)
            base = (f'"{_short(text, 60)}": {len(found)} of {len(found) + len(missing)} content words '
                    f"appear in the context")
            if found:
                base += f" ({', '.join(found[:6])})"
            if ok and quote:
                return base + f'; the context says "{_short(quote, 80)}".'
            miss_num = sorted(numbers(text) - numbers(self.context))
            if miss_num:
                return base + f"; the number(s) {', '.join(miss_num)} do not appear in the context."
            return base + (f"; not found: {', '.join(missing[:6])}." if missing else ".")
        if self.query and text:
            shared = sorted(set(content_words(text)) & set(content_words(self.query)))
            if shared:
                return f'"{_short(text, 60)}" shares {", ".join(shared[:6])} with the question.'
            return f'"{_short(text, 60)}" shares no content words with the question.'
        return "Judged by the ragbridge stub from word overlap."


def _resolve(schema: Any, root: dict) -> dict:
    seen = 0
    while isinstance(schema, dict) and "$ref" in schema and seen < 20:
        ref = schema["$ref"]
        seen += 1
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return {}
        node: Any = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            node = node.get(part, {}) if isinstance(node, dict) else {}
        extra = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {**node, **extra} if extra else node
    if isinstance(schema, dict) and "allOf" in schema and isinstance(schema["allOf"], list):
        merged: dict = {k: v for k, v in schema.items() if k != "allOf"}
        for sub in schema["allOf"]:
            sub = _resolve(sub, root)
            for k, v in sub.items():
                if k == "properties":
                    merged.setdefault("properties", {}).update(v)
                elif k == "required":
                    merged["required"] = list(dict.fromkeys(list(merged.get("required", [])) + list(v)))
                else:
                    merged.setdefault(k, v)
        schema = merged
    return schema if isinstance(schema, dict) else {}


def _types(schema: dict) -> list[str]:
    t = schema.get("type")
    if isinstance(t, list):
        return [x for x in t if x != "null"] or ["null"]
    if isinstance(t, str):
        return [t]
    if "properties" in schema:
        return ["object"]
    if "items" in schema:
        return ["array"]
    if "enum" in schema and schema["enum"]:
        v = schema["enum"][0]
        return ["string" if isinstance(v, str) else "integer" if isinstance(v, int) else "number"]
    return ["string"]


_VERDICT_NAMES = re.compile(
    r"^(verdict|attributed|supported|faithful|entailed|entailment|relevant|useful|is_relevant|"
    r"is_supported|grounded|correct|present|label|answerable|answerability|covered|agree|agrees)$"
)
_DECLINE_NAMES = re.compile(r"(noncommittal|non_committal|abstention|abstain|evasive|declined|refusal|idk)")
_SCORE_NAMES = re.compile(r"(score|rating|grade|rank|confidence|relevance|probability|value)")
_STATEMENT_LIST_NAMES = re.compile(
    r"^(statements|claims|truths|sentences|facts|key_points|keypoints|simpler_statements|propositions|points)$"
)
_ITEM_TEXT_NAMES = re.compile(r"^(statement|claim|sentence|fact|criteria|node|text|truth|proposition|point)$")
_REASON_NAMES = re.compile(r"(reason|reasoning|explanation|rationale|justification|feedback|analysis|thought)")
_EVIDENCE_NAMES = re.compile(r"(evidence|supporting|quote|citation)")

_RANGE_PATTERNS = [
    re.compile(r"\((\d+)\s*,\s*(\d+)\s*,\s*or\s*(\d+)\)"),
    re.compile(r"\b(?:from|between)\s+(\d+)\s+(?:to|and)\s+(\d+)\b", re.I),
    re.compile(r"\bscale\s+of\s+(\d+)\s*(?:to|-)\s*(\d+)\b", re.I),
    re.compile(r"\b(\d+)\s*(?:-|to)\s*(\d+)\s+scale\b", re.I),
    re.compile(r"\b(0)\s+or\s+(1)\b"),
    re.compile(r"\((0)/(1)\)"),
    re.compile(r"\b(0)/(1)\b"),
    re.compile(r"\b(\d+)\s*-\s*(\d+)\b"),
]


def find_range(*texts: str) -> Optional[tuple[float, float]]:
    for text in texts:
        if not text:
            continue
        for pat in _RANGE_PATTERNS:
            m = pat.search(text)
            if m:
                nums = [float(g) for g in m.groups()]
                lo, hi = min(nums), max(nums)
                if hi > lo and hi <= 100:
                    return lo, hi
    return None


def _scaled(frac: float, lo: float, hi: float, integer: bool) -> float:
    v = lo + frac * (hi - lo)
    if integer:
        return int(math.floor(v + 0.5))
    return round(v, 3)


def fill_schema(schema: dict, ctx: Ctx) -> Any:
    """A value that validates against ``schema``, filled from ``ctx`` by field-name heuristics."""
    root = schema if isinstance(schema, dict) else {}
    return _fill(root, None, ctx, root, 0)


def _fill(schema: Any, name: Optional[str], ctx: Ctx, root: dict, depth: int) -> Any:
    schema = _resolve(schema, root)
    lname = (name or "").lower()
    if depth > 12:
        return None
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            options = [_resolve(o, root) for o in schema[key]]
            non_null = [o for o in options if _types(o) != ["null"]]
            return _fill(non_null[0] if non_null else options[0], name, ctx, root, depth + 1)
    types = _types(schema)
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
        for want in (["yes", "true", "1", "supported", "met", "relevant"] if ok
                     else ["no", "false", "0", "not_supported", "not_met", "irrelevant", "borderline", "idk"]):
            if want in low:
                return values[low.index(want)]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        lo, hi = min(values), max(values)
        target = _scaled(ctx.fraction(), lo, hi, True)
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
        v = _scaled(frac, rng[0], rng[1], integer)
    else:
        v = lo if lo is not None else 0
    if lo is not None and v < lo:
        v = lo
    if hi is not None and v > hi:
        v = hi
    return int(v) if integer else float(v)


def _fill_array(schema: dict, lname: str, ctx: Ctx, root: dict, depth: int) -> list:
    item_schema = _resolve(schema.get("items") or {}, root)
    item_type = _types(item_schema)[0] if item_schema else "string"
    if item_schema.get("anyOf") or item_schema.get("oneOf"):
        opts = [_resolve(o, root) for o in (item_schema.get("anyOf") or item_schema.get("oneOf"))]
        non_null = [o for o in opts if _types(o) != ["null"]]
        item_type = _types(non_null[0])[0] if non_null else "string"
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
        out = [_fill_number(item_schema, "verdict", Ctx(**{**ctx.__dict__, "item": it}), item_type == "integer")
               for it in ctx.get_items()]
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
    crit = _short(ctx.subject or ctx.query or "the criteria", 120)
    return [
        f"Read the criteria: {crit}",
        "Compare the actual output with the expected output and the context, word by word.",
        "Penalise statements and numbers that are not supported by the expected output or the context.",
    ]


def _entities(text: str) -> list[str]:
    ents = re.findall(r"\b[A-Z][a-zA-Z0-9]+(?:\s+[A-Z][a-zA-Z0-9]+)*", text or "")
    return list(dict.fromkeys(ents))[:20] or content_words(text)[:5]


# --------------------------------------------------------------------------------------------
# Minimal JSON-schema validation (enough for the schemas judges receive)
# --------------------------------------------------------------------------------------------


class SchemaError(ValueError):
    pass


def validate_schema(instance: Any, schema: dict, _root: Optional[dict] = None, _path: str = "$") -> None:
    """Raise :class:`SchemaError` when ``instance`` does not match ``schema`` (subset of draft 2020-12:
    type, properties, required, additionalProperties, items, enum, const, anyOf/oneOf/allOf, $ref,
    minimum/maximum, minItems/maxItems)."""
    root = _root if _root is not None else schema
    schema = _resolve(schema, root)
    if "const" in schema and instance != schema["const"]:
        raise SchemaError(f"{_path}: expected const {schema['const']!r}")
    if "enum" in schema and instance not in schema["enum"]:
        raise SchemaError(f"{_path}: {instance!r} not in enum {schema['enum']!r}")
    for key in ("anyOf", "oneOf"):
        if key in schema:
            errs = []
            for sub in schema[key]:
                try:
                    validate_schema(instance, sub, root, _path)
                    break
                except SchemaError as e:
                    errs.append(str(e))
            else:
                raise SchemaError(f"{_path}: matches none of {key}: {errs}")
    t = schema.get("type")
    if t is not None:
        allowed = t if isinstance(t, list) else [t]
        if not any(_is_type(instance, a) for a in allowed):
            raise SchemaError(f"{_path}: {instance!r} is not of type {t}")
    if isinstance(instance, dict):
        props = schema.get("properties") or {}
        for req in schema.get("required") or []:
            if req not in instance:
                raise SchemaError(f"{_path}: missing required property {req!r}")
        for k, v in instance.items():
            if k in props:
                validate_schema(v, props[k], root, f"{_path}.{k}")
            elif schema.get("additionalProperties") is False:
                raise SchemaError(f"{_path}: additional property {k!r} not allowed")
    if isinstance(instance, list):
        if "items" in schema and isinstance(schema["items"], dict):
            for i, v in enumerate(instance):
                validate_schema(v, schema["items"], root, f"{_path}[{i}]")
        if isinstance(schema.get("minItems"), int) and len(instance) < schema["minItems"]:
            raise SchemaError(f"{_path}: fewer than {schema['minItems']} items")
        if isinstance(schema.get("maxItems"), int) and len(instance) > schema["maxItems"]:
            raise SchemaError(f"{_path}: more than {schema['maxItems']} items")
    if isinstance(instance, (int, float)) and not isinstance(instance, bool):
        if "minimum" in schema and instance < schema["minimum"]:
            raise SchemaError(f"{_path}: {instance} < minimum {schema['minimum']}")
        if "maximum" in schema and instance > schema["maximum"]:
            raise SchemaError(f"{_path}: {instance} > maximum {schema['maximum']}")
    for sub in schema.get("allOf") or []:
        validate_schema(instance, sub, root, _path)


def _is_type(v: Any, t: str) -> bool:
    if t == "object":
        return isinstance(v, dict)
    if t == "array":
        return isinstance(v, list)
    if t == "string":
        return isinstance(v, str)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool) or (isinstance(v, float) and v.is_integer())
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "null":
        return v is None
    return True


# --------------------------------------------------------------------------------------------
# Prompt parsing helpers
# --------------------------------------------------------------------------------------------

_DECODER = json.JSONDecoder()


def _json_after(text: str, marker: str, *, last: bool = False) -> Optional[Any]:
    idx = text.rfind(marker) if last else text.find(marker)
    if idx < 0:
        return None
    start = text.find("{", idx + len(marker))
    if start < 0:
        return None
    try:
        obj, _ = _DECODER.raw_decode(text[start:])
        return obj
    except ValueError:
        return None


def _schema_in_prompt(text: str) -> Optional[dict]:
    """A JSON schema embedded in the prompt (instructor's system message, RAGAS' prompt)."""
    for marker in ("json_schema:", "as specified in JSON Schema:", "JSON Schema:", "json schema:", "schema:"):
        obj = _json_after(text, marker)
        if isinstance(obj, dict) and ("properties" in obj or obj.get("type") == "object"):
            return obj
    return None


_PLACEHOLDER_RE = re.compile(r"<[^<>\n]{1,80}>")


def _example_json(text: str) -> Optional[dict]:
    """The last JSON object example in ``text`` (placeholders like <reason> made strings, '...' dropped)."""
    found = None
    i = 0
    cleaned = _PLACEHOLDER_RE.sub('"x"', text)
    cleaned = re.sub(r",\s*\.\.\.\s*(?=[\]\}])", "", cleaned)
    cleaned = re.sub(r"\[\s*\.\.\.\s*\]", "[]", cleaned)
    while True:
        start = cleaned.find("{", i)
        if start < 0:
            break
        try:
            obj, end = _DECODER.raw_decode(cleaned[start:])
            if isinstance(obj, dict) and obj:
                found = obj
            i = start + max(end, 1)
        except ValueError:
            i = start + 1
    return found


def schema_from_example(example: dict) -> dict:
    """A pseudo-schema inferred from an example object (every key required)."""

    def infer(v: Any, key: str = "") -> dict:
        if isinstance(v, dict):
            return {"type": "object", "properties": {k: infer(x, k) for k, x in v.items()},
                    "required": list(v)}
        if isinstance(v, list):
            merged: dict = {}
            for x in v:
                if isinstance(x, dict):
                    merged.update(x)
            if merged:
                return {"type": "array", "items": infer(merged, key)}
            return {"type": "array", "items": infer(v[0], key) if v else {"type": "string"}}
        if isinstance(v, bool):
            return {"type": "boolean"}
        if isinstance(v, int):
            return {"type": "integer"}
        if isinstance(v, float):
            return {"type": "number"}
        return {"type": "string"}

    return infer(example)


# Labels that introduce the texts in DeepEval-style prompts ("Label:\n<text>\n\n...JSON:").
_QUERY_LABELS = {"input", "question", "user query", "query", "prompt", "user input", "user_input"}
_CONTEXT_LABELS = {"context", "contexts", "retrieval context", "retrieval contexts", "source", "search result",
                   "premise", "excerpt", "documents", "retrieved context", "retrieved contexts"}
_SUBJECT_LABELS = {"actual output", "ai output", "text", "statement", "hypothesis", "answer", "response",
                   "expected output", "output", "summary", "claim"}
_LIST_LABELS = {"claims", "statements"}
_OTHER_LABELS = {"evaluation criteria", "evaluation steps", "test case", "parameters", "rubric",
                 "faithfulness score", "answer relevancy score", "contextual precision score",
                 "contextual recall score", "contextual relevancy score", "hallucination score", "score",
                 "contradictions", "supportive reasons", "unsupportive reasons", "verdicts",
                 "additional context", "irrelevant statements"}
_ALL_LABELS = _QUERY_LABELS | _CONTEXT_LABELS | _SUBJECT_LABELS | _LIST_LABELS | _OTHER_LABELS
_LABEL_LINE = re.compile(r"^([A-Za-z][A-Za-z _]{0,40}?)(?:\s*\([^)]*\))?\s*:[ \t]*(.*)$")
_STOP_LINE = re.compile(r"^(JSON:|Output:|\*\*|-{3,}|={3,}|Respond |Return |Produce |Example|IMPORTANT|"
                        r"[A-Z][A-Z ]+:\s*$)")


def labelled_sections(text: str) -> dict[str, str]:
    """``{label: text}`` for known labels (last occurrence wins), values run to the next label."""
    sections: dict[str, str] = {}
    cur: Optional[str] = None
    buf: list[str] = []

    def flush() -> None:
        if cur is not None:
            sections[cur] = "\n".join(buf).strip()

    for line in text.splitlines():
        m = _LABEL_LINE.match(line.strip())
        label = m.group(1).strip().lower() if m else None
        if m and label in _ALL_LABELS:
            flush()
            cur, buf = label, [m.group(2)] if m.group(2) else []
            continue
        if cur is not None and _STOP_LINE.match(line.strip()):
            flush()
            cur, buf = None, []
            continue
        if cur is not None:
            buf.append(line)
    flush()
    return sections


def parse_list(text: str) -> list[str]:
    """A Python/JSON list literal of strings, else the lines/sentences of ``text``."""
    t = (text or "").strip()
    if t.startswith("["):
        for loader in (json.loads, ast.literal_eval):
            try:
                v = loader(t)
                if isinstance(v, list):
                    return [x if isinstance(x, str) else json.dumps(x) for x in v]
            except Exception:
                pass
    return split_sentences(t)


def ctx_from_sections(sec: dict[str, str], prompt: str) -> Ctx:
    ctx = Ctx(prompt=prompt)
    for label, value in sec.items():
        if label in _QUERY_LABELS and not ctx.query:
            ctx.query = value
        elif label in _CONTEXT_LABELS:
            v = value
            if v.startswith("["):
                v = "\n\n".join(parse_list(v))
            ctx.context = (ctx.context + "\n\n" + v).strip() if ctx.context else v
        elif label in _LIST_LABELS:
            ctx.items = parse_list(value)
            ctx.subject = " ".join(ctx.items)
        elif label in _SUBJECT_LABELS and not ctx.subject:
            ctx.subject = value
    return ctx


def ctx_from_inputs(inputs: dict, prompt: str) -> Ctx:
    """A :class:`Ctx` from a dict of named inputs (RAGAS' ``input: {...}``)."""
    ctx = Ctx(prompt=prompt)

    def text(v: Any) -> str:
        if isinstance(v, list):
            return "\n\n".join(str(x) for x in v)
        return "" if v is None else str(v)

    for k, v in inputs.items():
        lk = k.lower()
        if lk in ("question", "user_input", "query", "input", "user_query"):
            ctx.query = text(v)
        elif lk in ("context", "contexts", "retrieved_contexts", "retrieval_context", "reference_contexts",
                    "source", "premise", "documents"):
            ctx.context = (ctx.context + "\n\n" + text(v)).strip()
        elif lk in ("statements", "claims", "sentences") and isinstance(v, list):
            ctx.items = [str(x) for x in v]
            ctx.subject = ctx.subject or " ".join(ctx.items)
        elif lk in ("answer", "response", "reference", "text", "statement", "hypothesis", "summary",
                    "ground_truth", "actual_output", "expected_output"):
            if not ctx.subject:
                ctx.subject = text(v)
            elif lk == "reference" and not ctx.context:
                ctx.context = text(v)
    return ctx


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _reply_json(req: JudgeRequest, schema: dict, ctx: Ctx, responder: str) -> JudgeReply:
    value = fill_schema(schema, ctx)
    score = value.get("score") if isinstance(value, dict) and isinstance(value.get("score"), int) else None
    return JudgeReply(content=_dump(value), tool_name=req.tool_name, score=score, responder=responder)


# --------------------------------------------------------------------------------------------
# Library-specific responders
# --------------------------------------------------------------------------------------------


class RagasResponder:
    """RAGAS 0.4.3 (collections API via instructor, or legacy via LangChain).

    The prompt ends with ``Now perform the same with the following input\\ninput: {...}\\nOutput:``;
    the schema comes from ``response_format``/``tools`` or from the prompt (instructor's JSON mode
    puts it into the system message, RAGAS repeats it in the user message)."""

    name = "ragas"
    MARKER = "Now perform the same with the following input"

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        user = req.user
        if self.MARKER not in user:
            return None
        tail = user[user.find(self.MARKER):]
        inputs = _json_after(tail, "input:")
        if not isinstance(inputs, dict):
            return None
        schema = req.schema or _schema_in_prompt(req.system) or _schema_in_prompt(user)
        if schema is None:
            return None
        instruction = user[: user.find("Please return the output")] if "Please return the output" in user else ""
        ctx = ctx_from_inputs(inputs, req.prompt)
        ctx.score_range = find_range(instruction)
        il = instruction.lower()
        if "context was useful" in il and ctx.context:
            # context precision: is this one context useful for the answer / reference?
            target = ctx.subject
            ctx.judge = lambda _t, c=ctx.context, a=target: usefulness(c, a) >= 0.3
        return _reply_json(req, schema, ctx, self.name)


class DeepEvalResponder:
    """DeepEval 4.3.1 metric templates (structured ``json_schema`` or plain text + JSON extraction)."""

    name = "deepeval"

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        prompt = req.user or req.prompt
        stripped = prompt.rstrip()
        asks_json = any(p in prompt for p in ("return in", "Only return valid JSON", "JSON format"))
        if not stripped.endswith("JSON:") or not asks_json:
            return None
        # The instruction part is everything before the first real input section.
        sec = labelled_sections(prompt)
        ctx = ctx_from_sections(sec, prompt)
        schema = req.schema or self._schema_from_prompt(prompt)
        if schema is None:
            return None
        low = prompt.lower()
        props = (schema.get("properties") or {}) if isinstance(schema, dict) else {}
        if "truths" in props or '"truths"' in prompt:
            ctx.items = split_sentences(ctx.subject or ctx.context)
        elif "node in the retrieval context was remotely useful" in low:
            nodes = parse_list(self._raw_section(prompt, "Retrieval Context"))
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
            self._geval(prompt, ctx)
        elif "generate 3-4 concise evaluation steps" in low:
            ctx.subject = sec.get("evaluation criteria", ctx.subject)
        if set(props) == {"reason"} or (props and list(props) == ["reason"]):
            score = next((v for k, v in sec.items() if k.endswith("score")), None)
            if score is not None:
                ctx.reason_prefix = f"The score is {score.strip()} because "
                ctx.scorer = None
        return _reply_json(req, schema, ctx, self.name)

    @staticmethod
    def _raw_section(prompt: str, label: str) -> str:
        m = re.search(rf"^{re.escape(label)}[^\n:]*:\s*\n(.*?)(?:\n\s*\nJSON:|\nJSON:|\Z)", prompt, re.M | re.S)
        return m.group(1).strip() if m else ""

    @staticmethod
    def _geval(prompt: str, ctx: Ctx) -> None:
        ctx.score_range = find_range(prompt[: prompt.find("Evaluation Steps")] if "Evaluation Steps" in prompt
                                     else prompt) or (0, 10)
        case = prompt.split("Test Case:", 1)[-1]
        sec = labelled_sections(case)
        actual = sec.get("actual output", "")
        ref = " ".join(v for k, v in sec.items() if k in ("expected output", "context", "retrieval context"))
        if actual and ref:
            items = split_sentences(actual) or [actual]
            ctx.scorer = lambda: sum(1 for s in items if is_supported(s, ref)) / len(items)
            ctx.subject, ctx.context = actual, ref
        elif actual and sec.get("input"):
            ctx.scorer = lambda: relevance(actual, sec["input"])
            ctx.subject, ctx.query = actual, sec["input"]

    @staticmethod
    def _schema_from_prompt(prompt: str) -> Optional[dict]:
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
            return {"type": "object", "properties": {"reason": {"type": "string"},
                                                     "score": {"type": "integer"}}, "required": ["reason", "score"]}
        if "'reason' key" in prompt or '"reason"' in prompt:
            return {"type": "object", "properties": {"reason": {"type": "string"}}, "required": ["reason"]}
        ex = _example_json(prompt)
        return schema_from_example(ex) if ex else None


class TruLensResponder:
    """TruLens 2.16 feedback prompts (groundedness, context relevance, answer relevance, helpers)."""

    name = "trulens"

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        system, user = req.system, req.user or req.prompt
        both = system + "\n" + user
        m_src = re.search(r"SOURCE:\s*(.*?)\n\s*\nSTATEMENT:\s*(.*?)(?:\n\s*\n(?:Respond|Return|ANSWER|Please)|\Z)",
                          user, re.S)
        m_cr = re.search(r"USER QUERY:\s*(.*?)\nSEARCH RESULT:\s*(.*?)(?:\n\s*\nRELEVANCE:|\nRELEVANCE:|\Z)", user, re.S)
        m_ar = re.search(r"PROMPT:\s*(.*?)\n\s*\nRESPONSE:\s*(.*?)(?:\n\s*\nRELEVANCE:|\nRELEVANCE:|\Z)", user, re.S)
        if "Split the following statement into individual sentences" in both:
            m = re.search(r"Statement:\s*(.*?)(?:\n\s*\nReturn each sentence|\Z)", both, re.S)
            return JudgeReply("\n".join(split_sentences(m.group(1) if m else user)), responder=self.name)
        if "Identify and remove sentences that are stylistic" in both:
            m = re.search(r"ALL STATEMENTS:\s*(.*?)\n\s*\nIMPORTANT STATEMENTS:", user, re.S)
            items = parse_list(m.group(1)) if m else []
            return JudgeReply(repr([str(s) for s in items]), responder=self.name)
        ctx: Optional[Ctx] = None
        if "ABSTENTION classifier" in system:
            m = re.search(r"STATEMENT:\s*(.*?)\n\s*\nABSTENTION:", user, re.S)
            v = 1 if is_noncommittal(m.group(1) if m else user) else 0
            return self._answer(req, Ctx(scorer=lambda: float(v), score_range=(0, 1), prompt=both))
        if "ANSWERABILITY classifier" in system:
            m = re.search(r"QUESTION:\s*(.*?)\n\s*\nSOURCE:\s*(.*?)\n\s*\nANSWERABILITY:", user, re.S)
            q, s = (m.group(1), m.group(2)) if m else (user, "")
            return self._answer(req, Ctx(query=q, context=s, scorer=lambda: float(relevance(s, q) >= 0.5),
                                         score_range=(0, 1), prompt=both))
        if m_src and ("INFORMATION OVERLAP" in system or "groundedness" in both.lower()):
            source, statement = m_src.group(1).strip(), m_src.group(2).strip()
            ctx = Ctx(context=source, subject=statement, prompt=both)
            if is_noncommittal(statement):
                ctx.scorer = lambda: 1.0
            else:
                frac = support(statement, source)[0]
                ok = is_supported(statement, source)
                ctx.scorer = lambda: frac if ok else min(frac, 0.34)
        elif m_cr:
            q, res = m_cr.group(1).strip(), m_cr.group(2).strip()
            ctx = Ctx(query=q, subject=res, prompt=both, scorer=lambda: relevance(res, q))
        elif m_ar:
            q, res = m_ar.group(1).strip(), m_ar.group(2).strip()
            ctx = Ctx(query=q, subject=res, prompt=both,
                      scorer=lambda: 0.0 if is_noncommittal(res) else relevance(res, q))
        if ctx is None:
            return None
        ctx.score_range = find_range(system) or find_range(user) or (0, 3)
        return self._answer(req, ctx)

    def _answer(self, req: JudgeRequest, ctx: Ctx) -> JudgeReply:
        lo, hi = ctx.score_range or (0, 3)
        score = int(_scaled(ctx.fraction(), lo, hi, True))
        if req.schema is not None:
            ctx.score_range = (lo, hi)
            return _reply_json(req, req.schema, ctx, self.name)
        crit = ctx.subject or ctx.query or "the criteria"
        evidence = (best_sentence(ctx.context, ctx.subject) if ctx.context else None) or ctx.reason(None)
        prompt = req.prompt
        if req.json_mode or "JSON object" in prompt:
            return JudgeReply(_dump({"criteria": crit, "supporting_evidence": evidence, "score": score}),
                              score=score, responder=self.name)
        if "Supporting Evidence" in prompt:
            return JudgeReply(f"Criteria: {_short(crit, 200)}\nSupporting Evidence: {evidence}\nScore: {score}",
                              score=score, responder=self.name)
        return JudgeReply(f"Score: {score}", score=score, responder=self.name)


# --------------------------------------------------------------------------------------------
# The generic responder
# --------------------------------------------------------------------------------------------


def generic(req: JudgeRequest) -> JudgeReply:
    """Answers anything: schema-valid JSON when there is a schema (sent, or found in the prompt),
    ``Score: N`` when the prompt asks for a score, JSON built from an example when JSON is wanted,
    otherwise a short grounded sentence."""
    prompt = req.prompt
    user = req.user or prompt
    inputs = _json_after(user, "input:", last=True)
    if isinstance(inputs, dict) and inputs:
        ctx = ctx_from_inputs(inputs, prompt)
    else:
        ctx = ctx_from_sections(labelled_sections(user), prompt)
    if not (ctx.query or ctx.context or ctx.subject):
        ctx.subject = user
    ctx.score_range = find_range(req.system, user)
    schema = req.schema or _schema_in_prompt(prompt)
    if schema is None and (req.json_mode or re.search(r"\bJSON\b", prompt)):
        ex = _example_json(prompt)
        if ex:
            schema = schema_from_example(ex)
    if schema is not None:
        return _reply_json(req, schema, ctx, "generic")
    if req.json_mode:
        score_rng = ctx.score_range or (0, 1)
        return JudgeReply(_dump({"reason": ctx.reason(None),
                                 "score": _scaled(ctx.fraction(), score_rng[0], score_rng[1], True)}),
                          responder="generic")
    if re.search(r"\b(score|rate|rating|grade)\b", prompt, re.I):
        lo, hi = ctx.score_range or (0, 3)
        s = int(_scaled(ctx.fraction(), lo, hi, True))
        return JudgeReply(f"Score: {s}", score=s, responder="generic")
    words = content_words(user)[:12]
    return JudgeReply("ragbridge stub reply: " + " ".join(words) + ".", responder="generic")


class _Generic:
    name = "generic"

    def __call__(self, req: JudgeRequest) -> JudgeReply:
        return generic(req)


_REGISTRY.extend([RagasResponder(), DeepEvalResponder(), TruLensResponder(), _Generic()])

# Library-specific refinements live in their own modules and register themselves ahead of the above.
from ragbridge.testing import responders_trulens as _responders_trulens  # noqa: E402,F401
from ragbridge.testing import responders_deepeval as _responders_deepeval  # noqa: E402,F401
