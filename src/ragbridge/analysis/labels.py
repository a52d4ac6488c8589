"""Human labels, read from JSONL (one object a line) or CSV, for ``validate`` and the report.

Each record has ``case_id`` (or ``id``), ``metric`` (may be left out when the caller names the one
metric) and the label under one of ``label``, ``human``, ``passed``, ``pass``, ``verdict``,
``grade``, ``score``, ``value``: pass/fail words (``pass``, ``fail``, ``yes``, ``no``...), a boolean,
or a number (a grade). A case and metric labelled twice with the same label is one label; with
two different labels it is an error naming both lines. Case ids are taken in Unicode NFC, as the
run's are (`ragbridge.schema.clean_id`). Grades are on 0..1 unless a ``label_threshold`` above 1
says the scale is another (3 for a 1-5 scale): a grade of 1.5 with pass/fail labels is an error.
"""

from __future__ import annotations

import json
import math
import unicodedata
from pathlib import Path
from typing import Any, Optional, Union

from .table import AnalysisError

__all__ = ["load_labels"]

_PASS_WORDS = {"pass", "passed", "yes", "y", "true", "t", "ok", "good", "correct", "faithful", "supported"}
_FAIL_WORDS = {"fail", "failed", "no", "n", "false", "f", "bad", "incorrect", "unfaithful", "unsupported"}
_LABEL_KEYS = ("label", "human", "passed", "pass", "verdict", "grade", "score", "value")


def load_labels(path: Union[str, Path], metric: Optional[str] = None, label_threshold: float = 0.5):
    """Human labels as a DataFrame ``case_id, metric, grade, graded``.

    Pass/fail labels are grades 1.0 / 0.0 with ``graded`` False; numbers are grades with ``graded``
    True (binarised by ``validate``'s ``label_threshold``). ``metric`` is the metric of records
    that name none; ``label_threshold`` at most 1 means grades on 0..1 (see the module docstring).
    Raises `AnalysisError` naming the file and line for bad input.
    """
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise AnalysisError(f"{path}: no such labels file")
    rows = []
    seen: dict[tuple[str, str], tuple[int, int, Any]] = {}  # -> row index, line, label as given
    for lineno, rec in _records(path):
        cid = rec.get("case_id", rec.get("id"))
        if cid is None or str(cid).strip() == "":
            raise AnalysisError(f"{path}:{lineno}: no case_id")
        cid = unicodedata.normalize("NFC", str(cid))
        m = rec.get("metric") or metric
        if not m:
            raise AnalysisError(f"{path}:{lineno}: no metric (add a metric field, or pass --metric)")
        key = next((k for k in _LABEL_KEYS if k in rec and rec[k] is not None), None)
        if key is None:
            raise AnalysisError(f"{path}:{lineno}: no label (one of: {', '.join(_LABEL_KEYS)})")
        grade = _grade(rec[key])
        if grade is None:
            raise AnalysisError(f"{path}:{lineno}: label {rec[key]!r} is neither pass/fail nor a number")
        if label_threshold <= 1 and _is_number(rec[key]) and not 0 <= grade <= 1:
            raise AnalysisError(
                f"{path}:{lineno}: label {rec[key]!r} is outside 0..1, the scale of --label-threshold "
                f"{label_threshold:g}: it would count as a {'pass' if grade > 1 else 'fail'}; use pass/fail, "
                "0..1, "
                "or name the threshold on your scale (--label-threshold 3 for grades 1-5)")
        k2 = (cid, str(m))
        row = {"case_id": k2[0], "metric": k2[1], "grade": grade, "graded": _is_number(rec[key])}
        if k2 in seen:
            at, first, given = seen[k2]
            if rows[at] != row:
                raise AnalysisError(
                    f"{path}:{lineno}: case {cid!r}, metric {m!r} is labelled {rec[key]!r} here and "
                    f"{given!r} at "
                    f"line {first}; keep one label per case and metric")
        else:
            seen[k2] = (len(rows), lineno, rec[key])
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
    records = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise AnalysisError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(rec, dict):
                raise AnalysisError(f"{path}:{lineno}: expected an object with case_id, metric, label")
            records.append((lineno, rec))
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
