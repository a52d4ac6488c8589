"""A run's scores as span evaluations: back to the trace each case came from.

Each score of a case read from a trace becomes one *span evaluation* (`evaluation_rows`):
``trace_id`` and ``span_id`` (from the case's ``metadata["trace"]``, exactly as read: a run never
changes them), ``name`` (``<backend>.<metric>``, e.g. ``rubric.faithfulness``), ``score`` (the
canonical value, 0..1), ``label`` (``pass`` or ``fail`` at the threshold the caller gives; ``error``
for a score that failed, ``undefined`` for one that does not apply), ``explanation`` (the score's
reason, or its error), and ``case_id``, ``metric``, ``backend``. A metric of the retrieval half
goes on the retriever span (the first, when there were several), every other on the root span,
which stands for the whole answer.

A score whose evidence holds a verdict per retrieved chunk (``Score.evidence.chunks``: context
relevance, judged chunk by chunk) also gives one *document evaluation* a chunk: the same row with
``document_position`` (the chunk's place among its retriever span's documents, from 0), on that
retriever span, ``label`` ``relevant`` or ``irrelevant``, ``score`` 1 or 0 and the chunk's reason.
A span evaluation's ``document_position`` is None.

Score formats (`ScoreFormat`, registered by plugins with ``ragbridge_register_score_formats``) write
the rows in a tracing tool's own form; the built-in ``jsonl`` and ``csv`` write them as they are.
Cases that did not come from a trace (no ``metadata["trace"]``) have nowhere to go and are counted.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from ..metrics import half_of
from ..schema import Case, Score

__all__ = ["ScoreFormat", "evaluation_rows", "score_rows", "trace_of", "span_rows", "written",
           "EVALUATION_COLUMNS", "SCORE_FORMATS"]

EVALUATION_COLUMNS = ("trace_id", "span_id", "document_position", "name", "label", "score", "explanation",
                      "case_id", "metric", "backend")


@dataclass
class ScoreFormat:
    """A file of span evaluations, as a plugin registers it: ``write(rows, path)`` writes the rows
    of `evaluation_rows` to ``path`` (a file, or a folder when ``is_dir``) and returns warning lines
    (what it could not write, counted). ``rows`` is an iterable read once, a row at a time (a run
    of a million cases is not held: ``export-scores`` makes the rows as they are written).
    ``needs_value``: rows without a score are left out;
    ``documents``: the document evaluations are written (see `written`)."""

    name: str
    write: Callable[[list[dict[str, Any]], Path], list[str]]
    description: str = ""
    suffixes: tuple[str, ...] = ()
    is_dir: bool = False
    needs_value: bool = False
    documents: bool = True


def evaluation_rows(cases: Iterable[Case], scores: Iterable[Score],
                    passed: Callable[[Score], Optional[bool]]) -> tuple[list[dict[str, Any]], int]:
    """The span evaluations of ``scores`` (see the module docstring), in score order, each followed
    by its document evaluations, and how many scores belong to cases that did not come from a
    trace. ``passed(score)`` is the verdict of a score with a value (True, False) or None."""
    where: dict[str, dict[str, Any]] = {}
    positions: dict[str, dict[str, int]] = {}
    for case in cases:
        info = trace_of(case.metadata)
        if info is not None:
            where[case.id] = info
            positions[case.id] = {}
            for k, chunk in enumerate(case.contexts):
                positions[case.id].setdefault(chunk.id, k)
    rows, homeless = [], 0
    for score in scores:
        info = where.get(score.case_id)
        if info is None:
            homeless += 1
            continue
        rows += score_rows(score, info, positions[score.case_id].get, passed)
    return rows, homeless


def trace_of(metadata: Any) -> Optional[dict[str, Any]]:
    """Where a case came from in its traces (its ``metadata["trace"]``, with a ``span_id``), or None."""
    info = metadata.get("trace") if isinstance(metadata, dict) else None
    return info if isinstance(info, dict) and info.get("span_id") else None


def score_rows(score: Score, info: dict[str, Any], position: Callable[[str], Optional[int]],
               passed: Callable[[Score], Optional[bool]]) -> list[dict[str, Any]]:
    """The span evaluation of one score of a case that came from a trace (``info``: its
    `trace_of`), and its document evaluations (``position``: a chunk id's place among the case's
    chunks, or None)."""
    span = info["span_id"]
    retrievers = info.get("retriever_span_ids") or []
    if retrievers and half_of(score.metric) == "retrieval":
        span = retrievers[0]
    value = score.value if score.value is not None and math.isfinite(score.value) else None
    if score.error:
        label, explanation = "error", score.error
    elif value is None:
        label, explanation = "undefined", score.reason
    else:
        verdict = passed(score)
        label = None if verdict is None else ("pass" if verdict else "fail")
        explanation = score.reason
    base = {"trace_id": info.get("trace_id"), "name": f"{score.backend}.{score.metric}",
            "case_id": score.case_id, "metric": score.metric, "backend": score.backend}
    rows = [{**base, "span_id": span, "document_position": None, "label": label, "score": value,
             "explanation": explanation}]
    chunks = score.evidence.chunks if score.evidence is not None and not score.error else None
    for verdict in chunks or []:
        at = position(verdict.id)
        if at is None or not retrievers:
            continue
        doc_span, doc_position = _document_place(info, at)
        rows.append({**base, "span_id": doc_span, "document_position": doc_position,
                     "label": "relevant" if verdict.relevant else "irrelevant",
                     "score": 1.0 if verdict.relevant else 0.0, "explanation": verdict.reason})
    return rows


def _document_place(info: dict[str, Any], position: int) -> tuple[str, int]:
    """The retriever span that returned the case's chunk at ``position`` and the chunk's place among
    that span's documents (``retriever_documents``: how many each retriever gave, when several)."""
    spans = info["retriever_span_ids"]
    counts = info.get("retriever_documents")
    if not counts or len(counts) != len(spans):
        return spans[0], position
    for span, count in zip(spans, counts):
        if position < count:
            return span, position
        position -= count
    return spans[-1], position


def span_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The span evaluations of ``rows`` (not the document evaluations)."""
    return [r for r in rows if r.get("document_position") is None]


def written(rows: Iterable[dict[str, Any]], needs_value: bool, documents: bool) -> tuple[int, int]:
    """How many span and document evaluations of ``rows`` a format or store that ``needs_value`` and
    takes ``documents`` (or not) writes."""
    kept = [r for r in rows if r["score"] is not None or not needs_value]
    spans = len(span_rows(kept))
    return spans, (len(kept) - spans) if documents else 0


def _write_jsonl(rows: Iterable[dict[str, Any]], path: Path) -> list[str]:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return []


def _write_csv(rows: Iterable[dict[str, Any]], path: Path) -> list[str]:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(EVALUATION_COLUMNS))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row.get(k) is None else row[k]) for k in EVALUATION_COLUMNS})
    return []


#: the built-in score formats: the rows as they are
SCORE_FORMATS = (
    ScoreFormat("jsonl", _write_jsonl, "span evaluations, one JSON object a line", (".jsonl",)),
    ScoreFormat("csv", _write_csv, "span evaluations, one row each", (".csv",)),
)
