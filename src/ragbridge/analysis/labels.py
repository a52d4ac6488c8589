"""Human labels, read from JSONL (one object a line) or CSV, for ``validate`` and the report.

Each record has ``case_id`` (or ``id``), ``metric`` (may be left out when the caller names the one
metric) and the label under one of ``label``, ``human``, ``passed``, ``pass``, ``verdict``,
``grade``, ``score``, ``value``: pass/fail words (``pass``, ``fail``, ``yes``, ``no``...), a boolean,
or a number (a grade). A later label for the same case and metric replaces an earlier one.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional, Union

from .table import AnalysisError

__all__ = ["load_labels"]

_PASS_WORDS = {"pass", "passed", "yes", "y", "true", "t", "ok", "good", "correct", "faithful", "supported"}
_FAIL_WORDS = {"fail", "failed", "no", "n", "false", "f", "bad", "incorrect", "unfaithful", "unsupported"}
_LABEL_KEYS = ("label", "human", "passed", "pass", "verdict", "grade", "score", "value")


def load_labels(path: Union[str, Path], metric: Optional[str] = None):
    """Human labels as a DataFrame ``case_id, metric, grade, graded``.

    Pass/fail labels are grades 1.0 / 0.0 with ``graded`` False; numbers are grades with ``graded``
    True (binarised by ``validate``'s ``label_threshold``). ``metric`` is the metric of records
    that name none. Raises `AnalysisError` naming the file and line for bad input.
    """
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise AnalysisError(f"{path}: no such labels file")
    rows = []
    seen: dict[tuple[str, str], int] = {}
    for lineno, rec in _records(path):
        cid = rec.get("case_id", rec.get("id"))
        if cid is None or str(cid).strip() == "":
            raise AnalysisError(f"{path}:{lineno}: no case_id")
        m = rec.get("metric") or metric
        if not m:
            raise AnalysisError(f"{path}:{lineno}: no metric (add a metric field, or pass --metric)")
        key = next((k for k in _LABEL_KEYS if k in rec and rec[k] is not None), None)
        if key is None:
            raise AnalysisError(f"{path}:{lineno}: no label (one of: {', '.join(_LABEL_KEYS)})")
        grade = _grade(rec[key])
        if grade is None:
            raise AnalysisError(f"{path}:{lineno}: label {rec[key]!r} is neither pass/fail nor a number")
        k2 = (str(cid), str(m))
        row = {"case_id": k2[0], "metric": k2[1], "grade": grade, "graded": _is_number(rec[key])}
        if k2 in seen:
            rows[seen[k2]] = row
        else:
            seen[k2] = len(rows)
            rows.append(row)
    if not rows:
        raise AnalysisError(f"{path}: no labels")
    return pd.DataFrame(rows, columns=["case_id", "metric", "grade", "graded"])


def _records(path: Path) -> list[tuple[int, dict]]:
    """``(line number, record)`` of every label record of a CSV or JSONL file."""
    import pandas as pd

    if path.suffix.lower() == ".csv":
        try:
            df = pd.read_csv(path, dtype=str, keep_default_na=False)
        except Exception as exc:  # pandas raises many kinds
            raise AnalysisError(f"{path}: cannot read CSV: {exc}") from None
        return [(i + 2, {k: v for k, v in r.items() if v != ""}) for i, r in enumerate(df.to_dict("records"))]
    from ..formats.files import DatasetError, jsonl_lines

    records = []
    try:
        for lineno, rec in jsonl_lines(path, allow_empty=True,
                                       hint="each line must be one object with case_id, metric, label"):
            if not isinstance(rec, dict):
                raise AnalysisError(f"{path}:{lineno}: expected an object with case_id, metric, label")
            records.append((lineno, rec))
    except DatasetError as exc:
        raise AnalysisError(str(exc)) from None
    return records


def _is_number(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, float)):
        return True
    if isinstance(v, str):
        try:
            float(v)
        except ValueError:
            return False
        return True
    return False


def _grade(v: Any) -> Optional[float]:
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, str):
        t = v.strip().lower()
        if t in _PASS_WORDS:
            return 1.0
        if t in _FAIL_WORDS:
            return 0.0
        try:
            f = float(t)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None
