"""A trace as a case: the semantic conventions for question, answer and retrieved chunks.

Spans are grouped by trace id (`group_traces`); each trace becomes at most one `Case`
(`trace_case`), read by the OpenInference conventions and the OpenTelemetry GenAI ones:

- the *root* is the span without a parent in the trace (several, or none because the parents were
  not exported: the earliest of the top-most spans, and the trace is noted as partial);
- a *retriever* is a span with ``openinference.span.kind`` ``RETRIEVER`` or ``RERANKER``, or with
  ``gen_ai.operation.name`` ``retrieval`` or a ``gen_ai.retrieval.documents`` attribute; an *LLM
  span* has kind ``LLM`` or a GenAI chat or completion operation;
- ``question``: the root's ``input.value``, else the retriever's (its query,
  ``gen_ai.retrieval.query.text`` too); never the LLM span's messages, which hold the prompt made
  of the question and the chunks (a trace recording neither is no case, counted); a JSON input
  (``input.mime_type`` ``application/json``) gives its question-like field (``question``,
  ``query``, ``input``, ``prompt``, ``text``, ``content``, ``message``);
- ``answer``: what the application returned to the user, the root's ``output.value``; without one,
  the output of the LLM span that wrote the answer (its ``output.value`` or first output message):
  with several LLM spans (a query rewrite before the retrieval, then the answer), the one whose
  input holds a retrieved chunk's text, else the last to start after the retrieval, else the last
  (`_answer_llm`; the report counts the traces answered so). ``llm_span_id`` is that span, or with
  a root output the LLM span whose output it is;
- ``contexts``: the retriever's documents, best first as recorded:
  ``retrieval.documents.N.document.id`` / ``.content`` / ``.score`` / ``.metadata`` (metadata a JSON
  string; its ``source``, ``url``, ``file_path`` or ``file_name`` is the chunk's source), and
  ``gen_ai.retrieval.documents`` (a JSON array, or an array value, of objects with ``id``,
  ``score`` and, when content capture is on, ``content``). A reranker's
  ``reranker.output_documents`` take the place of the retrieved ones (they are what the model saw);
  several retrievers' documents are joined in start order. A document without an id gets the id of
  its text (``ctx-<sha1>``, as everywhere); one without a text is kept with an empty text, and one
  with neither (a lone score at an index the others skip) is left out, both counted in the report;
- ``id``: the trace id; ``tags``: the root's ``tag.tags``; ``metadata["trace"]``: ``trace_id``,
  ``span_id`` (the root's: where a score of the whole answer goes), ``retriever_span_ids`` (with
  several, ``retriever_documents``: how many documents each gave, in the contexts' order),
  ``llm_span_id``, ``name``, ``start_time``, ``end_time`` (ISO 8601 UTC), and where present
  ``service``, ``session_id``, ``user_id`` and the root's ``metadata``; ``metadata["signals"]``:
  the user signals the export carried for the trace (`Signal`).

A span given more than once (the same span id: an export appended to itself) is read once, and
counted. A trace with no retriever, or with no question, is not a case: `TraceReport` counts each reason
and says it. A retriever that returned no documents does give a case, with no contexts, and is
counted too (an empty retrieval is a result to score, not a gap in the data).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

from pydantic import ValidationError

from ..formats.records import chunk_id_for_text
from ..schema import Case, Chunk
from .sessions import Turn, add_sessions, session_of
from .spans import Signal, Span, SpanError, gathered, indexed, iso_time, json_value, shown

__all__ = ["TraceReport", "group_traces", "trace_case", "cases_from_spans", "span_kind", "trace_turn"]

#: why a trace is not a case, as the report says it
NO_RETRIEVER = "no retriever span"
NO_QUESTION = "no question (no input on the root or retriever span)"
NO_SPANS = "no spans (only scores about the trace)"
#: what a kept case is noted for
EMPTY_RETRIEVAL = "retriever returned no documents (kept, with no contexts)"
NO_TEXT = "retriever documents without a text (kept, with an empty text)"
SCORE_TEXT = "retriever document scores written as text (read as numbers)"
SCORE_UNREAD = "retriever document scores that are not numbers (left out)"
DUPLICATE_SPANS = "spans given more than once (the same span id, e.g. an export appended twice: read once)"
#: a document of neither id nor text (a lone score at an index the others skip) is no chunk
NO_DOCUMENT = "retriever documents with neither an id nor a text (left out)"
SEVERAL_RETRIEVERS = "several retriever spans (documents joined in start order)"
NO_ROOT = "no root span (a parent was not exported)"
#: how the answer was picked when the root holds none and the trace has several LLM spans
ANSWER_SAW_CHUNKS = "answer from the LLM span given the retrieved chunks (the root has no output)"
ANSWER_AFTER_RETRIEVAL = "answer from the last LLM span after the retrieval (the root has no output)"
ANSWER_LAST = "answer from the last LLM span (the root has no output; none follows the retrieval)"

_QUESTION_KEYS = ("question", "query", "input", "prompt", "text", "content", "message")
_ANSWER_KEYS = ("answer", "output", "response", "text", "content", "message", "result")
_SOURCE_KEYS = ("source", "url", "file_path", "file_name", "document_id", "doc_id")
_LLM_OPERATIONS = {"chat", "text_completion", "generate_content"}


@dataclass
class TraceReport:
    """What reading traces gave: ``traces`` seen, ``cases`` made, ``skipped`` (reason -> count) and
    ``noted`` (reason -> count, cases kept), with up to three trace ids of each (``examples``)."""

    traces: int = 0
    cases: int = 0
    skipped: Counter = field(default_factory=Counter)
    noted: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, reason: str, trace_id: str, skipped: bool) -> None:
        (self.skipped if skipped else self.noted)[reason] += 1
        shown = self.examples.setdefault(reason, [])
        if len(shown) < 3:
            shown.append(trace_id)

    def lines(self) -> list[str]:
        """One warning line per reason: the count, the reason, example trace ids."""
        out = []
        for counter, verb in ((self.skipped, "not cases"), (self.noted, "kept")):
            for reason, n in sorted(counter.items()):
                ids = ", ".join(self.examples.get(reason, []))
                out.append(f"{n} of {self.traces} trace(s) {verb}: {reason} (e.g. {ids})")
        return out

    def record(self) -> dict[str, Any]:
        return {"traces": self.traces, "cases": self.cases, "skipped": dict(self.skipped),
                "noted": dict(self.noted), "examples": self.examples}


def group_traces(spans: Iterable[Span]) -> dict[str, list[Span]]:
    """Spans by trace id, traces in the order their first span came."""
    traces: dict[str, list[Span]] = {}
    for span in spans:
        traces.setdefault(span.trace_id, []).append(span)
    return traces


def span_kind(span: Span) -> str:
    """``RETRIEVER``, ``RERANKER``, ``LLM`` or another OpenInference kind (``CHAIN``, ...), from the
    OpenInference kind or the GenAI operation; empty when neither says."""
    kind = str(span.attributes.get("openinference.span.kind") or "").upper()
    if kind:
        return kind
    operation = str(span.attributes.get("gen_ai.operation.name") or "").lower()
    if operation == "retrieval" or "gen_ai.retrieval.documents" in span.attributes:
        return "RETRIEVER"
    if operation in _LLM_OPERATIONS:
        return "LLM"
    return ""


def _start(span: Span) -> int:
    return span.start if span.start is not None else 0


def _root(spans: Sequence[Span]) -> tuple[Span, bool]:
    ids = {s.span_id for s in spans}
    tops = [s for s in spans if s.parent_id is None]
    if tops:
        return min(tops, key=_start), True
    orphans = [s for s in spans if s.parent_id not in ids]
    return min(orphans or spans, key=_start), False


def _text(value: Any, mime: Any, keys: Sequence[str], field: str = "") -> Optional[str]:
    """A question or answer from an ``input.value`` / ``output.value``: the text, or a JSON value's
    text-like field."""
    if value is None:
        return None
    parsed = (json_value(value, field) if (str(mime or "").endswith("json") or not isinstance(value, str))
              else value)
    return _pick_text(parsed, keys)


def _pick_text(parsed: Any, keys: Sequence[str]) -> Optional[str]:
    if isinstance(parsed, str):
        return parsed
    if isinstance(parsed, dict):
        for key in keys:
            found = parsed.get(key)
            if isinstance(found, str) and found.strip():
                return found
            if isinstance(found, (dict, list)):
                inner = _pick_text(found, keys)
                if inner:
                    return inner
        return None
    if isinstance(parsed, list):
        for item in reversed(parsed):
            inner = _pick_text(item, keys)
            if inner:
                return inner
    return None if parsed is None else str(parsed)


def _message(span: Span, prefix: str, role: Optional[str], last: bool) -> Optional[str]:
    with span.reading(prefix):
        messages = [m for _, m in indexed(span.attributes, prefix)
                    if role is None or m.get("message.role") == role]
    if not messages:
        return None
    content = messages[-1 if last else 0].get("message.content")
    return content if isinstance(content, str) else None


def _span_text(span: Span, key: str, keys: Sequence[str]) -> Optional[str]:
    """The span's ``input`` or ``output`` (``key``) as text (see `_text`)."""
    with span.reading(f"{key}.value"):
        return _text(span.attributes.get(f"{key}.value"), span.attributes.get(f"{key}.mime_type"), keys,
                     f"{key}.value")


def _documents(span: Span) -> list[tuple[dict[str, Any], str]]:
    """The span's documents as ``{id?, content?, score?, metadata?}``, each with the attribute it was
    read from; the output of a reranker first."""
    attrs = span.attributes
    with span.reading():
        for prefix in ("reranker.output_documents", "retrieval.documents"):
            docs = [(_document(d, f"{prefix}.{i}"), f"{prefix}.{i}") for i, d in indexed(attrs, prefix)]
            if not docs and attrs.get(prefix) is not None:
                docs = [(_document(d, f"{prefix}.{i}"), f"{prefix}.{i}")
                        for i, d in enumerate(_document_list(attrs[prefix], prefix))]
            if docs:
                return docs
        key = "gen_ai.retrieval.documents"
        genai = json_value(attrs.get(key), key)
        if genai is not None:
            return [(_document(d, f"{key}[{i}]"), f"{key}[{i}]")
                    for i, d in enumerate(_document_list(genai, key))]
    return []


def _document_list(value: Any, key: str) -> list[dict[str, Any]]:
    """An attribute that holds the documents as one list of objects; raises `SpanError` for any
    other value (a number, a text, an object, a list of anything but objects)."""
    if not isinstance(value, list) or any(not isinstance(d, dict) for d in value):
        raise SpanError(f"must be a list of documents (objects), got {shown(value)}"
                        + (f" holding {shown(next(d for d in value if not isinstance(d, dict)))}"
                           if isinstance(value, list) else ""), field=key,
                        hint="write the documents as retrieval.documents.N.document.* attributes")
    return value


def _document(raw: dict[str, Any], at: str) -> dict[str, Any]:
    if isinstance(raw.get("document"), dict):
        raw = raw["document"]
    pick = {k.removeprefix("document."): v for k, v in raw.items()}
    return {"id": pick.get("id"), "content": pick.get("content", pick.get("text")),
            "score": pick.get("score"),
            "metadata": json_value(gathered(pick, "metadata"), f"{at}.document.metadata")}


#: the attribute each field of a chunk comes from, for errors
_CHUNK_FIELDS = {"id": "document.id", "text": "document.content", "score": "document.score",
                 "source": "document.metadata"}


def _score(value: Any) -> Optional[float]:
    """A document's score as a finite number (text holding one too), else None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        score = float(value)
    except (TypeError, ValueError):
        return None
    return score if math.isfinite(score) else None


def _chunk(doc: dict[str, Any], span: Span, at: str) -> Chunk:
    text = doc["content"] if isinstance(doc["content"], str) else ("" if doc["content"] is None
                                                                    else json.dumps(doc["content"]))
    cid = doc["id"]
    if isinstance(cid, bool) or not isinstance(cid, (str, int, type(None))):
        raise span.error(f"a document id must be a string, got {shown(cid)}", f"{at}.document.id",
                         "give each document a text id")
    cid = str(cid) if cid is not None and str(cid).strip() else chunk_id_for_text(text)
    score = doc["score"]
    meta = doc["metadata"] if isinstance(doc["metadata"], dict) else {}
    source = next((str(meta[k]) for k in _SOURCE_KEYS if meta.get(k) not in (None, "")), None)
    try:
        return Chunk(id=cid, text=text, score=score, source=source)
    except ValidationError as exc:
        first = exc.errors()[0]
        part = str(first["loc"][0]) if first.get("loc") else "id"
        message = str(first.get("msg", exc)).removeprefix("Value error, ")
        raise span.error(message, f"{at}.{_CHUNK_FIELDS.get(part, part)}", "fix the document in the "
                         "application's instrumentation") from None


def _tags(root: Span) -> list[str]:
    tags = root.attributes.get("tag.tags")
    if tags is None:
        return []
    if isinstance(tags, str):
        return [tags]
    if not isinstance(tags, list) or any(isinstance(t, (dict, list, bool)) or t is None for t in tags):
        raise root.error(f"tags must be a list of texts, got {shown(tags)}", "tag.tags",
                         'set tag.tags to a list of strings, e.g. ["billing"]')
    return [str(t) for t in tags]


def _seen_chunks(llm: Span, chunks: Sequence[Chunk]) -> bool:
    """Whether an LLM span's input holds the text of one of ``chunks`` (it was given the retrieval)."""
    attrs = llm.attributes
    given = [v for k, v in attrs.items() if isinstance(v, str) and (
        k == "input.value" or (k.startswith("llm.input_messages.") and k.endswith(".message.content"))
        or k.startswith("gen_ai.prompt") or k == "gen_ai.input.messages")]
    if not given:
        return False
    text = "\n".join(given)
    return any(len(c.text.strip()) >= 20 and c.text.strip()[:200] in text for c in chunks)


def _answer_llm(llms: Sequence[Span], retrievers: Sequence[Span], chunks: Sequence[Chunk],
                order: dict[str, int]) -> tuple[Optional[Span], str]:
    """The LLM span whose output is the answer when the root holds none, and how it was picked: the
    one that was given the retrieved chunks (its input holds a chunk's text), else one that starts at
    or after the retrieval, else any; of those the last to end (then the last in the trace's order).
    A query rewrite before the retrieval is not taken for the answer."""
    if not llms:
        return None, ""
    if len(llms) == 1:
        return llms[0], ""
    first = min(order[r.span_id] for r in retrievers)
    for how, pool in ((ANSWER_SAW_CHUNKS, [s for s in llms if _seen_chunks(s, chunks)]),
                      (ANSWER_AFTER_RETRIEVAL, [s for s in llms if order[s.span_id] > first]),
                      (ANSWER_LAST, list(llms))):
        if pool:
            return max(pool, key=lambda s: (s.end or s.start or 0, order[s.span_id])), how
    return None, ""


def trace_case(spans: Sequence[Span], report: TraceReport,
               signals: Sequence[Signal] = ()) -> Optional[Case]:
    """One trace's spans as a case, or None with the reason counted in ``report`` (see the module
    docstring). Raises `DatasetError` naming where a span was read for a value that cannot be read."""
    trace_id = spans[0].trace_id
    report.traces += 1
    about = [s for s in spans if not s.span_id]
    notes = [n for s in spans for n in s.notes]
    if about:
        spans = [s for s in spans if s.span_id]
        signals = [g for s in about for g in s.signals] + list(signals)
    if not spans:
        report.add(notes[0] if notes else NO_SPANS, trace_id, skipped=True)
        return None
    once: dict[str, Span] = {}
    for span in spans:
        once.setdefault(span.span_id, span)  # the first of each span id
    if len(once) < len(spans):
        notes.append(DUPLICATE_SPANS)
        spans = list(once.values())
    spans = sorted(spans, key=_start)
    order = {s.span_id: i for i, s in enumerate(spans)}
    root, whole = _root(spans)
    kinds = [(s, span_kind(s)) for s in spans]
    retrievers = [s for s, k in kinds if k in ("RETRIEVER", "RERANKER")]
    rerankers = [s for s, k in kinds if k == "RERANKER" and _documents(s)]
    llms = [s for s, k in kinds if k == "LLM"]
    if not retrievers:
        report.add(NO_RETRIEVER, trace_id, skipped=True)
        return None
    question, asked = _span_text(root, "input", _QUESTION_KEYS), root
    for span in retrievers:
        if question:
            break
        question, asked = (_span_text(span, "input", _QUESTION_KEYS)
                           or span.attributes.get("gen_ai.retrieval.query.text")), span
    used = [rerankers[-1]] if rerankers else retrievers
    chunks = []
    for s in used:
        for d, at in _documents(s):
            if d["content"] is None:
                if d["id"] is None or not str(d["id"]).strip():
                    notes.append(NO_DOCUMENT)
                    continue
                notes.append(NO_TEXT)
            score = _score(d["score"])
            if score is None and d["score"] is not None:
                notes.append(SCORE_UNREAD)
            elif isinstance(d["score"], str):
                notes.append(SCORE_TEXT)
            chunks.append(_chunk({**d, "score": score}, s, at))
    root_answer = _span_text(root, "output", _ANSWER_KEYS) if root is not retrievers[0] else None
    llm, how = _answer_llm(llms, retrievers, chunks, order)
    if root_answer is not None:
        same = [s for s in llms if _span_text(s, "output", _ANSWER_KEYS) == root_answer]
        llm = same[-1] if same else llm
    if not question or not str(question).strip():
        report.add(NO_QUESTION, trace_id, skipped=True)
        return None
    answer, answered = root_answer, root
    if answer is None and llm is not None:
        answer, answered = (_span_text(llm, "output", _ANSWER_KEYS)
                            or _message(llm, "llm.output_messages", None, last=False)), llm
        if how:
            report.add(how, trace_id, skipped=False)
    if not whole:
        report.add(NO_ROOT, trace_id, skipped=False)
    if len(used) > 1:
        report.add(SEVERAL_RETRIEVERS, trace_id, skipped=False)
    if not chunks:
        report.add(EMPTY_RETRIEVAL, trace_id, skipped=False)
    info: dict[str, Any] = {
        "trace_id": trace_id, "span_id": root.span_id,
        "retriever_span_ids": [s.span_id for s in used],
        "retriever_documents": [len(_documents(s)) for s in used] if len(used) > 1 else None,
        "llm_span_id": llm.span_id if llm is not None else None,
        "name": root.name, "start_time": iso_time(min((s.start for s in spans if s.start), default=None)),
        "end_time": iso_time(max((s.end for s in spans if s.end), default=None)),
    }
    for key, attr in (("service", "service.name"), ("session_id", "session.id"), ("user_id", "user.id")):
        value = root.get(attr)
        if value not in (None, ""):
            info[key] = value
    if gathered(root.attributes, "metadata") not in (None, ""):
        with root.reading("metadata"):
            info["metadata"] = json_value(gathered(root.attributes, "metadata"), "metadata")
    metadata: dict[str, Any] = {"trace": {k: v for k, v in info.items() if v is not None}}
    given = [g for s in spans for g in s.signals] + list(signals)
    if given:
        metadata["signals"] = [g.record() for g in given]
    tags = _tags(root)
    try:
        case = Case(id=trace_id, question=str(question), answer=answer, contexts=chunks, tags=tags,
                    metadata=metadata)
    except ValidationError as exc:
        first = exc.errors()[0]
        part = str(first["loc"][0]) if first.get("loc") else ""
        message = str(first.get("msg", exc)).removeprefix("Value error, ")
        span, at = {"id": (root, "trace id"), "question": (asked, "input.value"),
                    "answer": (answered, "output.value"), "tags": (root, "tag.tags")}.get(
            part, (root, "metadata"))
        raise span.error(message, at) from None
    for note in dict.fromkeys(notes):
        report.add(note, trace_id, skipped=False)
    report.cases += 1
    return case


def trace_turn(spans: Sequence[Span]) -> Optional[Turn]:
    """The turn a trace's spans make (`ragbridge.traces.sessions`): its session (the root's, else
    the first span's that names one), start, and the root's question and answer; None outside a
    session."""
    real = [s for s in spans if s.span_id]
    if not real:
        return None
    root, _ = _root(sorted(real, key=_start))
    session = session_of(root) or next((session_of(s) for s in real if session_of(s)), None)
    if session is None:
        return None
    start = min((s.start for s in real if s.start), default=0)
    return Turn(session, root.trace_id, start, _span_text(root, "input", _QUESTION_KEYS),
                _span_text(root, "output", _ANSWER_KEYS))


def cases_from_spans(spans: Iterable[Span], signals: Optional[dict[str, list[Signal]]] = None
                     ) -> tuple[list[Case], TraceReport]:
    """Every trace of ``spans`` as a case (in the order traces first appear), each turn of a session
    with its session (`ragbridge.traces.sessions`), and the report."""
    report = TraceReport()
    cases, turns = [], []
    for trace_id, members in group_traces(spans).items():
        case = trace_case(members, report, (signals or {}).get(trace_id, ()))
        if case is not None:
            cases.append(case)
        turn = trace_turn(members)
        if turn is not None:
            turns.append(turn)
    add_sessions(cases, turns)
    return cases, report
