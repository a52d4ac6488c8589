"""Traces in, scores out: production traces as cases, and a run's scores as span evaluations.

Trace formats are dataset formats (`ragbridge.formats.Format`) with a ``spans`` stream: OTLP JSON
(`ragbridge.traces.otlp`) and span objects (`ragbridge.traces.span_json`), this built-in plugin's,
and the span exports that plugins register (a tracing tool's span table, its trace export). Reading
one groups the spans by trace and turns each trace into a case by the OpenInference and
OpenTelemetry GenAI conventions (`ragbridge.traces.cases`); ``ragbridge sample`` draws traces from
the stream (`ragbridge.run.sample`). The way back is `ragbridge.traces.evaluations`: each score of a
run as a span evaluation (trace id, span id, name, label, score, explanation), written by a score
format that a plugin registers, or as plain JSONL/CSV.

The modules: ``spans`` (`Span`, `Signal`, the shared id and time rules), ``otlp`` (the OTLP JSON
reader), ``span_json`` (spans one JSON object each: the SDK's console exporter, one span a line),
``cases`` (a trace as a case, `TraceReport`), ``evaluations`` (scores as span evaluations),
``stores`` (tracing servers spans are pulled from and evaluations pushed to, `TraceStore`), ``signals``
(user signals and their polarity).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from ..formats import Format
from ..formats.files import DatasetError
from ..hookspecs import hookimpl
from ..plugins import registered
from ..schema import Case
from .cases import TraceReport, cases_from_spans
from .evaluations import SCORE_FORMATS, ScoreFormat
from .otlp import is_otlp, read_spans
from .span_json import is_span_object
from .span_json import read_spans as read_span_objects
from .spans import Signal, Span
from .stores import TraceStore

__all__ = ["Span", "Signal", "TraceReport", "ScoreFormat", "TraceStore", "trace_format", "read_traces",
           "get_score_formats", "get_trace_stores", "OTLP", "SPAN_OBJECTS"]

logger = logging.getLogger("ragbridge")

def read_traces(path: Path, spans: Callable[[Path], Iterator[Span]]) -> tuple[list[Case], TraceReport]:
    """Every trace of a trace file as a case, and the report of what was not (see
    `ragbridge.traces.cases`). Raises `DatasetError` when no trace gives a case."""
    cases, report = cases_from_spans(spans(Path(path)))
    if not cases:
        reasons = "; ".join(report.lines()) or "the file holds no spans"
        raise DatasetError(f"no trace gives a case ({reasons})", path=path,
                           hint="a case needs a retriever span and a question")
    return cases, report


def trace_format(name: str, spans: Callable[[Path], Iterator[Span]], description: str, *,
                 suffixes: tuple[str, ...] = (), fields: frozenset[str] = frozenset(),
                 recognise: Optional[Callable[[dict[str, Any]], bool]] = None) -> Format:
    """A read-only dataset format for a trace file whose spans ``spans`` streams: ``read`` gives a
    case per trace and writes each line of the report to the ``ragbridge`` logger as a warning."""

    def read(path: Path) -> list[Case]:
        cases, report = read_traces(path, spans)
        for line in report.lines():
            logger.warning("warning: %s: %s", path, line)
        return cases

    return Format(name, suffixes, read, None, description, fields=fields, recognise=recognise,
                  spans=spans)


OTLP = trace_format(
    "otlp", read_spans,
    "OpenTelemetry spans as OTLP JSON (file exporter lines or an OTLP/HTTP JSON body): a case per "
    "trace with a retriever span (read only)",
    recognise=is_otlp,
)


SPAN_OBJECTS = trace_format(
    "otel-spans", read_span_objects,
    "OpenTelemetry spans one JSON object each, attributes a flat object: the SDK's ConsoleSpanExporter "
    "(span.to_json(), pretty-printed one after another), one span a line, or a span table's rows: a case "
    "per trace with a retriever span (read only)",
    recognise=is_span_object,
)


def get_score_formats() -> dict[str, ScoreFormat]:
    """Every registered score format by name."""
    return registered("ragbridge_register_score_formats", "score format")


def get_trace_stores() -> dict[str, TraceStore]:
    """Every registered trace store by name (its URL scheme)."""
    return registered("ragbridge_register_trace_stores", "trace store")


@hookimpl
def ragbridge_register_formats(register):
    register(OTLP)
    register(SPAN_OBJECTS)


@hookimpl
def ragbridge_register_score_formats(register):
    for fmt in SCORE_FORMATS:
        register(fmt)
