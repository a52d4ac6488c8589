"""What the stub judge answers: a registry of deterministic, lexically grounded responders.

Every responder gets a `JudgeRequest` (the request normalised: the messages as plain text, the JSON
schema the caller asked for, if any, and where it came from) and returns a `JudgeReply` (message
text, or function-call arguments when the caller forced a tool), or ``None`` to let the next
responder try. The registered responders are tried in order; `generic` comes last and always answers.

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

**Noise, on purpose (a test device).** A real judge does not give the same verdict every time it is
asked; to test what ragbridge measures about that (``--repeats``, the noise figures), the stub can be
made noisy: ``StubJudge(noise=p, noise_seed=s)``. Every verdict of the toy judge (`is_supported`,
`is_relevant`) then flips with probability ``p``, and a level on a scale (`noisy_level`, which a
responder applies to the level it answers) moves to a neighbouring level with probability ``p``. The
draws come from a generator seeded by (``s``, the repeat index the gateway sends in
``X-Ragbridge-Repeat``, the request body), so a given request in a given repeat always gets the same
answer, and repeats differ as independent draws. Without ``noise`` nothing changes.

This module knows no evaluation library. A backend plugin whose prompts the stub should answer
registers its own responder through the ``ragbridge_register_stub_responders`` hook (asked once, at
the first answer); it works out *which text is judged against which* and leaves the rest to the
public helpers here:

* the toy judge: `content_words`, `numbers`, `support`, `is_supported`, `relevance`, `is_relevant`,
  `usefulness`, `is_noncommittal`, `split_sentences`, `best_sentence`, `make_question`, `short`;
* what is judged: `Ctx` (the query, the evidence, the subject, the items and how each is judged);
* reading prompts: `Labels` (the names that introduce each text; `SECTION_LABELS`, `INPUT_KEYS`
  are the generic ones, which a plugin extends with its library's), `labelled_sections`,
  `ctx_from_sections`, `ctx_from_inputs`, `parse_list`, `json_after`, `schema_in_prompt`,
  `example_json`, `schema_from_example`, `find_range`;
* answering: `fill_schema` (a schema-valid value filled from a `Ctx`), `reply_json`, `scaled`,
  `validate_schema`.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import hashlib
import json
import math
import random
import re
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Optional, Protocol, Sequence

__all__ = [
    "JudgeRequest",
    "JudgeReply",
    "Responder",
    "register",
    "unregister",
    "responders",
    "respond",
    "generic",
    "Ctx",
    "Labels",
    "SECTION_LABELS",
    "INPUT_KEYS",
    "fill_schema",
    "validate_schema",
    "SchemaError",
    "schema_from_example",
    "find_range",
    "scaled",
    "reply_json",
    "json_after",
    "schema_in_prompt",
    "example_json",
    "labelled_sections",
    "parse_list",
    "ctx_from_sections",
    "ctx_from_inputs",
    "content_words",
    "numbers",
    "support",
    "is_supported",
    "relevance",
    "is_relevant",
    "perturbed",
    "noisy",
    "noisy_level",
    "usefulness",
    "is_noncommittal",
    "split_sentences",
    "best_sentence",
    "make_question",
    "short",
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
    """The numbers in ``text`` (thousands separators dropped)."""
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


@dataclass
class _Noise:
    rate: float
    rng: random.Random


_NOISE: contextvars.ContextVar[Optional[_Noise]] = contextvars.ContextVar("ragbridge_stub_noise",
                                                                         default=None)


@contextlib.contextmanager
def perturbed(rate: float, seed: int, repeat: int, request: bytes):
    """Within this block the toy judge is noisy (see the module docstring): verdicts flip and levels
    move with probability ``rate``, drawn from a generator seeded by (seed, repeat, request)."""
    if not rate:
        yield
        return
    digest = hashlib.sha256(b"%d\0%d\0" % (seed, repeat) + request).digest()
    token = _NOISE.set(_Noise(float(rate), random.Random(int.from_bytes(digest[:8], "little"))))
    try:
        yield
    finally:
        _NOISE.reset(token)


def noisy(verdict: bool) -> bool:
    """``verdict``, flipped with the noise probability inside `perturbed` (else unchanged)."""
    noise = _NOISE.get()
    if noise is None:
        return verdict
    return (not verdict) if noise.rng.random() < noise.rate else verdict


def noisy_level(level: Any, values: Sequence[Any]) -> Any:
    """``level`` (one of the ordered ``values``), moved to a neighbouring value with the noise
    probability inside `perturbed` (at either end, to its only neighbour), else unchanged."""
    noise = _NOISE.get()
    values = list(values)
    if noise is None or len(values) < 2 or level not in values or noise.rng.random() >= noise.rate:
        return level
    i = values.index(level)
    if i == 0:
        return values[1]
    if i == len(values) - 1:
        return values[-2]
    return values[i + (1 if noise.rng.random() < 0.5 else -1)]


def is_supported(statement: str, context: str) -> bool:
    """Half the statement's content words and every number in it occur in the context."""
    frac, _, _ = support(statement, context)
    missing_numbers = numbers(statement) - numbers(context)
    return noisy(frac >= 0.5 and not missing_numbers)


def relevance(text: str, query: str) -> float:
    """Fraction of the query's content words that occur in ``text`` (1.0 when the query has none)."""
    q = list(dict.fromkeys(content_words(query)))
    if not q:
        return 1.0 if text.strip() else 0.0
    t = set(content_words(text))
    return sum(1 for w in q if w in t) / len(q)


def is_relevant(text: str, query: str) -> bool:
    """``text`` shares a quarter of the query's content words, or two of them."""
    q = set(content_words(query))
    t = set(content_words(text))
    inter = q & t
    return noisy(bool(q) and (len(inter) / len(q) >= 0.25 or len(inter) >= 2))


def usefulness(node: str, target: str) -> float:
    """Overlap of a retrieved node with a target text, relative to the shorter of the two."""
    a, b = set(content_words(node)), set(content_words(target))
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


def is_noncommittal(text: str) -> bool:
    """``text`` contains a decline phrase ("I don't know", "couldn't find", ...)."""
    t = _norm(text or "")
    return any(p in t for p in DECLINE_PHRASES)


_SENT_RE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n+")


def split_sentences(text: str) -> list[str]:
    """The sentences (and lines, list bullets dropped) of ``text``."""
    out = []
    for part in _SENT_RE.split(text or ""):
        s = part.strip().lstrip("-*\u2022 ").strip()
        if s and any(ch.isalnum() for ch in s):
            out.append(s)
    return out


def short(text: str, n: int = 80) -> str:
    """``text`` on one line, cut to ``n`` characters with "..."."""
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
    """The sentence of ``context`` that overlaps ``statement`` most (None: none overlaps)."""
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
            req.schema, req.schema_name = js.get("schema") or {}, js.get("name")
            req.schema_origin = "json_schema"
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
            req.schema, req.schema_name = fmt.get("schema") or {}, fmt.get("name")
            req.schema_origin = "json_schema"
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
    """Add a responder: ``first=True`` ahead of every registered one, else after them (always ahead
    of `generic`). Returns it (for `unregister`)."""
    if first:
        _REGISTRY.insert(0, responder)
    else:
        _REGISTRY.append(responder)
    return responder


def unregister(responder: Responder) -> None:
    """Remove a responder added by `register` (a test's own, say)."""
    _REGISTRY.remove(responder)


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
    """The responders in the order they are tried, `generic` last."""
    _plugin_responders()
    return [*_REGISTRY, _Generic()]


def respond(req: JudgeRequest) -> JudgeReply:
    """The first reply a responder gives, else `generic`'s."""
    _plugin_responders()
    for r in list(_REGISTRY):
        reply = r(req)
        if reply is not None:
            reply.responder = reply.responder or getattr(r, "name", type(r).__name__)
            return reply
    return generic(req)


# --------------------------------------------------------------------------------------------
# The judging context and the schema filler
# --------------------------------------------------------------------------------------------


@dataclass
class Ctx:
    """Which texts the verdicts compare."""

    query: str = ""  # the question
    context: str = ""  # the evidence (retrieved context, source)
    subject: str = ""  # the text being analysed (answer, statement, reference)
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
            base = (f'"{short(text, 60)}": {len(found)} of {len(found) + len(missing)} content words '
                    f"appear in the context")
            if found:
                base += f" ({', '.join(found[:6])})"
            if ok and quote:
                return base + f'; the context says "{short(quote, 80)}".'
            miss_num = sorted(numbers(text) - numbers(self.context))
            if miss_num:
                return base + f"; the number(s) {', '.join(miss_num)} do not appear in the context."
            return base + (f"; not found: {', '.join(missing[:6])}." if missing else ".")
        if self.query and text:
            shared = sorted(set(content_words(text)) & set(content_words(self.query)))
            if shared:
                return f'"{short(text, 60)}" shares {", ".join(shared[:6])} with the question.'
            return f'"{short(text, 60)}" shares no content words with the question.'
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
_REASON_NAMES = re.compile(
    r"(reason|reasoning|explanation|rationale|justification|feedback|analysis|thought)")
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
    """The score scale the first of ``texts`` that names one asks for ("0 to 10", "(0, 1, or 2)")."""
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


def scaled(frac: float, lo: float, hi: float, integer: bool) -> float:
    """The point ``frac`` (0..1) of the way from ``lo`` to ``hi``, rounded to an integer or 3 decimals."""
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


def json_after(text: str, marker: str, *, last: bool = False) -> Optional[Any]:
    """The JSON object that follows the first (``last``: the last) ``marker`` in ``text``, or None."""
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


def schema_in_prompt(text: str) -> Optional[dict]:
    """A JSON schema embedded in the prompt (after ``json_schema:``, ``JSON Schema:``, ``schema:``)."""
    for marker in ("json_schema:", "as specified in JSON Schema:", "JSON Schema:", "json schema:", "schema:"):
        obj = json_after(text, marker)
        if isinstance(obj, dict) and ("properties" in obj or obj.get("type") == "object"):
            return obj
    return None


_PLACEHOLDER_RE = re.compile(r"<[^<>\n]{1,80}>")


def example_json(text: str) -> Optional[dict]:
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


@dataclass(frozen=True)
class Labels:
    """The names that introduce the judged texts of a prompt, by role, lower case: the labels of its
    sections (``Question:`` and the text after it, see `labelled_sections`) or the keys of its inputs
    object (``{"question": ...}``, see `ctx_from_inputs`).

    ``query`` names the question, ``context`` the evidence, ``subject`` the text being judged,
    ``lists`` a list of items judged one by one; ``other`` labels are known only so that they end the
    section before them. `SECTION_LABELS` and `INPUT_KEYS` hold the generic names; a plugin extends
    them with its library's (`extend`)."""

    query: frozenset[str] = frozenset()
    context: frozenset[str] = frozenset()
    subject: frozenset[str] = frozenset()
    lists: frozenset[str] = frozenset()
    other: frozenset[str] = frozenset()

    def extend(self, **more: Iterable[str]) -> "Labels":
        """These labels and ``more`` (``query=("the question",), ...``)."""
        return replace(self, **{role: getattr(self, role) | frozenset(names) for role, names in more.items()})

    @property
    def known(self) -> frozenset[str]:
        return self.query | self.context | self.subject | self.lists | self.other


#: generic section labels ("Question:\n<text>\n\n...JSON:")
SECTION_LABELS = Labels(
    query=frozenset({"input", "question", "query", "prompt"}),
    context=frozenset({"context", "contexts", "source", "premise", "excerpt", "documents"}),
    subject=frozenset({"text", "statement", "hypothesis", "answer", "response", "output", "summary",
                       "claim"}),
    lists=frozenset({"claims", "statements"}),
    other=frozenset({"parameters", "rubric", "score", "verdicts"}),
)
#: generic keys of an inputs object (``input: {"question": ..., "context": ...}``)
INPUT_KEYS = Labels(
    query=frozenset({"question", "query", "input"}),
    context=frozenset({"context", "contexts", "reference_contexts", "source", "premise", "documents"}),
    subject=frozenset({"answer", "response", "reference", "text", "statement", "hypothesis", "summary"}),
    lists=frozenset({"statements", "claims", "sentences"}),
)
_LABEL_LINE = re.compile(r"^([A-Za-z][A-Za-z _]{0,40}?)(?:\s*\([^)]*\))?\s*:[ \t]*(.*)$")
_STOP_LINE = re.compile(r"^(JSON:|Output:|\*\*|-{3,}|={3,}|Respond |Return |Produce |Example|IMPORTANT|"
                        r"[A-Z][A-Z ]+:\s*$)")


def labelled_sections(text: str, labels: Labels = SECTION_LABELS) -> dict[str, str]:
    """``{label: text}`` for the known ``labels`` (last occurrence wins); a value runs to the next
    label or to an instruction line (``JSON:``, ``Return ...``, a rule, a heading in capitals)."""
    sections: dict[str, str] = {}
    cur: Optional[str] = None
    buf: list[str] = []

    def flush() -> None:
        if cur is not None:
            sections[cur] = "\n".join(buf).strip()

    for line in text.splitlines():
        m = _LABEL_LINE.match(line.strip())
        label = m.group(1).strip().lower() if m else None
        if m and label in labels.known:
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


def ctx_from_sections(sec: dict[str, str], prompt: str, labels: Labels = SECTION_LABELS) -> Ctx:
    """A `Ctx` from `labelled_sections` (the first query and subject, every context joined)."""
    ctx = Ctx(prompt=prompt)
    for label, value in sec.items():
        if label in labels.query and not ctx.query:
            ctx.query = value
        elif label in labels.context:
            v = value
            if v.startswith("["):
                v = "\n\n".join(parse_list(v))
            ctx.context = (ctx.context + "\n\n" + v).strip() if ctx.context else v
        elif label in labels.lists:
            ctx.items = parse_list(value)
            ctx.subject = " ".join(ctx.items)
        elif label in labels.subject and not ctx.subject:
            ctx.subject = value
    return ctx


def ctx_from_inputs(inputs: dict, prompt: str, keys: Labels = INPUT_KEYS) -> Ctx:
    """A `Ctx` from an object of named inputs (``input: {...}`` in a prompt). A ``reference`` after
    the subject is the evidence when there is no context."""
    ctx = Ctx(prompt=prompt)

    def text(v: Any) -> str:
        if isinstance(v, list):
            return "\n\n".join(str(x) for x in v)
        return "" if v is None else str(v)

    for k, v in inputs.items():
        lk = k.lower()
        if lk in keys.query:
            ctx.query = text(v)
        elif lk in keys.context:
            ctx.context = (ctx.context + "\n\n" + text(v)).strip()
        elif lk in keys.lists and isinstance(v, list):
            ctx.items = [str(x) for x in v]
            ctx.subject = ctx.subject or " ".join(ctx.items)
        elif lk in keys.subject:
            if not ctx.subject:
                ctx.subject = text(v)
            elif lk == "reference" and not ctx.context:
                ctx.context = text(v)
    return ctx


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def reply_json(req: JudgeRequest, schema: dict, ctx: Ctx, responder: str) -> JudgeReply:
    """The reply with `fill_schema`'s value for ``schema`` (as the forced tool's arguments when the
    request forced one); its integer ``score`` field, if any, is the reply's score token."""
    value = fill_schema(schema, ctx)
    score = value.get("score") if isinstance(value, dict) and isinstance(value.get("score"), int) else None
    return JudgeReply(content=_dump(value), tool_name=req.tool_name, score=score, responder=responder)


# --------------------------------------------------------------------------------------------
# The generic responder
# --------------------------------------------------------------------------------------------


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
        return JudgeReply(_dump({"reason": ctx.reason(None),
                                 "score": scaled(ctx.fraction(), score_rng[0], score_rng[1], True)}),
                          responder="generic")
    if re.search(r"\b(score|rate|rating|grade)\b", prompt, re.I):
        lo, hi = ctx.score_range or (0, 3)
        s = int(scaled(ctx.fraction(), lo, hi, True))
        return JudgeReply(f"Score: {s}", score=s, responder="generic")
    words = content_words(user)[:12]
    return JudgeReply("ragbridge stub reply: " + " ".join(words) + ".", responder="generic")


class _Generic:
    name = "generic"

    def __call__(self, req: JudgeRequest) -> JudgeReply:
        return generic(req)
