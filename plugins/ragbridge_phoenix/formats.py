"""Phoenix's span export in, span evaluations out.

``phoenix-spans`` (read only; recognised from the content, ``--from phoenix-spans`` forces it):
Phoenix's spans dataframe (``phoenix.client.Client().spans.get_spans_dataframe(...)``, or the
legacy ``px.Client().get_spans_dataframe()``) saved as Parquet (``df.to_parquet(path)``) or JSON
lines (``df.to_json(path, orient="records", lines=True)``). One span a row: ``context.trace_id``,
``context.span_id`` (the dataframe's index, kept by Parquet; JSON lines need the column),
``parent_id``, ``name``, ``span_kind``, ``start_time``, ``end_time``, ``status_code`` and one
``attributes.<key>`` column per attribute, where Phoenix keeps a list of documents or messages as
one cell (``attributes.retrieval.documents`` = ``[{"document.id": ..., "document.content": ...},
...]``). Each row is read as an OpenTelemetry span (lists back to ``retrieval.documents.0.document.id``
keys) and the traces become cases by the OpenInference conventions (`ragbridge.traces.cases`).
Parquet is read a row group at a time, so ``ragbridge sample`` streams it.

``phoenix`` (a score format, ``ragbridge export-scores RUN --to phoenix --out DIR``): a folder with
one ``evaluations-<id>.parquet`` per evaluation name, as Phoenix's ``SpanEvaluations.save`` writes
them: the rows indexed by ``span_id``, with ``label``, ``score`` and ``explanation``, and the schema
metadata ``arize`` = ``{"eval_id", "eval_name", "eval_type": "SpanEvaluations"}``. A score judged
chunk by chunk (context relevance) also gives a file of ``DocumentEvaluations``, as
``DocumentEvaluations.save`` writes them: indexed by ``span_id`` and ``document_position`` (the
retriever span's document), labels ``relevant``/``irrelevant``, scores 1/0. Phoenix loads one with
``SpanEvaluations.load(id, directory)`` (or ``DocumentEvaluations.load``), and logs it with
``Client().spans.log_span_annotations_dataframe(dataframe=evals.dataframe, annotation_name=
evals.eval_name, annotator_kind="LLM")`` (``log_document_annotations_dataframe`` for documents).
The id is derived from the evaluation name and its rows, so the same run writes the same files. A
score without a value (errored or undefined) is left out and counted: Phoenix's annotation takes a
finite score, and a missing one in a dataframe is NaN, which its client cannot send as JSON.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Iterator

from ragbridge.plugin import (
    DatasetError,
    ScoreFormat,
    SpanError,
    TraceSpan as Span,
    hex_id,
    jsonl_lines,
    nanos,
    trace_format,
)

__all__ = ["FORMATS", "SCORE_FORMATS", "read_spans", "write_evaluations", "left_out"]

_COLUMNS = ("context.trace_id", "context.span_id")


def is_span_export(record: dict[str, Any]) -> bool:
    """Whether a record (or the column names of a table) is a row of Phoenix's spans dataframe."""
    return "context.trace_id" in record and ("span_kind" in record or
                                             any(str(k).startswith("attributes.") for k in record))


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if type(value).__name__ == "NaTType":  # pandas' missing time
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, float) and value != value:
        return None
    return value


def _span(row: dict[str, Any], path: Path, line: int, unit: str) -> Span:
    at = "context.trace_id"
    try:
        trace_id = hex_id(row.get(at), 16)
        at = "context.span_id"
        span_id = hex_id(row.get(at), 8)
        at = "parent_id"
        parent_id = hex_id(row.get(at), 8)
        if trace_id is None or span_id is None:
            at = "context.trace_id" if trace_id is None else "context.span_id"
            raise DatasetError(f"no {at}", path=path, line=line, field=at, unit=unit,
                               hint="save the spans dataframe with its index (Parquet), or reset_index() "
                                    "before to_json")
        at = "attributes"
        attributes: dict[str, Any] = {}
        for key, value in row.items():
            if not str(key).startswith("attributes.") or value is None:
                continue
            at = str(key)
            name = at[len("attributes."):]
            value = _plain(value)
            if isinstance(value, list) and any(isinstance(v, dict) for v in value):
                for i, item in enumerate(value):  # a cell holding a list of documents or messages
                    for part, inner in (item.items() if isinstance(item, dict) else ()):
                        attributes[f"{name}.{i}.{part}"] = inner
            elif value is not None:
                attributes[name] = value
        if row.get("span_kind") and "openinference.span.kind" not in attributes:
            attributes["openinference.span.kind"] = row["span_kind"]
        status = str(row.get("status_code") or "").upper()
        at = "start_time"
        start = nanos(_plain(row.get(at)))
        at = "end_time"
        end = nanos(_plain(row.get(at)))
    except SpanError as exc:
        raise DatasetError(exc.message, path=path, line=line, field=exc.field or at, unit=unit,
                           hint=exc.hint) from None
    return Span(trace_id=trace_id, span_id=span_id, parent_id=parent_id, name=str(row.get("name") or ""),
                start=start, end=end, attributes=attributes,
                status=status if status in ("OK", "ERROR") else None, origin=(str(path), line, unit))


def read_spans(path: Path) -> Iterator[Span]:
    """Every span of a saved spans dataframe, in file order (see the module docstring)."""
    path = Path(path)
    if path.suffix.lower() in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        try:
            source = pq.ParquetFile(path)
        except Exception as exc:
            raise DatasetError(f"cannot be read as Parquet: {exc}", path=path) from None
        row = 0
        for batch in source.iter_batches(batch_size=2048):
            for record in batch.to_pylist():
                row += 1
                yield _span(record, path, row, "row")
        return
    for line, record in jsonl_lines(path):
        if not isinstance(record, dict):
            raise DatasetError("each line must be a JSON object (a span)", path=path, line=line)
        yield _span(record, path, line, "line")


def _frames(rows: list[dict[str, Any]]) -> tuple[list[tuple[str, str, Any]], list[str]]:
    """Each evaluation name's rows as Phoenix's dataframe, ``(kind, name, frame)`` (kind
    ``SpanEvaluations`` or ``DocumentEvaluations``), and the warnings for what is left out: a row
    without a score (errored, undefined) has no place among Phoenix's scores (its annotation needs a
    finite one, and a dataframe's missing score is NaN, which its client cannot send)."""
    import pandas as pd

    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    kept, notes = left_out(rows)
    for row in kept:
        kind = "SpanEvaluations" if row.get("document_position") is None else "DocumentEvaluations"
        groups.setdefault((kind, row["name"]), []).append(row)
    frames = []
    for (kind, name), items in sorted(groups.items()):
        columns = {"span_id": pd.Series([r["span_id"] for r in items], dtype=object)}
        if kind == "DocumentEvaluations":
            columns["document_position"] = pd.Series([r["document_position"] for r in items], dtype="int64")
        columns.update({
            "label": pd.Series([r["label"] for r in items], dtype=object),
            "score": pd.Series([r["score"] for r in items], dtype="float64"),
            "explanation": pd.Series([r["explanation"] for r in items], dtype=object)})
        index = ["span_id", "document_position"] if kind == "DocumentEvaluations" else "span_id"
        frames.append((kind, name, pd.DataFrame(columns).set_index(index)))
    return frames, notes


def left_out(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows with a score, and the warnings counting the others (errored, undefined): a Phoenix
    annotation of a run's score needs the score."""
    left: dict[str, int] = {}
    kept = []
    for row in rows:
        if row["score"] is None:
            left[row["label"] or "undefined"] = left.get(row["label"] or "undefined", 0) + 1
        else:
            kept.append(row)
    notes = [f"{n} score(s) {'that errored' if label == 'error' else 'without a value (undefined)'} left "
             "out: a Phoenix evaluation needs a score" for label, n in sorted(left.items())]
    return kept, notes


def write_evaluations(rows: list[dict[str, Any]], folder: Path) -> list[str]:
    """One ``evaluations-<id>.parquet`` per evaluation name and kind in ``folder`` (see the module
    docstring); returns the warnings for what was left out."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    Path(folder).mkdir(parents=True, exist_ok=True)
    frames, notes = _frames(rows)
    for kind, name, frame in frames:
        digest = json.dumps([kind, name, frame.reset_index().to_dict("records")], sort_keys=True, default=str)
        eval_id = uuid.uuid5(uuid.NAMESPACE_URL, "ragbridge-evaluations:" + digest)
        table = pa.Table.from_pandas(frame)
        table = table.replace_schema_metadata({
            **(table.schema.metadata or {}),
            b"arize": json.dumps({"eval_id": str(eval_id), "eval_name": name,
                                  "eval_type": kind}).encode("utf-8"),
        })
        pq.write_table(table, Path(folder) / f"evaluations-{eval_id}.parquet")
    return notes


FORMATS = [
    trace_format(
        "phoenix-spans", read_spans,
        "Phoenix's spans dataframe saved as Parquet or JSON lines (context.*, attributes.* columns): a "
        "case per trace with a retriever span (read only)",
        recognise=is_span_export,
    ),
]

SCORE_FORMATS = [
    ScoreFormat("phoenix", write_evaluations,
                "a folder of Phoenix SpanEvaluations (and DocumentEvaluations) parquet files, one per "
                "evaluation name", is_dir=True, needs_value=True),
]
