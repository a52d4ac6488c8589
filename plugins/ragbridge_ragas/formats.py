"""RAGAS datasets as ragbridge formats, and the Python API to translate in memory.

Formats (for ``ragbridge convert`` and ``ragbridge run --format``; they claim no file suffix, so
name them with ``--from`` / ``--to``, or let a ``.jsonl``/``.csv``/... file's RAGAS fields tell):

* ``ragas``: a RAGAS ``EvaluationDataset`` as JSONL (what ``EvaluationDataset.to_jsonl`` writes and
  ``from_jsonl`` reads). Reading also accepts a ``datasets`` folder, a ``.csv`` (``to_csv``), a
  ``.parquet`` file (``to_pandas().to_parquet(...)``) and a ``.json`` list (``to_list()`` dumped).
* ``ragas-hf``: a Hugging Face ``datasets`` folder (``EvaluationDataset.to_hf_dataset().save_to_disk``).
* ``ragas-csv``: what ``EvaluationDataset.to_csv`` writes (list cells as Python literals,
  ``['a', 'b']``; JSON lists are read too), and what pandas' ``to_csv`` writes of
  ``EvaluationDataset.to_pandas()`` (its index column, the first, left out; a DataFrame pandas reads
  back is read the same way). RAGAS has no CSV reader; ragbridge has one. An empty
  answer or reference reads back as missing (the one loss; reported).

Every file format writes the ``ragbridge`` column (JSON text in CSV and ``datasets`` folders) where
a case has something RAGAS cannot hold, so a round trip is lossless; RAGAS's loaders ignore it, and
RAGAS's own re-save drops it (`RESAVE_DROPS`; ``resave_lost_*`` name what given cases lose there,
with the quirks of RAGAS's ``to_hf_dataset`` and ``to_csv``, which take the first sample's fields).
Chunk ids are exported in the labels' id space, so RAGAS's ``IDBasedContextRecall`` on the export
equals native recall at full depth (and its ``IDBasedContextPrecision`` counts distinct labels).

Python::

    from ragbridge_ragas import from_ragas, to_ragas
    cases = from_ragas(evaluation_dataset)   # or a datasets.Dataset, a pandas DataFrame, a list of dicts
    dataset, lost = to_ragas(cases)          # a ragas EvaluationDataset + canonical fields it cannot hold

The field mapping, the id space and the ``ragbridge`` column: :mod:`ragbridge_ragas.translate`.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Sequence

from ragbridge.plugin import Case, DatasetError, Format, jsonl_lines, literal_cell, pandas_index, read_hf_rows

from .translate import (LIST_COLUMNS, RAGAS_FIELDS, READ_FIELDS, SIDECAR, cases_to_rows, is_ragas_object,
                        lost_fields, object_rows, read_object_rows, rows_to_cases, to_ragas)

__all__ = ["FORMATS", "from_ragas", "to_ragas", "read_ragas", "read_ragas_jsonl", "read_ragas_hf",
           "read_ragas_csv", "write_ragas_jsonl", "write_ragas_hf", "write_ragas_csv"]


def from_ragas(data: Any) -> list[Case]:
    """Canonical cases from a RAGAS ``EvaluationDataset``, a ``datasets.Dataset``, a pandas
    ``DataFrame``, a list of sample dicts or ``SingleTurnSample`` objects, or a path (JSONL file or
    ``datasets`` folder). Legacy column names (question/contexts/answer/ground_truth) are accepted.
    Raises ``DatasetError`` for input it cannot translate (an in-memory item named by its index)."""
    if isinstance(data, (str, Path)):
        return read_ragas(Path(data))
    if is_ragas_object(data):
        return read_object_rows(object_rows(data))
    kind = type(data).__module__.split(".")[0] + "." + type(data).__name__
    if kind == "pandas.DataFrame":
        frame = data.astype(object).where(data.notna(), None)  # pandas 3: missing text cells are NaN
        return read_object_rows(frame.to_dict(orient="records"))
    if kind.startswith("datasets.") and hasattr(data, "to_list"):
        return read_object_rows(data.to_list())
    if isinstance(data, (list, tuple)):
        return read_object_rows(list(data))
    raise DatasetError(f"cannot translate a {type(data).__name__} into cases",
                       hint="pass a ragas EvaluationDataset, a datasets.Dataset, a pandas DataFrame or "
                            "a list of dicts")


# --------------------------------------------------------------------------------------------
# File formats


def read_ragas(path: Path) -> list[Case]:
    """The ``ragas`` format's reader: JSONL, or by its form a ``datasets`` folder, a ``.csv`` (as
    ``ragas-csv``), a ``.parquet`` file (a saved pandas DataFrame) or a ``.json`` list of samples
    (``EvaluationDataset.to_list()`` dumped)."""
    path = Path(path)
    if path.is_dir():
        return read_ragas_hf(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        try:
            data = json.loads(path.read_bytes().decode("utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DatasetError(f"not a valid UTF-8 JSON file: {exc}", path=path) from None
        if not isinstance(data, list):
            raise DatasetError("must hold a JSON list of RAGAS samples", path=path)
        return rows_to_cases(data, path=str(path), unit="item")
    if suffix == ".csv":
        return read_ragas_csv(path)
    if suffix in (".parquet", ".pq"):
        import pandas as pd

        try:
            frame = pd.read_parquet(path)
        except Exception as exc:
            raise DatasetError(f"cannot be read as Parquet: {exc}", path=path) from None
        try:
            return from_ragas(frame)
        except DatasetError as exc:
            exc.path = str(path)
            raise
    return read_ragas_jsonl(path)


def read_ragas_jsonl(path: Path) -> list[Case]:
    path = Path(path)
    rows, lines = [], []
    for n, row in jsonl_lines(path, hint="each line must be one RAGAS sample as a JSON object"):
        rows.append(row)
        lines.append(n)
    try:
        return rows_to_cases(rows, path=str(path), unit="line")
    except DatasetError as exc:
        if exc.line is not None and exc.unit == "line":
            exc.line = lines[exc.line - 1]  # sample number -> file line (blank lines skipped)
        raise


def read_ragas_hf(path: Path) -> list[Case]:
    return rows_to_cases(read_hf_rows(path), path=str(path), unit="row")


def write_ragas_jsonl(cases: Sequence[Case], path: Path) -> list[str]:
    with open(path, "w", encoding="utf-8") as f:
        for row in cases_to_rows(cases):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return []


def _flat_sidecar(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``ragbridge`` column as JSON text (its shape differs from row to row)."""
    for row in rows:
        if SIDECAR in row:
            row[SIDECAR] = json.dumps(row[SIDECAR], ensure_ascii=False)
    return rows


#: a RAGAS field -> the canonical field it holds
_CANONICAL_OF = {"retrieved_contexts": "contexts", "retrieved_context_ids": "contexts.id",
                 "reference_context_ids": "relevant", "response": "answer", "reference": "reference",
                 "reference_contexts": "reference_contexts"}
#: what RAGAS's ``to_hf_dataset`` loses: it keeps the fields of the first sample only
#: (``datasets.Dataset.from_list``)
HF_FIRST_ROW = tuple(f"{name} (absent from the first case: RAGAS's to_hf_dataset)"
                     for name in [*_CANONICAL_OF.values(), "metadata"])
#: RAGAS's ``to_csv`` takes its columns from the first sample and fails on a later one with more
CSV_FIRST_ROW = "every field (RAGAS's to_csv fails when a later case has a field the first lacks)"


def _later_fields(cases: Sequence[Case]) -> list[str]:
    """The canonical fields a later case gives to RAGAS and the first does not."""
    rows = cases_to_rows(cases, with_sidecar=False)
    first = set(rows[0]) if rows else set()
    later = {k for row in rows[1:] for k in row} - first
    return sorted({_CANONICAL_OF.get(k, "metadata") for k in later})


def write_ragas_hf(cases: Sequence[Case], path: Path) -> list[str]:
    import datasets

    rows = _flat_sidecar(cases_to_rows(cases))
    columns = list(dict.fromkeys(k for row in rows for k in row))  # from_list reads the first row's keys only
    datasets.Dataset.from_list([{k: row.get(k) for k in columns} for row in rows]).save_to_disk(str(path))
    return []


def resave_lost_jsonl(cases: Sequence[Case], path: Path) -> list[str]:
    """What RAGAS's own load and re-save lose: the ``ragbridge`` column (`lost_fields`). Without it,
    an empty id list the writer chose (a labelled case that retrieved nothing, or whose labels all
    have grade 0) reads back as one RAGAS was given, kept in ``metadata["ragas"]``."""
    lost = lost_fields(cases)
    for case, row in zip(cases, cases_to_rows(cases, with_sidecar=False)):
        given = case.metadata.get("ragas") if isinstance(case.metadata.get("ragas"), dict) else {}
        if any(row.get(k) == [] and k not in given
               for k in ("retrieved_context_ids", "reference_context_ids")):
            return sorted(set(lost) | {"metadata"})
    return lost


def resave_lost_hf(cases: Sequence[Case], path: Path) -> list[str]:
    return resave_lost_jsonl(cases, path) + [f"{name} (absent from the first case: RAGAS's to_hf_dataset)"
                                             for name in _later_fields(cases)]


def resave_lost_csv(cases: Sequence[Case], path: Path) -> list[str]:
    return resave_lost_jsonl(cases, path) + ([CSV_FIRST_ROW] if _later_fields(cases) else [])


def _csv_cell(column: str, text: str, path: Path, line: int):
    if text == "":
        return None
    if column in LIST_COLUMNS and text[:1] in "[{":
        try:
            return literal_cell(text)
        except DatasetError as exc:
            exc.path, exc.line, exc.field = str(path), line, column
            raise
    return text


def read_ragas_csv(path: Path) -> list[Case]:
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DatasetError("invalid UTF-8", path=path, hint="save the file as UTF-8") from None
    if not text.strip():
        raise DatasetError("file is empty", path=path, hint="a golden set needs at least one case")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows, lines = [], []
    for row in reader:
        if None in row:
            raise DatasetError("has more cells than the header has columns", path=path, line=reader.line_num)
        rows.append(row)
        lines.append(reader.line_num)
    index = pandas_index(reader.fieldnames or [], rows)  # pandas' to_csv writes the index first
    rows = [{k: _csv_cell(k, v, path, n) for k, v in row.items() if k != index}
            for row, n in zip(rows, lines)]
    try:
        return rows_to_cases(rows, path=str(path), unit="line")
    except DatasetError as exc:
        if exc.line is not None and exc.unit == "line" and lines:
            exc.line = lines[exc.line - 1]
        raise


def write_ragas_csv(cases: Sequence[Case], path: Path) -> list[str]:
    rows = _flat_sidecar(cases_to_rows(cases))
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:  # as EvaluationDataset.to_csv: lists as Python literals
            writer.writerow({k: ("" if row.get(k) is None else row[k]) for k in columns})
    # an empty cell reads back as missing
    return [f"{name} (empty)" for name in ("answer", "reference")
            if any(getattr(c, name) == "" for c in cases)]


#: what RAGAS's own load and re-save lose: the ``ragbridge`` column (`lost_fields` names its parts)
RESAVE_DROPS = ("id", "contexts.id", "contexts.score", "contexts.source", "contexts.doc", "relevant (grades)",
                "relevant_spans", "must_contain", "must_not_contain", "answerable", "tags", "metadata")

FORMATS = [
    Format("ragas", (), read_ragas, write_ragas_jsonl,
           "RAGAS EvaluationDataset as JSONL (to_jsonl / from_jsonl), ids in the labels' id space, "
           "other fields in a 'ragbridge' column; also reads a datasets folder, .csv, .parquet, .json "
           "and RAGAS' legacy column names",
           fields=READ_FIELDS, signature=frozenset(RAGAS_FIELDS),
           resaved_by="RAGAS's EvaluationDataset.from_jsonl and to_jsonl", resave_drops=RESAVE_DROPS,
           resave_lost=resave_lost_jsonl),
    Format("ragas-hf", (), read_ragas_hf, write_ragas_hf,
           "RAGAS EvaluationDataset as a Hugging Face datasets folder", is_dir=True,
           resaved_by="RAGAS's EvaluationDataset.from_hf_dataset and to_hf_dataset",
           resave_drops=RESAVE_DROPS + HF_FIRST_ROW, resave_lost=resave_lost_hf),
    Format("ragas-csv", (), read_ragas_csv, write_ragas_csv,
           "RAGAS EvaluationDataset.to_csv output (list cells as Python literals)",
           cannot_hold=("answer (empty)", "reference (empty)"),
           resaved_by="RAGAS's EvaluationDataset.from_list (after pandas) and to_csv",
           resave_drops=RESAVE_DROPS + (CSV_FIRST_ROW,), resave_lost=resave_lost_csv),
]
