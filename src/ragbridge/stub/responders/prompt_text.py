"""Reading a judge prompt: the texts it judges (`labelled_sections`, `ctx_from_sections`,
`ctx_from_inputs`, under the names of `Labels`), the JSON it embeds (`json_after`, `schema_in_prompt`,
`example_json`, `schema_from_example`), lists (`parse_list`) and the score scale it asks for
(`find_range`)."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, replace
from typing import Any, Iterable, Optional

from .judged import Ctx
from .toy_judge import split_sentences

__all__ = ["find_range", "json_after", "schema_in_prompt", "example_json", "schema_from_example", "Labels",
           "SECTION_LABELS", "INPUT_KEYS", "labelled_sections", "parse_list", "ctx_from_sections",
           "ctx_from_inputs"]

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
