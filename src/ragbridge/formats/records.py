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

Table cells (CSV, Parquet, ``datasets``; `cell_value`, `rows_to_records`): list and mapping fields
may hold JSON (``["a", "b"]``, ``{"doc#s": 2}``); list fields and ``relevant`` also accept
``|``-separated text, and ``answerable`` ``true``/``false``, ``yes``/``no`` or ``1``/``0``. In JSON a
value must have its field's type: ``"relevant": "doc#s"`` or ``"answerable": "no"`` is an error, not
a guess.

Legal but suspicious input is not an error: `input_warnings` gives one line per kind, with the
number of cases it affects.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import math
import re
import unicodedata
from collections.abc import Sequence as _Sequence
from itertools import repeat
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple, Optional, Sequence

import pydantic_core
from pydantic import ValidationError

from ..schema import MAX_GRADE, MAX_METADATA_DEPTH, Case, Span, check_where, deeper_than
from .files import DatasetError, check_parsed, parse_json

__all__ = [
    "ALIASES",
    "CANONICAL_FIELDS",
    "CASE_FIELDS",
    "LIST_FIELDS",
    "stable_id",
    "chunk_id_for_text",
    "case_id_for_question",
    "numbered",
    "derived_chunk_ids",
    "is_missing",
    "plain",
    "normalize_record",
    "normalize_chunk",
    "cases_from_records",
    "cell_value",
    "rows_to_records",
    "input_warnings",
    "InputCheck",
    "fingerprint",
    "Fingerprint",
    "plain_record",
    "IdChunkRecord",
    "parse_record_line",
    "with_chunks",
    "case_record",
    "CaseBatch",
    "batch_from_records",
    "SeenCaseIds",
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
        raise DatasetError(
            f"unknown field(s): {unknown}",
            field=sorted(rec)[0],
            hint="known fields: " + ", ".join(CASE_FIELDS) + "; put anything else under 'metadata'",
        )
    if "id" not in out and isinstance(out.get("question"), str):
        out["id"] = case_id_for_question(out["question"])
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


def _one_case(raw: Any, path, line, unit) -> Case:
    """One record validated into a case (the normalising path: aliases, conversions, exact errors)."""
    try:
        return Case.model_validate(normalize_record(raw))
    except DatasetError as exc:
        exc.path, exc.line, exc.unit = str(path) if path else None, line, unit
        raise exc
    except ValidationError as exc:
        raise _validation_error(exc, path, line, unit) from None


def _duplicate(case_id: str, line: int, first: int, path, unit: str) -> DatasetError:
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
        case = _one_case(raw, path, line, unit)
        if case.id in first_seen:
            raise _duplicate(case.id, line, first_seen[case.id], path, unit)
        first_seen[case.id] = line
        cases.append(case)
    if not cases:
        raise DatasetError("holds no cases", path=path, hint="a golden set needs at least one case")
    return cases


# --------------------------------------------------------------------------------------------
# Canonical records: the light form of a case, for reading and scoring in batches
#
# A *canonical record* is a case as a plain dict: canonical field names in `CASE_FIELDS` order,
# every field that holds its default left out, chunks as ``{id, text?, score?, source?}`` (a float
# score), ``relevant`` as ``{id: grade}``. It is what `case_record` gives for a `Case`, what
# ``cases.jsonl`` holds a line, and what the fingerprint hashes. `plain_record` turns a record that
# is already canonical in everything but key order and defaults into one without building a `Case`
# (about a tenth of the cost, and no object per chunk); anything else goes the normalising way.
# The common line of a large golden set, chunks given as ids alone, is read as an `IdChunkRecord`
# (`parse_record_line`): the ids cut from the line's text, no mapping per chunk.

_STR_LISTS = ("reference_contexts", "must_contain", "must_not_contain", "tags")
_CHUNK_KEYS = frozenset({"id", "text", "score", "source", "doc", "start", "end"})
_SPAN_KEYS = frozenset(Span.model_fields)
_CASE_KEYS = frozenset(CASE_FIELDS)


def _good_id(value: Any) -> bool:
    """Whether ``value`` is an id as `ragbridge.schema.clean_id` leaves it (a string, not empty, every
    character printing, no space at either end, in NFC)."""
    return (type(value) is str and value.isprintable() and value[:1] not in ("", " ")
            and value[-1] != " " and unicodedata.is_normalized("NFC", value))


def _id_only(contexts: list) -> bool:
    """Whether every chunk is ``{"id": <an id as `_good_id` wants it>}`` and nothing else."""
    if set(map(type, contexts)) != {dict} or set(map(len, contexts)) != {1}:
        return False
    ids = list(map(dict.get, contexts, repeat("id", len(contexts))))
    if set(map(type, ids)) != {str} or "" in ids:
        return False
    # one C call each over the ids joined: printing, no space at an id's end, NFC ("\n" composes with
    # nothing, so NFC of the joined text is NFC of each id)
    joined = "\n".join(ids)
    return ("".join(ids).isprintable() and joined[0] != " " and joined[-1] != " " and " \n" not in joined
            and "\n " not in joined and unicodedata.is_normalized("NFC", joined))


def _plain_chunk(chunk: Any) -> Optional[dict[str, Any]]:
    """A chunk mapping in canonical form, or None when it needs the normalising path."""
    if type(chunk) is not dict or not _good_id(chunk.get("id")) or not chunk.keys() <= _CHUNK_KEYS:
        return None
    out = {"id": chunk["id"]}
    text = chunk.get("text", "")
    if type(text) is not str:
        return None
    if text:
        out["text"] = text
    if "score" in chunk:
        score = chunk["score"]
        if type(score) not in (int, float) or not math.isfinite(score):
            return None
        out["score"] = float(score)
    if "source" in chunk:
        source = chunk["source"]
        if type(source) is not str or (source and not _good_id(source)):
            return None
        out["source"] = source
    if "doc" in chunk or "start" in chunk or "end" in chunk:
        doc, start, end = chunk.get("doc"), chunk.get("start"), chunk.get("end")
        if type(doc) is not str or type(start) not in (int, type(None)) or type(end) not in (int, type(None)):
            return None
        try:
            check_where(doc, start, end, "chunk")
        except ValueError:
            return None
        if start is not None and start < 0:
            return None
        out["doc"] = doc
        if start is not None:
            out["start"], out["end"] = start, end
    return out


def _plain_spans(spans: Any) -> Optional[list[dict[str, Any]]]:
    """Span labels in canonical form (each validated by `Span`), or None when they need the
    normalising path (which then reports them)."""
    if type(spans) is not list or any(type(s) is not dict or not s.keys() <= _SPAN_KEYS for s in spans):
        return None
    try:
        return [Span.model_validate(s).model_dump(mode="json", exclude_defaults=True) for s in spans]
    except ValueError:
        return None


def plain_record(raw: Any) -> Optional[dict[str, Any]]:
    """``raw`` as a canonical record when it is one already but for key order and defaults: the
    canonical field names only, every value of its field's type with no conversion needed (string
    ids, integer grades in range, lists where lists go). None for anything else, which the
    normalising path (`normalize_record`, `Case`) then reads, accepts or reports exactly as always.
    Nothing is validated twice: a record this accepts is exactly one the normalising path accepts
    unchanged, and `case_record` of that case equals the returned record."""
    if type(raw) is not dict or not raw.keys() <= _CASE_KEYS:
        return None
    if not _good_id(raw.get("id")) or type(raw.get("question")) is not str:
        return None
    out: dict[str, Any] = {"id": raw["id"], "question": raw["question"]}
    if "answer" in raw:
        if type(raw["answer"]) is not str:
            return None
        out["answer"] = raw["answer"]
    contexts = raw.get("contexts")
    if contexts:
        if type(contexts) is not list:
            return None
        # the common chunk, {"id": ...} alone, is canonical as it is: no copy (checked by C loops)
        if _id_only(contexts):
            out["contexts"] = contexts
        else:
            chunks = [_plain_chunk(c) for c in contexts]
            if None in chunks:
                return None
            out["contexts"] = chunks
    elif contexts is not None and type(contexts) is not list:
        return None
    relevant = raw.get("relevant")
    if relevant:
        if type(relevant) is not dict:
            return None
        for grade in relevant.values():
            if type(grade) is not int or not 0 <= grade <= MAX_GRADE:
                return None
        if not all(map(_good_id, relevant)):
            return None
        out["relevant"] = relevant
    elif relevant is not None and type(relevant) is not dict:
        return None
    spans = raw.get("relevant_spans")
    if spans:
        spans = _plain_spans(spans)
        if spans is None:
            return None
        out["relevant_spans"] = spans
    elif spans is not None and type(spans) is not list:
        return None
    if "reference" in raw:
        if type(raw["reference"]) is not str:
            return None
        out["reference"] = raw["reference"]
    for name in _STR_LISTS[:3]:
        if name in raw and not _str_list_into(raw, name, out):
            return None
    for name in _STR_LISTS[1:3]:  # a blank phrase: the normalising path says why it is wrong
        if name in out and not all(map(str.strip, out[name])):
            return None
    answerable = raw.get("answerable", True)
    if type(answerable) is not bool:
        return None
    if not answerable:
        out["answerable"] = False
    if "tags" in raw and not _str_list_into(raw, "tags", out):
        return None
    metadata = raw.get("metadata")
    if metadata:
        if type(metadata) is not dict or deeper_than(metadata, MAX_METADATA_DEPTH):
            return None
        out["metadata"] = metadata
    elif metadata is not None and type(metadata) is not dict:
        return None
    return out


def _str_list_into(raw: dict[str, Any], name: str, out: dict[str, Any]) -> bool:
    value = raw.get(name)
    if value is None:
        return name not in raw
    if type(value) is not list or not all(type(v) is str for v in value):
        return False
    if value:
        out[name] = value
    return True


class IdChunkRecord(NamedTuple):
    """A canonical record whose chunks are ids alone, read without a mapping per chunk: ``record``
    (`plain_record`'s result, without ``contexts``) and ``chunk_ids`` (its chunks' ids, in order)."""

    record: dict[str, Any]
    chunk_ids: list[str]


# The common line of a large golden set, chunks given as ids alone, in the two spellings JSON writers
# use (Python's json.dumps and compact JSON): the opening of its contexts and the text between chunks.
_ID_CHUNKS = (('"contexts": [{"id": "', '"}, {"id": "'), ('"contexts":[{"id":"', '"},{"id":"'))
_OUTSIDE_BRACES = re.compile(r'"[^"]*"|[^"{}\[\]]+')


def _split_id_chunks(text: str) -> Optional[tuple[str, list[str]]]:
    """``text`` with its chunks written as ``[]``, and the chunks' ids, when the line's top-level
    ``contexts`` is a list of ``{"id": "..."}`` written as `_ID_CHUNKS` spell it and nothing can make
    that reading wrong: no escape before the chunks (so every quote there opens or closes a string,
    and the chunks are the top-level object's, the prefix holding one ``{`` outside strings), no
    ``contexts`` key besides (none after, escaped or not), ids without quote, backslash or control
    character (so each id is its JSON text). Else None: the line is parsed as it is."""
    for opening, between in _ID_CHUNKS:
        start = text.find(opening)
        if start >= 0:
            break
    else:
        return None
    first = start + len(opening)
    end = text.find('"}]', first)
    if end < 0:
        return None
    body = text[first:end]
    ids = body.split(between)
    # 4 quotes in `between` and none in an id; no escape or control character (nor any other
    # character that does not print: a stricter test than JSON's, and a C loop); no id blank (empty:
    # two quotes side by side, or at an end; white space that prints is " " alone, after a quote)
    if body.count('"') != 4 * (len(ids) - 1) or "\\" in body or not body.isprintable():
        return None
    # an id empty (two quotes side by side, or a quote at an end) or with a space at its start or end
    # (`between` holds no quote before a space and no space before its '"}'), or not in NFC: the
    # line takes the normalising path, which says what is wrong
    if not body or '""' in body or body[0] in '" ' or body[-1] in '" ' or '" ' in body or ' "}' in body:
        return None
    if not body.isascii() and not unicodedata.is_normalized("NFC", body):
        return None
    prefix, suffix = text[:start], text[end + 3:]
    if "\\" in prefix or '"contexts"' in prefix or not _top_level(prefix):
        return None
    if '"contexts"' in suffix or "\\u" in suffix:
        return None
    return prefix + '"contexts":[]' + suffix, ids


def _top_level(prefix: str) -> bool:
    """Whether what follows ``prefix`` (a line's text, without escapes) is in its top-level object."""
    if prefix.count("{") == 1 and prefix.lstrip(" \t\r\n").startswith("{") and prefix.count('"') % 2 == 0 \
            and "}" not in prefix and "[" not in prefix and "]" not in prefix:
        return True  # no bracket but the first, in strings or not
    return _OUTSIDE_BRACES.sub("", prefix) == "{"


def parse_record_line(text: str) -> Any:
    """One line of a JSONL golden set: an `IdChunkRecord` when it is a canonical record whose chunks
    are ids alone (`plain_record`'s checks, the chunks' too, without a mapping per chunk), else the
    parsed JSON value (the fast parser's; for anything it refuses, `ragbridge.formats.files.parse_json`
    and its errors)."""
    split = _split_id_chunks(text)
    if split is not None:
        reduced, ids = split
        try:
            raw = pydantic_core.from_json(reduced)
        except ValueError:
            raw = None
        if type(raw) is dict and raw.get("contexts") == []:
            record = plain_record(raw)
            if record is not None:
                check_parsed(reduced, raw)
                return IdChunkRecord(record, ids)
    try:
        value = pydantic_core.from_json(text)
    except ValueError:
        return parse_json(text)
    check_parsed(text, value)
    return value


def with_chunks(record: dict[str, Any], chunk_ids: Optional[list[str]]) -> dict[str, Any]:
    """The canonical record of an `IdChunkRecord` (its chunks as ``{"id": ...}`` mappings, in key
    order); ``record`` itself when ``chunk_ids`` is None."""
    if chunk_ids is None:
        return record
    out = {k: record[k] for k in ("id", "question", "answer") if k in record}
    out["contexts"] = [{"id": cid} for cid in chunk_ids]
    out.update(record)
    return out


def case_record(case: Case) -> dict[str, Any]:
    """The canonical record of a case (see above): ``model_dump`` without defaults, as JSON types."""
    return case.model_dump(mode="json", exclude_defaults=True)


def record_line(record: dict[str, Any], chunk_ids: Optional[list[str]] = None) -> bytes:
    """A canonical record as one line of JSON (UTF-8, no newline): what ``cases.jsonl`` holds and the
    fingerprint hashes. With ``chunk_ids`` (an `IdChunkRecord`'s), the line of `with_chunks`, written
    without building it (each id is its own JSON text: `parse_record_line` checked that)."""
    if chunk_ids is None:
        return pydantic_core.to_json(record)
    head = {k: record[k] for k in ("id", "question", "answer") if k in record}
    tail = {k: v for k, v in record.items() if k not in head}
    line = pydantic_core.to_json(head)[:-1] + b',"contexts":[{"id":"' + '"},{"id":"'.join(chunk_ids).encode()
    return line + (b'"}],' + pydantic_core.to_json(tail)[1:] if tail else b'"}]}')


class Fingerprint:
    """The dataset fingerprint, fed one canonical record at a time: the SHA-256 of the cases'
    canonical lines (`record_line`), so it does not depend on the format the cases came from."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def add(self, line: bytes) -> None:
        self._h.update(line)
        self._h.update(b"\n")

    def hexdigest(self) -> str:
        return "sha256:" + self._h.hexdigest()


class CaseBatch(_Sequence):
    """Cases held as canonical records, each made a `Case` only when it is asked for (and kept).

    A batch is what the runner hands a backend: a sequence of cases like any other, so a backend that
    needs `Case` objects indexes or iterates it; the native backend reads the records' chunk ids and
    labels directly (`chunk_lists`), so a ranking metric builds no object per chunk. A record read as
    an `IdChunkRecord` keeps its chunk ids alone (``chunk_ids``) until its chunks are asked for
    (``records``, `record`). `of_cases` wraps cases that exist already.
    """

    __slots__ = ("_records", "_cases", "_chunk_ids")

    def __init__(self, records: Optional[list[dict[str, Any]]], cases: Optional[list[Optional[Case]]] = None,
                 chunk_ids: Optional[list[Optional[list[str]]]] = None):
        if records is None and cases is None:
            raise ValueError("a batch needs records or cases")
        self._records = records
        self._cases = cases if cases is not None else [None] * len(records)
        self._chunk_ids = chunk_ids  # per record: its chunk ids when its chunks are not in it, else None

    @classmethod
    def of_cases(cls, cases: Sequence[Case]) -> "CaseBatch":
        return cases if isinstance(cases, CaseBatch) else cls(None, list(cases))

    def to_bytes(self) -> bytes:
        """A batch of records as bytes (`marshal`'s format; `from_bytes` reads it back): its records
        and chunk ids, the quickest way to read a batch again (no `Case` object is kept)."""
        return marshal.dumps((self._records, self._chunk_ids))

    @classmethod
    def from_bytes(cls, data: bytes) -> "CaseBatch":
        records, chunk_ids = marshal.loads(data)
        return cls(records, chunk_ids=chunk_ids)

    @property
    def records(self) -> Optional[list[dict[str, Any]]]:
        """The canonical records (None for a batch of `Case` objects)."""
        if self._chunk_ids is not None:
            self._records = [with_chunks(r, ids) for r, ids in zip(self._records, self._chunk_ids)]
            self._chunk_ids = None
        return self._records

    def __len__(self) -> int:
        return len(self._cases)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.subset(range(len(self))[i])
        case = self._cases[i]
        if case is None:
            case = self._cases[i] = Case.model_validate(self.record(i))
        return case

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def subset(self, indices: Iterable[int]) -> "CaseBatch":
        indices = list(indices)
        if self._records is None:
            return CaseBatch(None, [self._cases[i] for i in indices])
        ids = None if self._chunk_ids is None else [self._chunk_ids[i] for i in indices]
        return CaseBatch([self._records[i] for i in indices], [self._cases[i] for i in indices], ids)

    def record(self, i: int) -> dict[str, Any]:
        """Case ``i`` as a canonical record."""
        if self._records is None:
            return case_record(self._cases[i])
        return with_chunks(self._records[i], None if self._chunk_ids is None else self._chunk_ids[i])

    def line(self, i: int) -> bytes:
        """Case ``i``'s canonical line (`record_line`)."""
        if self._records is None or self._chunk_ids is None:
            return record_line(self.record(i))
        return record_line(self._records[i], self._chunk_ids[i])

    def span_lists(self) -> Iterator[Optional[list]]:
        """Per case its span labels (records' mappings or `Span` objects), None where it has none."""
        if self._records is None:
            for c in self._cases:
                yield c.relevant_spans or None
            return
        for r in self._records:
            yield r.get("relevant_spans")

    def chunk_lists(self) -> Iterator[tuple[list[str], Optional[list], Optional[dict[str, int]]]]:
        """Per case ``(chunk ids, chunks, relevant)``; ``chunks`` (records' mappings or `Chunk`
        objects, for their sources) is None where every chunk is an id alone."""
        if self._records is None:
            for c in self._cases:
                yield [ch.id for ch in c.contexts], c.contexts, c.relevant
            return
        id_lists = self._chunk_ids or repeat(None, len(self._records))
        for r, ids in zip(self._records, id_lists):
            if ids is not None:
                yield ids, None, r.get("relevant")
            else:
                ctx = r.get("contexts", ())
                yield [c["id"] for c in ctx], ctx, r.get("relevant")

    @property
    def ids(self) -> list[str]:
        if self._records is not None:
            return [r["id"] for r in self._records]
        return [c.id for c in self._cases]

    def tags(self, i: int) -> list[str]:
        return self._records[i].get("tags", []) if self._records is not None else self._cases[i].tags

    def metadata(self, i: int) -> dict[str, Any]:
        return self._records[i].get("metadata", {}) if self._records is not None else self._cases[i].metadata

    def fields_present(self, i: int) -> set[str]:
        """``Case.fields_present()`` of case ``i``, from its record when there is one."""
        if self._records is None:
            return self._cases[i].fields_present()
        r = self._records[i]
        present = {"question"}
        if r.get("answer", "").strip():
            present.add("answer")
        if self._chunk_ids is not None and self._chunk_ids[i] is not None:
            present.add("contexts")  # ids alone: no text
        elif "contexts" in r:
            present.add("contexts")
            if any(map(dict.get, r["contexts"], repeat("text", len(r["contexts"])))):
                present.add("context_text")
        for name in ("relevant", "relevant_spans", "reference_contexts"):
            if name in r:
                present.add(name)
        if r.get("reference", "").strip():
            present.add("reference")
        return present

    def duplicate_chunk_ids(self) -> int:
        """Chunk ids repeated within a case, over the batch (dropped before ranking)."""
        return sum(len(ids) - len(set(ids)) for ids, _, _ in self.chunk_lists())


def batch_from_records(
    records: Iterable[tuple[int, Any]], path: Optional[str | Path] = None, unit: str = "line",
    first_seen: "Optional[dict[str, int] | SeenCaseIds]" = None,
) -> CaseBatch:
    """Validate ``(line, record)`` pairs into a `CaseBatch`: a plain record (`plain_record`, or an
    `IdChunkRecord` that `parse_record_line` made of one) is kept as it is, any other goes the
    normalising way (`cases_from_records`' errors, exactly). Duplicate ids are errors, also against
    ``first_seen`` (id -> line of the earlier batches, updated)."""
    first_seen = {} if first_seen is None else first_seen
    out: list[dict[str, Any]] = []
    cases: list[Optional[Case]] = []
    chunk_ids: list[Optional[list[str]]] = []
    for line, raw in records:
        ids = case = None
        if type(raw) is IdChunkRecord:
            rec, ids = raw
        else:
            rec = plain_record(raw)
            if rec is None:
                case = _one_case(raw, path, line, unit)
                rec = case_record(case)
        cid = rec["id"]
        if cid in first_seen:
            raise _duplicate(cid, line, first_seen[cid], path, unit)
        first_seen[cid] = line
        out.append(rec)
        cases.append(case)
        chunk_ids.append(ids)
    return CaseBatch(out, cases, chunk_ids)


class SeenCaseIds:
    """The case ids of a dataset read batch by batch, and the line of each, in bounded memory: what
    `batch_from_records` takes as ``first_seen`` (``cid in seen``, ``seen[cid]``, ``seen[cid] =
    line``). The current batch's ids are kept as they are; `end_batch` folds them into sorted NumPy
    arrays of 16-byte digests (BLAKE2b, so two ids are never taken for one) and lines, 25 bytes a
    case whatever its id, in 256 buckets by the digest's first byte (so a batch folded in copies a
    bucket, not them all)."""

    def __init__(self) -> None:
        import numpy as np

        self._np = np
        self._digests = [np.empty(0, dtype="S17") for _ in range(256)]
        self._lines = [np.empty(0, dtype=np.int64) for _ in range(256)]
        self._batch: dict[str, int] = {}

    @staticmethod
    def _digest(case_id: str) -> bytes:
        # a last byte that is not 0: NumPy's bytes type drops trailing zero bytes
        return hashlib.blake2b(case_id.encode("utf-8", "surrogatepass"), digest_size=16).digest() + b"\x01"

    def _earlier(self, case_id: str) -> Optional[int]:
        """The line of ``case_id`` in an earlier batch, or None."""
        digest = self._digest(case_id)
        digests = self._digests[digest[0]]
        i = int(self._np.searchsorted(digests, digest))
        return int(self._lines[digest[0]][i]) if i < digests.size and digests[i] == digest else None

    def __contains__(self, case_id: str) -> bool:
        return case_id in self._batch or self._earlier(case_id) is not None

    def __getitem__(self, case_id: str) -> int:
        line = self._batch.get(case_id)
        line = self._earlier(case_id) if line is None else line
        if line is None:
            raise KeyError(case_id)
        return line

    def __setitem__(self, case_id: str, line: int) -> None:
        self._batch[case_id] = line

    def end_batch(self) -> None:
        np = self._np
        if not self._batch:
            return
        digests = np.array([self._digest(cid) for cid in self._batch], dtype="S17")
        lines = np.fromiter(self._batch.values(), dtype=np.int64, count=len(self._batch))
        order = np.argsort(digests)
        digests, lines = digests[order], lines[order]
        firsts = np.frombuffer(digests.tobytes(), dtype=np.uint8)[::17]
        bounds = np.searchsorted(firsts, np.arange(257))
        for b in np.flatnonzero(bounds[1:] > bounds[:-1]).tolist():
            new = slice(bounds[b], bounds[b + 1])
            at = np.searchsorted(self._digests[b], digests[new])
            self._digests[b] = np.insert(self._digests[b], at, digests[new])
            self._lines[b] = np.insert(self._lines[b], at, lines[new])
        self._batch = {}


# --------------------------------------------------------------------------------------------
# Table cells and rows

_JSON_CELLS = ("contexts", "relevant", "relevant_spans", "relevant_ids", "qrels", "metadata", "retrieved",
               "retrieved_contexts", "retrieval_context", "retrieved_context_ids")


def cell_value(column: str, value: Any) -> Any:
    """A text cell of ``column`` as the value it stands for (see the module docstring): blank is
    missing, JSON in a list or mapping column is parsed, other list cells are ``|``-separated."""
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
    if column in _JSON_CELLS or column in LIST_FIELDS:
        if text[:1] in "[{":
            try:
                return parse_json(text)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"cell is not valid JSON: {exc.msg}", field=column) from None
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
            if isinstance(v, str) and v[:1] in "[{" and k in json_columns:
                try:
                    v = parse_json(v)
                except json.JSONDecodeError:
                    pass
                except DatasetError as exc:
                    exc.path, exc.line, exc.unit, exc.field = str(path), i, "row", k
                    raise
            elif isinstance(v, str) and k in ("relevant", "relevant_ids", "qrels"):
                v = [s for s in v.split("|") if s]  # a table cell: '|'-separated ids, as in CSV
            elif isinstance(v, str) and k == "answerable":
                v = cell_value(k, v)  # true/false, yes/no, 1/0, as in CSV
            rec[k] = v
        yield i, rec


# --------------------------------------------------------------------------------------------
# Whole sets of cases


def input_warnings(cases: Sequence[Case]) -> list[str]:
    """One line per kind of legal but suspicious input, each with the number of cases it affects.

    The kinds: relevance labels no retrieved chunk can match, so every ranking metric of the case is
    0 whatever was retrieved. Either the chunks were given as plain text (their ids are derived from
    the text, they have no ``source``) and no label names such an id, or, across the whole dataset,
    not one chunk id or source is a label (ids from two different id spaces); and, counted per case,
    a case no label matches though one differs from a chunk's id or source only in letter case or
    Unicode compatibility form (``Doc#A`` and ``doc#a``). A warning, not an error: the same cases
    are good input for judged metrics, and the labels may serve an export. And cases whose labels
    all have grade 0: their recall, MRR, nDCG and MAP are undefined, where trec_eval averages them
    as 0 (``--no-relevant zero``).
    (`InputCheck` counts the same, one canonical record at a time.)
    """
    check = InputCheck()
    check.add_batch(CaseBatch.of_cases(cases))
    return check.warnings()


_NO_TEXT_ID = chunk_id_for_text("")  # the id a chunk given as empty text would get


class InputCheck:
    """`input_warnings`, counted one canonical record at a time (for a golden set read in batches)."""

    def __init__(self) -> None:
        self.labelled = 0
        self.matching = 0
        self.textual = 0
        self.first_textual: Optional[str] = None
        self.near = 0  # cases no label matches, where one differs from a chunk's name in case or form
        self.first_near: Optional[tuple[str, str, str]] = None
        self.no_relevant = 0  # labelled, but every grade 0

    def add_batch(self, batch: "CaseBatch") -> None:
        if batch._records is None:  # Case objects: their canonical records
            for i in range(len(batch)):
                record = batch.record(i)
                chunks = record.get("contexts", [])
                self.add(record["id"], [ch["id"] for ch in chunks], chunks, record.get("relevant"))
            return
        for (ids, chunks, relevant), case_id in zip(batch.chunk_lists(), batch.ids):
            self.add(case_id, ids, chunks, relevant)

    def add(self, case_id: str, ids: list[str], chunks: Optional[list[dict[str, Any]]],
            relevant: Optional[dict[str, int]]) -> None:
        """One case: its id, chunk ids, chunk mappings (None: ids alone) and labels."""
        if relevant and max(relevant.values()) <= 0:
            self.no_relevant += 1
        if not ids or not relevant or max(relevant.values()) <= 0:
            return
        self.labelled += 1
        sources = () if chunks is None else map(dict.get, chunks, repeat("source"))
        if not relevant.keys().isdisjoint(ids) or not relevant.keys().isdisjoint(sources):
            self.matching += 1
        elif all(cid == _NO_TEXT_ID for cid in ids) if chunks is None else all(
                "source" not in ch and ch["id"] == chunk_id_for_text(ch.get("text", "")) for ch in chunks):
            self.textual += 1
            self.first_textual = self.first_textual or case_id
        else:
            names = ids if chunks is None else [*ids, *(ch["source"] for ch in chunks if ch.get("source"))]
            near = _near_miss(relevant, names)
            if near is not None:
                self.near += 1
                self.first_near = self.first_near or (case_id, *near)

    def warnings(self) -> list[str]:
        out = []
        if self.near:
            case_id, label, name = self.first_near
            out.append(
                f"{self.near} of {self.labelled} case(s) with relevance labels match no chunk, though a "
                "label "
                "differs from a chunk's id or source only in letter case or Unicode form, so it never "
                f"matches (first: {case_id!r}, label {label!r}, chunk {name!r}); ids are compared exactly: "
                "spell them alike")
        if self.no_relevant:
            out.append(
                f"{self.no_relevant} case(s) have relevance labels but none with grade >= 1: their recall, "
                "MRR, nDCG and MAP are undefined and left out of the means (trec_eval counts such a query "
                "as 0: run with --no-relevant zero for its mean)")
        return out + self._unmatched()

    def _unmatched(self) -> list[str]:
        if self.textual:
            return [
                f"{self.textual} of {self.labelled} case(s) with relevance labels give their chunks as plain "
                "text (no id, no source), so no chunk can match a label and their ranking metrics are 0 "
                f"(first: {self.first_textual!r}); give each chunk the id or source its label names"
            ]
        if self.labelled and not self.matching:
            return [
                f"in none of the {self.labelled} case(s) with relevance labels does a chunk's id or source "
                "match a label, so their ranking metrics are 0; check that 'relevant' names chunk ids "
                "or sources as 'contexts' gives them"
            ]
        return []


def _fold(text: str) -> str:
    """``text`` without the differences ids are not told apart by at a glance: letter case and
    Unicode compatibility forms (full-width letters, ligatures)."""
    return text.lower() if text.isascii() else unicodedata.normalize("NFKC", text).casefold()


def _near_miss(relevant: dict[str, int], names: list[str]) -> Optional[tuple[str, str]]:
    """A label (of grade > 0) and a chunk id or source it equals once folded (`_fold`), if any: the
    names of the chunks folded at once, joined by a line break (no id holds one)."""
    folded = "\n" + _fold("\n".join(names)) + "\n"
    for label, grade in relevant.items():
        if grade > 0 and "\n" + _fold(label) + "\n" in folded:
            return label, next((n for n in names if _fold(n) == _fold(label)), label)
    return None


def fingerprint(cases: Sequence[Case]) -> str:
    """A content hash of the cases, independent of the file format they came from (`Fingerprint`)."""
    fp = Fingerprint()
    batch = CaseBatch.of_cases(cases)
    for i in range(len(batch)):
        fp.add(record_line(batch.record(i)))
    return fp.hexdigest()
