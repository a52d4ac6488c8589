"""Records: one raw record (a JSON object, a table row) into a canonical `Case`, for every reader.

Besides the canonical field names, records may use the common golden-set vocabulary:

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

Ids derived from content follow one rule, `stable_id` (a prefix and the first hex digits of the
SHA-1 of a text), used by every reader and plugin: a chunk given as plain text is
``ctx-<sha1[:12]>`` of its text (`chunk_id_for_text`), so the same text in two cases is the same
chunk; a case without an id is ``q-<sha1[:10]>`` of its question (`case_id_for_question`); repeats in
one list get ``-2``, ``-3``... (`numbered`).

Table cells (CSV, Parquet, ``datasets``, a DataFrame; `cell_value`, `rows_to_records`): list and
mapping fields may hold JSON (``["a", "b"]``, ``{"doc#s": 2}``) or the Python literal pandas writes
for a list or dict cell (``['a', 'b']``: `literal_cell`); list fields and ``relevant`` also accept
``|``-separated text, and ``answerable`` ``true``/``false``, ``yes``/``no`` or ``1``/``0``. The
column pandas' ``to_csv`` writes for the index (no name in the file, ``Unnamed: 0`` once pandas
reads it back) is not data: `pandas_index` finds it, and the readers leave it out. In JSON a value
must have its field's type: ``"relevant": "doc#s"`` or ``"answerable": "no"`` is an error, not a
guess.

This is the normalising path, which every record may take and whose errors are exact. A record
already in canonical form takes a lighter one (`ragbridge.formats.plain_records`) to the same result.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import math
import numbers
import re
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

from pydantic import ValidationError

from ..schema import Case
from .files import DatasetError, parse_json

__all__ = [
    "ALIASES",
    "CANONICAL_FIELDS",
    "CASE_FIELDS",
    "LIST_FIELDS",
    "QUESTION_COLUMNS",
    "stable_id",
    "chunk_id_for_text",
    "case_id_for_question",
    "case_label",
    "numbered",
    "derived_chunk_ids",
    "is_missing",
    "plain",
    "normalize_record",
    "normalize_chunk",
    "shared_fields",
    "validated_case",
    "duplicate_case_id",
    "cases_from_records",
    "cell_value",
    "literal_cell",
    "pandas_index",
    "rows_to_records",
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
#: every field name the canonical readers know
CANONICAL_FIELDS = frozenset(CASE_FIELDS) | {a for names in ALIASES.values() for a in names} | set(
    CONTEXT_TEXT_ALIASES) | {"retrieved_context_ids", "retrieved"}
_CHUNK_ALIASES = {"chunk_id": "id", "doc_id": "id", "content": "text", "page_content": "text"}


# --------------------------------------------------------------------------------------------
# Ids derived from content


def stable_id(prefix: str, text: str, digits: int) -> str:
    """The one rule for an id derived from content: ``prefix`` and the first ``digits`` hex digits of
    the SHA-1 of ``text`` (UTF-8). The same text always gets the same id, in every format."""
    return prefix + hashlib.sha1(text.encode("utf-8")).hexdigest()[:digits]


def chunk_id_for_text(text: str) -> str:
    """The id of a chunk known only by its text: ``ctx-<sha1[:12]>``."""
    return stable_id("ctx-", text, 12)


def case_id_for_question(question: str) -> str:
    """The id of a case given without one: ``q-<sha1[:10]>`` of its question."""
    return stable_id("q-", question, 10)


def case_label(case_id: str, question: Optional[str]) -> str:
    """How a case is named to a person: its id, or its question where the id was derived from it
    (`case_id_for_question`, `numbered` when the question repeats), which says nothing to a reader."""
    if question:
        derived = case_id_for_question(question)
        if case_id == derived or (case_id.startswith(derived + "-") and case_id[len(derived) + 1:].isdigit()):
            return question
    return case_id


def numbered(ids: Iterable[str]) -> list[str]:
    """``ids`` with ``-2``, ``-3``... added to the second, third... occurrence of each."""
    out, seen = [], {}
    for base in ids:
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return out


def derived_chunk_ids(texts: Sequence[str]) -> list[str]:
    """Ids for chunks known only by their texts (a library's list of retrieved texts): each text's
    `chunk_id_for_text`, `numbered` so that a text repeated in the same list stays distinct chunks."""
    return numbered(chunk_id_for_text(text) for text in texts)


# --------------------------------------------------------------------------------------------
# Values


def is_missing(value: Any) -> bool:
    """None or NaN (how pandas and Arrow spell an empty cell)."""
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return False


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


# --------------------------------------------------------------------------------------------
# Normalising one record


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
    contexts = _contexts(rec, given="contexts" in out)
    if contexts is not None:
        out["contexts"] = contexts
    if isinstance(out.get("contexts"), (list, tuple)):
        out["contexts"] = [normalize_chunk(c) for c in out["contexts"]]

    if rec:
        unknown = ", ".join(sorted(rec))
        guesses = sorted({g for f in rec for g in difflib.get_close_matches(f, CASE_FIELDS, n=1)})
        raise DatasetError(
            f"unknown field(s): {unknown}" + (f" (did you mean {', '.join(map(repr, guesses))}?)"
                                               if guesses else ""),
            field=sorted(rec)[0],
            hint="known fields: " + ", ".join(CASE_FIELDS) + "; put anything else under 'metadata'",
        )
    if "id" not in out:  # the id is made from the question: a question missing is what to report
        question = out.get("question")
        if not isinstance(question, str):
            raise DatasetError("is required but missing" if question is None
                               else f"must be a text, got {type(question).__name__}", field="question",
                               hint="every case needs its question; a case without an id gets one made "
                                    "from it")
        out["id"] = case_id_for_question(question)
    return out


def _contexts(rec: dict[str, Any], given: bool) -> Optional[list[Any]]:
    """The chunks ``rec`` gives under another name than ``contexts`` (popped from it), if any."""
    texts = None
    for alias in CONTEXT_TEXT_ALIASES:
        if alias in rec:
            if texts is not None or given:
                raise DatasetError("retrieved chunks given twice", field=alias, hint="keep one of them")
            texts = rec.pop(alias)
    ids = rec.pop("retrieved_context_ids", None)
    retrieved, chunks = rec.pop("retrieved", None), None
    if retrieved is not None:
        if texts is not None or given:
            raise DatasetError("retrieved chunks given twice", field="retrieved", hint="keep one of them")
        if not isinstance(retrieved, (list, tuple)):
            raise DatasetError(
                f"must be a list of chunk ids, got {type(retrieved).__name__}", field="retrieved"
            )
        chunks = [c if isinstance(c, dict) else {"id": c} for c in retrieved]
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
                cid = str(ids[i]) if ids is not None else chunk_id_for_text(str(t))
                chunks.append({"id": cid, "text": str(t)})
        return chunks
    if ids is not None:  # ids alone: chunks without text (they take the place of any others)
        return [{"id": str(i)} for i in ids]
    return chunks


def normalize_chunk(chunk: Any) -> Any:
    """One chunk in the common vocabulary as a canonical chunk mapping (not validated yet): a plain
    string is its text; ``chunk_id``/``doc_id`` are ``id``, ``content``/``page_content`` are ``text``;
    a chunk without an id gets `chunk_id_for_text`. Anything else is returned as it is."""
    if isinstance(chunk, str):
        return {"id": chunk_id_for_text(chunk), "text": chunk}
    if isinstance(chunk, dict):
        out = {}
        for k, v in chunk.items():
            key = _CHUNK_ALIASES.get(k, k)
            if key in out:
                continue
            out[key] = v
        if "id" not in out and isinstance(out.get("text"), str):
            out["id"] = chunk_id_for_text(out["text"])
        return out
    return chunk


def shared_fields(record: dict[str, Any] | Sequence[str], fields_of: dict[str, frozenset[str]],
                  claims: Sequence[str]) -> Optional[str]:
    """Why ``record``'s fields tell no format, when they do not: its fields that are not canonical are
    fields of more than one format (``fields_of``: name -> fields), and nothing else it has is a
    library's own word that the one format ``claims`` makes for it has and the others lack: a field
    two libraries name alike and mean differently (gold passages to one, retrieved chunks to the
    other), beside canonical fields. None when the fields tell, or when ``claims`` is not one
    format."""
    names = set(record)
    foreign = names - CANONICAL_FIELDS
    if len(claims) != 1 or not foreign:
        return None
    others = {n for n, fields in fields_of.items() if n != claims[0] and foreign & fields}
    if not others or any(not any(f in fields_of[n] for n in others) for f in foreign):
        return None  # a foreign field only the claiming format has
    words = (names - set(CASE_FIELDS)) & fields_of[claims[0]]
    if any(all(w not in fields_of[n] for n in others) for w in words):
        return None  # a library's word (an alias) of the claiming format only: its file
    guesses = sorted({g for f in foreign for g in difflib.get_close_matches(f, CASE_FIELDS, n=1)})
    named = ", ".join(repr(f) for f in sorted(foreign))
    return (f"its field(s) {named} are not canonical, and more than one format has a field of that name "
            f"({', '.join(sorted({claims[0], *others}))}), each its own meaning: rename it to a canonical "
            "field" + (f" (did you mean {', '.join(map(repr, guesses))}?)" if guesses else "")
            + ", or name the format that wrote it")


# --------------------------------------------------------------------------------------------
# Validating records into cases


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


def validated_case(raw: Any, path, line, unit) -> Case:
    """One record validated into a case (the normalising path: aliases, conversions, exact errors)."""
    try:
        return Case.model_validate(normalize_record(raw))
    except DatasetError as exc:
        exc.path, exc.line, exc.unit = str(path) if path else None, line, unit
        raise exc
    except ValidationError as exc:
        raise _validation_error(exc, path, line, unit) from None


def duplicate_case_id(case_id: str, line: int, first: int, path, unit: str) -> DatasetError:
    """The error for a case id seen before, at ``first``."""
    return DatasetError(f"duplicate case id {case_id!r} (first at {unit} {first})", path=path, line=line,
                        field="id", hint="case ids must be unique; they are compared without white space "
                        "at their ends and in Unicode NFC", unit=unit)


def cases_from_records(
    records: Iterable[tuple[int, Any]], path: Optional[str | Path] = None, unit: str = "line"
) -> list[Case]:
    """Validate ``(line, record)`` pairs into cases; duplicate ids and an empty input are errors."""
    cases: list[Case] = []
    first_seen: dict[str, int] = {}
    for line, raw in records:
        case = validated_case(raw, path, line, unit)
        if case.id in first_seen:
            raise duplicate_case_id(case.id, line, first_seen[case.id], path, unit)
        first_seen[case.id] = line
        cases.append(case)
    if not cases:
        raise DatasetError("holds no cases", path=path, hint="a golden set needs at least one case")
    return cases




# --------------------------------------------------------------------------------------------
# Table cells and rows

_JSON_CELLS = ("contexts", "relevant", "relevant_spans", "relevant_ids", "qrels", "metadata", "retrieved",
               "retrieved_contexts", "retrieval_context", "retrieved_context_ids")


#: the names pandas gives its index column in a CSV file (none) and when it reads the file back
PANDAS_INDEX_NAMES = ("", "Unnamed: 0")


def pandas_index(columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> Optional[str]:
    """The column of ``columns`` that is pandas' index as ``DataFrame.to_csv`` writes it (the first,
    without a name, or ``Unnamed: 0`` as ``read_csv`` names it), when every cell of it in ``rows`` is
    a whole number; else None."""
    if not columns or columns[0] not in PANDAS_INDEX_NAMES:
        return None
    name = columns[0]
    for row in rows:
        v = row.get(name)
        if isinstance(v, str):
            v = v.strip()
            if not v.isdigit():
                return None
        elif isinstance(v, bool) or not isinstance(v, numbers.Integral):  # numpy's integers too
            return None
    return name


#: the names pandas writes in a cell's Python literal for a missing value (a float NaN, NaT, None)
_MISSING_NAMES = frozenset({"nan", "NaN", "NaT", "None"})


class _NotLiteral(ValueError):
    """A cell's Python text holds something other than a literal: ``what`` is its source text."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class _SideBySide(ValueError):
    """A cell's Python text writes strings side by side with no comma between (``['a' 'b']``, a NumPy
    array as pandas prints it), which Python reads as one string joined."""


#: a quote, then only white space, then a quote: where two string literals may stand side by side
_QUOTES_CLOSE = re.compile(r"""['"]\s*['"]""")


def _side_by_side(source: str) -> bool:
    """Whether Python text (that parses) holds two string literals one right after the other (which
    Python reads as one string joined): one pass of the tokenizer."""
    import io
    import tokenize

    skip = (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)
    last = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in skip:
                continue
            if token.type == tokenize.STRING and last == tokenize.STRING:
                return True
            last = token.type
    except (tokenize.TokenError, SyntaxError):
        return False
    return False


def _python_literal(text: str) -> Any:
    """``text`` as the Python literal pandas writes for a list or dict cell: constants, lists, tuples
    and dicts, ``True``/``False``, and ``nan`` (a float NaN, as ``repr`` writes it), ``NaT`` and
    ``None`` as None (missing). Raises SyntaxError for text that is not Python, `_NotLiteral` for
    anything else (a call such as ``Timestamp('2024-01-01')``)."""

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and not isinstance(node.value, (bytes, complex)):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [value(e) for e in node.elts]
        if isinstance(node, ast.Dict) and None not in node.keys:
            return {value(k): value(v) for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.Name) and node.id in _MISSING_NAMES:
            return None
        if isinstance(node, ast.Name) and node.id in ("True", "False"):
            return node.id == "True"
        if (isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd))
                and isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float)):
            return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
        raise _NotLiteral(ast.get_source_segment(text, node) or type(node).__name__)

    tree = ast.parse(text, mode="eval").body
    if _QUOTES_CLOSE.search(text) and _side_by_side(text):
        raise _SideBySide()
    return value(tree)


def literal_cell(text: str) -> Any:
    """A table cell's text that stands for a list or a mapping: JSON (``["a", "b"]``), else the
    Python literal pandas writes for a list or dict cell (``['a', 'b']``, ``{'k': None}``; a ``nan``
    in it, pandas' missing value, is None: `_python_literal`). Raises `DatasetError` (without a
    location) for text that is neither, naming what in it is no literal (pandas writes a
    ``Timestamp(...)`` it cannot read back), else with the JSON parser's message."""
    try:
        return parse_json(text)
    except json.JSONDecodeError as exc:
        error = exc
    try:
        value = _python_literal(text)
    except _SideBySide:
        raise DatasetError("cell holds strings side by side with no comma between them, as pandas prints "
                           "a NumPy array (pd.read_parquet gives one for each list cell): Python would read "
                           "them as one string joined", hint="turn the arrays into lists before to_csv "
                           "(df[col] = df[col].map(list)), or write lists as JSON") from None
    except _NotLiteral as exc:
        what = exc.what if len(exc.what) <= 60 else exc.what[:57] + "..."
        raise DatasetError(f"cell holds {what}, which is neither JSON nor a Python literal (pandas writes "
                           "such an object's repr, which no reader takes back)",
                           hint="turn it into a text or a number before writing the table, or write lists "
                                "and mappings as JSON") from None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise DatasetError(f"cell is neither JSON nor a Python list or dict: {error.msg}",
                           hint="write lists and mappings as JSON") from None
    if isinstance(value, (list, dict)):
        return value
    raise DatasetError("cell is neither a JSON nor a Python list or dict",
                       hint="write lists and mappings as JSON")


#: the columns that hold the question: a blank cell of one is an empty question, not a missing one
QUESTION_COLUMNS = ("question", *ALIASES["question"])


def cell_value(column: str, value: Any) -> Any:
    """A text cell of ``column`` as the value it stands for (see the module docstring): blank is
    missing (but an empty question, as ``""`` is in JSON), JSON in a list or mapping column is
    parsed, other list cells are ``|``-separated."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text == "":
        return value if column in QUESTION_COLUMNS else None
    if column in ("answerable",):
        low = text.lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        return text
    if column in _JSON_CELLS or column in LIST_FIELDS:
        if text[:1] in "[{":
            try:
                return literal_cell(text)
            except DatasetError as exc:
                exc.field = column
                raise
        if column in ("metadata",):
            return text
        return [s.strip() for s in text.split("|") if s.strip()]
    return value


def rows_to_records(rows: Iterable[dict[str, Any]], path: Path) -> Iterator[tuple[int, Any]]:
    """``(row number, record)`` for rows of a table (Parquet, ``datasets``) in the canonical columns:
    cells as plain Python, JSON text in list and mapping columns parsed, ``|``-separated ids and
    ``answerable`` words read as in CSV."""
    json_columns = (*LIST_FIELDS, "relevant", "relevant_spans", "metadata", "relevant_ids")
    for i, row in enumerate(rows, start=1):
        rec = {}
        for k, v in row.items():
            v = plain(v)
            if isinstance(v, str) and v.strip()[:1] in "[{" and k in json_columns:
                try:
                    v = literal_cell(v.strip())
                except DatasetError as exc:
                    exc.path, exc.line, exc.unit, exc.field = str(path), i, "row", k
                    raise
            elif isinstance(v, str) and k in ("relevant", "relevant_ids", "qrels"):
                v = [s for s in v.split("|") if s]  # a table cell: '|'-separated ids, as in CSV
            elif isinstance(v, str) and k in LIST_FIELDS:
                v = cell_value(k, v)  # '|'-separated texts, as in CSV
            elif isinstance(v, str) and k == "answerable":
                v = cell_value(k, v)  # true/false, yes/no, 1/0, as in CSV
            rec[k] = v
        yield i, rec

