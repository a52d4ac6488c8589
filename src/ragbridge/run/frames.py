"""A run folder's scores as pandas DataFrames (`ragbridge.run.folder.Run.to_frame`, ``Run.costs``),
built from the run's columns (`ragbridge.run.columns`) and its score lines read a block at a time.

The frames are those a list of `Score` objects gives (one row per score, their ``model_dump``, the
run's verdict beside them; or one row per case, one column per ``backend:metric``), but no `Score`
or `Case` object is kept per case: memory holds the frame, the columns and one block of lines.

- `wide_frame`: the values straight from the columns, the cases' ids from the case index and their
  questions read a block at a time (`ragbridge.run.columns.CaseIndex.questions`, only the id and the
  question of each line decoded).
- `long_frame`: per column, in (backend, metric) order and the cases' order, the score lines read
  back a block at a time (`ragbridge.run.recorded.lines_at`); a line as a run writes it gives its
  fields as parsed, any other line (evidence, a native value that is a mapping) and a case collapsed
  from repeats is read as its `Score` (`ragbridge.run.columns.Column.scores`), a block at a time.
  Each column's dtype is the one pandas infers from the rows (``infer_objects`` on the values as
  Python objects, or the dtype they always have: counts int64, flags bool, seconds float64).
- `costs_frame`: the judge's counts summed over the columns' arrays, in the order the scores run.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pydantic_core

from ..verdicts import pass_mark, verdict
from .columns import RunColumns
from .recorded import FileStore, plain_fields, lines_at, score_from_line

__all__ = ["wide_frame", "long_frame", "costs_frame", "frames_apply", "questions", "Unusual", "BLOCK",
           "QUESTIONS_BLOCK"]

#: scores read back at a time
BLOCK = 10_000
#: cases whose question is read back at a time (a case's line holds its chunks: it may be long)
QUESTIONS_BLOCK = 256

#: the columns of `long_frame`: a `Score`'s fields (its ``passed`` the run's verdict), then these
LONG_COLUMNS = ("case_id", "question", "metric", "backend", "value", "native_metric", "native_value",
                "passed", "reason", "error", "judge_calls", "prompt_tokens", "completion_tokens",
                "seconds", "evidence", "repeat", "not_run", "cost", "repeats", "cached", "pass_mark",
                "library_passed", "status")
_INTS = ("judge_calls", "prompt_tokens", "completion_tokens", "repeat")
_BOOLS = ("not_run", "cached")
_FLOATS = ("seconds",)
_OPTIONAL_FLOATS = ("value", "cost")  # float64 unless every row is None


def questions(columns: RunColumns) -> np.ndarray:
    """The question of each case the run's cases describe, in order (an object array)."""
    index = columns.cases
    out = np.empty(index.described, object)
    for start in range(0, index.described, QUESTIONS_BLOCK):
        part = range(start, min(start + QUESTIONS_BLOCK, index.described))
        out[start:part.stop] = index.questions(part)
    return out


def _object_column(values: np.ndarray):
    """``values`` (Python objects) as pandas infers a column of them from a list of rows."""
    import pandas as pd

    return pd.Series(values, dtype=object, copy=False).infer_objects().array


def wide_frame(columns: RunColumns):
    """One row per case the run's cases describe (``case_id``, ``question``), one column per
    ``backend:metric`` with its value (NaN: undefined, failed or not scored)."""
    import pandas as pd

    index = columns.cases
    n = index.described
    ids = np.empty(n, object)
    ids[:] = index.ids[0:n]
    data: dict[str, Any] = {"case_id": _object_column(ids), "question": _object_column(questions(columns))}
    for (backend, metric), col in columns.columns.items():
        data[f"{backend}:{metric}"] = col.value[:n].astype(float, copy=True)
    if n == 0:
        names = list(data)
        return pd.DataFrame([], columns=names).astype({c: float for c in names[2:]})
    return pd.DataFrame(data)


class Unusual(Exception):
    """A score whose count does not fit in 64 bits (no run writes one): its frame is made from the
    `Score` objects, as pandas takes such a column."""


class _Rows:
    """The long frame's columns, filled a block of rows at a time."""

    def __init__(self, n: int):
        self.n = n
        self.objects = {name: np.empty(n, object) for name in LONG_COLUMNS
                        if name not in _INTS + _BOOLS + _FLOATS + _OPTIONAL_FLOATS}
        self.ints = {name: np.zeros(n, np.int64) for name in _INTS}
        self.bools = {name: np.zeros(n, bool) for name in _BOOLS}
        self.floats = {name: np.full(n, np.nan) for name in _FLOATS + _OPTIONAL_FLOATS}
        self.given = dict.fromkeys(_OPTIONAL_FLOATS, False)  # a value other than None seen
        self.at = 0

    def add(self, rows: list[dict[str, Any]]) -> None:
        a, b = self.at, self.at + len(rows)
        for name, arr in self.objects.items():  # each value as it is (a list is not made an array)
            arr[a:b] = np.fromiter((r[name] for r in rows), object, len(rows))
        for name, arr in self.ints.items():
            got = [r[name] for r in rows]
            if any(v >= 1 << 63 for v in got):
                raise Unusual(name)
            arr[a:b] = got
        for name, arr in self.bools.items():
            arr[a:b] = [r[name] for r in rows]
        for name, arr in self.floats.items():
            got = [r[name] for r in rows]
            if name in self.given and not self.given[name]:
                self.given[name] = any(v is not None for v in got)
            arr[a:b] = [math.nan if v is None else v for v in got]
        self.at = b

    def frame(self):
        import pandas as pd

        data: dict[str, Any] = {}
        for name in LONG_COLUMNS:
            if name in self.objects:
                data[name] = _object_column(self.objects.pop(name))
            elif name in self.ints:
                data[name] = self.ints.pop(name)
            elif name in self.bools:
                data[name] = self.bools.pop(name)
            elif name in self.given and not self.given[name]:
                data[name] = _object_column(np.full(self.n, None, object))  # every row None
            else:
                data[name] = self.floats.pop(name)
        return pd.DataFrame(data, copy=False)


def long_frame(columns: RunColumns, manifest: Any, scores_path: Path):
    """One row per score, in (backend, metric) order and the cases' order: the `Score`'s fields as
    ``model_dump`` gives them, with ``question``, ``passed`` the run's verdict at ``pass_mark`` (the
    run's own), ``library_passed`` the score's own and ``status``; ``scores_path``: the run's
    ``scores.jsonl``, where the columns' places point."""
    import pandas as pd

    n = sum(int(col.present.sum()) for col in columns.columns.values())
    if n == 0:
        return pd.DataFrame([])
    asked = questions(columns)
    rows = _Rows(n)
    with open(scores_path, "rb") as f:
        for (backend, metric), col in columns.columns.items():
            mark = pass_mark(manifest, backend, metric)[0]
            present = np.flatnonzero(col.present)
            for start in range(0, len(present), BLOCK):
                part = present[start:start + BLOCK]
                rows.add(_block_rows(f, col, part, asked, mark))
    return rows.frame()


def _block_rows(f: Any, col: Any, part: np.ndarray, asked: np.ndarray, mark: float) -> list[dict[str, Any]]:
    """The rows of the scores of ``col``'s cases ``part``: each line as a run writes it from its
    parsed fields, any other (and a case collapsed from repeats) from its `Score`."""
    rep = col.repeats
    collapsed = rep.collapsed[part] if rep is not None else np.zeros(len(part), bool)
    places = col.places[part]
    wanted = places[~collapsed].tolist()
    lines = lines_at(f, wanted)
    folded_at = part[collapsed].tolist()
    folded = dict(zip(folded_at, col.scores(folded_at))) if folded_at else {}
    try:
        parsed = pydantic_core.from_json(b"[" + b",".join(lines[p] for p in wanted) + b"]")
    except ValueError:
        parsed = None
    if type(parsed) is not list or len(parsed) != len(wanted):
        parsed = [None] * len(wanted)
    plain = dict(zip(wanted, parsed))
    out = []
    for i, place, is_folded in zip(part.tolist(), places.tolist(), collapsed.tolist()):
        d = None if is_folded else plain.get(place)
        fields = plain_fields(d, lines[place], True) if type(d) is dict else None
        if fields is None:
            s = folded[i] if is_folded else score_from_line(lines[place].decode("utf-8"))
            row = s.model_dump()
            row["library_passed"], row["passed"] = row["passed"], verdict(s, mark)
            row["status"] = s.status
        else:
            value, status = fields[3], fields[4]
            cost, seconds = d.get("cost"), d["seconds"]
            row = {**d, "value": value, "seconds": float(seconds),
                   "repeat": d.get("repeat", 0), "not_run": d.get("not_run", False),
                   "cost": None if cost is None else float(cost), "repeats": None,
                   "cached": d.get("cached", False), "library_passed": d["passed"]}
            row["status"] = _STATUS[status]
            row["passed"] = value >= mark if row["status"] == "scored" else None
        row["question"] = asked[i] if i < len(asked) else None
        row["pass_mark"] = mark
        out.append(row)
    return out


_STATUS = {1: "scored", 2: "undefined", 3: "error", 4: "not_run"}


def costs_frame(columns: RunColumns):
    """Judge calls, tokens and cost per backend and metric over the scores with judge calls (cost NaN
    when one score's was unknown), from the columns' arrays."""
    import pandas as pd

    rows = []
    for (backend, metric), col in columns.columns.items():
        if col.judge_calls is None:
            continue
        judged = col.present & (col.judge_calls > 0)
        if not judged.any():
            continue
        cost = 0.0
        for c in col.get("cost")[judged].tolist():  # in the scores' order, as they were added up
            cost = c if c != c else cost + c
        rows.append({"backend": backend, "metric": metric,
                     "judge_calls": int(col.judge_calls[judged].sum()),
                     "prompt_tokens": int(col.get("prompt_tokens")[judged].sum()),
                     "completion_tokens": int(col.get("completion_tokens")[judged].sum()), "cost": cost})
    names = ["backend", "metric", "judge_calls", "prompt_tokens", "completion_tokens", "cost"]
    return pd.DataFrame(rows, columns=names)


def frames_apply(columns: RunColumns, scores_path: Path) -> bool:
    """Whether the run's frames are built from ``columns``: read from the folder's ``scores.jsonl``
    (``scores_path``), and every case it scores one of its cases (a folder without ``cases.jsonl``
    names cases only by its scores: its frames come from its `Score` objects)."""
    return len(columns.cases) == columns.cases.described and all(
        isinstance(col._store, FileStore) and col._store.path == scores_path
        for col in columns.columns.values())

