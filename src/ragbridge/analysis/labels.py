"""Human labels, read from JSONL (one object a line) or CSV, for ``validate`` and the report.

Each record has ``case_id`` (or ``id``), ``metric`` (may be left out when the caller names the one
metric) and the label under one of ``label``, ``human``, ``passed``, ``pass``, ``verdict``,
``grade``, ``score``, ``value``: pass/fail words (``pass``, ``fail``, ``yes``, ``no``...), a boolean,
or a number (a grade). A case and metric labelled twice with the same label is one label; with
two different labels it is an error naming both lines. Case ids are read by the run's rule
(`ragbridge.schema.clean_id`: white space at the ends dropped, Unicode NFC, a character that does not
print refused). Grades are on 0..1 unless a ``label_threshold`` above 1
says the scale is another (3 for a 1-5 scale): a grade of 1.5 with pass/fail labels is an error.

Labels drawn by stratum (``ragbridge label``: half from the cases the judge passed, half from those
it failed) carry their sampling design, so that every estimate made from them is weighted by it:
``stratum`` (the judge's verdict on the case when it was drawn, ``pass`` or ``fail``),
``stratum_size`` (how many of the run's cases that stratum held), ``stratum_backend`` and
``stratum_threshold`` (whose verdict, at which threshold, made the strata). Labels without them were
drawn uniformly. All labels of one metric are one or the other.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional, Union

from ..schema import clean_id
from .table import AnalysisError

__all__ = ["load_labels", "DESIGN"]

_PASS_WORDS = {"pass", "passed", "yes", "y", "true", "t", "ok", "good", "correct", "faithful", "supported"}
_FAIL_WORDS = {"fail", "failed", "no", "n", "false", "f", "bad", "incorrect", "unfaithful", "unsupported"}
_LABEL_KEYS = ("label", "human", "passed", "pass", "verdict", "grade", "score", "value")


def load_labels(path: Union[str, Path], metric: Optional[str] = None, label_threshold: float = 0.5):
    """Human labels as a DataFrame ``case_id, metric, grade, graded`` and the sampling design's
    ``stratum, stratum_size, stratum_backend, stratum_threshold`` (None for labels drawn uniformly).

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
    designs: dict[str, tuple[int, tuple]] = {}
    for lineno, rec in _records(path):
        cid = rec.get("case_id", rec.get("id"))
        if cid is None or str(cid).strip() == "":
            raise AnalysisError(f"{path}:{lineno}: no case_id")
        try:
            cid = clean_id(str(cid), "case_id")
        except ValueError as exc:
            raise AnalysisError(f"{path}:{lineno}: {exc}") from None
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
