"""Langfuse's trace exports and API answers in, a score import out.

``langfuse`` (read only; recognised from the content, ``--from langfuse`` forces it) reads what the
Langfuse UI downloads and what its public API answers, as the SDKs v2 to v5 fetch them, in a file of
JSON lines (one record a line) or one JSON document (a record, or a list of them, pretty-printed or
not). A record is:

* a trace with its observations: the trace view's download (``{"trace": {...}, "observations":
  [...]}``, or ``{"observations": [...], "scores": [...]}``), or a trace as ``GET
  /api/public/traces/{id}`` answers it (SDK v2-v4 ``api.trace.get``: the trace's fields with its
  ``observations`` and ``scores``); several of them are several lines;
* one observation (the observations table's export, one a line or a list);
* a page of the public API, ``{"data": [...], "meta": {...}}``: observations (``GET
  /api/public/observations``, SDK v2-v4 ``api.observations.get_many``; ``GET
  /api/public/v2/observations``, SDK v5, whose ``input`` and ``output`` are JSON text), traces
  (``GET /api/public/traces``: its traces name their observations by id only, so they are counted
  and left out: fetch each trace, or its observations), or scores (``GET /api/public/scores``, ``GET
  /api/public/v3/scores``: they become the signals of their traces); pages of observations and of
  scores in one file of JSON lines give the cases and their signals together;
* one score, in the same shapes.

Each observation is a span: ``id`` (the span id; for spans sent over OpenTelemetry it is the
span's own id), ``traceId``, ``parentObservationId`` (none when ``isRootObservation``),
``name``, ``startTime``, ``endTime``, ``input``, ``output`` and ``metadata``. Its ``type`` gives the
kind: ``RETRIEVER`` is a retriever, ``GENERATION`` an LLM span (the other types are kept as they
are). A retriever's ``output`` holds the documents, as the application logged them: a list (or
``{"documents": [...]}``) of objects with ``id`` (or ``document_id``, ``doc_id``, ``chunk_id``,
``metadata.id``), the text (``content``, ``text``, ``page_content`` (LangChain's ``Document``) or
``pageContent`` (LangChain.js's)), ``score`` and ``metadata`` (``metadata.source`` is the chunk's
source), or of plain texts. An observation of another type (Langfuse's older LangChain handler
typed the retriever ``SPAN``) is a retriever when its output holds LangChain documents (objects with
``page_content`` or ``pageContent``), or its name says retriever and its output is a list of
documents: the case's report counts the traces read so. Where the observation came from
OpenTelemetry with OpenInference attributes (``metadata.attributes``), those attributes are read as
they are. The trace object's own ``input`` and ``output``, when the record has them, stand in for a
root observation's missing ones; ``sessionId``, ``userId`` and ``tags`` come from the observation or
its trace.

The answer is what the application returned to the user: the root's output (the trace's); without
one, the generation given the retrieved chunks (a query rewrite before the retrieval is not the
answer): `ragbridge.traces.cases`.

Scores become user signals on the case (``metadata["signals"]``): ``name``, ``value`` (a number; a
``BOOLEAN`` score's 1/0; a ``CATEGORICAL`` score's text, as in the v3 API, is its label),
``stringValue`` (the label of a ``CATEGORICAL`` score), ``comment`` (the note), ``source``
(``ANNOTATION``, ``API``, ``EVAL``), ``observationId`` (or the v3 ``subject``); from an observations
export, the columns Langfuse adds per score name (a list of the values given on that observation:
numbers, or categories). What is left out is counted in the report: documents without text (kept,
text empty), scores without a value, traces whose observations are named by id only.

``langfuse`` (a score format: ``ragbridge export-scores RUN --to langfuse --out scores.json``)
writes the body of Langfuse's batch score import, ``POST /api/public/scores``: a JSON list of
``CreateScoreRequest``, as the SDK v5 sends it with ``LangfuseAPI(...).scores.create(request=
[CreateScoreRequest(**s) for s in json.load(f)])``. One score each: ``id``, ``traceId``,
``observationId`` (the span the score is about), ``name``, ``value`` (the canonical 0..1 value),
``dataType`` ``NUMERIC``, ``comment`` (the reason) and ``metadata`` (``label``, ``case_id``,
``metric``, ``backend``). Score ids are derived from the trace, span and name, so importing the file
twice updates the same scores. Langfuse needs a value: scores that errored or do not apply are not
written (counted in a warning).
"""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from ragbridge.plugin import (
    MAX_METADATA_DEPTH,
    DatasetError,
    ScoreFormat,
    Signal,
    SpanError,
    TraceSpan as Span,
    deeper_than,
    flatten,
    hex_id,
    jsonl_lines,
    nanos,
    parse_json,
    shown,
    text_lines,
    trace_format,
)

__all__ = ["FORMATS", "SCORE_FORMATS", "read_spans", "write_scores", "is_langfuse_export", "records_spans",
           "score_bodies"]

#: the fields of an exported observation (Langfuse's ``convertObservation``, the export's joins and
#: the v2 API's field groups); any other column of an observations export whose cells are lists is a
#: score column
OBSERVATION_FIELDS = frozenset({
    "id", "traceId", "projectId", "type", "name", "startTime", "endTime", "completionStartTime",
    "parentObservationId", "input", "output", "metadata", "level", "statusMessage", "version",
    "environment", "model", "modelParameters", "modelId", "internalModelId", "promptId", "promptName",
    "promptVersion", "usage", "usageDetails", "providedUsageDetails", "costDetails",
    "providedCostDetails", "totalCost", "inputCost", "outputCost", "calculatedInputCost",
    "calculatedOutputCost", "calculatedTotalCost", "inputPrice", "outputPrice", "totalPrice",
    "latency", "timeToFirstToken", "createdAt", "updatedAt", "traceName", "traceTags",
    "traceTimestamp", "userId", "sessionId", "release", "tags", "bookmarked", "public", "comments",
    "toolDefinitions", "toolCalls", "toolCallNames", "usagePricingTierId", "usagePricingTierName",
    "unit", "promptTokens", "completionTokens", "totalTokens", "providedModelName", "isRootObservation",
    "usagePricingTierId",
})
_KINDS = {"GENERATION": "LLM", "RETRIEVER": "RETRIEVER", "EMBEDDING": "EMBEDDING"}
#: the keys of a retriever's output that hold its documents, and of a document that hold its text
_DOC_LISTS = ("documents", "results", "chunks", "contexts", "nodes", "source_documents", "sourceDocuments")
_TEXT_KEYS = ("content", "text", "page_content", "pageContent", "chunk", "document")
_LANGCHAIN_TEXT = ("page_content", "pageContent")

#: what the report counts
SPAN_RETRIEVER = ("a retriever logged as another type (SPAN, as Langfuse's older LangChain handler logs it): "
                  "read as the retriever by the documents in its output")
NO_OBSERVATIONS = "the trace has no observations"
IDS_ONLY = ("the trace names its observations by id only (the traces list): fetch the trace, or its "
            "observations, to read it")
SCORE_UNREAD = "scores with neither a value nor a name (not read)"
_HINT = "a Langfuse trace download, observations export or API answer (see docs/traces.md)"

Origin = tuple[str, Optional[int], str]


def _is_observation(record: dict[str, Any]) -> bool:
    return "id" in record and "type" in record and ("traceId" in record or "startTime" in record)


def _is_score(record: dict[str, Any]) -> bool:
    return "name" in record and ("value" in record or "stringValue" in record) and (
        "traceId" in record or "subject" in record or "observationId" in record or "dataType" in record)


def _is_trace(record: dict[str, Any]) -> bool:
    return isinstance(record.get("observations"), list) and (
        "trace" in record or "scores" in record or ("id" in record and "timestamp" in record))


def is_langfuse_export(record: dict[str, Any]) -> bool:
    """Whether a record is one Langfuse writes: a trace download or API trace, an observation, a score,
    or an API page of them."""
    if isinstance(record.get("data"), list) and ("meta" in record or len(record) == 1):
        first = next((r for r in record["data"] if isinstance(r, dict)), None)
        return first is not None and (_is_trace(first) or _is_observation(first) or _is_score(first)
                                      or ("id" in first and "timestamp" in first))
    return _is_trace(record) or _is_observation(record)


def _json_text(value: Any) -> tuple[Any, bool]:
    """An ``input`` or ``output`` as a value: the v2 API gives them as JSON text, parsed back here (a
    text that is not JSON stays text). Returns the value and whether it is JSON."""
    if isinstance(value, str):
        if value[:1] in ("{", "[") or (value[:1] == '"' and value[-1:] == '"' and len(value) > 1):
            try:
                parsed = parse_json(value)
            except DatasetError as exc:
                raise SpanError(exc.message, hint=exc.hint) from None
            except ValueError:
                return value, False
            return parsed, not isinstance(parsed, str)
        return value, False
    return value, value is not None


def _document_items(output: Any) -> Optional[list]:
    """The list a retriever's output holds its documents in, or None."""
    if isinstance(output, dict):
        output = next((output[k] for k in _DOC_LISTS if isinstance(output.get(k), list)), None)
    return output if isinstance(output, list) else None


def _holds_documents(name: str, output: Any) -> bool:
    """Whether an observation of another type is a retriever: its output holds LangChain documents, or
    its name says retriever and its output is a list of documents."""
    items = _document_items(output)
    if not items:
        return False
    if all(isinstance(i, dict) and any(k in i for k in _LANGCHAIN_TEXT) for i in items):
        return True
    return "retriev" in name.lower() and all(
        isinstance(i, str) or (isinstance(i, dict) and any(k in i for k in _TEXT_KEYS)) for i in items)


def _documents(output: Any) -> list[dict[str, Any]]:
    """A retriever observation's output as OpenInference documents (one without a text has no
    ``document.content``: the trace's report counts it, as for every trace format)."""
    items = _document_items(output)
    if items is None:
        if output is not None and not isinstance(output, (dict, str)):
            raise SpanError(f"a retriever's output must hold its documents (a list, or an object with "
                            f"documents), got {shown(output)}", field="output", hint=_HINT)
        items = [output] if isinstance(output, (dict, str)) and output != "" else []
    docs = []
    for item in items:
        if isinstance(item, str):
            docs.append({"document.content": item})
            continue
        if not isinstance(item, dict):
            docs.append({"document.content": json.dumps(item)})
            continue
        meta = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
        text = next((item[k] for k in _TEXT_KEYS if isinstance(item.get(k), str)), None)
        doc = {"document.id": next((item[k] for k in ("id", "document_id", "doc_id", "chunk_id")
                                    if item.get(k) not in (None, "")), meta.get("id")),
               "document.content": text,
               "document.score": item.get("score", meta.get("score")),
               "document.metadata": json.dumps(meta, ensure_ascii=False, default=str) if meta else None}
        docs.append({k: v for k, v in doc.items() if v is not None})
    return docs


def _signal(score: dict[str, Any]) -> Optional[Signal]:
    """A Langfuse score (API v1 or v3, a download's, the SDK's model dump) as a signal; None without a
    name or a value."""
    name = score.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    value = score.get("value")
    if value is not None and not isinstance(value, (int, float, str)):
        raise SpanError(f"a score's value must be a number or a text, got {shown(value)}", field="value",
                        hint=_HINT)
    kind = str(score.get("dataType") or "").upper()
    label = score.get("stringValue")
    number = None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        number = float(value)
    elif isinstance(value, bool):
        number = 1.0 if value else 0.0
    elif isinstance(value, str) and label in (None, ""):
        label = value  # the v3 API gives a categorical score's value as its text
    if kind == "CATEGORICAL":
        number = None
    if number is None and label in (None, "") and not score.get("comment"):
        return None
    subject = score.get("subject") if isinstance(score.get("subject"), dict) else {}
    observation = score.get("observationId") or (subject.get("id") if subject.get("kind") == "observation"
                                                 else None)
    return Signal(name=name, score=number, label=None if label in (None, "") else str(label),
                  note=score.get("comment") or None, span_id=hex_id(observation, 8),
                  source=(str(score["source"]).lower() if score.get("source") else None))


def _score_trace(score: dict[str, Any]) -> Optional[str]:
    subject = score.get("subject") if isinstance(score.get("subject"), dict) else {}
    trace = score.get("traceId") or subject.get("traceId") or (
        subject.get("id") if subject.get("kind") == "trace" else None)
    return hex_id(trace, 16)


def _column_signals(record: dict[str, Any], span_id: str) -> list[Signal]:
    out = []
    for key, value in record.items():
        if key in OBSERVATION_FIELDS or not isinstance(value, list) or not value:
            continue
        numbers = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)
                   and math.isfinite(v)]
        words = [v for v in value if isinstance(v, str)]
        if numbers and len(numbers) == len(value):
            out.append(Signal(name=str(key), score=float(sum(numbers) / len(numbers)), span_id=span_id))
        elif words and len(words) == len(value):
            out.append(Signal(name=str(key), label=words[-1], span_id=span_id))
    return out


def _error(exc: SpanError, origin: Origin, where: str) -> DatasetError:
    path, line, unit = origin
    at = ".".join(p for p in (where, exc.field) if p) or None
    return DatasetError(exc.message, path=path, line=line, field=at, unit=unit, hint=exc.hint or _HINT)


def _span(obs: dict[str, Any], origin: Origin, where: str, trace: Optional[dict] = None) -> Span:
    """One observation as a span (see the module docstring)."""
    at = "id"
    try:
        trace_id = hex_id(obs.get("traceId") or (trace or {}).get("id"), 16)
        span_id = hex_id(obs.get("id"), 8)
        if trace_id is None or span_id is None:
            at = "traceId" if trace_id is None else "id"
            raise SpanError(f"an observation has no {at}", hint="every observation needs an id and a traceId")
        at = "parentObservationId"
        parent = None if obs.get("isRootObservation") is True else hex_id(obs.get("parentObservationId"), 8)
        for at in ("input", "output", "metadata"):
            if deeper_than(obs.get(at), MAX_METADATA_DEPTH):
                raise SpanError(f"nests more than {MAX_METADATA_DEPTH} levels of objects and lists, too deep "
                                "to read", hint="store the deep part as a JSON string")
        at = "metadata"
        metadata, _ = _json_text(obs.get("metadata"))
        attributes: dict[str, Any] = {}
        if isinstance(metadata, dict) and isinstance(metadata.get("attributes"), dict):
            for key, value in metadata["attributes"].items():  # OpenTelemetry attributes, as sent
                if isinstance(value, list) and any(isinstance(v, dict) for v in value):
                    flatten(value, str(key), attributes)
                else:
                    attributes[str(key)] = value
        name = obs.get("name")
        name = name if isinstance(name, str) else ("" if name is None else str(name))
        kind = str(obs.get("type") or "").upper()
        root = parent is None and trace is not None
        at = "input"
        inputs, in_json = _json_text(obs.get("input"))
        if root and inputs is None:
            inputs, in_json = _json_text(trace.get("input"))
        at = "output"
        outputs, out_json = _json_text(obs.get("output"))
        if root and outputs is None:
            outputs, out_json = _json_text(trace.get("output"))
        notes = []
        if kind not in _KINDS and kind != "RETRIEVER" and "openinference.span.kind" not in attributes \
                and _holds_documents(name, outputs):
            kind = "RETRIEVER"
            notes.append(SPAN_RETRIEVER)
        attributes.setdefault("openinference.span.kind", _KINDS.get(kind, kind))
        for key, value, is_json in (("input", inputs, in_json), ("output", outputs, out_json)):
            if value is not None and f"{key}.value" not in attributes:
                attributes[f"{key}.value"] = value if isinstance(value, str) else json.dumps(
                    value, ensure_ascii=False, default=str)
                if is_json:
                    attributes[f"{key}.mime_type"] = "application/json"
        if attributes["openinference.span.kind"] == "RETRIEVER" and not any(
                k.startswith("retrieval.documents.") for k in attributes):
            docs = _documents(outputs)
            for i, doc in enumerate(docs):
                for key, value in doc.items():
                    attributes[f"retrieval.documents.{i}.{key}"] = value
        at = "tags"
        tags = obs.get("tags") if obs.get("tags") is not None else (trace or {}).get("tags")
        if tags is not None and (not isinstance(tags, list) or not all(isinstance(t, str) for t in tags)):
            raise SpanError(f"tags must be a list of texts, got {shown(tags)}", hint=_HINT)
        if parent is None and tags:
            attributes.setdefault("tag.tags", tags)
        for key, attr in (("sessionId", "session.id"), ("userId", "user.id")):
            at = key
            value = obs.get(key) or (trace or {}).get(key)
            if value not in (None, "") and not isinstance(value, (str, int)) or isinstance(value, bool):
                raise SpanError(f"{key} must be a text, got {shown(value)}", hint=_HINT)
            if value not in (None, "") and attr not in attributes:
                attributes[attr] = str(value)
        at = "startTime"
        start = nanos(obs.get("startTime"))
        at = "endTime"
        end = nanos(obs.get("endTime"))
    except SpanError as exc:
        exc.field = exc.field or at
        raise _error(exc, origin, where) from None
    level = str(obs.get("level") or "").upper()
    return Span(trace_id=trace_id, span_id=span_id, parent_id=parent, name=name, start=start, end=end,
                attributes=attributes, status="ERROR" if level == "ERROR" else None,
                signals=_column_signals(obs, span_id), origin=origin, notes=notes)


def _trace(doc: dict[str, Any], origin: Origin, where: str) -> Iterator[Span]:
    """A trace with its observations (a download, or the API's trace)."""
    trace = doc.get("trace") if isinstance(doc.get("trace"), dict) else (doc if "id" in doc else None)
    observations = doc["observations"]
    if not observations or all(isinstance(o, str) for o in observations):
        try:
            trace_id = hex_id((trace or {}).get("id"), 16)
        except SpanError as exc:
            raise _error(exc, origin, f"{where}id" if where else "id") from None
        if trace_id is not None:
            yield Span.about(trace_id, notes=[IDS_ONLY if observations else NO_OBSERVATIONS], origin=origin)
        return
    spans = []
    for i, obs in enumerate(observations):
        if not isinstance(obs, dict):
            raise DatasetError(f"an observation must be a JSON object, got {shown(obs)}", path=origin[0],
                               line=origin[1], unit=origin[2], field=f"{where}observations[{i}]", hint=_HINT)
        spans.append(_span(obs, origin, f"{where}observations[{i}]", trace))
    scores = doc.get("scores") if doc.get("scores") is not None else (trace or {}).get("scores")
    if scores is not None and not isinstance(scores, list):
        raise DatasetError(f"scores must be a list, got {shown(scores)}", path=origin[0], line=origin[1],
                           unit=origin[2], field=f"{where}scores", hint=_HINT)
    scores = scores or []
    if spans:
        by_id = {s.span_id: s for s in spans}
        roots = [s for s in spans if s.parent_id not in by_id] or spans
        root = min(roots, key=lambda s: s.start or 0)
        for i, score in enumerate(scores):
            if not isinstance(score, dict):
                continue  # scores named by id only
            try:
                signal = _signal(score)
            except SpanError as exc:
                raise _error(exc, origin, f"{where}scores[{i}]") from None
            if signal is None:
                root.notes.append(SCORE_UNREAD)
            else:
                by_id.get(signal.span_id or "", root).signals.append(signal)
    yield from spans


def _record(record: Any, origin: Origin, where: str = "") -> Iterator[Span]:
    """The spans of one record of a file (see the module docstring)."""
    if isinstance(record, list):
        for i, item in enumerate(record):
            yield from _record(item, origin, f"{where}[{i}].")
        return
    if not isinstance(record, dict):
        raise DatasetError(f"not a Langfuse record: got {shown(record)}", path=origin[0], line=origin[1],
                           unit=origin[2], field=where.rstrip(".") or None, hint=_HINT)
    for key in ("observations", "data"):
        if key in record and record[key] is not None and not isinstance(record[key], list) \
                and not _is_observation(record):
            raise DatasetError(f"{key} must be a list, got {shown(record[key])}", path=origin[0],
                               line=origin[1], unit=origin[2], field=f"{where}{key}", hint=_HINT)
    if isinstance(record.get("data"), list) and not _is_observation(record) and not _is_trace(record):
        for i, item in enumerate(record["data"]):
            yield from _record(item, origin, f"{where}data[{i}].")
        return
    if _is_trace(record):
        yield from _trace(record, origin, where)
    elif _is_observation(record):
        yield _span(record, origin, where.rstrip("."))
    elif _is_score(record):
        try:
            signal, trace_id = _signal(record), _score_trace(record)
        except SpanError as exc:
            raise _error(exc, origin, where.rstrip(".")) from None
        if trace_id is not None:
            yield Span.about(trace_id, signals=[signal] if signal else None,
                             notes=None if signal else [SCORE_UNREAD], origin=origin)
    elif "id" in record and ("timestamp" in record or "observations" in record):
        try:
            trace_id = hex_id(record.get("id"), 16)
        except SpanError as exc:
            raise _error(exc, origin, f"{where}id") from None
        if trace_id is not None:  # a trace of the traces list without its observations
            yield Span.about(trace_id, notes=[IDS_ONLY], origin=origin)
    else:
        keys = ", ".join(sorted(map(str, record))[:6])
        raise DatasetError(f"not a Langfuse observation, trace, score or page (its keys: {keys})",
                           path=origin[0], line=origin[1], unit=origin[2], field=where.rstrip(".") or None,
                           hint=_HINT)


def records_spans(records: Iterable[Any], origin: Origin) -> Iterator[Span]:
    """The spans of records of the shapes this module reads, all read where ``origin`` says (a page of
    a server's answer, say)."""
    for record in records:
        yield from _record(record, origin)


def read_spans(path: Path) -> Iterator[Span]:
    """Every observation of a Langfuse export as a span, in file order (see the module docstring)."""
    path = Path(path)
    first = next((text for _, text in text_lines(path) if text.strip()), "")
    try:
        whole_line = json.loads(first)
    except (ValueError, RecursionError):
        whole_line = None
    if isinstance(whole_line, (dict, list)):  # JSON lines: one record (or list) a line
        for line, record in jsonl_lines(path):
            yield from _record(record, (str(path), line, "line"))
        return
    try:
        doc = parse_json(path.read_bytes().decode("utf-8-sig"))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno, hint=_HINT) from None
    except DatasetError as exc:
        exc.path = str(path)
        raise
    except UnicodeDecodeError as exc:
        raise DatasetError(f"invalid UTF-8 (byte 0x{exc.object[exc.start]:02x})", path=path,
                           hint="save the file as UTF-8") from None
    if isinstance(doc, list):
        for i, item in enumerate(doc, start=1):
            yield from _record(item, (str(path), i, "item"))
    else:
        yield from _record(doc, (str(path), None, "line"))


def _score_id(*parts: Any) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "ragbridge-score:" + "\x00".join(map(str, parts))))


def score_bodies(rows: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Langfuse score bodies for the span evaluations with a value, and the warnings for the rest."""
    bodies, skipped, documents = [], 0, 0
    for row in rows:
        if row.get("document_position") is not None:
            documents += 1
            continue
        if row["score"] is None:
            skipped += 1
            continue
        body = {"id": _score_id(row["trace_id"], row["span_id"], row["name"]), "traceId": row["trace_id"],
                "observationId": row["span_id"], "name": row["name"], "value": float(row["score"]),
                "dataType": "NUMERIC",
                "metadata": {k: row[k] for k in ("label", "case_id", "metric", "backend") if row.get(k)}}
        if row.get("explanation"):
            body["comment"] = row["explanation"]
        bodies.append(body)
    notes = []
    if skipped:
        notes.append(f"{skipped} score(s) without a value (errored or undefined) not written: a Langfuse "
                     "score needs one")
    if documents:
        notes.append(f"{documents} per-document evaluation(s) not written: a Langfuse score is on a trace or "
                     "an observation, not on one of its documents")
    return bodies, notes


def write_scores(rows: list[dict[str, Any]], path: Path) -> list[str]:
    """The batch score import (see the module docstring); returns the warnings for what was left out."""
    bodies, notes = score_bodies(rows)
    Path(path).write_text(json.dumps(bodies, ensure_ascii=False, indent=1), encoding="utf-8")
    return notes


FORMATS = [
    trace_format(
        "langfuse", read_spans,
        "Langfuse traces: a trace download or the API's trace (with observations and scores), an "
        "observations export, API pages of observations, traces or scores (one record a line, a JSON "
        "list or one document): a case per trace with a retriever observation (read only)",
        recognise=is_langfuse_export,
    ),
]

SCORE_FORMATS = [
    ScoreFormat("langfuse", write_scores,
                "Langfuse's batch score import (POST /api/public/scores): a JSON list of scores", (".json",),
                needs_value=True, documents=False),
]
