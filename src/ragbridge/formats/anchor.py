"""Anchoring labels: chunk-id and section labels turned into span labels of the documents.

A golden set labelled by chunk id (``"relevant": {"refunds.md#3": 1}``) is tied to the chunking that
made those ids; one labelled by section survives only as long as the sections do. `anchor_cases`
moves each label onto the documents, where re-chunking cannot break it:

* a label that is a chunk's ``id`` becomes the span of that chunk: its ``doc``, ``start`` and
  ``end``, or its text located in its document (`ragbridge.formats.corpus.Corpus.locate`, the rule
  of the retrieved chunks);
* a label that is a chunk's ``source`` (a section) becomes, per document, one span from the first
  character of the section's chunks to the last (their hull: the section's text, gaps between its
  chunks included);
* a label that names a document of the corpus becomes the whole document.

The chunks come from the chunking (``--chunks``: every chunk the old chunker made, the best source,
since a section's chunks may never have been retrieved) and from the cases' own retrieved chunks. A
label of grade g gives spans of grade g. What cannot be placed stays in ``relevant`` as it was and
is reported (`Unplaced`), never dropped in silence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

from ..schema import Case, Span
from .corpus import Corpus, chunk_doc
from .files import DatasetError, jsonl_lines
from .records import normalize_chunk

__all__ = ["Unplaced", "anchor_cases", "read_chunks"]


@dataclass(frozen=True)
class Unplaced:
    """A label `anchor_cases` could not place: the case, the label and why."""

    case_id: str
    label: str
    reason: str


def read_chunks(path) -> list[dict[str, Any]]:
    """The chunk mappings of a chunking file (JSONL, one chunk a line), for `anchor_cases`."""
    out = []
    for line, rec in jsonl_lines(path):
        chunk = normalize_chunk(rec)
        if not isinstance(chunk, dict) or not isinstance(chunk.get("id"), (str, int)):
            raise DatasetError("each line must be a chunk with an id", path=path, line=line, field="id")
        chunk["id"] = str(chunk["id"])
        out.append(chunk)
    return out


class _Chunks:
    """The chunks known by id and by source, the chunking's first."""

    def __init__(self, chunks: Iterable[Any]) -> None:
        self.by_id: dict[str, dict[str, Any]] = {}
        self.by_source: dict[str, list[dict[str, Any]]] = {}
        self.add(chunks)

    def add(self, chunks: Iterable[Any]) -> None:
        for chunk in chunks:
            if not isinstance(chunk, dict):
                chunk = chunk.model_dump(exclude_none=True)
            if chunk["id"] in self.by_id:
                continue
            self.by_id[chunk["id"]] = chunk
            if chunk.get("source"):
                self.by_source.setdefault(chunk["source"], []).append(chunk)


def _place(chunk: dict[str, Any], corpus: Corpus) -> tuple[Optional[tuple[str, int, int]], str]:
    """Where ``chunk`` sits, or None and why not."""
    if chunk.get("start") is not None and chunk.get("doc") is not None:
        if chunk["doc"] not in corpus:
            return None, f"its chunk {chunk['id']!r} names document {chunk['doc']!r}, not in the corpus"
        return (chunk["doc"], chunk["start"], chunk["end"]), ""
    doc = chunk_doc(chunk, corpus)
    if doc is None:
        return None, f"its chunk {chunk['id']!r} names no document of the corpus (give it doc)"
    if not (chunk.get("text") or "").strip():
        return None, f"its chunk {chunk['id']!r} has no text to locate it by"
    found = corpus.locate(doc, chunk["text"])
    if found is None:
        return None, f"the text of its chunk {chunk['id']!r} is not in {doc!r}"
    return (doc, found[0], found[1]), ""


def _spans_of(label: str, chunks: _Chunks, corpus: Corpus) -> tuple[list[tuple[str, int, int]], str]:
    """The spans one label becomes, or none and why."""
    chunk = chunks.by_id.get(label)
    if chunk is not None:
        where, why = _place(chunk, corpus)
        return ([where] if where else []), why
    section = chunks.by_source.get(label)
    if section:
        hull: dict[str, list[int]] = {}
        for chunk in section:
            where, why = _place(chunk, corpus)
            if where is None:
                return [], why
            doc, start, end = where
            lo_hi = hull.setdefault(doc, [start, end])
            lo_hi[0], lo_hi[1] = min(lo_hi[0], start), max(lo_hi[1], end)
        return [(doc, lo, hi) for doc, (lo, hi) in hull.items()], ""
    if label in corpus:
        return [(label, 0, corpus.length(label))], ""
    return [], "no chunk has this id or source (among the chunks given) and no document has this name"


def anchor_cases(cases: Sequence[Case], corpus: Corpus,
                 chunks: Iterable[Any] = ()) -> tuple[list[Case], list[Unplaced], int]:
    """The cases with their ``relevant`` labels anchored to span labels (see the module docstring),
    the labels that could not be placed, and how many were. ``chunks``: the chunking's chunks
    (mappings or `Chunk` objects), looked up before the cases' own."""
    known = _Chunks(chunks)
    for case in cases:
        known.add(case.contexts)
    out: list[Case] = []
    unplaced: list[Unplaced] = []
    placed = 0
    for case in cases:
        kept: dict[str, int] = {}
        spans = [s.model_dump(exclude_none=True) for s in case.relevant_spans]
        for label, grade in case.relevant.items():
            found, why = _spans_of(label, known, corpus)
            if not found:
                kept[label] = grade
                unplaced.append(Unplaced(case.id, label, why))
                continue
            placed += 1
            spans += [{"doc": doc, "start": start, "end": end, "grade": grade} for doc, start, end in found]
        out.append(case.model_copy(update={"relevant": kept,
                                           "relevant_spans": [Span.model_validate(s) for s in spans]}))
    return out, unplaced, placed
