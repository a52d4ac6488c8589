"""Batches: cases held as canonical records, validated a batch at a time, and what a dataset keeps
across its batches (the fingerprint, the case ids seen).

`batch_from_records` validates ``(line, record)`` pairs into a `CaseBatch`: a plain record
(`ragbridge.formats.plain_records.plain_record`, or a `ColumnRecord` cut from its line) is kept as it
is, any other goes the normalising way (`ragbridge.formats.records`), with its exact errors. A
`CaseBatch` is a sequence of cases like any other, each made a `Case` only when asked for.
"""

from __future__ import annotations

import hashlib
import marshal
from collections.abc import Sequence as _Sequence
from itertools import compress, count, repeat
from operator import itemgetter, methodcaller
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple, Optional, Sequence

from ..schema import Case
from .plain_records import (ColumnRecord, case_record, id_list, plain_record, rank_ids, record_line,
                            with_chunks)
from .records import duplicate_case_id, validated_case

__all__ = ["Fingerprint", "fingerprint", "CaseBatch", "batch_from_records", "SeenCaseIds", "CaseView",
           "ChunkView"]


class Fingerprint:
    """The dataset fingerprint, fed one canonical record at a time: the SHA-256 of the cases'
    canonical lines (`record_line`), so it does not depend on the format the cases came from."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def add(self, line: bytes) -> None:
        self._h.update(line)
        self._h.update(b"\n")

    def add_lines(self, block: bytes) -> None:
        """Canonical lines, each ending with its line break: the same as `add` of each."""
        self._h.update(block)

    def hexdigest(self) -> str:
        return "sha256:" + self._h.hexdigest()


def fingerprint(cases: Sequence[Case]) -> str:
    """A content hash of the cases, independent of the file format they came from (`Fingerprint`)."""
    fp = Fingerprint()
    batch = CaseBatch.of_cases(cases)
    for i in range(len(batch)):
        fp.add(batch.line(i))
    return fp.hexdigest()


class CaseBatch(_Sequence):
    """Cases held as canonical records, each made a `Case` only when it is asked for (and kept).

    A batch is what the runner hands a backend: a sequence of cases like any other, so a backend that
    needs `Case` objects indexes or iterates it; the native backend reads the records' chunk ids and
    labels directly (`chunk_rows`), so a ranking metric builds no object per chunk. A record read as
    a `ColumnRecord` keeps its chunks as columns (``chunk_ids``, ``texts``) until its chunks are asked
    for (``records``, `record`); ids as one string joined by line breaks stay one (`chunk_rows`).
    `of_cases` wraps cases that exist already.
    """

    # a case's ids and texts: lists, or strings joined by line breaks (as `to_bytes` writes them)
    __slots__ = ("_records", "_cases", "_chunk_ids", "_texts", "_ranked", "_ids")

    def __init__(self, records: Optional[list[dict[str, Any]]], cases: Optional[list[Optional[Case]]] = None,
                 chunk_ids: Optional[list[Optional[list[str]]]] = None,
                 texts: Optional[list[Optional[list[str]]]] = None, ranked: Optional[list] = None):
        if records is None and cases is None:
            raise ValueError("a batch needs records or cases")
        self._records = records
        self._cases = cases if cases is not None else [None] * len(records)
        # per record: its chunks' ids (and texts, where they have them) when its chunks are not in it
        self._chunk_ids = chunk_ids
        self._texts = texts if texts is not None or chunk_ids is None else [None] * len(chunk_ids)
        self._ranked = ranked  # `chunk_rows`' ``ranked`` of each case, once made
        self._ids: Optional[list[str]] = None  # the case ids, once asked for

    @classmethod
    def of_cases(cls, cases: Sequence[Case]) -> "CaseBatch":
        return cases if isinstance(cases, CaseBatch) else cls(None, list(cases))

    def to_bytes(self) -> bytes:
        """A batch of records as bytes (`marshal`'s format; `from_bytes` reads it back): its records
        and chunk columns, the quickest way to read a batch again (no `Case` object is kept). A case's
        chunk ids, and its texts, are one string joined by line breaks (a column's ids and texts hold
        none: they print, or are plain JSON text): a string a case to write and read, not one a chunk.
        Each is split again when a list of them is asked for. The rows `chunk_rows` ranked go too."""
        chunk_ids = texts = None
        if self._chunk_ids is not None:
            chunk_ids, texts = self._chunk_ids, self._texts
            if not _STR_OR_NONE.issuperset(map(type, chunk_ids)):
                chunk_ids = [i if i is None or type(i) is str else "\n".join(i) for i in chunk_ids]
            if texts.count(None) != len(texts):
                texts = [t if t is None or type(t) is str else "\n".join(t) for t in texts]
        return marshal.dumps((self._records, chunk_ids, texts, self._ranked))

    @classmethod
    def from_bytes(cls, data: bytes) -> "CaseBatch":
        records, chunk_ids, texts, ranked = marshal.loads(data)
        return cls(records, chunk_ids=chunk_ids, texts=texts, ranked=ranked)

    @property
    def records(self) -> Optional[list[dict[str, Any]]]:
        """The canonical records (None for a batch of `Case` objects)."""
        if self._chunk_ids is not None:
            self._records = [with_chunks(r, *self._columns(i)) for i, r in enumerate(self._records)]
            self._chunk_ids = self._texts = self._ranked = None
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
        if self._chunk_ids is None:
            return CaseBatch([self._records[i] for i in indices], [self._cases[i] for i in indices])
        return CaseBatch([self._records[i] for i in indices], [self._cases[i] for i in indices],
                         [self._chunk_ids[i] for i in indices], [self._texts[i] for i in indices],
                         None if self._ranked is None else [self._ranked[i] for i in indices])

    def _columns(self, i: int) -> tuple[Optional[list[str]], Optional[list[str]]]:
        if self._chunk_ids is None:
            return None, None
        return id_list(self._chunk_ids[i]), self._text_column(i)

    def _text_column(self, i: int) -> Optional[list[str]]:
        texts = self._texts[i]
        if type(texts) is str:  # as `to_bytes` wrote them
            texts = self._texts[i] = texts.split("\n")
        return texts

    def record(self, i: int) -> dict[str, Any]:
        """Case ``i`` as a canonical record."""
        if self._records is None:
            return case_record(self._cases[i])
        return with_chunks(self._records[i], *self._columns(i))

    def replace(self, i: int, record: dict[str, Any]) -> None:
        """Hold ``record`` (a canonical record, chunks in it) as case ``i``."""
        if self._chunk_ids is not None:
            self._chunk_ids[i] = self._texts[i] = None
            self._ranked = None
        self._records[i] = record
        self._ids = None
        self._cases[i] = None  # made again from the new record when asked for

    def line(self, i: int) -> bytes:
        """Case ``i``'s canonical line (`record_line`)."""
        if self._records is None:
            return record_line(case_record(self._cases[i]))
        if self._chunk_ids is None:
            return record_line(self._records[i])
        return record_line(self._records[i], self._chunk_ids[i], self._text_column(i))

    def lines(self) -> list[bytes]:
        """Every case's canonical line (`line` of each)."""
        if self._records is None or self._chunk_ids is None:
            return list(map(self.line, range(len(self))))
        texts = self._texts
        if texts.count(None) != len(texts):  # texts of some: lists, as `_text_column` gives them
            texts = map(self._text_column, range(len(self)))
        return list(map(record_line, self._records, self._chunk_ids, texts))

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
        objects, for their sources) is None where the chunks are columns (they have no source)."""
        if self._records is None:
            for c in self._cases:
                yield [ch.id for ch in c.contexts], c.contexts, c.relevant
            return
        id_lists = self._chunk_ids or repeat(None, len(self._records))
        for r, ids in zip(self._records, id_lists):
            if ids is not None:
                yield id_list(ids), None, r.get("relevant")
            else:
                ctx = r.get("contexts", ())
                yield [c["id"] for c in ctx], ctx, r.get("relevant")

    def chunk_rows(self) -> Iterator[tuple[Any, Optional[list], Optional[dict[str, int]], Optional[tuple]]]:
        """Per case ``(chunk ids, chunks, relevant, ranked)``: `chunk_lists`' row and None, but for a
        case whose chunk ids are held as one string (chunks as columns, no span labels): that string,
        and ``ranked`` = `rank_ids` of it for ``relevant``'s labels (how many ids, how many repeats,
        each label's rank): what ranking and the input check read of the case, no string a chunk.
        Each case is ranked once a batch (and the ranks are written with it, `to_bytes`)."""
        if self._chunk_ids is None:
            for ids, chunks, rel in self.chunk_lists():
                yield ids, chunks, rel, None
            return
        for r, ids, ranked in zip(self._records, self._chunk_ids, self._ranks()):
            if ranked is not None:
                yield ids, None, r.get("relevant"), ranked
            elif ids is None:
                ctx = r.get("contexts", ())
                yield [c["id"] for c in ctx], ctx, r.get("relevant"), None
            else:
                yield id_list(ids), None, r.get("relevant"), None

    def _ranks(self) -> list:
        """`chunk_rows`' ``ranked`` of each case (None where it has none), made once."""
        if self._ranked is None:
            self._ranked = [rank_ids(ids, list(r["relevant"]) if r.get("relevant") else [])
                            if type(ids) is str and "relevant_spans" not in r else None
                            for r, ids in zip(self._records, self._chunk_ids)]
        return self._ranked

    def ranked_rows(self) -> Optional[tuple[list, list]]:
        """Where every case's chunk ids are held as one string and ranked (`chunk_rows`' ``ranked`` not
        None for any): each case's labels (None where it has none) and its ``ranked``, as two lists,
        for a reader that takes a batch at once; else None."""
        if self._chunk_ids is None:
            return None
        ranked = self._ranks()
        if None in ranked:
            return None
        return list(map(_RELEVANT, self._records)), ranked

    def contexts_given(self) -> Iterator[bool]:
        """Per case whether it gives its retriever's output (`Case.contexts_given`: ``contexts`` set,
        even to an empty list)."""
        if self._records is None:
            return (c.contexts_given for c in self._cases)
        if self._chunk_ids is not None and None not in self._chunk_ids:
            return repeat(True, len(self._records))  # every case's chunks are columns: given
        id_lists = self._chunk_ids or repeat(None, len(self._records))
        return (ids is not None or "contexts" in r for r, ids in zip(self._records, id_lists))

    def questions(self) -> Iterator[str]:
        """Per case its question."""
        if self._records is None:
            return (c.question for c in self._cases)
        return map(_QUESTION, self._records)

    def chunk_texts(self) -> Iterator[Optional[list[str]]]:
        """Per case the texts of its chunks where they are a column, else None (see `chunk_lists`)."""
        if self._texts is None or self._texts.count(None) == len(self._texts):
            return repeat(None, len(self))
        return map(self._text_column, range(len(self)))

    @property
    def ids(self) -> list[str]:
        if self._ids is None:
            records = self._records
            self._ids = list(map(_ID, records)) if records is not None else [c.id for c in self._cases]
        return list(self._ids)

    def view(self, i: int) -> Any:
        """Case ``i`` to read: a `CaseView` of its canonical record (no `Case` made), or the `Case`
        itself where the batch holds one."""
        if self._records is None or self._cases[i] is not None:
            return self[i]
        if self._chunk_ids is None:
            return CaseView(self._records[i])
        return CaseView(self._records[i], self._chunk_ids[i], self._text_column(i))

    def head(self, i: int) -> dict[str, Any]:
        """Case ``i``'s canonical record, as it is held: a record whose chunks are columns without them."""
        return self._records[i] if self._records is not None else case_record(self._cases[i])

    def having(self, field: str) -> list[int]:
        """The positions of the cases that give ``field`` (``tags``, ``metadata``: not empty)."""
        if self._records is None:
            return [i for i, c in enumerate(self._cases) if getattr(c, field)]
        return list(compress(count(), map(methodcaller("get", field), self._records)))

    def tags(self, i: int) -> list[str]:
        return self._records[i].get("tags", []) if self._records is not None else self._cases[i].tags

    def metadata(self, i: int) -> dict[str, Any]:
        return self._records[i].get("metadata", {}) if self._records is not None else self._cases[i].metadata

    def fields_present(self, i: int) -> set[str]:
        """``Case.fields_present()`` of case ``i``, from its record when there is one."""
        if self._records is None:
            return self._cases[i].fields_present()
        r = self._records[i]
        present = {"question"} if r["question"].strip() else set()
        if r.get("answer", "").strip():
            present.add("answer")
        ids, texts = (self._chunk_ids[i], self._texts[i]) if self._chunk_ids is not None else (None, None)
        if ids:
            present.add("contexts")
            if texts:  # none empty
                present.add("context_text")
        elif r.get("contexts"):
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


class ChunkView(NamedTuple):
    """A chunk of a `CaseView`: `ragbridge.schema.Chunk`'s fields, read only."""

    id: str
    text: str = ""
    score: Optional[float] = None
    source: Optional[str] = None
    doc: Optional[str] = None
    start: Optional[int] = None
    end: Optional[int] = None


class CaseView:
    """A case to read, from its canonical record (checked as it was read, `plain_record`): the fields
    of `ragbridge.schema.Case`, read only, its chunks as `ChunkView` (made when first asked for), its
    span labels as `ragbridge.schema.Span`. About a tenth of the cost of making the `Case` (whose
    chunks are models validated one by one): what reads many cases back (a diagnosis, a report of
    every case) reads. ``case()`` gives the `Case`."""

    def __init__(self, record: dict[str, Any], chunk_ids: Any = None, texts: Optional[list[str]] = None):
        # the chunk ids as a list, or joined by line breaks (split when first read: `id_list`)
        self._record, self._ids, self._texts = record, chunk_ids, texts
        self._contexts: Optional[list[ChunkView]] = None
        self._spans: Optional[list] = None

    def __getattr__(self, name: str) -> Any:
        default = _VIEW_DEFAULTS.get(name, _NO_FIELD)
        if default is _NO_FIELD:
            raise AttributeError(name)
        got = self._record.get(name, _NO_FIELD)
        value = (default() if callable(default) else default) if got is _NO_FIELD else got
        self.__dict__[name] = value  # read once: the next read is a plain attribute's
        return value

    @property
    def contexts(self) -> list[ChunkView]:
        if self._contexts is None:
            ids = self.chunk_ids
            if ids is not None:
                texts = self._texts if self._texts is not None else repeat("", len(ids))
                self._contexts = [ChunkView(cid, text) for cid, text in zip(ids, texts)]
            else:
                self._contexts = [ChunkView(**c) for c in self._record.get("contexts", ())]
        return self._contexts

    @property
    def chunk_ids(self) -> Optional[list[str]]:
        """The chunks' ids where the case holds its chunks as columns (ids, texts: no other field of a
        chunk), without a `ChunkView` made a chunk; None otherwise (read `contexts`)."""
        if type(self._ids) is str:
            self._ids = id_list(self._ids)
        return self._ids

    @property
    def relevant_spans(self) -> list:
        if self._spans is None:
            from ..schema import Span

            self._spans = [Span.model_validate(s) for s in self._record.get("relevant_spans", ())]
        return self._spans

    def case(self) -> Case:
        return Case.model_validate(with_chunks(self._record, self.chunk_ids, self._texts))


_ID, _QUESTION, _RELEVANT = itemgetter("id"), itemgetter("question"), methodcaller("get", "relevant")
_FIRST, _SECOND, _THIRD = itemgetter(0), itemgetter(1), itemgetter(2)
_STR_OR_NONE = frozenset({str, type(None)})

#: the fields of a `CaseView` read from its record, with their defaults (a type: a new empty one)
_VIEW_DEFAULTS: dict[str, Any] = {"id": None, "question": None, "answer": None, "relevant": dict,
                                  "reference": None, "reference_contexts": list, "must_contain": list,
                                  "must_not_contain": list, "answerable": True, "tags": list,
                                  "metadata": dict}
_NO_FIELD = object()


def batch_from_records(
    records: Iterable[tuple[int, Any]], path: Optional[str | Path] = None, unit: str = "line",
    first_seen: "Optional[dict[str, int] | SeenCaseIds]" = None,
) -> CaseBatch:
    """Validate ``(line, record)`` pairs into a `CaseBatch`: a plain record (`plain_record`, or a
    `ColumnRecord` that `ragbridge.formats.record_lines.parse_record_line` made of one) is kept as it
    is, any other goes the normalising way (`ragbridge.formats.records.cases_from_records`' errors,
    exactly). Duplicate ids are errors, also against ``first_seen`` (id -> line of the earlier
    batches, updated)."""
    first_seen = {} if first_seen is None else first_seen
    if type(first_seen) is SeenCaseIds:
        records = records if type(records) is list else list(records)
        raws = list(map(_SECOND, records))
        if set(map(type, raws)) == {ColumnRecord}:  # nothing to validate: the ids at once
            out = list(map(_FIRST, raws))
            if first_seen.add_new(list(map(_ID, out)), list(map(_FIRST, records))):
                return CaseBatch(out, [None] * len(out), list(map(_SECOND, raws)), list(map(_THIRD, raws)))
    out: list[dict[str, Any]] = []
    cases: list[Optional[Case]] = []
    chunk_ids: list[Optional[list[str]]] = []
    texts: list[Optional[list[str]]] = []
    for line, raw in records:
        ids = words = case = None
        if type(raw) is ColumnRecord:
            rec, ids, words = raw
        else:
            rec = plain_record(raw)
            if rec is None:
                case = validated_case(raw, path, line, unit)
                rec = case_record(case)
        cid = rec["id"]
        if cid in first_seen:
            raise duplicate_case_id(cid, line, first_seen[cid], path, unit)
        first_seen[cid] = line
        out.append(rec)
        cases.append(case)
        chunk_ids.append(ids)
        texts.append(words)
    return CaseBatch(out, cases, chunk_ids, texts)


class SeenCaseIds:
    """The case ids of a dataset read batch by batch, and the line of each, in bounded memory: what
    `batch_from_records` takes as ``first_seen`` (``cid in seen``, ``seen[cid]``, ``seen[cid] =
    line``). The current batch's ids are kept as they are; `end_batch` folds them into sorted NumPy
    arrays of 16-byte digests (BLAKE2b, so two ids are never taken for one) and lines, 25 bytes a
    case whatever its id: a sorted run a batch, and two runs merged whenever the newer is as long as
    the older (so a batch costs a few NumPy calls, and an id is looked up in at most about log2 of
    the batches runs). A bit a hash value (2 MiB, `_BITS`) says at once that most new ids were not
    seen: only the rest are looked up among the digests."""

    _BITS = 1 << 24

    def __init__(self) -> None:
        import numpy as np

        self._np = np
        self._runs: list[tuple[Any, Any]] = []  # (sorted digests, their lines), longest first
        self._batch: dict[str, int] = {}
        self._seen_bits = bytearray(self._BITS >> 3)

    @staticmethod
    def _digest(case_id: str) -> bytes:
        # a last byte that is not 0: NumPy's bytes type drops trailing zero bytes
        return hashlib.blake2b(case_id.encode("utf-8", "surrogatepass"), digest_size=16).digest() + b"\x01"

    def _earlier(self, case_id: str) -> Optional[int]:
        """The line of ``case_id`` in an earlier batch, or None."""
        h = hash(case_id) & (self._BITS - 1)
        if not self._seen_bits[h >> 3] & (1 << (h & 7)):
            return None
        digest = self._digest(case_id)
        for digests, lines in self._runs:
            i = int(self._np.searchsorted(digests, digest))
            if i < digests.size and digests[i] == digest:
                return int(lines[i])
        return None

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

    def add_new(self, case_ids: list[str], lines: list[int]) -> bool:
        """``seen[cid] = line`` for each of ``case_ids`` and ``lines`` where none of them was seen
        before and none is given twice; False, having added nothing, otherwise (the caller adds them one
        by one, finding the first one seen)."""
        batch = dict(zip(case_ids, lines))
        if len(batch) != len(case_ids) or not self._batch.keys().isdisjoint(batch):
            return False
        if self._runs:
            np = self._np
            at = np.fromiter(map(hash, batch), dtype=np.int64, count=len(batch)) & (self._BITS - 1)
            bits = np.frombuffer(self._seen_bits, dtype=np.uint8)[at >> 3] & (1 << (at & 7))
            if bits.any() and any(self._earlier(cid) is not None for cid in compress(batch, bits.tolist())):
                return False
        self._batch.update(batch)
        return True

    def end_batch(self) -> None:
        np = self._np
        if not self._batch:
            return
        bits, mask = self._seen_bits, self._BITS - 1
        for h in map(hash, self._batch):
            h &= mask
            bits[h >> 3] |= 1 << (h & 7)
        digests = np.array([self._digest(cid) for cid in self._batch], dtype="S17")
        lines = np.fromiter(self._batch.values(), dtype=np.int64, count=len(self._batch))
        while self._runs and self._runs[-1][0].size <= digests.size:
            older, older_lines = self._runs.pop()
            digests, lines = np.concatenate((older, digests)), np.concatenate((older_lines, lines))
        order = np.argsort(digests, kind="stable")
        self._runs.append((digests[order], lines[order]))
        self._batch = {}
