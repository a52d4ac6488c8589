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
``STATUS_CODE_ERROR``). The same names in snake case (``resource_spans``, ``trace_id``,
``string_value``: the protobuf JSON mapping with the proto field names, as some servers answer)
are read too.

Every value is checked as it is read: a list where a list belongs, ids, times and typed values that
are what they say; anything else is an error naming the file, the line and the field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterator, Optional

from ..formats.files import DatasetError, json_problem, parse_json, text_lines
from ..schema import MAX_METADATA_DEPTH
from .spans import Span, SpanError, hex_id, nanos, shown

__all__ = ["read_spans", "is_otlp", "any_value", "attributes", "otlp_span", "field"]

_HINT = "see the OTLP JSON encoding: resourceSpans[].scopeSpans[].spans[], attributes [{key, value}]"
_STATUS = {0: None, 1: "OK", 2: "ERROR", "STATUS_CODE_UNSET": None, "STATUS_CODE_OK": "OK",
           "STATUS_CODE_ERROR": "ERROR", "UNSET": None, "OK": "OK", "ERROR": "ERROR"}

#: the snake-case name of each camel-case OTLP JSON field this reader looks at
_SNAKE = {"resourceSpans": "resource_spans", "scopeSpans": "scope_spans",
          "instrumentationLibrarySpans": "instrumentation_library_spans", "traceId": "trace_id",
          "spanId": "span_id", "parentSpanId": "parent_span_id", "startTimeUnixNano": "start_time_unix_nano",
          "endTimeUnixNano": "end_time_unix_nano", "timeUnixNano": "time_unix_nano",
          "stringValue": "string_value", "boolValue": "bool_value", "intValue": "int_value",
          "doubleValue": "double_value", "arrayValue": "array_value", "kvlistValue": "kvlist_value",
          "bytesValue": "bytes_value"}


def field(record: dict, name: str) -> Any:
    """The OTLP JSON field ``name`` (camel case) of ``record``, or its snake-case form."""
    value = record.get(name)
    if value is None and name in _SNAKE:
        value = record.get(_SNAKE[name])
    return value


def is_otlp(record: Any) -> bool:
    """Whether a JSON object is an OTLP ``TracesData`` (or ``ExportTraceServiceRequest``)."""
    return isinstance(record, dict) and ("resourceSpans" in record or "resource_spans" in record)


def _items(value: Any, what: str) -> list:
    """A JSON list that OTLP expects (None: empty); anything else raises `SpanError`."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpanError(f"must be a list, got {shown(value)}", field=what, hint=_HINT)
    return value


def any_value(value: Any, key: str = "", depth: int = 0) -> Any:
    """An OTLP ``AnyValue`` as a plain value; raises `SpanError` (naming the attribute ``key``) for a
    value that is not what its type says, or nests more than `MAX_METADATA_DEPTH` levels."""
    if not isinstance(value, dict):
        return value
    if depth > MAX_METADATA_DEPTH:
        raise SpanError(f"nests more than {MAX_METADATA_DEPTH} levels of values, too deep to read", field=key)
    for name in ("stringValue", "boolValue", "intValue", "doubleValue", "arrayValue", "kvlistValue",
                 "bytesValue"):
        if name in value or _SNAKE[name] in value:
            got = field(value, name)
            break
    else:
        return None
    if name == "stringValue":
        return got if got is None or isinstance(got, str) else str(got)
    if name == "boolValue":
        if not isinstance(got, bool):
            raise SpanError(f"boolValue must be true or false, got {got!r}", field=key)
        return got
    if name == "intValue":
        if isinstance(got, int) and not isinstance(got, bool):
            return got
        if isinstance(got, str) and got.strip().lstrip("+-").isascii() and got.strip().lstrip("+-").isdigit():
            return int(got)
        raise SpanError(f"intValue must be an integer (or its decimal text), got {shown(got)}", field=key)
    if name == "doubleValue":
        number = got
        if isinstance(number, str):
            try:
                number = float(number)
            except ValueError:
                raise SpanError(f"doubleValue must be a number, got {shown(number)}", field=key) from None
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise SpanError(f"doubleValue must be a number, got {shown(got)}", field=key)
        return number if math.isfinite(number) else None
    if name == "arrayValue":
        inner = _items(got.get("values") if isinstance(got, dict) else got, f"{key}.arrayValue")
        return [any_value(v, key, depth + 1) for v in inner]
    if name == "kvlistValue":
        inner = _items(got.get("values") if isinstance(got, dict) else got, f"{key}.kvlistValue")
        return attributes(inner, key, depth + 1)
    return got


def attributes(items: Any, where: str = "attributes", depth: int = 0) -> dict[str, Any]:
    """OTLP's ``[{"key", "value"}]`` as a mapping; raises `SpanError` for anything else."""
    out: dict[str, Any] = {}
    for item in _items(items, where):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise SpanError(f"each attribute must be an object with a text key and a value, got "
                            f"{shown(item)}", field=where)
        key = f"{where}.{item['key']}" if depth else item["key"]
        out[item["key"]] = any_value(item.get("value"), key, depth)
    return out


def _spans_of(data: dict, path: Path, line: int) -> Iterator[Span]:
    try:
        batches = _items(field(data, "resourceSpans"), "resourceSpans")
        for i, rs in enumerate(batches):
            where = f"resourceSpans[{i}]"
            if not isinstance(rs, dict):
                raise SpanError("must be an object with resource and scopeSpans", field=where)
            resource = field(rs, "resource") or {}
            if not isinstance(resource, dict):
                raise SpanError("must be an object with attributes", field=f"{where}.resource")
            attrs = attributes(resource.get("attributes"), f"{where}.resource.attributes")
            scopes = field(rs, "scopeSpans")
            scopes = scopes if scopes is not None else field(rs, "instrumentationLibrarySpans")
            for j, ss in enumerate(_items(scopes, f"{where}.scopeSpans")):
                if not isinstance(ss, dict):
                    raise SpanError("must be an object with spans", field=f"{where}.scopeSpans[{j}]")
                for raw in _items(ss.get("spans"), f"{where}.scopeSpans[{j}].spans"):
                    yield otlp_span(raw, attrs, (str(path), line, "line"))
    except SpanError as exc:
        raise DatasetError(exc.message, path=path, line=line, field=exc.field,
                           hint=exc.hint or _HINT) from None


def otlp_span(raw: Any, resource: dict, origin: tuple[str, Optional[int], str]) -> Span:
    """One OTLP JSON span (``raw``) as a `Span`, read where ``origin`` says; its attributes, events and
    status are read when first used. Raises `DatasetError` for what cannot be read."""
    path, line, unit = origin
    if not isinstance(raw, dict):
        raise DatasetError("a span must be a JSON object", path=path, line=line, field="spans", unit=unit)
    ids = []
    for name, size in (("traceId", 16), ("spanId", 8), ("parentSpanId", 8)):
        try:
            ids.append(hex_id(field(raw, name), size))
        except SpanError as exc:
            raise DatasetError(exc.message, path=path, line=line, field=name, unit=unit,
                               hint=exc.hint) from None
    trace_id, span_id, parent_id = ids
    if trace_id is None or span_id is None:
        missing = "traceId" if trace_id is None else "spanId"
        raise DatasetError(f"a span has no {missing}", path=path, line=line, field=missing, unit=unit,
                           hint="every OTLP span needs a traceId and a spanId")

    def detail() -> dict[str, Any]:
        at = "status"
        try:
            status = raw.get("status") or {}
            if not isinstance(status, dict):
                raise SpanError(f"must be an object with a code, got {shown(status)}")
            out = {"status": _STATUS.get(status.get("code")) if isinstance(status.get("code"), (int, str))
                   else None}
            name = raw.get("name")
            out["name"] = name if isinstance(name, str) else ("" if name is None else str(name))
            for key, name in (("start", "startTimeUnixNano"), ("end", "endTimeUnixNano")):
                at = name
                out[key] = nanos(field(raw, name))
            at = "attributes"
            out["attributes"] = attributes(raw.get("attributes"))
            events = []
            for k, e in enumerate(_items(raw.get("events"), "events")):
                at = f"events[{k}]"
                if not isinstance(e, dict):
                    raise SpanError("must be an object with name, timeUnixNano and attributes")
                events.append({"name": str(e.get("name") or ""), "time": nanos(field(e, "timeUnixNano")),
                               "attributes": attributes(e.get("attributes"), f"events[{k}].attributes")})
            out["events"] = events
            return out
        except SpanError as exc:
            raise DatasetError(f"span {span_id}: {exc.message}", path=path, line=line, field=exc.field or at,
                               unit=unit, hint=exc.hint or _HINT) from None

    return Span(trace_id=trace_id, span_id=span_id, parent_id=parent_id, resource=resource, detail=detail,
                origin=origin)


def read_spans(path: Path) -> Iterator[Span]:
    """Every span of an OTLP JSON file, in file order (see the module docstring)."""
    path = Path(path)
    lines = text_lines(path)
    for n, text in lines:
        if not text.strip():
            continue
        try:
            first = json.loads(text)
        except (ValueError, RecursionError):
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
            last = next((t for _, t in lines if t.strip()), None) is None
            hint = ("the last line is cut short: is the exporter still writing? read the file once it "
                    "has flushed (or without its last line)" if last and not text.rstrip().endswith("}") else
                    "each line of an OTLP JSON lines file is one {\"resourceSpans\": ...}")
            raise DatasetError(json_problem(exc), path=path, line=n, hint=hint) from None
        except DatasetError as exc:
            exc.path, exc.line = str(path), n
            raise
        if not is_otlp(data):
            raise DatasetError("not an OTLP traces object", path=path, line=n, field="resourceSpans",
                               hint="each line must be one {\"resourceSpans\": [...]} object")
        yield from _spans_of(data, path, n)


def _whole(path: Path) -> Iterator[Span]:
    text = path.read_bytes().decode("utf-8-sig", errors="replace")
    try:
        data = parse_json(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno,
                           hint="an OTLP JSON file is one {\"resourceSpans\": ...} a line, or one document; "
                                "span objects one after another (the console exporter's output) are read "
                                "with --from otel-spans") from None
    except DatasetError as exc:
        exc.path = str(path)
        raise
    for item in (data if isinstance(data, list) else [data]):
        if not is_otlp(item):
            raise DatasetError("not an OTLP traces object", path=path, field="resourceSpans",
                               hint="an OTLP JSON file holds {\"resourceSpans\": [...]}")
        yield from _spans_of(item, path, 1)
