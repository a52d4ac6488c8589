"""OTLP JSON: spans as the OpenTelemetry collector's file exporter, the SDK's OTLP JSON file
exporter and the OTLP/HTTP JSON encoding write them.

A file is either JSON lines, one ``TracesData`` object (``{"resourceSpans": [...]}``) a line, which
is what the file exporters write and what is read as a stream, or one such object as a whole JSON
document (a saved OTLP/HTTP request body, possibly pretty-printed), read whole.

Each ``resourceSpans`` item holds a ``resource`` (its attributes: ``service.name``, ...) and
``scopeSpans`` (``instrumentationLibrarySpans`` in files of old exporters), each with ``spans``.
A span has ``traceId``, ``spanId``, ``parentSpanId`` (hex in OTLP JSON; base64, the protobuf JSON
mapping's form, is read too), ``name``, ``startTimeUnixNano``, ``endTimeUnixNano`` (integers, or
their decimal strings), ``attributes`` (a list of ``{"key", "value"}``, the value typed:
``stringValue``, ``intValue`` (a decimal string in JSON), ``doubleValue``, ``boolValue``,
``bytesValue``, ``arrayValue`` ``{"values": [...]}``, ``kvlistValue`` ``{"values": [{"key",
"value"}]}``), ``events`` and ``status`` (``code``: 1 or ``STATUS_CODE_OK``, 2 or
``STATUS_CODE_ERROR``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterator

from ..formats.files import DatasetError, parse_json, text_lines
from .spans import Span, hex_id, nanos

__all__ = ["read_spans", "is_otlp", "any_value", "attributes"]

_STATUS = {0: None, 1: "OK", 2: "ERROR", "STATUS_CODE_UNSET": None, "STATUS_CODE_OK": "OK",
           "STATUS_CODE_ERROR": "ERROR"}


def is_otlp(record: Any) -> bool:
    """Whether a JSON object is an OTLP ``TracesData`` (or ``ExportTraceServiceRequest``)."""
    return isinstance(record, dict) and "resourceSpans" in record


def any_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as a plain value."""
    if not isinstance(value, dict):
        return value
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        number = value["doubleValue"]
        number = float(number) if isinstance(number, str) else number
        return number if isinstance(number, (int, float)) and math.isfinite(number) else None
    if "arrayValue" in value:
        return [any_value(v) for v in (value["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in value:
        return attributes((value["kvlistValue"] or {}).get("values", []))
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def attributes(items: Any) -> dict[str, Any]:
    """OTLP's ``[{"key", "value"}]`` as a mapping."""
    out: dict[str, Any] = {}
    for item in items or []:
        if isinstance(item, dict) and "key" in item:
            out[str(item["key"])] = any_value(item.get("value"))
    return out


def _spans_of(data: dict, path: Path, line: int) -> Iterator[Span]:
    for rs in data.get("resourceSpans") or []:
        resource = attributes(((rs or {}).get("resource") or {}).get("attributes"))
        for ss in (rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []):
            for raw in (ss or {}).get("spans") or []:
                yield _span(raw, resource, path, line)


def _span(raw: Any, resource: dict, path: Path, line: int) -> Span:
    if not isinstance(raw, dict):
        raise DatasetError("a span must be a JSON object", path=path, line=line, field="spans")
    trace_id, span_id = hex_id(raw.get("traceId"), 16), hex_id(raw.get("spanId"), 8)
    if trace_id is None or span_id is None:
        missing = "traceId" if trace_id is None else "spanId"
        raise DatasetError(f"a span has no {missing}", path=path, line=line, field=missing,
                           hint="every OTLP span needs a traceId and a spanId")

    def detail() -> dict[str, Any]:
        try:
            status = raw.get("status") or {}
            return {
                "name": str(raw.get("name") or ""), "start": nanos(raw.get("startTimeUnixNano")),
                "end": nanos(raw.get("endTimeUnixNano")), "attributes": attributes(raw.get("attributes")),
                "events": [{"name": e.get("name", ""), "time": nanos(e.get("timeUnixNano")),
                            "attributes": attributes(e.get("attributes"))} for e in raw.get("events") or []],
                "status": _STATUS.get(status.get("code")),
            }
        except (TypeError, ValueError, AttributeError) as exc:
            raise DatasetError(f"span {span_id} is not valid OTLP JSON: {exc}", path=path, line=line,
                               field="spans") from None

    return Span(trace_id=trace_id, span_id=span_id, parent_id=hex_id(raw.get("parentSpanId"), 8),
                resource=resource, detail=detail)


def read_spans(path: Path) -> Iterator[Span]:
    """Every span of an OTLP JSON file, in file order (see the module docstring)."""
    path = Path(path)
    lines = text_lines(path)
    for n, text in lines:
        if not text.strip():
            continue
        try:
            first = json.loads(text)
        except ValueError:
            first = None
        if not is_otlp(first):  # one document over several lines
            yield from _whole(path)
            return
        yield from _spans_of(first, path, n)
        break
    for n, text in lines:
        if not text.strip():
            continue
        try:
            data = parse_json(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"not valid JSON: {exc.msg} at column {exc.colno}", path=path, line=n,
                               hint="each line of an OTLP JSON lines file is one {\"resourceSpans\": ...}"
                               ) from None
        if not is_otlp(data):
            raise DatasetError("not an OTLP traces object", path=path, line=n, field="resourceSpans",
                               hint="each line must be one {\"resourceSpans\": [...]} object")
        yield from _spans_of(data, path, n)


def _whole(path: Path) -> Iterator[Span]:
    text = path.read_bytes().decode("utf-8-sig", errors="replace")
    try:
        data = parse_json(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno) from None
    if not is_otlp(data):
        raise DatasetError("not an OTLP traces object", path=path, field="resourceSpans",
                           hint="an OTLP JSON file holds {\"resourceSpans\": [...]}")
    yield from _spans_of(data, path, 1)
