"""Spans one JSON object each, their attributes a flat object: what OpenTelemetry writes besides OTLP.

``otel-spans`` reads a file of span objects, in any of these layouts: one a line (JSON lines), one
after another pretty-printed (the SDK's ``ConsoleSpanExporter``, which writes ``span.to_json()``
objects of four-space indents, to stdout or a file), or a JSON list of them. The file is read as a
stream: memory holds one span.

A span object names its fields in one of the usual ways:

- the SDK's ``span.to_json()``: ``context`` ``{"trace_id": "0x...", "span_id": "0x..."}``,
  ``parent_id``, ``name``, ``start_time`` and ``end_time`` (ISO 8601), ``status``
  ``{"status_code": "OK" | "ERROR" | "UNSET"}``, ``attributes`` (a flat object:
  ``{"retrieval.documents.0.document.id": ...}``), ``events`` and ``resource`` ``{"attributes":
  {...}}``;
- OTLP's names for one span, as one span a line of a collector's output flattened to spans
  (``traceId``, ``spanId``, ``parentSpanId``, ``startTimeUnixNano``, ``endTimeUnixNano``,
  ``attributes`` as OTLP's typed ``[{"key", "value"}]`` list or as a flat object), in camel or snake
  case;
- a span table's row as a collector's database exporters write it (``TraceId``, ``SpanId``,
  ``ParentSpanId``, ``SpanName``, ``Timestamp``, ``Duration`` in nanoseconds, ``StatusCode``,
  ``SpanAttributes``, ``ResourceAttributes``, ``ServiceName``).

Attributes nested as objects (``{"retrieval": {"documents": [...]}}``) are flattened to the dotted
keys OpenTelemetry holds; ``span_kind``, where a span object carries it apart, is the OpenInference
span kind. Ids may be hex, ``0x``-prefixed hex or base64 (`ragbridge.traces.spans.hex_id`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterator, Optional

from ..formats.files import DatasetError, parse_json, text_lines
from .otlp import attributes as otlp_attributes
from .spans import Span, SpanError, flatten, hex_id, nanos, shown

__all__ = ["read_spans", "is_span_object", "span_from_object", "values"]

#: each field's names, in the order they are looked for (dotted: inside an object)
_NAMES = {
    "trace_id": ("context.trace_id", "traceId", "trace_id", "TraceId", "context.traceId"),
    "span_id": ("context.span_id", "spanId", "span_id", "SpanId", "context.spanId"),
    "parent_id": ("parent_id", "parentSpanId", "parent_span_id", "ParentSpanId", "parentId"),
    "name": ("name", "SpanName", "span_name"),
    "start": ("start_time", "startTimeUnixNano", "start_time_unix_nano", "startTime", "Timestamp"),
    "end": ("end_time", "endTimeUnixNano", "end_time_unix_nano", "endTime"),
    "attributes": ("attributes", "SpanAttributes", "span_attributes"),
    "resource": ("resource.attributes", "ResourceAttributes", "resource_attributes", "resource"),
    "status": ("status.status_code", "status.code", "StatusCode", "status_code", "status"),
}
_STATUS = {"OK": "OK", "ERROR": "ERROR", "STATUS_CODE_OK": "OK", "STATUS_CODE_ERROR": "ERROR", "1": "OK",
           "2": "ERROR"}
logger = logging.getLogger("ragbridge")
#: the files whose skipped lines were warned about (a sample reads a file more than once)
_WARNED: set[tuple[str, int, int]] = set()

_HINT = ("one span a JSON object: the OpenTelemetry SDK's span.to_json() (ConsoleSpanExporter), or traceId, "
         "spanId and attributes")


def _get(record: dict, name: str) -> tuple[Any, Optional[str]]:
    """The first of a field's names that ``record`` holds: its value and the name."""
    for key in _NAMES[name]:
        head, _, rest = key.partition(".")
        value = record.get(head)
        if rest:
            value = value.get(rest) if isinstance(value, dict) else None
        if value is not None:
            return value, key
    return None, None


def is_span_object(record: Any) -> bool:
    """Whether a JSON object is one span of the kinds this module reads (not an OTLP batch)."""
    if not isinstance(record, dict) or "resourceSpans" in record or "resource_spans" in record:
        return False
    return (_get(record, "trace_id")[0] is not None and _get(record, "span_id")[0] is not None
            and any(isinstance(record.get(k), (dict, list))
                    for k in ("attributes", "SpanAttributes", "span_attributes")))


def _attributes(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, list):
        return otlp_attributes(value, where)
    if not isinstance(value, dict):
        raise SpanError(f"must be an object (or OTLP's list of key and value), got {shown(value)}",
                        field=where, hint=_HINT)
    out: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, dict) or (isinstance(item, list) and any(isinstance(v, dict) for v in item)):
            flatten(item, str(key), out)
        else:
            out[str(key)] = item
    return out


def span_from_object(record: Any, origin: tuple[str, Optional[int], str]) -> Span:
    """One span object (see the module docstring) as a `Span`; raises `DatasetError` naming where it
    was read and the field for what cannot be read."""
    path, line, unit = origin
    if not isinstance(record, dict):
        raise DatasetError(f"a span must be a JSON object, got {shown(record)}", path=path, line=line,
                           unit=unit, hint=_HINT)
    at = "trace_id"
    try:
        ids = {}
        for key, size in (("trace_id", 16), ("span_id", 8), ("parent_id", 8)):
            value, at = _get(record, key)
            at = at or _NAMES[key][0]
            ids[key] = hex_id(value, size)
        for key in ("trace_id", "span_id"):
            if ids[key] is None:
                at = _NAMES[key][0]
                raise SpanError(f"a span has no {key.replace('_', ' ')}", hint=_HINT)
        name, _ = _get(record, "name")
        out: dict[str, Any] = {"name": name if isinstance(name, str) else ("" if name is None else str(name))}
        for key in ("start", "end"):
            value, at = _get(record, key)
            at = at or _NAMES[key][0]
            out[key] = nanos(value)
        if out["end"] is None and out["start"] is not None and record.get("Duration") is not None:
            at = "Duration"
            duration = record["Duration"]
            try:
                if isinstance(duration, bool) or not isinstance(duration, (int, float, str)):
                    raise ValueError
                out["end"] = nanos(out["start"] + int(float(duration)))
            except SpanError:
                raise
            except (ValueError, OverflowError):
                raise SpanError(f"must be a number of nanoseconds, got {shown(duration)}",
                                hint=_HINT) from None
        value, at = _get(record, "attributes")
        at = at or "attributes"
        attrs = _attributes(value, at)
        kind = record.get("span_kind")
        if isinstance(kind, str) and kind and "openinference.span.kind" not in attrs:
            attrs["openinference.span.kind"] = kind
        value, at = _get(record, "resource")
        at = at or "resource"
        resource = _attributes(value, at)
        if isinstance(record.get("ServiceName"), str):
            resource.setdefault("service.name", record["ServiceName"])
        value, at = _get(record, "status")
        status = (_STATUS.get(str(value).upper().removeprefix("STATUSCODE."))
                  if isinstance(value, (str, int)) else None)
        events = []
        at = "events"
        raw = record.get("events") if record.get("events") is not None else record.get("Events")
        if raw is not None and not isinstance(raw, list):
            raise SpanError(f"must be a list, got {shown(raw)}", hint=_HINT)
        for k, event in enumerate(raw or []):
            at = f"events[{k}]"
            if not isinstance(event, dict):
                raise SpanError(f"an event must be an object, got {shown(event)}", hint=_HINT)
            when = event.get("timestamp", event.get("timeUnixNano", event.get("time_unix_nano")))
            events.append({"name": str(event.get("name") or ""), "time": nanos(when),
                           "attributes": _attributes(event.get("attributes"), f"{at}.attributes")})
    except SpanError as exc:
        raise DatasetError(exc.message, path=path, line=line, unit=unit, field=exc.field or at,
                           hint=exc.hint or _HINT) from None
    return Span(trace_id=ids["trace_id"], span_id=ids["span_id"], parent_id=ids["parent_id"],
                name=out["name"], start=out["start"], end=out["end"], attributes=attrs, resource=resource,
                events=events, status=status, origin=origin)


def values(path: Path) -> Iterator[tuple[int, Any]]:
    """Each top-level JSON value of the file with the line it starts on: one a line, or several lines
    each (a pretty-printed object ends with a line holding ``}`` alone). Lines between the values
    that start no JSON value (an application's log lines around the console exporter's output) are
    skipped, and counted in a warning."""
    held: list[str] = []
    start = skipped = 0
    for n, text in text_lines(path):
        if not held:
            if not text.strip():
                continue
            stripped = text.strip()
            if stripped[0] not in "{[":
                skipped += 1
                continue
            if stripped[0] in "{[" and stripped[-1] in "}]":
                try:
                    yield n, parse_json(stripped)
                    continue
                except json.JSONDecodeError:
                    pass  # an opening line of a longer value
                except DatasetError as exc:
                    exc.path, exc.line = str(path), n
                    raise
            start = n
        held.append(text)
        if text.rstrip() in ("}", "]"):
            try:
                value = parse_json("\n".join(held))
            except json.JSONDecodeError:
                continue  # not its end yet
            except DatasetError as exc:
                exc.path, exc.line = str(path), start
                raise
            held = []
            yield start, value
    if held:
        try:
            parse_json("\n".join(held))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"not valid JSON: {exc.msg} (line {start + exc.lineno - 1})", path=path,
                               line=start, hint=_HINT) from None
    stat = path.stat()
    if skipped and (str(path), stat.st_mtime_ns, stat.st_size) not in _WARNED:
        _WARNED.add((str(path), stat.st_mtime_ns, stat.st_size))
        logger.warning("warning: %s: %d line(s) outside the span objects skipped (an application's log "
                       "lines?)", path, skipped)


def read_spans(path: Path) -> Iterator[Span]:
    """Every span of the file, in file order (see the module docstring)."""
    path = Path(path)
    for line, value in values(path):
        if isinstance(value, list):
            for i, item in enumerate(value, start=1):
                yield span_from_object(item, (str(path), i, "item"))
        else:
            yield span_from_object(value, (str(path), line, "line"))
