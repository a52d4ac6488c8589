"""Human labels, read from JSONL (one object a line) or CSV, for ``validate`` and the report.

Each record has ``case_id`` (or ``id``), ``metric`` (may be left out when the caller names the one
metric) and the label under one of ``label``, ``human``, ``passed``, ``pass``, ``verdict``,
``grade``, ``score``, ``value``: pass/fail words (``pass``, ``fail``, ``yes``, ``no``...), a boolean,
or a number (a grade). A later label for the same case and metric replaces an earlier one.

Labels drawn by stratum (``ragbridge label``: half from the cases the judge passed, half from those
it failed) carry their sampling design, so that every estimate made from them is weighted by it:
``stratum`` (the judge's verdict on the case when it was drawn, ``pass`` or ``fail``),
``stratum_size`` (how many of the run's cases that stratum held), ``stratum_backend`` and
``stratum_threshold`` (whose verdict, at which threshold, made the strata). Labels without them were
drawn uniformly. All labels of one metric are one or the other.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional, Union

from .table import AnalysisError

__all__ = ["load_labels", "DESIGN"]

_PASS_WORDS = {"pass", "passed", "yes", "y", "true", "t", "ok", "good", "correct", "faithful", "supported"}
_FAIL_WORDS = {"fail", "failed", "no", "n", "false", "f", "bad", "incorrect", "unfaithful", "unsupported"}
_LABEL_KEYS = ("label", "human", "passed", "pass", "verdict", "grade", "score", "value")


def load_labels(path: Union[str, Path], metric: Optional[str] = None):
    """Human labels as a DataFrame ``case_id, metric, grade, graded`` and the sampling design's
    ``stratum, stratum_size, stratum_backend, stratum_threshold`` (None for labels drawn uniformly).

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
    designs: dict[str, tuple[int, tuple]] = {}
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
        row = {"case_id": k2[0], "metric": k2[1], "grade": grade, "graded": _is_number(rec[key]),
               **_design(rec, f"{path}:{lineno}")}
        draw = (row["stratum_backend"], row["stratum_threshold"])
        first_line, first_draw = designs.setdefault(k2[1], (lineno, draw))
        if draw != first_draw:
            raise AnalysisError(
                f"{path}:{lineno}: drawn by {_draw_text(draw)}, but line {first_line} by "
                f"{_draw_text(first_draw)}: the labels of {k2[1]!r} must come from one draw (give every "
                "line the sampling fields ragbridge label wrote, or none)")
        if k2 in seen:
            rows[seen[k2]] = row
        else:
            seen[k2] = len(rows)
            rows.append(row)
    if not rows:
        raise AnalysisError(f"{path}: no labels")
    return pd.DataFrame(rows, columns=["case_id", "metric", "grade", "graded", *DESIGN])


#: the fields of a label that describe how it was drawn
DESIGN = ("stratum", "stratum_size", "stratum_backend", "stratum_threshold")


def _design(rec: dict, at: str) -> dict[str, Any]:
    """The sampling fields of a record, checked (all four or none)."""
    got = {k: rec.get(k) for k in DESIGN}
    if all(v is None for v in got.values()):
        return got
    missing = [k for k, v in got.items() if v is None]
    if missing:
        raise AnalysisError(f"{at}: a stratified label needs {', '.join(DESIGN)}; "
                            f"missing {', '.join(missing)}")
    size, thr = got["stratum_size"], got["stratum_threshold"]
    if isinstance(size, bool) or not isinstance(size, (int, str)) or not str(size).isdigit() or int(size) < 1:
        raise AnalysisError(f"{at}: stratum_size must be a positive integer, got {size!r}")
    try:
        thr = float(thr)
    except (TypeError, ValueError):
        raise AnalysisError(f"{at}: stratum_threshold must be a number, got {thr!r}") from None
    return {"stratum": str(got["stratum"]), "stratum_size": int(size),
            "stratum_backend": str(got["stratum_backend"]), "stratum_threshold": thr}


def _draw_text(draw: tuple) -> str:
    backend, threshold = draw
    return "a uniform draw" if backend is None else f"{backend}'s verdicts at {threshold:g}"


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
