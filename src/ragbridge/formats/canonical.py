"""The canonical formats, a built-in plugin: JSONL, JSON, CSV, Parquet and Hugging Face ``datasets``.

Each holds canonical cases under the canonical field names (a reader also accepts the common
vocabulary of `ragbridge.formats.records`). JSONL is one case a line, JSON a list of cases (or an
object holding one under ``cases``, ``data``, ``examples``, ``samples``, ``goldens`` or
``test_cases``; read only). CSV, Parquet and ``datasets`` are one case a row, with list and mapping
cells as JSON (reading also takes the Python literals pandas writes, and leaves out the index column
of pandas' ``to_csv``: `ragbridge.formats.records.pandas_index`). CSV is comma-separated; a file that
seems separated by semicolons or tabs is an error that says so. A CSV cell cannot tell an empty or
blank text from a missing one: writing such an ``answer`` or ``reference`` names it as lost.
"""

from __future__ import annotations

import csv
import json
import math
from itertools import islice
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

from ..hookspecs import hookimpl
from ..schema import Case
from . import JSON_LIST_KEYS, Format
from .files import (DatasetError, jsonl_lines, optional_module, parquet_file, parse_json, read_hf_rows,
                    text_lines)
from .plain_records import case_record, record_line
from .records import CASE_FIELDS, cases_from_records, cell_value, pandas_index, rows_to_records

__all__ = ["BUILTIN_FORMATS", "read_jsonl", "write_jsonl", "write_records",
           "csv_records", "parquet_records"]


# --------------------------------------------------------------------------------------------
# Readers


def read_jsonl(path: Path) -> list[Case]:
    return cases_from_records(jsonl_lines(path), path)


def read_json(path: Path) -> list[Case]:
    lines = list(text_lines(path))
    try:
        data = parse_json("\n".join(t for _, t in lines))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno) from None
    except DatasetError as exc:
        exc.path = str(path)
        raise
    if isinstance(data, dict):
        data = next((data[k] for k in JSON_LIST_KEYS if isinstance(data.get(k), list)), data)
    if not isinstance(data, list):
        raise DatasetError("must hold a JSON list of case objects", path=path)
    return cases_from_records(((i, r) for i, r in enumerate(data, start=1)), path, unit="item")


def read_csv(path: Path) -> list[Case]:
    return cases_from_records(csv_records(path), path)


def csv_records(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line, record)`` of each row of a CSV golden set, read a row at a time (its header checked
    first), cells read as the module docstring of `ragbridge.formats.records` says."""
    for _ in text_lines(path):  # checks emptiness and UTF-8, with line numbers
        pass
    f = open(path, encoding="utf-8-sig", newline="")  # closed when the rows end
    try:
        reader = csv.DictReader(f)
        if not reader.fieldnames:
            raise DatasetError("has no header row", path=path)
        _columns_once(reader.fieldnames, path, "the header")
        delimiter = _other_delimiter(reader.fieldnames)
        if delimiter:
            raise DatasetError(
                f"the header is one column, {reader.fieldnames[0][:60]!r}: the file seems to be "
                f"separated by {delimiter}, not commas",
                path=path, line=1, hint="save it as comma-separated CSV, quoting the cells that hold a comma",
            )
    except BaseException:
        f.close()
        raise

    def rows() -> Iterator[dict[str, Any]]:
        try:
            yield from reader
        except csv.Error as exc:
            raise DatasetError(f"is not valid CSV: {exc}", path=path, line=reader.line_num) from None
        finally:
            f.close()

    index = reader.fieldnames[0] if reader.fieldnames[0] == "" else None  # pandas' to_csv index

    def records() -> Iterator[tuple[int, Any]]:
        for row in rows():
            line = reader.line_num
            if index is not None:
                if pandas_index([index], [row]) is None:
                    raise DatasetError("the first column has no name and holds more than row numbers",
                                       path=path, line=line,
                                       hint="give it a name in the header, or remove it")
                del row[index]
            if None in row:
                raise DatasetError(
                    f"has {len(row) - 1 + len(row[None])} cells but the header has "
                    f"{len(reader.fieldnames)} columns",
                    path=path, line=line,
                    hint="a cell holding a comma must be in double quotes; cells are separated by commas",
                )
            try:
                rec = {k: cell_value(k, v) for k, v in row.items()}
            except DatasetError as exc:
                exc.path, exc.line = str(path), line
                raise
            yield line, rec

    return records()


def _columns_once(names: Sequence[str], path: Path, where: str) -> None:
    """A column named twice is an error: a reader would keep one of the two silently."""
    seen: dict[str, int] = {}
    for i, name in enumerate(names, start=1):
        if name in seen:
            raise DatasetError(f"{where} names column {name!r} twice (columns {seen[name]} and {i}); a "
                               "reader "
                               "would keep one of them silently", path=path, line=1 if where == "the header"
                               else None, hint="rename or remove one of them")
        seen[name] = i


def _other_delimiter(header: Sequence[str]) -> Optional[str]:
    """The name of the delimiter a one-column header seems to use instead of commas, if any."""
    if len(header) != 1:
        return None
    for char, name in ((";", "semicolons"), ("\t", "tabs"), ("|", "vertical bars")):
        if char in header[0]:
            return name
    return None


def read_parquet(path: Path) -> list[Case]:
    return cases_from_records(parquet_records(path), path, unit="row")


def parquet_records(path: Path, batch_size: int = 2000) -> Iterator[tuple[int, Any]]:
    """``(row, record)`` of each row of a Parquet golden set, read ``batch_size`` rows at a time
    (`ragbridge.formats.files.parquet_file` checks its schema first); a first column that is pandas'
    index (every cell of it a whole number: `pandas_index`, read alone first) is left out."""
    source = parquet_file(path)
    if source.metadata.num_rows == 0:
        raise DatasetError("file is empty", path=path, hint="a golden set needs at least one case")
    names = source.schema_arrow.names
    _columns_once(names, path, "the schema")
    index = None
    if names and pandas_index(names[:1], ({names[0]: v} for v in
                                          source.read(columns=[names[0]]).column(0).to_pylist())):
        index = names[0]

    def rows() -> Iterator[dict[str, Any]]:
        for batch in source.iter_batches(batch_size=batch_size):
            for row in batch.to_pylist():
                if index is not None:
                    del row[index]
                yield row

    return rows_to_records(rows(), path)


def read_hf(path: Path) -> list[Case]:
    return cases_from_records(rows_to_records(read_hf_rows(path), path), path, unit="row")


# --------------------------------------------------------------------------------------------
# Writers


def write_jsonl(cases: Sequence[Case], path: Path) -> list[str]:
    write_records((case_record(c) for c in cases), path)
    return []


def write_records(records: Iterable[dict[str, Any]], path: Path) -> None:
    """Canonical records (`ragbridge.formats.plain_records.case_record`), one JSON line each."""
    with open(path, "wb") as f:
        for record in records:
            f.write(record_line(record) + b"\n")


_JSON_COLUMNS = ("contexts", "relevant", "relevant_spans", "reference_contexts", "must_contain",
                 "must_not_contain", "tags", "metadata")


def _flat_rows(cases: Iterable[Case]) -> Iterator[dict[str, Any]]:
    """The cases as table rows, list and mapping cells as JSON text; ``contexts`` an empty cell where
    the case gives none (`Case.contexts_given`), ``[]`` where its retriever returned none. One at a
    time: a golden set read a batch at a time (``convert``) is written so."""
    for case in cases:
        d = case.model_dump(mode="json")
        for col in _JSON_COLUMNS:
            d[col] = json.dumps(d[col], ensure_ascii=False)
        if not case.contexts_given:
            d["contexts"] = None
        yield d


def _blank(row: dict[str, Any]) -> set[str]:
    """``answer (blank)`` / ``reference (blank)`` where the row has that text empty or all spaces: a
    CSV cell cannot tell such a text from a missing one, so it reads back as missing."""
    return {f"{name} (blank)" for name in ("answer", "reference")
            if row[name] is not None and not row[name].strip()}


def write_csv(cases: Iterable[Case], path: Path) -> list[str]:
    blank: set[str] = set()
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(CASE_FIELDS))
        writer.writeheader()
        for row in _flat_rows(cases):
            blank |= _blank(row)
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return [name for name in ("answer (blank)", "reference (blank)") if name in blank]


#: the rows of a Parquet file written a part at a time (`write_parquet`)
PARQUET_ROWS = 2000


def write_parquet(cases: Iterable[Case], path: Path) -> list[str]:
    """A column of text per field (a list or mapping as JSON text), ``answerable`` true or false;
    `PARQUET_ROWS` rows at a time."""
    pq = optional_module("pyarrow.parquet", "parquet", "writing Parquet", path)
    import pyarrow as pa

    schema = pa.schema([(name, pa.bool_() if name == "answerable" else pa.string()) for name in CASE_FIELDS])
    rows = _flat_rows(cases)
    with pq.ParquetWriter(path, schema) as writer:
        while part := list(islice(rows, PARQUET_ROWS)):
            writer.write_table(pa.Table.from_pylist(part, schema=schema))
    return []


def write_hf(cases: Sequence[Case], path: Path) -> list[str]:
    datasets = optional_module("datasets", "datasets", "writing a datasets folder", path)

    datasets.Dataset.from_list(list(_flat_rows(cases))).save_to_disk(str(path))
    return []


# --------------------------------------------------------------------------------------------
# In pandas' hands (the library a user loads these files with)

#: what pandas' ``to_json`` (10 decimal places by default) loses of numbers a JSONL file holds
JSONL_RESAVE_DROPS = ("contexts.score (pandas' to_json keeps 10 digits)",
                      "metadata (pandas' to_json keeps 10 digits)")
#: pandas' ``to_csv`` ends rows with "\n" and so leaves a carriage return in a text unquoted: the
#: row breaks there for every reader
CSV_RESAVE_DROPS = ("every field (a text with a carriage return: pandas' to_csv leaves it unquoted)",)


def _long_floats(value: Any) -> bool:
    """A float that pandas' JSON encoder (``double_precision=10``, its default) does not write exactly.

    A float under 1e5 whose shortest text has at most 10 decimals and no exponent (0.3, 12.3456) is
    written exactly without asking pandas: it is within a tenth of a unit of that text's last place,
    so rounding it to 10 decimals gives that text back. The others are written by pandas and read."""
    if isinstance(value, float):
        text = repr(value)
        point = text.find(".")
        if -1e5 < value < 1e5 and point >= 0 and len(text) - point <= 11 and "e" not in text:
            return False
        from pandas.io.json import ujson_dumps

        return math.isfinite(value) and json.loads(ujson_dumps(value, double_precision=10)) != value
    if isinstance(value, dict):
        return any(_long_floats(v) for v in value.values())
    if isinstance(value, list):
        return any(_long_floats(v) for v in value)
    return False


def jsonl_resave_lost(cases: Sequence[Case], path: Path) -> list[str]:
    return records_resave_lost(map(case_record, cases))


def records_resave_lost(records: Iterable[dict[str, Any]]) -> list[str]:
    """What pandas' JSON re-save loses of the cases of canonical ``records`` (`JSONL_RESAVE_DROPS`):
    a golden set read a batch at a time is checked without a `Case` made of each record."""
    scores = meta = False
    for record in records:
        scores = scores or any(type(c) is dict and _long_floats(c.get("score"))
                               for c in record.get("contexts") or ())
        meta = meta or _long_floats(record.get("metadata"))
        if scores and meta:
            break
    return [name for name, used in zip(JSONL_RESAVE_DROPS, (scores, meta)) if used]


def csv_resave_lost(cases: Sequence[Case], path: Path) -> list[str]:
    texts = (t for c in cases for t in (c.id, c.question, c.answer, c.reference) if t)
    return list(CSV_RESAVE_DROPS) if any("\r" in t for t in texts) else []


# --------------------------------------------------------------------------------------------
# The plugin

BUILTIN_FORMATS = [
    Format("jsonl", (".jsonl", ".ndjson"), read_jsonl, write_jsonl,
           "canonical cases, one JSON object a line",
           resaved_by="pandas' read_json(lines=True, dtype=False, precise_float=True) and to_json",
           resave_drops=JSONL_RESAVE_DROPS, resave_lost=jsonl_resave_lost),
    Format("json", (".json",), read_json, None, "a JSON list of case objects (read only)"),
    Format("csv", (".csv",), read_csv, write_csv, "one case a row; list and mapping cells as JSON",
           cannot_hold=("answer (blank)", "reference (blank)"),
           resaved_by="pandas' read_csv(dtype=str, keep_default_na=False) and to_csv",
           resave_drops=CSV_RESAVE_DROPS, resave_lost=csv_resave_lost),
    Format("parquet", (".parquet", ".pq"), read_parquet, write_parquet, "one case a row",
           resaved_by="pandas' read_parquet and to_parquet"),
    Format("hf", (), read_hf, write_hf, "a Hugging Face datasets folder (save_to_disk / load_from_disk)",
           is_dir=True, resaved_by="datasets' load_from_disk and save_to_disk"),
]


@hookimpl
def ragbridge_register_formats(register):
    for fmt in BUILTIN_FORMATS:
        register(fmt)
