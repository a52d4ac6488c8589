"""Plain records: the light form of a case, for reading and scoring in batches.

A *canonical record* is a case as a plain dict: canonical field names in `CASE_FIELDS` order, every
field that holds its default left out (but an empty ``contexts`` that was given, `Case.contexts_given`),
chunks as ``{id, text?, score?, source?, doc?, start?, end?}`` (a float score, no empty text),
``relevant`` as ``{id: grade}``. It is what `case_record` gives for a
`Case`, what ``cases.jsonl`` holds a line (`record_line`), and what the fingerprint hashes.

`plain_record` turns a parsed record that is already canonical in everything but key order and
defaults into one without building a `Case` (about a tenth of the cost, and no object per chunk):
chunks of one shape are checked a column at a time, in C loops. Anything else goes the normalising
way (`ragbridge.formats.records`), which accepts or reports it exactly as always.

A `ColumnRecord` holds a record's chunks as columns (their ids, and their texts where they have
them) instead of a mapping per chunk: what `ragbridge.formats.record_lines` cuts out of the common
line of a large golden set. `with_chunks` and `record_line` give its canonical record and line.
Chunks given as ids alone are held as one string, the ids joined by line breaks (no id holds one:
ids print): no string a chunk is made to read, check, write or rank them (`rank_ids`).
"""

from __future__ import annotations

import math
import unicodedata
from operator import itemgetter
from typing import Any, NamedTuple, Optional

import pydantic_core

from ..schema import MAX_GRADE, MAX_METADATA_DEPTH, Case, Span, check_where, deeper_than
from .records import CASE_FIELDS

__all__ = ["good_id", "good_ids", "plain_record", "ColumnRecord", "with_chunks", "case_record",
           "record_line", "id_list", "rank_ids", "RANKING_FIELDS"]

_STR_LISTS = ("reference_contexts", "must_contain", "must_not_contain", "tags")
_CHUNK_KEYS = frozenset({"id", "text", "score", "source", "doc", "start", "end"})
_SPAN_KEYS = frozenset(Span.model_fields)
_CASE_KEYS = frozenset(CASE_FIELDS)
#: the fields of a record that a ranking needs (a golden set's common line holds no other)
RANKING_FIELDS = frozenset({"id", "question", "answer", "contexts", "relevant"})
#: the chunk shapes checked a column at a time: ``id`` and any of these, in the canonical key order
_SHAPES = frozenset(("id",) + tuple(k for k, bit in zip(("text", "score", "source"), (1, 2, 4)) if mask & bit)
                    for mask in range(8))
_ID, _TEXT, _SCORE, _SOURCE = itemgetter("id"), itemgetter("text"), itemgetter("score"), itemgetter("source")


def _joined_pairs(ids: list[str], texts: list[str], middle: str, between: str) -> str:
    """``id middle text between id middle text ...``: a column's chunks written as JSON text."""
    return between.join(map(middle.join, zip(ids, texts)))


def _ranked_ids(joined: str, labels: list[str]) -> tuple[int, int, list[int]]:
    """`rank_ids` in Python."""
    ids = joined.split("\n") if joined else []
    first: dict[str, int] = {}
    for cid in ids:
        first.setdefault(cid, len(first) + 1)
    return len(ids), len(ids) - len(first), [first.get(label, 0) for label in labels]


try:  # built with the package where a C compiler was found: `_joined_pairs` in one pass, in C
    from ._columns import interleave as _interleave
except ImportError:  # pragma: no cover - the package built without it
    _interleave = _joined_pairs
try:  # the checks of a record's labels and grades where they are ASCII, in C
    from ._columns import plain_labels as _plain_labels
except ImportError:  # pragma: no cover - the package built without it
    _plain_labels = None
try:  # `_ranked_ids` of ASCII ids, in C, a table of the ids' places in the string (no str per id)
    from ._columns import rank_ids as _rank_ids
except ImportError:  # pragma: no cover - the package built without it
    _rank_ids = None
try:  # `record_line` of a record of plain ranking fields whose chunk ids are one string, in C
    from ._columns import ids_line as _ids_line
except ImportError:  # pragma: no cover - the package built without it
    _ids_line = None


def rank_ids(joined: str, labels: list[str]) -> tuple[int, int, list[int]]:
    """For a case's chunk ids joined by line breaks (a `ColumnRecord`'s): how many ids there are, how
    many repeat an id before them, and per label of ``labels`` its 1-based rank among the ids with
    each repeat dropped (0: not among them). What ranking, the input check and the reasons of the
    values below 1 need of a case whose chunks are ids alone."""
    got = _rank_ids(joined, labels) if _rank_ids is not None else None
    return got if got is not None else _ranked_ids(joined, labels)


def id_list(ids: Any) -> Any:
    """A case's chunk ids as a list: ``ids`` itself, or ids held joined by line breaks split."""
    if type(ids) is str:
        return ids.split("\n") if ids else []
    return ids


def _plain_text(text: str) -> bool:
    """Whether ``text`` is its own JSON text: no quote, backslash or control character, which JSON
    writers escape (any character that does not print is taken for one: a C loop, and safe)."""
    return '"' not in text and "\\" not in text and text.isprintable()


def good_id(value: Any) -> bool:
    """Whether ``value`` is an id as `ragbridge.schema.clean_id` leaves it (a string, not empty, every
    character printing, no space at either end, in NFC)."""
    return (type(value) is str and value.isprintable() and value[:1] not in ("", " ")
            and value[-1] != " " and unicodedata.is_normalized("NFC", value))


def good_ids(ids: list) -> bool:
    """Whether every item of ``ids`` (a non-empty list) is a `good_id`: one C call each over the ids
    joined (a line break prints not, so it splits the joined text exactly; it composes with nothing,
    so NFC of the joined text is NFC of each id)."""
    if set(map(type, ids)) != {str} or "" in ids:
        return False
    joined = "\n".join(ids)
    return ("".join(ids).isprintable() and joined[0] != " " and joined[-1] != " " and " \n" not in joined
            and "\n " not in joined and unicodedata.is_normalized("NFC", joined))


def _plain_chunks(contexts: list) -> Optional[list[dict[str, Any]]]:
    """``contexts`` (a non-empty list) as canonical chunks, or None when it needs the normalising path.
    Chunks of one shape (`_SHAPES`) are checked a column at a time and kept as they are; others (an
    empty text, an integer score, offsets, keys in another order) chunk by chunk."""
    if set(map(type, contexts)) != {dict}:
        return None
    shapes = set(map(tuple, contexts))
    shape = shapes.pop() if len(shapes) == 1 else None
    if shape in _SHAPES and good_ids(list(map(_ID, contexts))) and _columns_plain(contexts, shape):
        return contexts
    chunks = [_plain_chunk(c) for c in contexts]
    return None if None in chunks else chunks


def _columns_plain(contexts: list, shape: tuple) -> bool:
    """Whether the chunks of ``shape`` (ids checked) are canonical as they are: texts strings, none
    empty; scores finite floats; sources strings, each empty or an id."""
    if "text" in shape:
        texts = list(map(_TEXT, contexts))
        if set(map(type, texts)) != {str} or "" in texts:
            return False
    if "score" in shape:
        scores = list(map(_SCORE, contexts))
        if set(map(type, scores)) != {float} or not all(map(math.isfinite, scores)):
            return False
    if "source" in shape:
        sources = list(map(_SOURCE, contexts))
        if set(map(type, sources)) != {str}:
            return False
        named = list(filter(None, sources))
        if named and not good_ids(named):
            return False
    return True


def _plain_chunk(chunk: Any) -> Optional[dict[str, Any]]:
    """A chunk mapping in canonical form, or None when it needs the normalising path."""
    if type(chunk) is not dict or not good_id(chunk.get("id")) or not chunk.keys() <= _CHUNK_KEYS:
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
        if type(source) is not str or (source and not good_id(source)):
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
    if not good_id(raw.get("id")) or type(raw.get("question")) is not str:
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
        contexts = _plain_chunks(contexts)
        if contexts is None:
            return None
        out["contexts"] = contexts
    elif contexts is not None:
        if type(contexts) is not list:
            return None
        out["contexts"] = []  # given, and empty: the retriever returned nothing
    relevant = raw.get("relevant")
    if relevant:
        if type(relevant) is not dict:
            return None
        if _plain_labels is None or _plain_labels(relevant, MAX_GRADE) is None:  # else checked in C
            grades = relevant.values()
            if set(map(type, grades)) != {int} or min(grades) < 0 or max(grades) > MAX_GRADE:
                return None
            if not good_ids(list(relevant)):
                return None
        out["relevant"] = relevant
    elif relevant is not None and type(relevant) is not dict:
        return None
    if raw.keys() <= RANKING_FIELDS:
        return out  # none of the fields below: each at its default
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
    tags = out.get("tags")
    if tags and (not good_ids(tags) or len(set(tags)) != len(tags)):
        return None  # a tag that `clean_tags` changes or refuses, or one given twice
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


class ColumnRecord(NamedTuple):
    """A canonical record whose chunks are held as columns, without a mapping per chunk: ``record``
    (`plain_record`'s result, without ``contexts``), ``chunk_ids`` (its chunks' ids, in order, each a
    `good_id` without quote or backslash: a list, or chunks given as ids alone one string of them
    joined by line breaks) and ``texts`` (their texts, none empty; None when the chunks are ids
    alone)."""

    record: dict[str, Any]
    chunk_ids: Any
    texts: Optional[list[str]] = None


def with_chunks(record: dict[str, Any], chunk_ids: Optional[list[str]],
                texts: Optional[list[str]] = None) -> dict[str, Any]:
    """The canonical record of a `ColumnRecord` (its chunks as mappings, in key order); ``record``
    itself when ``chunk_ids`` is None."""
    if chunk_ids is None:
        return record
    chunk_ids = id_list(chunk_ids)
    out = {k: record[k] for k in ("id", "question", "answer") if k in record}
    if texts is None:
        out["contexts"] = [{"id": cid} for cid in chunk_ids]
    else:
        out["contexts"] = [{"id": cid, "text": text} for cid, text in zip(chunk_ids, texts)]
    out.update(record)
    return out


def case_record(case: Case) -> dict[str, Any]:
    """The canonical record of a case (see above): ``model_dump`` without defaults, as JSON types; an
    empty ``contexts`` that was given (`Case.contexts_given`: the retriever returned nothing) is
    kept, in its place."""
    record = case.model_dump(mode="json", exclude_defaults=True)
    if not case.contexts and "contexts" in case.__pydantic_fields_set__:
        head = {k: record.pop(k) for k in ("id", "question", "answer") if k in record}
        record = {**head, "contexts": [], **record}
    return record


def record_line(record: dict[str, Any], chunk_ids: Optional[list[str]] = None,
                texts: Optional[list[str]] = None) -> bytes:
    """A canonical record as one line of JSON (UTF-8, no newline): what ``cases.jsonl`` holds and the
    fingerprint hashes. With ``chunk_ids`` (and ``texts``: a `ColumnRecord`'s), the line of
    `with_chunks`, written without building it where every id and text is its own JSON text (no
    character a JSON writer escapes)."""
    if chunk_ids is None:
        return pydantic_core.to_json(record)
    if type(chunk_ids) is str and texts is None:  # ids alone, joined by line breaks
        if _ids_line is not None:
            line = _ids_line(record, chunk_ids)
            if line is not None:
                return line
        chunks = chunk_ids.replace("\n", '"},{"id":"')
    elif texts is None:
        chunks = '"},{"id":"'.join(chunk_ids)
    elif _plain_text("".join(texts)):
        chunks = _interleave(id_list(chunk_ids), texts, '","text":"', '"},{"id":"')
    else:
        return pydantic_core.to_json(with_chunks(record, chunk_ids, texts))
    head = {k: record[k] for k in ("id", "question", "answer") if k in record}
    tail = {k: v for k, v in record.items() if k not in head}
    line = pydantic_core.to_json(head)[:-1] + b',"contexts":[{"id":"' + chunks.encode()
    return line + (b'"}],' + pydantic_core.to_json(tail)[1:] if tail else b'"}]}')
