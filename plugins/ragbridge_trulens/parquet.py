"""TruLens rows in Parquet: ``meta`` as a struct, as TruLens's own tables hold it.

TruLens's ``add_ground_truth_to_dataset`` takes a row's ``meta`` only as a mapping, and pandas writes
TruLens's own ground-truth frame with ``meta`` a struct: a field per key of any row's ``meta``, null in
a row that lacks the key. `write_rows` writes the same, with two kinds of key held as JSON text inside
the struct instead (their names in the file's key-value metadata, `META_AS_JSON`): a key whose values
the rows cannot share one Arrow type for (a number in one row, a text in another; a mapping here, a
list there: each is written as it is, or not at all), and the keys the caller names (ragbridge's own
part, whose label ids would each be a struct field). `read_rows` gives the rows back without the
nulls of absent keys and with those keys parsed. What a struct cannot tell apart, a null of the case's
own from a key the row lacks, is named as lost (`PARQUET_CANNOT_HOLD`; `struct_nulls` says when the
rows lack keys others have, which TruLens's store keeps as nulls).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from ragbridge.plugin import DatasetError, read_parquet_table
from ragbridge.plugin import plain as _plain

__all__ = ["META_AS_JSON", "PARQUET_CANNOT_HOLD", "read_rows", "write_rows", "struct_nulls", "struct_texts"]


#: the Parquet file's key-value metadata that names the keys of ``meta`` held as JSON text
META_AS_JSON = b"ragbridge.meta_json"


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a Parquet file; ``meta``, a struct (as TruLens's own tables hold it, and as
    `write_rows` writes it), without the nulls a struct gives the keys a row lacks, its keys held
    as JSON text parsed (`META_AS_JSON`)."""
    table = read_parquet_table(path)
    as_json = json.loads((table.schema.metadata or {}).get(META_AS_JSON, b"[]"))
    rows = table.to_pylist()
    for row in rows:
        meta = row.get("meta")
        if isinstance(meta, dict):
            row["meta"] = {k: json.loads(v) if k in as_json and isinstance(v, str) else _plain(v)
                           for k, v in meta.items() if v is not None}
    return rows


def write_rows(rows: list[dict[str, Any]], path: Path, as_text: Sequence[str] = ()) -> list[str]:
    """Lists as Parquet's own lists (``contexts``, and ``expected_chunks`` as a list of objects, so
    that TruLens gets lists of chunks); ``meta`` as a struct, as TruLens's own tables hold it
    (`_meta_array`). Returns what the file cannot hold (`PARQUET_CANNOT_HOLD`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = list(dict.fromkeys(k for r in rows for k in r))
    arrays, as_json, lost = {}, [], []
    for col in columns:
        values = [r.get(col) for r in rows]
        try:
            if col == "meta":
                arrays[col], as_json, lost = _meta_array(values, as_text)
            else:
                arrays[col] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise DatasetError(f"cannot be written as one Parquet column: {exc}", path=path, field=col,
                               hint="the rows' values differ in type; write .jsonl instead") from None
    table = pa.table(arrays)
    if as_json:
        table = table.replace_schema_metadata({META_AS_JSON: json.dumps(as_json).encode()})
    pq.write_table(table, path)
    return lost


#: what the ``.parquet`` file cannot hold: a null in ``metadata``, which a struct cannot tell from a
#: key the row lacks
PARQUET_CANNOT_HOLD = ("metadata (a null value, Parquet)",)


def _meta_array(metas: list[dict[str, Any]], as_text: Sequence[str] = ()) -> tuple[Any, list[str], list[str]]:
    """``meta`` as a Parquet struct, its fields the keys of every row's ``meta`` (a row without one
    has null there, as TruLens's own tables write it), the keys held as JSON text inside it, and what
    is lost. A key whose values the rows cannot share one type for (a number in one row, a text in
    another; a mapping here, a list there) is JSON text in every row, and so is each key of
    ``as_text``; TruLens reads a text as any other value, and `read_rows` parses them back. With no
    key in any row, ``meta`` is null (Parquet has no struct without fields)."""
    import pyarrow as pa

    keys = list(dict.fromkeys(k for m in metas for k in m))
    if not keys:
        return pa.nulls(len(metas)), [], []
    children, as_json, lost = [], [], []
    for key in keys:
        values = [m.get(key) for m in metas]
        array = None
        if key not in as_text:
            try:
                array = pa.array(values)
                if not _kept(values, array.to_pylist()) or _empty_struct(array.type):
                    array = None
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
                array = None
        if array is None:
            as_json.append(key)
            array = pa.array([None if v is None else json.dumps(v, ensure_ascii=False) for v in values],
                             pa.string())
        elif any(m[key] is None or _has_null(m[key]) for m in metas if key in m):
            lost = list(PARQUET_CANNOT_HOLD)
        children.append(array)
    return pa.StructArray.from_arrays(children, names=keys), as_json, lost


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _kept(values: list[Any], back: list[Any]) -> bool:
    """Whether Arrow gave back each value as it was (nulls of absent keys aside): not an integer as a
    float, a tuple as a list, ..."""
    def text(v: Any) -> str:
        return json.dumps(_without_nulls(v), sort_keys=True, ensure_ascii=False, default=repr)

    return all(text(a) == text(b) for a, b in zip(values, back))


def _has_null(value: Any) -> bool:
    """Whether ``value`` holds a mapping with a null value (which a struct reads back as absent)."""
    if isinstance(value, dict):
        return any(v is None or _has_null(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_null(v) for v in value)
    return False


def _empty_struct(kind: Any) -> bool:
    """Whether an Arrow type holds a struct without fields, which Parquet cannot write."""
    import pyarrow as pa

    if pa.types.is_struct(kind):
        return kind.num_fields == 0 or any(_empty_struct(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _empty_struct(kind.value_type)
    return False


def struct_nulls(metas: list[dict[str, Any]], as_text: Sequence[str] = ()) -> bool:
    """Whether the ``meta`` struct of `_meta_array` gives some row a null it did not have."""
    array, as_json, _ = _meta_array(metas, as_text)
    for meta, back in zip(metas, array.to_pylist()):
        back = {k: json.loads(v) if k in as_json and v is not None else v for k, v in (back or {}).items()}
        if json.dumps(back, sort_keys=True, default=repr) != json.dumps(meta, sort_keys=True, default=repr):
            return True
    return False


def struct_texts(metas: list[dict[str, Any]], as_text: Sequence[str] = ()) -> list[str]:
    """The keys of ``meta`` that `_meta_array` holds as JSON text (`read_rows` parses them back; another
    reader, TruLens among them, gets the text)."""
    return _meta_array(metas, as_text)[1] if metas else []
