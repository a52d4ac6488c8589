"""One span of a trace, as every trace format reads it, and the small rules they share.

A `Span` is what a trace reader yields: the trace and span ids as lowercase hex (OTLP's JSON
form; a base64 id, the protobuf JSON mapping's form, is turned into hex), the parent span's id,
the name, the start and end in Unix nanoseconds, and the attributes as one flat mapping of dotted
keys to plain values (``retrieval.documents.0.document.id``), which is how OpenTelemetry holds them.
Resource attributes (``service.name``) are kept apart, in ``resource``. Span events (name, time,
attributes) are kept in ``events``, and the user signals an export carries for the span (a `Signal`
each: feedback, annotations) in ``signals``; what a reader noticed about it (a document without
text, a retriever recognised by its output) in ``notes``, which the trace's report counts.
`Span.about` carries signals or notes about a whole trace in the stream. ``origin`` is where the
span was read (file, line or row, or the page of a server's answer), so a value that cannot be read
later, when the trace is turned into a case, is an error naming the file, the line and the field
(`Span.reading`).

Values are read strictly: a list item's index is written in the digits 0-9 as a plain number (an
index in other digits, ``retrieval.documents.١`` or a superscript, would land silently on another
item), a time lies between 1970 and the year 9999, a JSON value nests at most `MAX_METADATA_DEPTH`
levels; anything else raises `SpanError` (a ``ValueError`` naming the field).
"""

from __future__ import annotations

import base64
import binascii
import re
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator, Optional

from pydantic import ValidationError

from ..formats.files import DatasetError, parse_json
from ..schema import MAX_METADATA_DEPTH, deeper_than

__all__ = ["Span", "Signal", "SpanError", "shown", "hex_id", "flatten", "list_index", "indexed", "gathered",
           "iso_time", "nanos", "json_value", "MAX_NANOS"]

_HEX = re.compile(r"^[0-9a-fA-F]+$")

#: the last nanosecond of the year 9999, the last a date can name
MAX_NANOS = 253_402_300_799_999_999_999


class SpanError(ValueError):
    """A value of a span that cannot be read; ``field`` names the attribute or field when known."""

    def __init__(self, message: str, field: Optional[str] = None, hint: Optional[str] = None):
        super().__init__(message)
        self.message, self.field, self.hint = message, field, hint


@dataclass
class Signal:
    """A user's or annotator's signal on a trace: a thumbs up or down, a score, a label, a note.
    ``name`` says which (``thumbs``, ``user_feedback``, ...); ``score`` is a number, ``label`` a word,
    ``note`` free text; ``span_id`` the span it was given on; ``source`` who gave it (``user``,
    ``annotator``, ``api``, ...) as the export says; ``polarity`` whether a high score is good
    (``positive``) or bad (``negative``), when the signal says (`ragbridge.traces.signals`)."""

    name: str
    score: Optional[float] = None
    label: Optional[str] = None
    note: Optional[str] = None
    span_id: Optional[str] = None
    source: Optional[str] = None
    polarity: Optional[str] = None

    def record(self) -> dict[str, Any]:
        """The signal as a case's ``metadata["signals"]`` holds it (absent parts left out)."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


class Span:
    """One span (see the module docstring).

    A reader may give the ids and hand the rest over as ``detail``, a function returning the other
    fields (``name``, ``start``, ``end``, ``attributes``, ``events``, ``status``) as a mapping: it
    is called when one of them is first read, so a pass that only groups or draws trace ids never
    decodes the spans it does not keep."""

    __slots__ = ("trace_id", "span_id", "parent_id", "resource", "signals", "notes", "origin", "_detail",
                 "_name", "_start", "_end", "_attributes", "_events", "_status")

    def __init__(self, trace_id: str, span_id: str, parent_id: Optional[str] = None, name: str = "",
                 start: Optional[int] = None, end: Optional[int] = None,
                 attributes: Optional[dict[str, Any]] = None, resource: Optional[dict[str, Any]] = None,
                 events: Optional[list[dict[str, Any]]] = None, status: Optional[str] = None,
                 signals: Optional[list[Signal]] = None,
                 detail: Optional[Callable[[], dict[str, Any]]] = None,
                 origin: Optional[tuple[str, Optional[int], str]] = None,
                 notes: Optional[list[str]] = None):
        self.trace_id, self.span_id, self.parent_id = trace_id, span_id, parent_id
        self.origin = origin
        self.notes = notes if notes is not None else []
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

    @classmethod
    def about(cls, trace_id: str, signals: Optional[list[Signal]] = None, notes: Optional[list[str]] = None,
              origin: Optional[tuple[str, Optional[int], str]] = None) -> "Span":
        """Not a span: what an export says about a trace apart from its spans (scores given on it, or why
        its spans are not there), carried in the span stream so that it reaches the trace's case. Its
        ``span_id`` is empty; turning a trace into a case sets it apart from the spans."""
        return cls(trace_id, "", signals=signals, notes=notes, origin=origin)

    def get(self, key: str) -> Any:
        """An attribute of the span, else of its resource."""
        value = self.attributes.get(key)
        return self.resource.get(key) if value is None else value

    def error(self, message: str, field: Optional[str] = None, hint: Optional[str] = None) -> DatasetError:
        """A `DatasetError` about this span: where it was read (``origin``), the field, the span's id."""
        path, line, unit = self.origin or (None, None, "line")
        return DatasetError(f"span {self.span_id}: {message}", path=path, line=line, field=field, unit=unit,
                            hint=hint)

    @contextmanager
    def reading(self, field: Optional[str] = None) -> Iterator[None]:
        """Read a part of this span: a `SpanError`, a pydantic ``ValidationError`` or a `DatasetError`
        without a location raised inside becomes a `DatasetError` naming where the span was read and
        the field (the error's own, else ``field``)."""
        try:
            yield
        except SpanError as exc:
            raise self.error(exc.message, exc.field or field, exc.hint) from None
        except ValidationError as exc:
            first = exc.errors()[0]
            message = str(first.get("msg", exc)).removeprefix("Value error, ")
            raise self.error(message, field) from None
        except DatasetError as exc:
            if exc.path is not None:
                raise
            raise self.error(exc.message, exc.field or field, exc.hint) from None


def hex_id(value: Any, size: int) -> Optional[str]:
    """A trace id (``size`` 16 bytes) or span id (8) as lowercase hex, from hex, ``0x``-prefixed
    hex, base64 or raw bytes; None for an absent or all-zero id. Another string is kept as it is
    (an export's own ids, e.g. UUIDs)."""
    if value is None:
        return None
    if type(value) is str and len(value) == 2 * size and value.islower() and _HEX.match(value):
        return None if value.strip("0") == "" else value  # the common case: OTLP JSON's own hex
    if isinstance(value, bool) or not isinstance(value, (str, int, bytes, bytearray)):
        raise SpanError(f"an id must be a string, got {shown(value)}", hint="write ids as hex or text")
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


def shown(value: Any, width: int = 40) -> str:
    """A value as an error message shows it: a plain value's repr, cut to ``width``; a container by
    its kind alone (it may be large or deep)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def flatten(value: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
    """Nested mappings and lists of mappings as dotted keys (``a.0.b``), as OpenTelemetry attributes
    hold them; a list of plain values stays one value. Raises `SpanError` for a value nesting more
    than `MAX_METADATA_DEPTH` levels."""
    if deeper_than(value, MAX_METADATA_DEPTH):
        raise SpanError(f"nests more than {MAX_METADATA_DEPTH} levels of objects and lists, too deep to read",
                        field=prefix or None, hint="store the deep part as a JSON string")
    stack = [(prefix, value)]
    while stack:
        at, item = stack.pop()
        if isinstance(item, dict):
            stack.extend((f"{at}.{k}" if at else str(k), v) for k, v in reversed(list(item.items())))
        elif isinstance(item, list) and item and any(isinstance(v, dict) for v in item):
            stack.extend((f"{at}.{i}" if at else str(i), v) for i, v in reversed(list(enumerate(item))))
        else:
            out[at] = item
    return out


def list_index(text: str, key: str) -> Optional[int]:
    """``text`` as a list item's index in the attribute ``key``: a plain number in the digits 0-9; None
    for a part that is no number at all. Raises `SpanError` for a number written otherwise (other
    digits, a superscript, a leading zero): it would name another item's index."""
    if text.isascii() and text.isdigit() and (text == "0" or text[0] != "0"):
        return int(text)
    if any(c.isdigit() for c in text) and (text.isdigit() or text.isdecimal() or text.isnumeric()):
        raise SpanError(f"the list index {text!r} is not a plain number in the digits 0-9 (it would be read "
                        "as another item's index)", field=key,
                        hint="number the items 0, 1, 2, ... in ASCII digits")
    return None


def indexed(attributes: dict[str, Any], prefix: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """The items of a flattened list attribute, in index order: for ``prefix`` ``retrieval.documents``,
    ``(0, {"document.id": ..., "document.content": ...})``, ``(1, {...})``, ... Raises `SpanError`
    for an index not written as a plain number in the digits 0-9 (`list_index`)."""
    items: dict[int, dict[str, Any]] = {}
    start = prefix + "."
    for key, value in attributes.items():
        if key.startswith(start):
            text, _, rest = key[len(start):].partition(".")
            index = list_index(text, key)
            if index is not None:
                items.setdefault(index, {})[rest] = value
    for index in sorted(items):
        yield index, items[index]


def gathered(attributes: dict[str, Any], key: str) -> Any:
    """The attribute ``key`` (``metadata``, ``document.metadata``: a JSON string, or an object), or,
    when a store has flattened its object into dotted keys (a trace store's REST API may write
    ``document.metadata.source``), those keys gathered back into one object; None when neither."""
    value = attributes.get(key)
    if value is not None:
        return value
    start = key + "."
    found = {k[len(start):]: v for k, v in attributes.items() if k.startswith(start)}
    return found or None


_TIME_HINT = "write times as Unix nanoseconds (OTLP) or ISO 8601 text with a time zone"


def nanos(value: Any) -> Optional[int]:
    """A time as Unix nanoseconds: from a number (or its string) of seconds, milliseconds,
    microseconds or nanoseconds since 1970, told apart by their size (a date after 1973 in any of
    them), or from an ISO 8601 text or a ``datetime``. None for no time (absent, empty, 0: OTLP's
    unset time). Raises `SpanError` for a value that is no time, or one before 1970 or after the
    year 9999."""
    if value is None or value == "" or value == 0:
        return None
    if isinstance(value, bool):
        raise SpanError(f"a time must be a number or an ISO 8601 text, got {value!r}", hint=_TIME_HINT)
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, (int, float)):
        if abs(value) == float("inf"):
            raise SpanError(f"the time {value!r} is not a time", hint=_TIME_HINT)
        ns = int(value)
        for limit, scale in ((1e11, 1_000_000_000), (1e14, 1_000_000), (1e17, 1000)):
            if abs(value) < limit:  # a float to the microsecond, as a double holds a date's
                ns = int(value * scale) if isinstance(value, int) else round(value * (scale // 1000)) * 1000
                break
        if not 0 <= ns <= MAX_NANOS:
            when = "before 1970" if ns < 0 else "after the year 9999"
            raise SpanError(f"the time {shown(value)} lies {when} in seconds, milliseconds, microseconds "
                            "and nanoseconds alike", hint=_TIME_HINT)
        return ns
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return _checked(moment, value)
    if not isinstance(value, str):
        raise SpanError(f"a time must be a number or an ISO 8601 text, got {shown(value)}", hint=_TIME_HINT)
    text = value.strip()
    if text.isascii() and text.isdigit():
        return nanos(int(text))
    if text.isascii() and re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text):
        return nanos(float(text))
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError:
        raise SpanError(f"the time {shown(value)} is neither a number nor an ISO 8601 text",
                        hint=_TIME_HINT) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return _checked(moment, value)


def _checked(moment: datetime, value: Any) -> int:
    ns = int(moment.timestamp() * 1_000_000) * 1000
    if ns < 0:
        raise SpanError(f"the time {shown(value)} lies before 1970", hint=_TIME_HINT)
    return ns


def iso_time(ns: Optional[int]) -> Optional[str]:
    """Unix nanoseconds as ISO 8601 UTC with microseconds (``2026-11-02T10:00:00.123456Z``)."""
    if ns is None:
        return None
    seconds, micros = divmod(ns // 1000, 1_000_000)  # exact: no float between the digits
    moment = datetime.fromtimestamp(seconds, tz=timezone.utc) + timedelta(microseconds=micros)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def json_value(value: Any, field: Optional[str] = None) -> Any:
    """A value that may be JSON text (OpenInference keeps metadata as a JSON string) as parsed JSON;
    anything else, or text that is not JSON, as it is. Raises `SpanError` (naming ``field``) for JSON
    that nests more than `MAX_METADATA_DEPTH` levels, gives a key twice or holds a lone surrogate
    escape (`ragbridge.formats.files.parse_json`)."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            parsed = parse_json(value)
        except DatasetError as exc:
            raise SpanError(exc.message, field, exc.hint) from None
        except ValueError:
            return value
    elif isinstance(value, (dict, list)):
        parsed = value
    else:
        return value
    if deeper_than(parsed, MAX_METADATA_DEPTH):
        raise SpanError(f"nests more than {MAX_METADATA_DEPTH} levels of objects and lists, too deep to read",
                        field, "store the deep part as a JSON string")
    return parsed
