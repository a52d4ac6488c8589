"""Golden-set input and output: the registry of dataset formats, and reading or writing through it.

A format is a `Format` that a plugin registers (``ragbridge_register_formats``): the canonical ones
(JSONL, JSON, CSV, Parquet, ``datasets`` folders) in `ragbridge.formats.canonical`, each library's in
its plugin. `load_cases` picks the format by the path's suffix (a folder is a ``datasets`` folder) or
by name, and recognises a library's file behind a canonical suffix by its fields (`Format.fields`).

Every reader turns a file into canonical `Case` objects and reports bad input precisely with a
`DatasetError`: the file, the line (or row), the field, what is wrong and what to do. Every output is
written whole or not at all (`ragbridge.formats.files.atomic_path`).

The modules: ``files`` (writing whole or not at all, the one JSONL reader, `DatasetError`),
``records`` (one record into a case: aliases, the stable-id rule, table cells), ``plain_records``
(the canonical record of a case, and a record checked into one without a `Case`), ``record_lines``
(a JSONL golden set's line read without a mapping per chunk), ``batches`` (cases held as records, a
batch at a time; the fingerprint), ``input_check`` (warnings for legal but suspicious input),
``source`` (a golden set read for a run), ``canonical`` (the canonical formats, a built-in plugin).
"""

from __future__ import annotations

import csv
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from ..plugins import registered
from ..schema import Case
from .files import DatasetError, atomic_path, jsonl_lines
from .records import CANONICAL_FIELDS, CASE_FIELDS, shared_fields

__all__ = ["DatasetError", "Format", "get_formats", "load_cases", "write_cases", "writing_format",
           "resave_losses", "format_hinted", "JSON_LIST_KEYS"]

logger = logging.getLogger("ragbridge")

#: the keys of a JSON object that may hold a JSON file's list of cases
JSON_LIST_KEYS = ("cases", "data", "examples", "samples", "goldens", "test_cases")


@dataclass
class Format:
    """A dataset format, as a plugin registers it.

    ``read`` returns cases. ``write`` returns the names, from ``cannot_hold``, of what the cases used
    that the format could not hold (empty: nothing lost); the caller warns with them.
    ``cannot_hold`` lists every canonical field (or part of one, e.g. ``contexts.score``) that this
    format loses on a round trip, for ``ragbridge formats``; ``docs/formats.md`` explains each.
    ``resaved_by`` names the library's own loader and writer that a user would run on a file of
    this format (its dataset class's load and save methods), and ``resave_drops`` what ragbridge's
    file holds but the file loses in that library's hands (its loader and that re-save), for
    ``ragbridge formats`` too; ``resave_lost(cases, path)`` returns those of them the cases use (the
    caller warns with them apart from ``write``'s).
    ``options`` names the keyword arguments ``read`` takes besides the path (TREC's ``qrels``).
    ``fields`` are the record fields this format reads, for recognising its files: a file named by
    a canonical suffix (``.jsonl``, ``.csv``, ...) whose first record has a field the canonical
    format does not know, and only fields of exactly one format, is read as that format.
    ``signature`` are the field names of the library's own schema, some of which the canonical
    readers also accept as aliases: a file whose fields are
    all in one format's signature, one of them not a canonical field's own name, is that library's
    file (its reader keeps what canonical reading would not, such as an empty list).
    ``recognise``, for a format whose records have open-ended fields (a span export's
    ``attributes.*`` columns), is a test of that first record instead.
    ``spans``, for a trace format, streams the file's spans (`ragbridge.traces.spans.Span`) in file
    order; its ``read`` groups them into cases (`ragbridge.traces`), and ``ragbridge sample`` draws
    from the stream.
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
    options: tuple[str, ...] = ()
    resaved_by: str = ""
    resave_drops: tuple[str, ...] = ()
    resave_lost: Optional[Callable[[Sequence[Case], Path], list[str]]] = None
    signature: frozenset[str] = frozenset()
    recognise: Optional[Callable[[dict[str, Any]], bool]] = None
    spans: Optional[Callable[[Path], Iterator[Any]]] = None


def get_formats() -> dict[str, Format]:
    """Every registered dataset format by name."""
    return registered("ragbridge_register_formats", "format")


# --------------------------------------------------------------------------------------------
# Which format a path is


def _pick_format(path: Path, name: Optional[str], purpose: str) -> Format:
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
                header = next(csv.reader(f))
            return dict.fromkeys(header[1:] if header[:1] == [""] else header)  # pandas' index column
        if suffix == ".json":
            first = _first_line_object(path)
            if first is not None and not any(isinstance(first.get(k), list) for k in JSON_LIST_KEYS):
                return first  # JSON lines behind a .json suffix (a file exporter's), or one line
            text = path.read_bytes().decode("utf-8-sig")
            data = json.JSONDecoder().raw_decode(text.lstrip())[0]  # the first of several objects too
            if isinstance(data, dict):
                data = next((data[k] for k in JSON_LIST_KEYS if isinstance(data.get(k), list)), data)
            first = data[0] if isinstance(data, list) and data else data  # or one object (a trace export)
        else:
            first = next(jsonl_lines(path, allow_empty=True), (0, None))[1]
        return first if isinstance(first, dict) else None
    except Exception:  # noqa: BLE001 - unreadable here: the reader reports it precisely
        return None


def _first_line_object(path: Path) -> Optional[dict[str, Any]]:
    """The first line of a file as a JSON object, if it is one by itself."""
    with open(path, "rb") as f:
        for raw in f:
            if raw.strip():
                try:
                    value = json.loads(raw.decode("utf-8-sig"))
                except ValueError:
                    return None
                return value if isinstance(value, dict) else None
    return None


def _recognise(path: Path, fmt: Format) -> Format:
    """The format a file really is when its suffix names a canonical format (see `Format.fields`)."""
    record = _first_record(path)
    if record is None:
        return fmt
    formats = get_formats()
    foreign = sorted(set(record) - CANONICAL_FIELDS)
    if not foreign:
        foreign = sorted(set(record) - set(CASE_FIELDS))
        claims = sorted(n for n, f in formats.items()
                        if f.read and f.signature and set(record) <= f.signature)
        if not foreign or len(claims) != 1:
            return fmt
    else:
        claims = sorted(n for n, f in formats.items() if f.read and (
            (f.fields and set(record) <= f.fields) or (f.recognise is not None and f.recognise(record))))
        fields_of = {n: f.fields for n, f in formats.items() if f.read and f.fields}
        shared = shared_fields(record, fields_of, claims)
        if shared:
            raise DatasetError(shared, path=path, hint="name the format with --format NAME; for convert, "
                                                       "--from NAME")
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
    return formats[claims[0]]


# --------------------------------------------------------------------------------------------
# Entry points


def load_cases(data: Any, format: Optional[str] = None, qrels: str | Path | None = None) -> list[Case]:
    """Read a golden set into canonical cases. Raises `DatasetError` for any bad input, saying where
    (file and line, or the item's index), which field, and what to do.

    ``data`` is a path (a file, or a ``datasets`` folder), or data held in memory: `Case` objects, a
    list of dicts, a pandas DataFrame, a ``datasets.Dataset``, or a library's own dataset, sample or
    test-case objects (read by its plugin: `ragbridge.formats.objects`).

    For a path, without ``format`` the suffix names the format; a file whose first record has fields
    of exactly one library's format instead of canonical ones (a format a backend plugin registers) is
    read as that format, with a one-line note on the ``ragbridge`` logger (stderr by default). For
    rows in memory, ``format`` names the library whose fields they use, when their fields do not tell.
    ``qrels``: the relevance file of a TREC run (``format="trec"``; default: a ``.qrels`` beside it).
    """
    if not isinstance(data, (str, os.PathLike)):
        from .objects import cases_from_data

        if qrels is not None:
            raise DatasetError("qrels= goes with a TREC run file, not with data in memory")
        return cases_from_data(data, format)
    path = Path(data)
    options = {"qrels": qrels}
    if not path.exists():
        raise DatasetError("no such file or folder", path=path)
    fmt = reading_format(path, format, options)
    try:
        return fmt.read(path, **{k: v for k, v in options.items() if v is not None})
    except DatasetError as exc:
        raise format_hinted(exc, format)


def format_hinted(exc: DatasetError, format: Optional[str]) -> DatasetError:
    """``exc``, for a file read without a named format, with the hint to name one where its fields are
    unknown (another tool's file)."""
    if format is None and exc.message.startswith("unknown field(s)"):
        exc.hint = (exc.hint + "; " if exc.hint else "") + (
            "if another tool wrote the file, name its format (see ragbridge formats)")
    return exc


def reading_format(path: Path, format: Optional[str], options: dict[str, Any]) -> Format:
    """The format ``path`` is read as (see `load_cases`); a read option it does not take is an error."""
    fmt = _pick_format(path, format, "read")
    if format is None:
        fmt = _recognise(path, fmt)
    if fmt.read is None:
        raise DatasetError(f"format {fmt.name!r} cannot be read", path=path)
    unknown = [k for k, v in options.items() if v is not None and k not in fmt.options]
    if unknown:
        raise DatasetError(f"format {fmt.name!r} takes no --{unknown[0]}", path=path,
                           hint=f"--{unknown[0]} goes with a format that reads it, e.g. trec")
    return fmt


def writing_format(path: str | Path, format: Optional[str] = None) -> Format:
    """The format `write_cases` writes ``path`` in."""
    path = Path(path)
    fmt = _pick_format(path, format, "write")
    if fmt.write is None:
        raise DatasetError(f"format {fmt.name!r} cannot be written", path=path)
    return fmt


def resave_losses(cases: Sequence[Case], path: str | Path, format: Optional[str] = None) -> list[str]:
    """What of ``cases``, written to ``path``, the file holds but loses when the format's library loads
    it and saves it again (names from `Format.resave_drops`; empty: nothing)."""
    fmt = writing_format(path, format)
    return fmt.resave_lost(cases, Path(path)) if fmt.resave_lost else []


def write_cases(cases: Sequence[Case], path: str | Path, format: Optional[str] = None) -> list[str]:
    """Write cases; returns the canonical fields the format could not hold (empty: nothing lost).
    What the library's own re-save of the file would lose: `resave_losses`."""
    path = Path(path)
    fmt = writing_format(path, format)
    try:
        with atomic_path(path) as tmp:
            return fmt.write(cases, tmp)
    except OSError as exc:
        raise DatasetError(f"cannot be written: {exc.strerror or exc}", path=path) from None
