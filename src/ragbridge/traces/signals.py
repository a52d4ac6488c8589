"""User signals kept apart from the spans: a file of feedback and annotations, by trace or span.

A signals file is JSON lines or CSV, one signal a record: ``trace_id`` or ``span_id`` (which the
signal is about), ``name`` (``thumbs``, ``user_feedback``, ...: default ``feedback``), and at least
one of ``score`` (a number; ``true``/``false`` read as 1/0), ``label`` (a word: ``up``, ``down``,
``helpful``) and ``note`` (free text); ``source`` (who gave it) is optional. Ids are matched as
the trace files hold them (hex for OpenTelemetry ids).

`labels_from_signals` turns the signals that a run's cases carry (``metadata["signals"]``) into
human labels for ``validate``: one signal name is the human side.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Optional, Sequence

from ..formats.files import DatasetError, jsonl_lines
from ..schema import Case
from .spans import Signal, hex_id

__all__ = ["load_signals", "signal_grade", "labels_from_signals"]

_UP = {"up", "thumbs_up", "thumbsup", "positive", "good", "helpful", "like", "pass", "yes", "true",
       "correct", "1"}
_DOWN = {"down", "thumbs_down", "thumbsdown", "negative", "bad", "unhelpful", "dislike", "fail", "no",
         "false", "incorrect", "0"}


def _number(value: Any, path: Path, line: int, unit: str) -> Optional[float]:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    try:
        number = float(value)
    except (TypeError, ValueError):
        text = str(value).strip().lower()
        if text in ("true", "false"):
            return 1.0 if text == "true" else 0.0
        raise DatasetError(f"score {value!r} is not a number", path=path, line=line, field="score",
                           unit=unit) from None
    if not math.isfinite(number):
        raise DatasetError(f"score {value!r} is not a finite number", path=path, line=line, field="score",
                           unit=unit)
    return number


def load_signals(path: str | Path) -> dict[str, list[Signal]]:
    """Signals by trace id or span id (see the module docstring); raises `DatasetError` for bad
    input, naming the line and field."""
    path = Path(path)
    if not path.exists():
        raise DatasetError("no such signals file", path=path)
    if path.suffix.lower() == ".csv":
        with open(path, encoding="utf-8-sig", newline="") as f:
            rows = [(n, {k: v for k, v in row.items() if v not in (None, "")})
                    for n, row in enumerate(csv.DictReader(f), start=2)]
    else:
        rows = list(jsonl_lines(path))
    out: dict[str, list[Signal]] = {}
    for line, rec in rows:
        if not isinstance(rec, dict):
            raise DatasetError("each signal must be a JSON object", path=path, line=line)
        trace, span = hex_id(rec.get("trace_id"), 16), hex_id(rec.get("span_id"), 8)
        if trace is None and span is None:
            raise DatasetError("no trace_id or span_id", path=path, line=line, field="trace_id",
                               hint="say which trace (or span) the signal is about")
        score = _number(rec.get("score"), path, line, "line")
        label, note = rec.get("label"), rec.get("note")
        if score is None and label in (None, "") and note in (None, ""):
            raise DatasetError("the signal has no score, label or note", path=path, line=line,
                               field="score")
        signal = Signal(name=str(rec.get("name") or "feedback"), score=score,
                        label=None if label in (None, "") else str(label),
                        note=None if note in (None, "") else str(note),
                        span_id=span, source=rec.get("source"))
        out.setdefault(trace or span, []).append(signal)
    return out


def signal_grade(signal: dict[str, Any]) -> Optional[float]:
    """A signal as a human grade: its score if it has one, else its label as pass (1) or fail (0)
    (``up``/``down``, ``good``/``bad``, ``helpful``/``unhelpful``, ...); None if neither says."""
    score = signal.get("score")
    if isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score):
        return float(score)
    label = str(signal.get("label") or "").strip().lower().replace("-", "_").replace(" ", "_")
    if label in _UP:
        return 1.0
    if label in _DOWN:
        return 0.0
    return None


def labels_from_signals(cases: Sequence[Case], name: str, metrics: Sequence[str]):
    """Human labels (``case_id, metric, grade, graded``) from the signal ``name`` on each case, one
    row per metric of ``metrics``: the same user judgement stands for every metric. A case with
    several such signals takes the last; a signal with neither a score nor a pass/fail label is
    not a label. Returns the frame and the number of signals that were not labels."""
    import pandas as pd

    rows, unread = [], 0
    for case in cases:
        found = [s for s in case.metadata.get("signals", []) or []
                 if isinstance(s, dict) and s.get("name") == name]
        if not found:
            continue
        grade = signal_grade(found[-1])
        if grade is None:
            unread += 1
            continue
        graded = isinstance(found[-1].get("score"), (int, float)) and grade not in (0.0, 1.0)
        rows.extend({"case_id": case.id, "metric": m, "grade": grade, "graded": graded} for m in metrics)
    return pd.DataFrame(rows, columns=["case_id", "metric", "grade", "graded"]), unread
