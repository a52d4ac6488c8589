"""Golden-set input and output: JSONL, CSV, Parquet and Hugging Face ``datasets`` folders.

Every reader turns a file into canonical `Case` objects and reports bad input precisely: the file,
the line (or row), the field, what is wrong and what to do. Besides the canonical field names, the
readers accept the common golden-set vocabulary:

===================  =====================================================================
canonical            also accepted
===================  =====================================================================
``id``               ``case_id``, ``qid``, ``query_id``, ``name`` (missing: derived from the question)
``question``         ``query``, ``user_input``, ``input``
``answer``           ``response``, ``actual_output``, ``generated_answer``
``contexts``         ``retrieved_contexts`` / ``retrieval_context`` (list of texts),
                     ``retrieved`` (list of chunk ids, or of chunks)
``relevant``         ``relevant_ids`` (a list: grade 1 each), ``qrels``
``reference``        ``ground_truth``, ``expected_output``, ``reference_answer``
===================  =====================================================================

A chunk given as plain text gets a stable id derived from its text (``ctx-<sha1[:12]>``), so the same
text in two cases is the same chunk. In CSV, list and mapping fields hold JSON (``["a", "b"]``,
``{"doc#s": 2}``); list fields and ``relevant`` also accept ``|``-separated text, and ``answerable``
``true``/``false``, ``yes``/``no`` or ``1``/``0`` (Parquet and ``datasets`` string cells alike). In
JSON a value must have its field's type: ``"relevant": "doc#s"`` or ``"answerable": "no"`` is an
error, not a guess. CSV is comma-separated; a file that seems separated by semicolons or tabs is
an error that says so.

Legal but suspicious input is not an error: `input_warnings` gives one line per kind, with the number
of cases it affects. Every output is written through `atomic_path`: whole or absent.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import math
import os
import secrets
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from pydantic import ValidationError

from .hookspecs import hookimpl
from .schema import MAX_METADATA_DEPTH, Case

__all__ = [
    "DatasetError",
    "Format",
    "load_cases",
    "write_cases",
    "fingerprint",
    "input_warnings",
    "atomic_path",
    "write_atomic",
    "normalize_record",
    "is_missing",
    "plain",
    "read_hf_rows",
    "cases_from_records",
    "derived_chunk_ids",
]

CASE_FIELDS = tuple(Case.model_fields)

ALIASES: dict[str, tuple[str, ...]] = {
    "id": ("case_id", "qid", "query_id", "name"),
    "question": ("query", "user_input", "input"),
    "answer": ("response", "actual_output", "generated_answer"),
    "reference": ("ground_truth", "expected_output", "reference_answer"),
    "relevant": ("relevant_ids", "qrels"),
}
CONTEXT_TEXT_ALIASES = ("retrieved_contexts", "retrieval_context")
LIST_FIELDS = ("contexts", "reference_contexts", "must_contain", "must_not_contain", "tags", "retrieved")


class DatasetError(ValueError):
    """Bad input in a dataset file: says where (file, line, field), what, and what to do."""

    def __init__(
        self,
        message: str,
        path: Optional[str | Path] = None,
        line: Optional[int] = None,
        field: Optional[str] = None,
        hint: Optional[str] = None,
        unit: str = "line",
    ):
        self.path = str(path) if path is not None else None
        self.line = line
        self.field = field
        self.message = message
        self.hint = hint
        self.unit = unit
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path or "<data>"
        if self.line is not None:
            where += f":{self.line}" if self.unit == "line" else f" ({self.unit} {self.line})"
        text = f"{where}: "
        if self.field:
            text += f"field '{self.field}': "
        text += self.message
        if self.hint:
            text += f" ({self.hint})"
        return text


@dataclass
class Format:
    """A dataset format, as a plugin registers it.

    ``read`` returns cases. ``write`` returns the names, from ``cannot_hold``, of what the cases used
    that the format could not hold (empty: nothing lost); the caller warns with them.
    ``cannot_hold`` lists every canonical field (or part of one, e.g. ``contexts.score``) that this
    format loses on a round trip, for ``ragbridge formats``; ``docs/formats.md`` explains each.
    ``fields`` are the record fields this format reads, for recognising its files: a file named by
    a canonical suffix (``.jsonl``, ``.csv``, ...) whose first record has a field the canonical
    format does not know, and only fields of exactly one format, is read as that format.
    """

    name: str
    suffixes: tuple[str, ...] = ()
    read: Optional[Callable[[Path], list[Case]]] = None
    write: Optional[Callable[[Sequence[Case], Path], list[str]]] = None
    description: str = ""
    is_dir: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    cannot_hold: tuple[str, ...] = ()
    fields: frozenset[str] = frozenset()


# --------------------------------------------------------------------------------------------
# Normalising one record


def _chunk_id_for_text(text: str) -> str:
    return "ctx-" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def derived_chunk_ids(texts: Sequence[str]) -> list[str]:
    """Ids for chunks known only by their texts (a library's list of retrieved texts):
    ``ctx-<sha1[:12]>`` of each text, so the same text in two cases is the same chunk, with ``-2``,
    ``-3``... for a text repeated in the same list, so that repeats stay distinct chunks."""
    out, seen = [], {}
    for text in texts:
        base = _chunk_id_for_text(text)
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return out


def _stable_case_id(question: str) -> str:
    return "q-" + hashlib.sha1(question.encode("utf-8")).hexdigest()[:10]


def is_missing(value: Any) -> bool:
    """None or NaN (how pandas and Arrow spell an empty cell)."""
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return False


def normalize_record(raw: dict[str, Any]) -> dict[str, Any]:
    """Map one record in the common vocabulary onto canonical field names (no validation yet).

    Raises ``DatasetError`` (without a location: the caller adds it) for an unknown field or a field
    given twice under two names.
    """
    if not isinstance(raw, dict):
        raise DatasetError(f"each record must be a JSON object, got {type(raw).__name__}")
    rec = {k: v for k, v in raw.items() if not is_missing(v)}
    out: dict[str, Any] = {}
    for canon in CASE_FIELDS:
        if canon in rec:
            out[canon] = rec.pop(canon)
    for canon, aliases in ALIASES.items():
        for alias in aliases:
            if alias in rec:
                value = rec.pop(alias)
                if canon in out:
                    raise DatasetError(
                        f"given twice, as '{canon}' and as '{alias}'", field=alias, hint="keep one of them"
                    )
                out[canon] = value
    texts = None
    for alias in CONTEXT_TEXT_ALIASES:
        if alias in rec:
            if texts is not None or "contexts" in out:
                raise DatasetError("retrieved chunks given twice", field=alias, hint="keep one of them")
            texts = rec.pop(alias)
    ids = rec.pop("retrieved_context_ids", None)
    retrieved = rec.pop("retrieved", None)
    if retrieved is not None:
        if texts is not None or "contexts" in out:
            raise DatasetError("retrieved chunks given twice", field="retrieved", hint="keep one of them")
        if not isinstance(retrieved, (list, tuple)):
            raise DatasetError(
                f"must be a list of chunk ids, got {type(retrieved).__name__}", field="retrieved"
            )
        out["contexts"] = [c if isinstance(c, dict) else {"id": c} for c in retrieved]
    if texts is not None:
        if not isinstance(texts, (list, tuple)):
            raise DatasetError(
                f"must be a list of texts, got {type(texts).__name__}", field="retrieved_contexts"
            )
        if ids is not None and len(ids) != len(texts):
            raise DatasetError(
                f"has {len(ids)} ids for {len(texts)} contexts", field="retrieved_context_ids"
            )
        chunks = []
        for i, t in enumerate(texts):
            if isinstance(t, dict):
                chunks.append(t)
            else:
                cid = str(ids[i]) if ids is not None else _chunk_id_for_text(str(t))
                chunks.append({"id": cid, "text": str(t)})
        out["contexts"] = chunks
    elif ids is not None:
        out["contexts"] = [{"id": str(i)} for i in ids]

    if isinstance(out.get("contexts"), (list, tuple)):
        out["contexts"] = [_normalize_chunk(c) for c in out["contexts"]]

    if rec:
        unknown = ", ".join(sorted(rec))
        raise DatasetError(
            f"unknown field(s): {unknown}",
            field=sorted(rec)[0],
            hint="known fields: " + ", ".join(CASE_FIELDS) + "; put anything else under 'metadata'",
        )
    if "id" not in out and isinstance(out.get("question"), str):
        out["id"] = _stable_case_id(out["question"])
    return out


_CHUNK_ALIASES = {"chunk_id": "id", "doc_id": "id", "content": "text", "page_content": "text"}


def _normalize_chunk(chunk: Any) -> Any:
    if isinstance(chunk, str):
        return {"id": _chunk_id_for_text(chunk), "text": chunk}
    if isinstance(chunk, dict):
        out = {}
        for k, v in chunk.items():
            key = _CHUNK_ALIASES.get(k, k)
            if key in out:
                continue
            out[key] = v
        if "id" not in out and isinstance(out.get("text"), str):
            out["id"] = _chunk_id_for_text(out["text"])
        return out
    return chunk


def _field_path(loc: Sequence[Any]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def _validation_error(exc: ValidationError, path, line, unit) -> DatasetError:
    err = exc.errors()[0]
    loc = [x for x in err["loc"] if x not in ("function-after[_clean_value()]",)]
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if err["type"] == "missing":
        msg = "is required but missing"
    elif err["type"] == "extra_forbidden":
        msg = "is not a known field"
    elif "input" in err and err["type"] not in ("value_error",):
        msg += f" (got {json.dumps(err['input'], default=str)[:80]})"
    more = len(exc.errors()) - 1
    hint = f"{more} more problem(s) in this record" if more else None
    return DatasetError(msg, path=path, line=line, field=_field_path(loc), hint=hint, unit=unit)


def cases_from_records(
    records: Iterable[tuple[int, Any]], path: Optional[str | Path] = None, unit: str = "line"
) -> list[Case]:
    """Validate ``(line, record)`` pairs into cases; duplicate ids and an empty input are errors."""
    cases: list[Case] = []
    first_seen: dict[str, int] = {}
    for line, raw in records:
        try:
            rec = normalize_record(raw)
            case = Case.model_validate(rec)
        except DatasetError as exc:
            exc.path, exc.line, exc.unit = str(path) if path else None, line, unit
            raise exc
        except ValidationError as exc:
            raise _validation_error(exc, path, line, unit) from None
        if case.id in first_seen:
            raise DatasetError(
                f"duplicate case id {case.id!r} (first at {unit} {first_seen[case.id]})",
                path=path,
                line=line,
                field="id",
                hint="case ids must be unique",
                unit=unit,
            )
        first_seen[case.id] = line
        cases.append(case)
    if not cases:
        raise DatasetError("holds no cases", path=path, hint="a golden set needs at least one case")
    return cases


# --------------------------------------------------------------------------------------------
# Formats


def _loads(text: str) -> Any:
    """``json.loads``, with nesting too deep for the parser reported as bad input, not a crash."""
    try:
        return json.loads(text)
    except RecursionError:
        column, key = _deep_spot(text)
        raise DatasetError(
            f"nests more than {MAX_METADATA_DEPTH} levels of objects and lists (by column {column}), "
            "too deep to read",
            field=key,
            hint="flatten it, or store the deep part as a JSON string",
        ) from None


def _deep_spot(text: str) -> tuple[int, Optional[str]]:
    """Where JSON ``text`` passes `MAX_METADATA_DEPTH` levels: the column and the top-level key."""
    depth, key, last, in_string, escaped, start = 0, None, None, False, False, 0
    for column, char in enumerate(text, start=1):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
                if depth == 1:
                    last = text[start:column - 1]
        elif char == '"':
            in_string, start = True, column
        elif char in "[{":
            depth += 1
            if depth == 2:
                key = last
            if depth > MAX_METADATA_DEPTH:
                return column, key
        elif char in "]}":
            depth -= 1
    return len(text), key


def _read_text_lines(path: Path) -> Iterator[tuple[int, str]]:
    data = path.read_bytes()
    if not data.strip():
        raise DatasetError("file is empty", path=path, hint="a golden set needs at least one case")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    for n, raw in enumerate(data.split(b"\n"), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DatasetError(
                f"invalid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})",
                path=path,
                line=n,
                hint="save the file as UTF-8",
            ) from None
        yield n, text


def read_jsonl(path: Path) -> list[Case]:
    def records() -> Iterator[tuple[int, Any]]:
        for n, text in _read_text_lines(path):
            if not text.strip():
                continue
            try:
                record = _loads(text)
            except json.JSONDecodeError as exc:
                raise DatasetError(
                    f"not valid JSON: {exc.msg} at column {exc.colno}",
                    path=path,
                    line=n,
                    hint="each line must be one JSON object",
                ) from None
            except DatasetError as exc:
                exc.path, exc.line = str(path), n
                raise
            yield n, record

    return cases_from_records(records(), path)


def read_json(path: Path) -> list[Case]:
    lines = list(_read_text_lines(path))
    try:
        data = _loads("\n".join(t for _, t in lines))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno) from None
    except DatasetError as exc:
        exc.path = str(path)
        raise
    if isinstance(data, dict):
        for key in ("cases", "data", "examples", "samples", "goldens", "test_cases"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
    if not isinstance(data, list):
        raise DatasetError("must hold a JSON list of case objects", path=path)
    return cases_from_records(((i, r) for i, r in enumerate(data, start=1)), path, unit="item")


def _cell(column: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text == "":
        return None
    if column in ("answerable",):
        low = text.lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        return text
    if column in ("contexts", "relevant", "relevant_ids", "qrels", "metadata", "retrieved",
                  "retrieved_contexts", "retrieval_context", "retrieved_context_ids") or column in LIST_FIELDS:
        if text[:1] in "[{":
            try:
                return _loads(text)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"cell is not valid JSON: {exc.msg}", field=column) from None
            except DatasetError as exc:
                exc.field = column
                raise
        if column in ("metadata",):
            return text
        return [s.strip() for s in text.split("|") if s.strip()]
    return value


def read_csv(path: Path) -> list[Case]:
    for _ in _read_text_lines(path):  # checks emptiness and UTF-8, with line numbers
        pass
    text = path.read_bytes().decode("utf-8-sig")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if not reader.fieldnames:
        raise DatasetError("has no header row", path=path)
    delimiter = _other_delimiter(reader.fieldnames)
    if delimiter:
        raise DatasetError(
            f"the header is one column, {reader.fieldnames[0][:60]!r}: the file seems to be "
            f"separated by {delimiter}, not commas",
            path=path, line=1, hint="save it as comma-separated CSV, quoting the cells that hold a comma",
        )

    def rows() -> Iterator[dict[str, Any]]:
        try:
            yield from reader
        except csv.Error as exc:
            raise DatasetError(f"is not valid CSV: {exc}", path=path, line=reader.line_num) from None

    def records() -> Iterator[tuple[int, Any]]:
        for row in rows():
            line = reader.line_num
            if None in row:
                raise DatasetError(
                    f"has {len(row) - 1 + len(row[None])} cells but the header has "
                    f"{len(reader.fieldnames)} columns",
                    path=path, line=line,
                    hint="a cell holding a comma must be in double quotes; cells are separated by commas",
                )
            try:
                rec = {k: _cell(k, v) for k, v in row.items()}
            except DatasetError as exc:
                exc.path, exc.line = str(path), line
                raise
            yield line, rec

    return cases_from_records(records(), path)


def _other_delimiter(header: Sequence[str]) -> Optional[str]:
    """The name of the delimiter a one-column header seems to use instead of commas, if any."""
    if len(header) != 1:
        return None
    for char, name in ((";", "semicolons"), ("\t", "tabs"), ("|", "vertical bars")):
        if char in header[0]:
            return name
    return None


def plain(value: Any, keep_missing: bool = False) -> Any:
    """Numpy arrays and scalars from Arrow/pandas into plain Python. Missing values in mappings are
    dropped (Arrow fills a struct's absent keys with null) unless ``keep_missing`` (free-form data)."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, list):
        return [plain(v, keep_missing) for v in value]
    if isinstance(value, dict):
        return {k: plain(v, keep_missing) for k, v in value.items() if keep_missing or not is_missing(v)}
    return value


def _rows_to_records(rows: Iterable[dict[str, Any]], path: Path) -> Iterator[tuple[int, Any]]:
    for i, row in enumerate(rows, start=1):
        rec = {}
        for k, v in row.items():
            v = plain(v)
            if isinstance(v, str) and v[:1] in "[{" and (k in LIST_FIELDS or k in ("relevant", "metadata", "relevant_ids")):
                try:
                    v = _loads(v)
                except json.JSONDecodeError:
                    pass
                except DatasetError as exc:
                    exc.path, exc.line, exc.unit, exc.field = str(path), i, "row", k
                    raise
            elif isinstance(v, str) and k in ("relevant", "relevant_ids", "qrels"):
                v = [s for s in v.split("|") if s]  # a table cell: '|'-separated ids, as in CSV
            elif isinstance(v, str) and k == "answerable":
                v = _cell(k, v)  # true/false, yes/no, 1/0, as in CSV
            rec[k] = v
        yield i, rec


def read_parquet(path: Path) -> list[Case]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise DatasetError(f"cannot be read as Parquet: {exc}", path=path) from None
    if table.num_rows == 0:
        raise DatasetError("file is empty", path=path, hint="a golden set needs at least one case")
    return cases_from_records(_rows_to_records(table.to_pylist(), path), path, unit="row")


def read_hf_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a Hugging Face ``datasets`` folder (one split), as dicts."""
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as exc:
        raise DatasetError(f"cannot be loaded with datasets.load_from_disk: {exc}", path=path) from None
    if isinstance(ds, datasets.DatasetDict):
        if len(ds) != 1:
            raise DatasetError(f"holds splits {list(ds)}; point at one split's folder", path=path)
        ds = next(iter(ds.values()))
    if len(ds) == 0:
        raise DatasetError("dataset is empty", path=path, hint="a golden set needs at least one case")
    return ds.to_list()


def read_hf(path: Path) -> list[Case]:
    return cases_from_records(_rows_to_records(read_hf_rows(path), path), path, unit="row")


def _record(case: Case) -> dict[str, Any]:
    return case.model_dump(mode="json", exclude_defaults=True)


def write_jsonl(cases: Sequence[Case], path: Path) -> list[str]:
    with open(path, "w", encoding="utf-8") as f:
        for case in cases:
            f.write(json.dumps(_record(case), ensure_ascii=False) + "\n")
    return []


_JSON_COLUMNS = ("contexts", "relevant", "reference_contexts", "must_contain", "must_not_contain", "tags", "metadata")


def _flat_rows(cases: Sequence[Case]) -> list[dict[str, Any]]:
    rows = []
    for case in cases:
        d = case.model_dump(mode="json")
        for col in _JSON_COLUMNS:
            d[col] = json.dumps(d[col], ensure_ascii=False)
        rows.append(d)
    return rows


def blank_text_losses(cases: Sequence[Case]) -> list[str]:
    """``answer (blank)`` / ``reference (blank)`` when some case has that text empty or all spaces:
    a CSV cell cannot tell such a text from a missing one, so it reads back as missing."""
    return [f"{name} (blank)" for name in ("answer", "reference")
            if any(getattr(c, name) is not None and not getattr(c, name).strip() for c in cases)]


def write_csv(cases: Sequence[Case], path: Path) -> list[str]:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(CASE_FIELDS))
        writer.writeheader()
        for row in _flat_rows(cases):
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return blank_text_losses(cases)


def write_parquet(cases: Sequence[Case], path: Path) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(_flat_rows(cases)), path)
    return []


def write_hf(cases: Sequence[Case], path: Path) -> list[str]:
    import datasets

    datasets.Dataset.from_list(_flat_rows(cases)).save_to_disk(str(path))
    return []


BUILTIN_FORMATS = [
    Format("jsonl", (".jsonl", ".ndjson"), read_jsonl, write_jsonl, "canonical cases, one JSON object a line"),
    Format("json", (".json",), read_json, None, "a JSON list of case objects (read only)"),
    Format("csv", (".csv",), read_csv, write_csv, "one case a row; list and mapping cells as JSON",
           cannot_hold=("answer (blank)", "reference (blank)")),
    Format("parquet", (".parquet", ".pq"), read_parquet, write_parquet, "one case a row"),
    Format("hf", (), read_hf, write_hf, "a Hugging Face datasets folder (save_to_disk / load_from_disk)", is_dir=True),
]


@hookimpl
def ragbridge_register_formats(register):
    for fmt in BUILTIN_FORMATS:
        register(fmt)


# --------------------------------------------------------------------------------------------
# Entry points


def _pick_format(path: Path, name: Optional[str], purpose: str) -> Format:
    from .plugins import get_formats

    formats = get_formats()
    if name:
        if name not in formats:
            raise DatasetError(
                f"unknown format {name!r}", path=path, hint="known formats: " + ", ".join(sorted(formats))
            )
        return formats[name]
    if path.is_dir():
        return formats["hf"]
    suffix = path.suffix.lower()
    for fmt in formats.values():
        if suffix in fmt.suffixes and getattr(fmt, purpose) is not None:
            return fmt
    raise DatasetError(
        f"cannot tell the format from the suffix {suffix!r}",
        path=path,
        hint="use .jsonl, .csv, .parquet or a datasets folder, or name the format",
    )


#: every field name the canonical readers know
CANONICAL_FIELDS = frozenset(CASE_FIELDS) | {a for names in ALIASES.values() for a in names} | set(
    CONTEXT_TEXT_ALIASES) | {"retrieved_context_ids", "retrieved"}

logger = logging.getLogger("ragbridge")


def _first_record(path: Path) -> Optional[dict[str, Any]]:
    """The first record of a dataset file, as far as it can be read cheaply (None if it cannot).
    From a CSV, Parquet file or datasets folder only the column names are read (values None)."""
    try:
        if path.is_dir():
            import datasets

            ds = datasets.load_from_disk(str(path))
            if isinstance(ds, datasets.DatasetDict):
                ds = next(iter(ds.values()))
            return dict.fromkeys(ds.column_names)
        suffix = path.suffix.lower()
        if suffix in (".parquet", ".pq"):
            import pyarrow.parquet as pq

            return dict.fromkeys(pq.read_schema(path).names)
        if suffix == ".csv":
            with open(path, encoding="utf-8-sig", newline="") as f:
                return dict.fromkeys(next(csv.reader(f)))
        if suffix == ".json":
            data = json.loads(path.read_bytes().decode("utf-8-sig"))
            if isinstance(data, dict):
                keys = ("cases", "data", "examples", "samples", "goldens", "test_cases")
                data = next((data[k] for k in keys if isinstance(data.get(k), list)), data)
            first = data[0] if isinstance(data, list) and data else None
            return first if isinstance(first, dict) else None
        with open(path, encoding="utf-8-sig") as f:
            for line in f:
                if line.strip():
                    first = json.loads(line)
                    return first if isinstance(first, dict) else None
    except Exception:  # noqa: BLE001 - unreadable here: the reader reports it precisely
        return None
    return None


def _recognise(path: Path, fmt: Format) -> Format:
    """The format a file really is when its suffix names a canonical format (see `Format.fields`)."""
    from .plugins import get_formats

    record = _first_record(path)
    if record is None:
        return fmt
    foreign = sorted(set(record) - CANONICAL_FIELDS)
    if not foreign:
        return fmt
    claims = sorted(n for n, f in get_formats().items() if f.read and f.fields and set(record) <= f.fields)
    if len(claims) > 1:
        raise DatasetError(
            f"its fields ({', '.join(sorted(record))}) fit more than one format: {', '.join(claims)}",
            path=path,
            hint="name one with --format NAME; for convert, --from NAME",
        )
    if not claims:
        return fmt
    shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
    logger.warning("note: %s: read as format %r (its fields: %s); name a format to override",
                   path, claims[0], shown)
    return get_formats()[claims[0]]


def load_cases(path: str | Path, format: Optional[str] = None) -> list[Case]:
    """Read a golden set into canonical cases. Raises `DatasetError` for any bad input.

    Without ``format``, the suffix names the format; a file whose first record has fields of
    exactly one library's format instead of canonical ones (a format a backend plugin registers) is
    read as that format, with a one-line note on the ``ragbridge`` logger (stderr by default).
    """
    path = Path(path)
    if not path.exists():
        raise DatasetError("no such file or folder", path=path)
    fmt = _pick_format(path, format, "read")
    if format is None:
        fmt = _recognise(path, fmt)
    if fmt.read is None:
        raise DatasetError(f"format {fmt.name!r} cannot be read", path=path)
    try:
        return fmt.read(path)
    except DatasetError as exc:
        if format is None and exc.message.startswith("unknown field(s)"):
            exc.hint = (exc.hint + "; " if exc.hint else "") + (
                "if another tool wrote the file, name its format (see ragbridge formats)")
        raise


def write_cases(cases: Sequence[Case], path: str | Path, format: Optional[str] = None) -> list[str]:
    """Write cases; returns the canonical fields the format could not hold (empty: nothing lost)."""
    path = Path(path)
    fmt = _pick_format(path, format, "write")
    if fmt.write is None:
        raise DatasetError(f"format {fmt.name!r} cannot be written", path=path)
    try:
        with atomic_path(path) as tmp:
            return fmt.write(cases, tmp)
    except OSError as exc:
        raise DatasetError(f"cannot be written: {exc.strerror or exc}", path=path) from None


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write a file or a folder at; on success it takes ``path``'s place.

    Every output ragbridge writes (other than the append-only scores and logs) goes through here, so a
    reader finds the earlier output or the new one, whole, never a part of one: a writer killed half
    way leaves only a hidden ``.tmp-*`` beside the output. The temporary keeps the name's suffix, for
    writers that choose by it. A file is synced and renamed over ``path``; a folder is renamed into
    place after the old one is moved aside (a kill between the two renames leaves no output, not a
    partial one). On an exception the temporary is removed and nothing is replaced.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{secrets.token_hex(4)}-{path.name}")
    try:
        yield tmp
        if tmp.is_dir():
            old = path.with_name(f".old-{secrets.token_hex(4)}-{path.name}")
            if path.exists():
                os.replace(path, old)
            os.replace(tmp, path)
            _remove(old)
        else:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Write text (UTF-8) or bytes to ``path`` whole or not at all (see `atomic_path`)."""
    with atomic_path(path) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
    return Path(path)


def input_warnings(cases: Sequence[Case]) -> list[str]:
    """One line per kind of legal but suspicious input, each with the number of cases it affects.

    Today one kind: relevance labels no retrieved chunk can match, so every ranking metric of the case
    is 0 whatever was retrieved. Either the chunks were given as plain text (their ids are derived
    from the text, they have no ``source``) and no label names such an id, or, across the whole
    dataset, not one chunk id or source is a label (ids from two different id spaces). A warning, not
    an error: the same cases are good input for judged metrics, and the labels may serve an export.
    """
    labelled = [c for c in cases if c.contexts and any(g > 0 for g in c.relevant.values())]

    def matches(case: Case) -> bool:
        return any(ch.id in case.relevant or (ch.source is not None and ch.source in case.relevant)
                   for ch in case.contexts)

    def plain_text(case: Case) -> bool:
        return all(ch.source is None and ch.id == _chunk_id_for_text(ch.text) for ch in case.contexts)

    textual = [c for c in labelled if plain_text(c) and not matches(c)]
    if textual:
        return [
            f"{len(textual)} of {len(labelled)} case(s) with relevance labels give their chunks as plain "
            "text (no id, no source), so no chunk can match a label and their ranking metrics are 0 "
            f"(first: {textual[0].id!r}); give each chunk the id or source its label names"
        ]
    if labelled and not any(matches(c) for c in labelled):
        return [
            f"in none of the {len(labelled)} case(s) with relevance labels does a chunk's id or source "
            "match a label, so their ranking metrics are 0; check that 'relevant' names chunk ids "
            "or sources as 'contexts' gives them"
        ]
    return []


def fingerprint(cases: Sequence[Case]) -> str:
    """A content hash of the cases, independent of the file format they came from."""
    h = hashlib.sha256()
    for case in cases:
        h.update(json.dumps(case.model_dump(mode="json"), sort_keys=True, ensure_ascii=False).encode())
        h.update(b"\n")
    return "sha256:" + h.hexdigest()
