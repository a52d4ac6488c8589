"""Langfuse's trace exports in, a score import file out.

``langfuse`` (read only; recognised from the content, ``--from langfuse`` forces it) reads:

* a trace downloaded from the trace view ("Download trace as JSON", ``trace-<id>.json``): either
  ``{"trace": {...}, "observations": [...]}`` or, from the server route, ``{"observations": [...],
  "scores": [...]}``; or a trace as the public API returns it (``GET /api/public/traces/{id}``:
  the trace's fields with its ``observations`` and ``scores``);
* an observations export (the observations table's batch export) as JSON lines or a JSON array,
  or the public API's observations list (``{"data": [...], "meta": {...}}``): one observation a
  record.

Each observation is a span: ``id`` (the span id; for spans sent over OpenTelemetry it is the
span's own id), ``traceId``, ``parentObservationId``, ``name``, ``startTime``, ``endTime``,
``input``, ``output`` and ``metadata``. Its ``type`` gives the kind: ``RETRIEVER`` is a retriever,
``GENERATION`` an LLM span (Langfuse's other types are kept as they are). A retriever's ``output``
holds the documents, as the application logged them: a list (or ``{"documents": [...]}``) of
objects with ``id`` (or ``document_id``, ``doc_id``, ``metadata.id``), the text (``content``,
``text`` or ``page_content``), ``score`` and ``metadata`` (``metadata.source`` is the chunk's
source), or of plain texts. Where the observation came from OpenTelemetry with OpenInference
attributes (``metadata.attributes``), those attributes are read as they are. The trace object's own
``input`` and ``output``, when the download has them, stand in for a root observation's missing ones.

Scores become user signals on the case (``metadata["signals"]``): from the download's ``scores``
(or ``trace.scores``): ``name``, ``value`` (a number; a ``BOOLEAN`` score's 1/0), ``stringValue``
(the label of a ``CATEGORICAL`` score), ``comment`` (the note), ``source`` (``ANNOTATION``,
``API``, ``EVAL``), ``observationId``; from an observations export, the columns Langfuse adds per
score name (a list of the values given on that observation: numbers, or categories).

``langfuse`` (a score format: ``ragbridge export-scores RUN --to langfuse --out scores.json``)
writes the body of Langfuse's batch score import, ``POST /api/public/scores`` (a JSON list of
``CreateScoreRequest``; the Python SDK's ``LangfuseAPI(...).scores.create(request=[...])``), one
score each: ``id``, ``traceId``, ``observationId`` (the span the score is about), ``name``,
``value`` (the canonical 0..1 value), ``dataType`` ``NUMERIC``, ``comment`` (the reason) and
``metadata`` (``label``, ``case_id``, ``metric``, ``backend``). Score ids are derived from the
trace, span and name, so importing the file twice updates the same scores. Langfuse needs a value:
scores that errored or do not apply are not written (counted in a warning).
"""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from ragbridge.plugin import (
    DatasetError,
    ScoreFormat,
    Signal,
    TraceSpan as Span,
    flatten,
    hex_id,
    jsonl_lines,
    nanos,
    parse_json,
    text_lines,
    trace_format,
)

__all__ = ["FORMATS", "SCORE_FORMATS", "read_spans", "write_scores", "is_langfuse_export"]

#: the fields of an exported observation (Langfuse's ``convertObservation`` and the export's joins);
#: any other column of an observations export whose cells are lists is a score column
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
})
_KINDS = {"GENERATION": "LLM", "RETRIEVER": "RETRIEVER", "EMBEDDING": "EMBEDDING"}


def is_langfuse_export(record: dict[str, Any]) -> bool:
    """Whether a record is a Langfuse trace download or one exported observation."""
    if isinstance(record.get("observations"), list) and ("trace" in record or "scores" in record):
        return True
    return {"traceId", "type", "startTime"} <= set(record) and "id" in record


def _text(value: Any) -> Optional[str]:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _documents(output: Any) -> list[dict[str, Any]]:
    """A retriever observation's output as OpenInference documents."""
    output = parse_json(output) if isinstance(output, str) and output[:1] in "[{" else output
    if isinstance(output, dict):
        output = next((output[k] for k in ("documents", "results", "chunks", "contexts", "nodes")
                       if isinstance(output.get(k), list)), [output])
    if not isinstance(output, list):
        return []
    docs = []
    for item in output:
        if isinstance(item, str):
            docs.append({"document.content": item})
            continue
        if not isinstance(item, dict):
            continue
        meta = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
        doc = {"document.id": next((item[k] for k in ("id", "document_id", "doc_id", "chunk_id")
                                    if item.get(k) not in (None, "")), meta.get("id")),
               "document.content": next((item[k] for k in ("content", "text", "page_content")
                                         if isinstance(item.get(k), str)), None),
               "document.score": item.get("score"),
               "document.metadata": json.dumps(meta, ensure_ascii=False, default=str) if meta else None}
        docs.append({k: v for k, v in doc.items() if v is not None})
    return docs


def _signal(score: dict[str, Any]) -> Optional[Signal]:
    name = score.get("name")
    if not name:
        return None
    value = score.get("value")
    number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) else None
    kind = str(score.get("dataType") or "").upper()
    label = score.get("stringValue")
    if kind == "CATEGORICAL":
        number = None
    return Signal(name=str(name), score=number, label=None if label in (None, "") else str(label),
                  note=score.get("comment") or None, span_id=hex_id(score.get("observationId"), 8),
                  source=(str(score["source"]).lower() if score.get("source") else None))


def _column_signals(record: dict[str, Any], span_id: str) -> list[Signal]:
    out = []
    for key, value in record.items():
        if key in OBSERVATION_FIELDS or not isinstance(value, list) or not value:
            continue
        numbers = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
        words = [v for v in value if isinstance(v, str)]
        if numbers and len(numbers) == len(value):
            out.append(Signal(name=str(key), score=float(sum(numbers) / len(numbers)), span_id=span_id))
        elif words and len(words) == len(value):
            out.append(Signal(name=str(key), label=words[-1], span_id=span_id))
    return out


def _span(obs: Any, where: tuple[Path, int, str], trace: Optional[dict] = None) -> Span:
    path, line, unit = where
    if not isinstance(obs, dict):
        raise DatasetError("an observation must be a JSON object", path=path, line=line, unit=unit)
    trace_id = hex_id(obs.get("traceId") or (trace or {}).get("id"), 16)
    span_id = hex_id(obs.get("id"), 8)
    if trace_id is None or span_id is None:
        field = "traceId" if trace_id is None else "id"
        raise DatasetError(f"an observation has no {field}", path=path, line=line, field=field, unit=unit)
    metadata = obs.get("metadata")
    metadata = parse_json(metadata) if isinstance(metadata, str) and metadata[:1] == "{" else metadata
    attributes: dict[str, Any] = {}
    if isinstance(metadata, dict) and isinstance(metadata.get("attributes"), dict):
        for key, value in metadata["attributes"].items():  # OpenTelemetry attributes, as sent
            if isinstance(value, list) and any(isinstance(v, dict) for v in value):
                flatten(value, key, attributes)
            else:
                attributes[key] = value
    kind = str(obs.get("type") or "").upper()
    attributes.setdefault("openinference.span.kind", _KINDS.get(kind, kind))
    parent = hex_id(obs.get("parentObservationId"), 8)
    inputs, outputs = obs.get("input"), obs.get("output")
    if parent is None and trace:
        inputs = trace.get("input") if inputs is None else inputs
        outputs = trace.get("output") if outputs is None else outputs
    for key, value in (("input", inputs), ("output", outputs)):
        if value is not None and f"{key}.value" not in attributes:
            attributes[f"{key}.value"] = _text(value)
            if not isinstance(value, str):
                attributes[f"{key}.mime_type"] = "application/json"
    if attributes["openinference.span.kind"] == "RETRIEVER" and not any(
            k.startswith("retrieval.documents.") for k in attributes):
        for i, doc in enumerate(_documents(outputs)):
            for key, value in doc.items():
                attributes[f"retrieval.documents.{i}.{key}"] = value
    if parent is None and trace and isinstance(trace.get("tags"), list):
        attributes.setdefault("tag.tags", trace["tags"])
    for key, attr in (("sessionId", "session.id"), ("userId", "user.id")):
        value = obs.get(key) or (trace or {}).get(key)
        if value and attr not in attributes:
            attributes[attr] = value
    level = str(obs.get("level") or "").upper()
    return Span(trace_id=trace_id, span_id=span_id, parent_id=parent, name=str(obs.get("name") or ""),
                start=nanos(obs.get("startTime")), end=nanos(obs.get("endTime")), attributes=attributes,
                status="ERROR" if level == "ERROR" else None, signals=_column_signals(obs, span_id))


def _download(doc: dict[str, Any], path: Path) -> Iterator[Span]:
    trace = doc.get("trace") if isinstance(doc.get("trace"), dict) else (doc if "id" in doc else None)
    spans = [_span(o, (path, i, "observation"), trace) for i, o in enumerate(doc["observations"], start=1)]
    scores = doc.get("scores") if isinstance(doc.get("scores"), list) else (trace or {}).get("scores") or []
    if spans:
        by_id = {s.span_id: s for s in spans}
        roots = [s for s in spans if s.parent_id not in by_id] or spans
        root = min(roots, key=lambda s: s.start or 0)
        for score in scores:
            signal = _signal(score) if isinstance(score, dict) else None
            if signal is not None:
                by_id.get(signal.span_id or "", root).signals.append(signal)
    yield from spans


def read_spans(path: Path) -> Iterator[Span]:
    """Every observation of a Langfuse export as a span, in file order (see the module docstring)."""
    path = Path(path)
    first = next((text for _, text in text_lines(path) if text.strip()), "")
    try:
        whole_line = json.loads(first)
    except ValueError:
        whole_line = None
    if isinstance(whole_line, dict) and not isinstance(whole_line.get("observations"), list):
        for line, record in jsonl_lines(path):  # one observation a line
            yield _span(record, (path, line, "line"))
        return
    try:
        doc = parse_json(path.read_bytes().decode("utf-8-sig"))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno) from None
    if isinstance(doc, dict) and isinstance(doc.get("observations"), list):
        yield from _download(doc, path)
    elif isinstance(doc, dict) and isinstance(doc.get("data"), list):  # the public API's list
        yield from (_span(o, (path, i, "item")) for i, o in enumerate(doc["data"], start=1))
    elif isinstance(doc, list):
        yield from (_span(o, (path, i, "item")) for i, o in enumerate(doc, start=1))
    else:
        raise DatasetError("is not a Langfuse trace download or observations export", path=path,
                           hint='expected {"observations": [...]} or a list of observations')


def _score_id(*parts: Any) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "ragbridge-score:" + "\x00".join(map(str, parts))))


def score_bodies(rows: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Langfuse score bodies for the span evaluations with a value, and how many had none."""
    bodies, skipped = [], 0
    for row in rows:
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
    return bodies, skipped


def write_scores(rows: list[dict[str, Any]], path: Path) -> list[str]:
    """The batch score import (see the module docstring); returns the warning for skipped scores."""
    bodies, skipped = score_bodies(rows)
    Path(path).write_text(json.dumps(bodies, ensure_ascii=False, indent=1), encoding="utf-8")
    if skipped:
        return [f"{skipped} score(s) without a value (errored or undefined) not written: a Langfuse score "
                "needs one"]
    return []


FORMATS = [
    trace_format(
        "langfuse", read_spans,
        "a Langfuse trace download (trace + observations, or observations + scores) or observations "
        "export (JSON lines or a JSON list): a case per trace with a RETRIEVER observation (read only)",
        recognise=is_langfuse_export,
    ),
]

SCORE_FORMATS = [
    ScoreFormat("langfuse", write_scores,
                "Langfuse's batch score import (POST /api/public/scores): a JSON list of scores", (".json",)),
]
