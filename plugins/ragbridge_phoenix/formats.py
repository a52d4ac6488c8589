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
metadata ``arize`` = ``{"eval_id", "eval_name", "eval_type": "SpanEvaluations"}``. Phoenix loads
one with ``SpanEvaluations.load(id, directory)`` (then ``px.Client().log_evaluations(...)``), and
any of them reads as a dataframe for ``Client().spans.log_span_annotations_dataframe(dataframe=
pd.read_parquet(path), annotation_name=NAME, annotator_kind="LLM")``. The id is derived from the
evaluation name and its rows, so the same run writes the same files. A score without a value
(errored or undefined) is written with its label (``error``, ``undefined``) and no score.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Iterator

from ragbridge.plugin import (
    DatasetError,
    ScoreFormat,
    TraceSpan as Span,
    hex_id,
    jsonl_lines,
    nanos,
    trace_format,
)

__all__ = ["FORMATS", "SCORE_FORMATS", "read_spans", "write_evaluations"]

_COLUMNS = ("context.trace_id", "context.span_id")


def is_span_export(record: dict[str, Any]) -> bool:
    """Whether a record (or the column names of a table) is a row of Phoenix's spans dataframe."""
    return "context.trace_id" in record and ("span_kind" in record or
                                             any(str(k).startswith("attributes.") for k in record))


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
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
    trace_id = hex_id(row.get("context.trace_id"), 16)
    span_id = hex_id(row.get("context.span_id"), 8)
    if trace_id is None or span_id is None:
        field = "context.trace_id" if trace_id is None else "context.span_id"
        raise DatasetError(f"no {field}", path=path, line=line, field=field, unit=unit,
                           hint="save the spans dataframe with its index (Parquet), or reset_index() "
                                "before to_json")
    attributes: dict[str, Any] = {}
    for key, value in row.items():
        if not str(key).startswith("attributes.") or value is None:
            continue
        name = str(key)[len("attributes."):]
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
    return Span(trace_id=trace_id, span_id=span_id, parent_id=hex_id(row.get("parent_id"), 8),
                name=str(row.get("name") or ""), start=nanos(_plain(row.get("start_time"))),
                end=nanos(_plain(row.get("end_time"))), attributes=attributes,
                status=status if status in ("OK", "ERROR") else None)


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


def write_evaluations(rows: list[dict[str, Any]], folder: Path) -> list[str]:
    """One ``evaluations-<id>.parquet`` per evaluation name in ``folder`` (see the module docstring)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    Path(folder).mkdir(parents=True, exist_ok=True)
    by_name: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_name.setdefault(row["name"], []).append(row)
    for name, items in sorted(by_name.items()):
        frame = pd.DataFrame({
            "span_id": pd.Series([r["span_id"] for r in items], dtype=object),
            "label": pd.Series([r["label"] for r in items], dtype=object),
            "score": pd.Series([r["score"] for r in items], dtype="float64"),
            "explanation": pd.Series([r["explanation"] for r in items], dtype=object),
        }).set_index("span_id")
        digest = json.dumps([name, items], sort_keys=True, default=str)
        eval_id = uuid.uuid5(uuid.NAMESPACE_URL, "ragbridge-evaluations:" + digest)
        table = pa.Table.from_pandas(frame)
        table = table.replace_schema_metadata({
            **(table.schema.metadata or {}),
            b"arize": json.dumps({"eval_id": str(eval_id), "eval_name": name,
                                  "eval_type": "SpanEvaluations"}).encode("utf-8"),
        })
        pq.write_table(table, Path(folder) / f"evaluations-{eval_id}.parquet")
    return []


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
                "a folder of Phoenix SpanEvaluations parquet files, one per evaluation name", is_dir=True),
]
