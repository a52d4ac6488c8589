"""Golden sets held in memory: the user's objects as canonical cases, and cases as a library's objects.

`cases_from_data` reads what `ragbridge.load_cases` and `ragbridge.evaluate` are given besides a path:

* `Case` objects (a list of them): taken as they are;
* rows: a list (or tuple) of mappings, a pandas ``DataFrame`` or a ``datasets.Dataset``. Rows in the
  canonical vocabulary (`ragbridge.formats.records`) are read as the lines of a canonical JSONL file
  are (a table's cells as a Parquet file's: JSON text in a list or mapping column is parsed). Rows
  whose fields are a library's (some field the canonical readers do not know, and every field one
  that exactly one library registers) are read by that library's plugin: the rule a file behind a
  canonical suffix is recognised by (`Format.fields`), on the first row's fields, or a DataFrame's
  or dataset's columns. ``format=NAME`` names the library instead;
* a library's own objects (its dataset, sample or test-case objects, or a list of them), which its
  plugin recognises: the plugin turns them into rows as the library writes them to a file, and
  those rows are read as above, so an object and the file the library writes of it give the same
  cases.

The checks are those of a file, and so are the errors (`DatasetError`), with the item's index (from
0, as in ``data[i]``) in place of the line: ``DataFrame (index 3): field 'question': is required
but missing``.

`to_library` is the way back: the cases as a library's own object (`Library.kinds`), with a warning
naming the canonical fields that object cannot hold.

What each library's objects are, and how they map onto cases, is its plugin's knowledge: a plugin
registers a `Library` through the ``ragbridge_register_libraries`` hook (`get_libraries`).
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from ..plugins import load_plugins, pm
from ..schema import Case
from .files import DatasetError
from .records import (CANONICAL_FIELDS, QUESTION_COLUMNS, cases_from_records, is_missing, literal_cell,
                      pandas_index, plain, rows_to_records, shared_fields)

__all__ = ["Library", "get_libraries", "cases_from_data", "data_rows", "to_library", "INDEX"]

#: the unit a `DatasetError` about an in-memory item names it by: its index from 0
INDEX = "index"
#: the in-memory tables, whose cells are read as a table file's (`rows_to_records`); a list of dicts
#: is read as JSON is, each value of its field's type
TABLES = ("DataFrame", "Dataset")


@dataclass
class Library:
    """What a library's in-memory data looks like, as its plugin registers it.

    ``recognises(data)`` says whether ``data`` is one of the library's own objects (a dataset, a
    sample or test case, or a list of them); it must be cheap and import nothing (it looks at the
    type's module and name). ``rows(data)`` gives such an object's records as the library writes
    them to a file (plain dicts in its field names). ``fields`` are the field names of the library's
    records, and ``read_rows(rows)`` reads records in them into cases. Records whose fields are all
    canonical are read by the canonical reader instead, as a file of them is (so an object and the
    file the library writes of it give the same cases). Both raise `DatasetError` naming the item
    by its index from 0 (``line=i, unit="index"``) and the field, as a file's reader names the line.
    ``kinds`` are the objects `to_library` makes, by name, the first the default: each takes the
    cases and returns ``(object, lost)``, ``lost`` naming the canonical fields (or parts, as in
    `Format.cannot_hold`) some case used that the object cannot hold. ``table_cells`` are the fields
    whose values are lists or mappings: in a table (a DataFrame read back with pandas' ``read_csv``)
    a text cell of one of them is read as JSON or as the Python literal pandas wrote (`literal_cell`)
    before ``read_rows`` sees it.
    """

    name: str
    fields: frozenset[str] = frozenset()
    read_rows: Optional[Callable[[list[dict[str, Any]]], list[Case]]] = None
    recognises: Callable[[Any], bool] = lambda data: False
    rows: Optional[Callable[[Any], list[dict[str, Any]]]] = None
    kinds: dict[str, Callable[[Sequence[Case]], tuple[Any, list[str]]]] = field(default_factory=dict)
    description: str = ""
    table_cells: frozenset[str] = frozenset()


def get_libraries() -> dict[str, Library]:
    """Every registered library by name."""
    load_plugins()
    found: dict[str, Library] = {}

    def register(library: Library) -> None:
        if library.name in found:
            raise ValueError(f"two plugins register a library named {library.name!r}")
        found[library.name] = library

    pm.hook.ragbridge_register_libraries(register=register)
    return found


# --------------------------------------------------------------------------------------------
# Reading


def _kind(data: Any) -> str:
    """``module.Class`` of ``data``'s type, the module cut to its package (imports nothing)."""
    return type(data).__module__.split(".")[0] + "." + type(data).__name__


def data_rows(data: Any) -> Optional[tuple[str, list[dict[str, Any]], list[str]]]:
    """``(what, rows, fields)`` when ``data`` is rows (see the module docstring), else None: what it
    is (for error messages), its rows as plain dicts without missing cells, and its field names (a
    table's columns, else the first row's keys)."""
    kind = _kind(data)
    if kind == "pandas.DataFrame":
        columns = [str(c) for c in data.columns]
        _numeric_ids(data, columns)
        # every missing cell (NaN, None, pd.NA, NaT) as None, whatever the column's dtype
        records = data.astype(object).where(data.notna(), None).to_dict(orient="records")
        index = pandas_index(columns, records)  # read_csv of a file to_csv wrote with its index
        if index is not None:
            columns = columns[1:]
            records = [{k: v for k, v in r.items() if k != index} for r in records]
        rows = [_plain_row(r) for r in records]
        for name in set(QUESTION_COLUMNS) & set(columns):  # a blank cell is an empty question, as in CSV
            for row in rows:
                row.setdefault(name, "")
        return "DataFrame", rows, columns
    if kind.startswith("datasets.") and type(data).__name__ == "Dataset":
        return "Dataset", [_plain_row(r) for r in data.to_list()], list(data.column_names)
    if isinstance(data, (list, tuple)) and data and isinstance(data[0], dict):
        return "list", [_plain_row(r) if isinstance(r, dict) else r for r in data], [str(k) for k in data[0]]
    return None


def _numeric_ids(frame: Any, columns: list[str]) -> None:
    """A DataFrame's id column that pandas holds as numbers (``read_csv`` of ids such as ``001`` or
    ``1e3``): never taken silently. Floats (``1e3`` read as 1000.0, or a column with a missing id)
    are a `DatasetError`; whole numbers (``001`` read as 1) a warning: both name the fix,
    ``pd.read_csv(..., dtype={COLUMN: str})``. A frame built with numbers as ids is warned of too."""
    from .records import ALIASES

    for name in ("id", *ALIASES["id"]):
        if name not in columns:
            continue
        dtype = frame[frame.columns[columns.index(name)]].dtype
        if dtype.kind not in "iuf":
            continue
        fix = f"pd.read_csv(path, dtype={{{name!r}: str}})"
        if dtype.kind == "f":
            raise DatasetError(
                f"column {name!r} holds numbers ({dtype}), not texts: pandas' read_csv reads ids such as "
                "'1e3' or '001' as numbers (1000.0, 1.0), and a column with a missing id as floats, so the "
                "ids as written are lost", path="DataFrame", field=name,
                hint=f"read the file with {fix}, or give the ids as texts")
        warnings.warn(
            f"DataFrame column {name!r} holds whole numbers ({dtype}): read as the ids '1', '2', ...; if "
            f"pandas read them from a file, ids such as '001' lost their zeros: read it with {fix} to keep "
            "the ids as written", UserWarning, stacklevel=_caller_level())
        return


def _caller_level() -> int:
    """The ``stacklevel`` that names the first frame outside ragbridge (the user's call)."""
    here = str(Path(__file__).resolve().parent.parent)
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(here):
        frame, level = frame.f_back, level + 1
    return level


def _plain_row(row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in row.items():
        v = plain(v, keep_missing=True)
        if not is_missing(v):
            out[str(k)] = v
    return out


def cases_from_data(data: Any, format: Optional[str] = None) -> list[Case]:
    """Canonical cases from in-memory data (see the module docstring); raises `DatasetError`."""
    if isinstance(data, (list, tuple)) and data and all(isinstance(c, Case) for c in data):
        return list(data)
    if isinstance(data, (list, tuple)) and not data:
        raise DatasetError("holds no cases", path=type(data).__name__,
                           hint="a golden set needs at least one case")
    libraries = get_libraries()
    if format is not None and format not in libraries and format not in ("jsonl", "canonical"):
        raise DatasetError(f"unknown library {format!r} for in-memory data",
                           hint="known: canonical, " + ", ".join(sorted(libraries)))
    rows = data_rows(data)
    if rows is not None:
        what, records, fields = rows
        library = libraries.get(format) if format else _library_of_fields(fields, libraries, what)
        return _read_records(records, library, what)
    claims = [lib for lib in libraries.values() if lib.rows is not None and lib.recognises(data)]
    if format is not None:
        claims = [lib for lib in claims if lib.name == format]
    if claims:
        what = _kind(data).split(".")[-1]
        records = _located(claims[0].rows, data, what)
        canonical = format is None and bool(records) and isinstance(records[0], dict) and set(
            records[0]) <= CANONICAL_FIELDS
        return _read_records(records, None if canonical else claims[0], what)
    raise DatasetError(
        f"cannot read a {_kind(data)} as cases", path=type(data).__name__,
        hint="pass a path, Case objects, a list of dicts, a pandas DataFrame, a datasets.Dataset, or a "
             "dataset or test-case object of a library whose backend is installed (ragbridge backends)")


def _read_records(records: list[Any], library: Optional[Library], what: str) -> list[Case]:
    if not records:
        raise DatasetError("holds no cases", path=what, hint="a golden set needs at least one case")
    if library is not None and library.read_rows is not None:
        if what in TABLES and library.table_cells:
            records = list(_table_cells(records, library.table_cells, what))
        return _located(library.read_rows, records, what)
    if what in TABLES:
        return cases_from_records(_table_records(records, what), what, unit=INDEX)
    return cases_from_records(enumerate(records), what, unit=INDEX)


def _table_records(records: list[Any], what: str) -> Iterator[tuple[int, Any]]:
    """A table's rows as records, their cells read as a Parquet file's are (`rows_to_records`: JSON
    text in list and mapping columns, ``|``-separated ids), numbered by index."""
    try:
        for n, record in rows_to_records(records, what):
            yield n - 1, record
    except DatasetError as exc:
        if exc.unit == "row" and exc.line is not None:
            exc.line, exc.unit = exc.line - 1, INDEX
        raise


def _table_cells(records: list[Any], cells: frozenset[str], what: str) -> Iterator[dict[str, Any]]:
    """A library's table rows with the text cells of its list and mapping fields read as JSON or
    as the Python literals pandas writes (`literal_cell`)."""
    for i, row in enumerate(records):
        out = dict(row)
        for k in cells & row.keys():
            v = row[k]
            if isinstance(v, str) and v.strip()[:1] in "[{":
                try:
                    out[k] = literal_cell(v.strip())
                except DatasetError as exc:
                    exc.path, exc.line, exc.unit, exc.field = what, i, INDEX, k
                    raise
        yield out


def _library_of_fields(fields: Sequence[str], libraries: dict[str, Library], what: str) -> Optional[Library]:
    """The one library whose fields these are, when some of them are not canonical (None: canonical)."""
    if set(fields) <= CANONICAL_FIELDS:
        return None
    claims = sorted(n for n, lib in libraries.items()
                    if lib.read_rows and lib.fields and set(fields) <= lib.fields)
    shared = shared_fields(fields, {n: lib.fields for n, lib in libraries.items() if lib.read_rows}, claims)
    if shared:
        raise DatasetError(shared, path=what, hint="name the library with format=NAME")
    if len(claims) > 1:
        raise DatasetError(f"its fields ({', '.join(sorted(fields))}) fit more than one library: "
                           f"{', '.join(claims)}", path=what, hint="name one with format=NAME")
    return libraries[claims[0]] if claims else None


def _located(read: Callable[[Any], Any], data: Any, what: str) -> Any:
    try:
        return read(data)
    except DatasetError as exc:
        if exc.path is None:
            exc.path = what
        raise


# --------------------------------------------------------------------------------------------
# The way back


def to_library(cases: Sequence[Case], library: str, kind: Optional[str] = None) -> Any:
    """``cases`` as library ``library``'s own object (``kind``: which of its objects; default its
    first, `Library.kinds`). A canonical field the object cannot hold is named in one warning
    (``UserWarning``). Raises `DatasetError` for an unknown library or kind."""
    libraries = get_libraries()
    lib = libraries.get(library)
    if lib is None or not lib.kinds:
        known = sorted(n for n, x in libraries.items() if x.kinds)
        raise DatasetError(f"no library {library!r} to translate cases into",
                           hint="known: " + (", ".join(known) or "none (install a backend's extra)"))
    name = kind or next(iter(lib.kinds))
    if name not in lib.kinds:
        raise DatasetError(f"library {library!r} has no kind {name!r}", hint="kinds: " + ", ".join(lib.kinds))
    obj, lost = lib.kinds[name](list(cases))
    if lost:
        warnings.warn(f"{library} {name} cannot hold: {', '.join(lost)} (a file format of the library keeps "
                      "them; see ragbridge formats)", UserWarning, stacklevel=2)
    return obj
