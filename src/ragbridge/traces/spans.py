"""One span of a trace, as every trace format reads it, and the small rules they share.

A `Span` is what a trace reader yields: the trace and span ids as lowercase hex (OTLP's JSON
form; a base64 id, the protobuf JSON mapping's form, is turned into hex), the parent span's id,
the name, the start and end in Unix nanoseconds, and the attributes as one flat mapping of dotted
keys to plain values (``retrieval.documents.0.document.id``), which is how OpenTelemetry holds them.
Resource attributes (``service.name``) are kept apart, in ``resource``. Span events (name, time,
attributes) are kept in ``events``, and the user signals an export carries for the span (a `Signal`
each: feedback, annotations) in ``signals``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Optional

__all__ = ["Span", "Signal", "hex_id", "flatten", "indexed", "iso_time", "nanos", "json_value"]

_HEX = re.compile(r"^[0-9a-fA-F]+$")


@dataclass
class Signal:
    """A user's or annotator's signal on a trace: a thumbs up or down, a score, a label, a note.
    ``name`` says which (``thumbs``, ``user_feedback``, ...); ``score`` is a number, ``label`` a word,
    ``note`` free text; ``span_id`` the span it was given on; ``source`` who gave it (``user``,
    ``annotator``, ``api``, ...) as the export says."""

    name: str
    score: Optional[float] = None
    label: Optional[str] = None
    note: Optional[str] = None
    span_id: Optional[str] = None
    source: Optional[str] = None

    def record(self) -> dict[str, Any]:
        """The signal as a case's ``metadata["signals"]`` holds it (absent parts left out)."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


class Span:
    """One span (see the module docstring).

    A reader may give the ids and hand the rest over as ``detail``, a function returning the other
    fields (``name``, ``start``, ``end``, ``attributes``, ``events``, ``status``) as a mapping: it
    is called when one of them is first read, so a pass that only groups or draws trace ids never
    decodes the spans it does not keep."""

    __slots__ = ("trace_id", "span_id", "parent_id", "resource", "signals", "_detail", "_name", "_start",
                 "_end", "_attributes", "_events", "_status")

    def __init__(self, trace_id: str, span_id: str, parent_id: Optional[str] = None, name: str = "",
                 start: Optional[int] = None, end: Optional[int] = None,
                 attributes: Optional[dict[str, Any]] = None, resource: Optional[dict[str, Any]] = None,
                 events: Optional[list[dict[str, Any]]] = None, status: Optional[str] = None,
                 signals: Optional[list[Signal]] = None,
                 detail: Optional[Callable[[], dict[str, Any]]] = None):
        self.trace_id, self.span_id, self.parent_id = trace_id, span_id, parent_id
        self.resource = resource if resource is not None else {}
        self.signals = signals if signals is not None else []
        self._detail = detail
        self._name, self._start, self._end, self._status = name, start, end, status
        self._attributes = attributes if attributes is not None else {}
        self._events = events if events is not None else []

    def _load(self) -> None:
        detail, self._detail = self._detail, None
        for key, value in detail().items():
            setattr(self, "_" + key, value)

    def _field(self, key: str) -> Any:
        if self._detail is not None:
            self._load()
        return getattr(self, "_" + key)

    name = property(lambda self: self._field("name"))
    start = property(lambda self: self._field("start"))
    end = property(lambda self: self._field("end"))
    attributes = property(lambda self: self._field("attributes"))
    events = property(lambda self: self._field("events"))
    status = property(lambda self: self._field("status"))

    def __repr__(self) -> str:
        return f"Span(trace_id={self.trace_id!r}, span_id={self.span_id!r}, name={self.name!r})"

    def get(self, key: str) -> Any:
        """An attribute of the span, else of its resource."""
        value = self.attributes.get(key)
        return self.resource.get(key) if value is None else value


def hex_id(value: Any, size: int) -> Optional[str]:
    """A trace id (``size`` 16 bytes) or span id (8) as lowercase hex, from hex, ``0x``-prefixed
    hex, base64 or raw bytes; None for an absent or all-zero id. Another string is kept as it is
    (an export's own ids, e.g. UUIDs)."""
    if value is None:
        return None
    if type(value) is str and len(value) == 2 * size and value.islower() and _HEX.match(value):
        return None if value.strip("0") == "" else value  # the common case: OTLP JSON's own hex
    if isinstance(value, (bytes, bytearray)):
        text = bytes(value).hex()
    else:
        text = str(value).strip()
        bare = text[2:] if text.startswith(("0x", "0X")) else text
        if len(bare) == 2 * size and _HEX.match(bare):
            text = bare
        else:  # base64 may begin with "0x" too (one id in about 2,000)
            try:
                raw = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                raw = b""
            if len(raw) == size:
                text = raw.hex()
    text = text.lower()
    if not text or set(text) == {"0"}:
        return None
    return text


def flatten(value: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
    """Nested mappings and lists of mappings as dotted keys (``a.0.b``), as OpenTelemetry attributes
    hold them; a list of plain values stays one value."""
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, list) and value and any(isinstance(v, dict) for v in value):
        for i, v in enumerate(value):
            flatten(v, f"{prefix}.{i}" if prefix else str(i), out)
    else:
        out[prefix] = value
    return out


def indexed(attributes: dict[str, Any], prefix: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """The items of a flattened list attribute, in index order: for ``prefix`` ``retrieval.documents``,
    ``(0, {"document.id": ..., "document.content": ...})``, ``(1, {...})``, ..."""
    items: dict[int, dict[str, Any]] = {}
    start = prefix + "."
    for key, value in attributes.items():
        if key.startswith(start):
            index, _, rest = key[len(start):].partition(".")
            if index.isdigit():
                items.setdefault(int(index), {})[rest] = value
    for index in sorted(items):
        yield index, items[index]


def nanos(value: Any) -> Optional[int]:
    """A time as Unix nanoseconds: from a number (or its string) of seconds, milliseconds,
    microseconds or nanoseconds since 1970, told apart by their size (a date after 1973 in any of
    them), or from an ISO 8601 text or a ``datetime``."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        if value != value:
            return None
        for limit, scale in ((1e11, 1_000_000_000), (1e14, 1_000_000), (1e17, 1000)):
            if abs(value) < limit:
                return int(value * scale)
        return int(value)
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return int(moment.timestamp() * 1_000_000) * 1000
    text = str(value).strip()
    if text.isdigit():
        return nanos(int(text))
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1_000_000) * 1000


def iso_time(ns: Optional[int]) -> Optional[str]:
    """Unix nanoseconds as ISO 8601 UTC with microseconds (``2026-11-02T10:00:00.123456Z``)."""
    if ns is None:
        return None
    moment = datetime.fromtimestamp(ns // 1000 / 1_000_000, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def json_value(value: Any) -> Any:
    """A value that may be JSON text (OpenInference keeps metadata as a JSON string) as parsed JSON;
    anything else, or text that is not JSON, as it is."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
