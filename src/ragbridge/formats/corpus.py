"""The corpus: the documents span labels and chunks point into, and locating text in them.

A corpus (``--corpus PATH``) is one of:

* a folder of text and markdown files (``.txt``, ``.text``, ``.md``, ``.markdown``, in subfolders
  too; names starting with ``.`` are skipped): each file is a document named by its path relative to
  the folder, with ``/`` (``billing/refunds.md``);
* one such file: a single document named by its file name;
* a JSONL file of ``{"doc": NAME, "text": TEXT}``, one document a line.

Texts are read as UTF-8 and kept as they are (line endings untouched), so a character offset counts
characters of the file as stored.

Locating (`Corpus.locate`): a text is found in its document exactly (the first occurrence), else
with white space collapsed on both sides (any run of white space matches any other, and the text's
own leading and trailing white space is dropped); its offsets are those of the matched characters in
the document as stored. Nothing fuzzier: a text that is not found is an error naming the case and the
chunk or label (`SpanPlacer`), never a silent non-match.

A chunking (``--chunks PATH``, `read_chunking`) is every chunk one chunker made of the corpus, placed
the same way: what ``precision_omega`` measures.

`SpanPlacer` checks and completes the span-labelled cases of a golden set, one canonical record at a
time, as the golden set is read: every chunk of such a case gets its ``doc``, ``start`` and ``end``
(located by its text where it has none), every quote its offsets, and offsets are checked against
the documents' lengths. Memory holds the corpus and the white-space indexes of the last
`NORMALISED_CACHE` documents that needed one, not the golden set.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from ..schema import Case, check_where
from .files import DatasetError, jsonl_lines

__all__ = ["Corpus", "read_corpus", "Chunking", "read_chunking", "SpanPlacer", "place_cases", "TEXT_SUFFIXES",
           "NORMALISED_CACHE", "chunk_doc"]

#: the suffixes of the files a corpus folder's documents are read from
TEXT_SUFFIXES = (".txt", ".text", ".md", ".markdown")
#: how many documents' white-space indexes are kept (each about 12 bytes a character)
NORMALISED_CACHE = 64

_SPACES = np.array(sorted(ord(c) for c in map(chr, range(0x3001)) if c.isspace()), dtype=np.uint32)


def _collapse(text: str) -> tuple[str, np.ndarray]:
    """``text`` with every run of white space as one space, and for each of its characters the
    offset of the character it stands for in ``text``."""
    if not text:
        return "", np.empty(0, dtype=np.int64)
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    space = np.isin(codes, _SPACES)
    keep = ~space
    keep[1:] |= space[1:] & ~space[:-1]
    keep[0] = True
    kept = np.where(space, np.uint32(32), codes)[keep]
    return kept.tobytes().decode("utf-32-le"), np.flatnonzero(keep)


class Corpus:
    """Documents by name (``texts``), with `locate` to find a text in one of them."""

    def __init__(self, texts: dict[str, str], path: Optional[str | Path] = None) -> None:
        self.texts = texts
        self.path = str(path) if path is not None else None
        self._collapsed: OrderedDict[str, tuple[str, np.ndarray]] = OrderedDict()

    def __contains__(self, doc: object) -> bool:
        return doc in self.texts

    def __len__(self) -> int:
        return len(self.texts)

    def length(self, doc: str) -> int:
        return len(self.texts[doc])

    def _collapsed_text(self, doc: str) -> tuple[str, np.ndarray]:
        hit = self._collapsed.get(doc)
        if hit is None:
            hit = self._collapsed[doc] = _collapse(self.texts[doc])
            if len(self._collapsed) > NORMALISED_CACHE:
                self._collapsed.popitem(last=False)
        else:
            self._collapsed.move_to_end(doc)
        return hit

    def locate(self, doc: str, text: str) -> Optional[tuple[int, int, bool, bool]]:
        """Where ``text`` is in document ``doc``: ``(start, end, exact, again)`` (``end`` exclusive;
        ``exact``: found as it is, else with white space collapsed; ``again``: it occurs a second time,
        and the first occurrence was taken), or None when it is not there."""
        body = self.texts[doc]
        at = body.find(text) if text else -1
        if at >= 0:
            return at, at + len(text), True, body.find(text, at + 1) >= 0
        words = " ".join(text.split())
        if not words:
            return None
        collapsed, offsets = self._collapsed_text(doc)
        at = collapsed.find(words)
        if at < 0:
            return None
        return (int(offsets[at]), int(offsets[at + len(words) - 1]) + 1, False,
                collapsed.find(words, at + 1) >= 0)

    def same_text(self, doc: str, start: int, end: int, text: str) -> bool:
        """Whether ``text`` is what the document holds at ``start:end`` (white space collapsed)."""
        held = self.texts[doc][start:end]
        return held == text or held.split() == text.split()

    def names(self, n: int = 3) -> str:
        """A few document names, for an error that says what the corpus holds."""
        some = sorted(self.texts)[:n]
        return ", ".join(map(repr, some)) + (", ..." if len(self.texts) > n else "")


def read_corpus(path: str | Path) -> Corpus:
    """The corpus at ``path`` (see the module docstring); `DatasetError` for anything wrong."""
    path = Path(path)
    if not path.exists():
        raise DatasetError("no such file or folder", path=path, hint="--corpus names the documents: a folder "
                           "of text or markdown files, or a JSONL file of {\"doc\", \"text\"}")
    if path.is_dir():
        texts = {name: _read_text(file) for name, file in _folder_files(path)}
        if not texts:
            raise DatasetError("holds no document", path=path,
                               hint="a corpus folder holds " + ", ".join(TEXT_SUFFIXES) + " files")
        return Corpus(texts, path)
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        return Corpus(_read_jsonl(path), path)
    if path.suffix.lower() in TEXT_SUFFIXES:
        return Corpus({path.name: _read_text(path)}, path)
    raise DatasetError("is not a corpus", path=path, hint="give a folder of text or markdown files, one such "
                       "file, or a .jsonl file of {\"doc\", \"text\"}")


def _folder_files(folder: Path) -> Iterator[tuple[str, Path]]:
    for file in sorted(folder.rglob("*")):
        rel = file.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts) or not file.is_file():
            continue
        if file.suffix.lower() in TEXT_SUFFIXES:
            yield rel.as_posix(), file


def _read_text(file: Path) -> str:
    try:
        return file.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"is not UTF-8 text (byte {exc.start})", path=file,
                           hint="save the document as UTF-8") from None


def _read_jsonl(path: Path) -> dict[str, str]:
    texts: dict[str, str] = {}
    first: dict[str, int] = {}
    for line, rec in jsonl_lines(path):
        if not isinstance(rec, dict):
            raise DatasetError('each line must be a JSON object {"doc": NAME, "text": TEXT}', path=path,
                               line=line)
        extra = sorted(set(rec) - {"doc", "text"})
        if extra:
            raise DatasetError(f"unknown field(s): {', '.join(extra)}", path=path, line=line, field=extra[0],
                               hint='a corpus line is {"doc": NAME, "text": TEXT}')
        for name in ("doc", "text"):
            if not isinstance(rec.get(name), str):
                raise DatasetError(f"must be a string, got {json.dumps(rec.get(name))[:40]}", path=path,
                                   line=line, field=name)
        doc = rec["doc"]
        if not doc.strip():
            raise DatasetError("must not be empty", path=path, line=line, field="doc")
        if doc in first:
            raise DatasetError(f"document {doc!r} given twice (first at line {first[doc]})", path=path,
                               line=line, field="doc", hint="document names must be unique")
        first[doc] = line
        texts[doc] = rec["text"]
    if not texts:
        raise DatasetError("holds no document", path=path)
    return texts


class Chunking:
    """Every chunk of one chunking of a corpus, by document: sorted starts and their ends (what
    ``precision_omega`` measures, `ragbridge.native.spans`). `read_chunking` reads one from a file;
    `from_places` builds one from ``(doc, start, end)`` triples; ``path`` says where it was read
    from."""

    def __init__(self, by_doc: dict[str, tuple[np.ndarray, np.ndarray]], n_chunks: int,
                 path: Optional[str] = None) -> None:
        self.by_doc = by_doc
        self.n_chunks = n_chunks
        self.path = path
        self._longest = {doc: int((e - s).max()) if s.size else 0 for doc, (s, e) in by_doc.items()}

    @classmethod
    def from_places(cls, places: Sequence[tuple[str, int, int]], path: Optional[str] = None) -> "Chunking":
        grouped: dict[str, tuple[list[int], list[int]]] = {}
        for doc, start, end in places:
            starts, ends = grouped.setdefault(doc, ([], []))
            starts.append(start)
            ends.append(end)
        by_doc = {}
        for doc, (starts, ends) in grouped.items():
            s, e = np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)
            order = np.lexsort((e, s))
            by_doc[doc] = (s[order], e[order])
        return cls(by_doc, len(places), path)

    def overlapping(self, doc: str, start: int, end: int, touching: bool) -> tuple[np.ndarray, np.ndarray]:
        """The chunks of ``doc`` that share a character with ``start:end`` (``touching``: or only
        touch it), as ``(starts, ends)``."""
        found = self.by_doc.get(doc)
        if found is None:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        s, e = found
        lo = np.searchsorted(s, start - self._longest[doc], "left")
        hi = np.searchsorted(s, end, "right" if touching else "left")
        s, e = s[lo:hi], e[lo:hi]
        keep = e >= start if touching else e > start
        return s[keep], e[keep]


def read_chunking(path: str | Path, corpus: Optional[Corpus]) -> Chunking:
    """The chunking in the JSONL file ``path``: one chunk a line, as a golden set's chunks are written
    (``{"id", "text", "doc", "start", "end", "source"}``, each optional but the place: ``doc``,
    ``start`` and ``end``, or the text and its document, located in ``corpus`` as a retrieved chunk
    is). `DatasetError` naming the line for a chunk that cannot be placed."""
    path = Path(path)
    if not path.exists():
        raise DatasetError("no such file", path=path,
                           hint="--chunks names the chunking: a JSONL file, one chunk a line")
    places: list[tuple[str, int, int]] = []
    for line, rec in jsonl_lines(path):
        if not isinstance(rec, dict):
            raise DatasetError("each line must be a JSON object (a chunk)", path=path, line=line)
        extra = sorted(set(rec) - {"id", "text", "doc", "start", "end", "source", "score"})
        if extra:
            raise DatasetError(f"unknown field(s): {', '.join(extra)}", path=path, line=line, field=extra[0],
                               hint="a chunk has id, text, doc, start, end, source")
        places.append(_place_chunk(rec, corpus, path, line))
    if not places:
        raise DatasetError("holds no chunk", path=path)
    return Chunking.from_places(places, str(path))


def _place_chunk(rec: dict[str, Any], corpus: Optional[Corpus], path: Path,
                 line: int) -> tuple[str, int, int]:
    what = f"chunk {rec['id']!r}" if "id" in rec else "the chunk"
    start, end = rec.get("start"), rec.get("end")
    if start is not None or end is not None:
        try:
            check_where(rec.get("doc"), start, end, "chunk")
            for name, v in (("start", start), ("end", end)):
                if type(v) is not int or v < 0:
                    raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
        except ValueError as exc:
            raise DatasetError(str(exc), path=path, line=line) from None
        if corpus is not None and (rec["doc"] not in corpus or end > corpus.length(rec["doc"])):
            raise DatasetError(f"{what} does not fit in the corpus: " + (
                f"no document {rec['doc']!r}" if rec["doc"] not in corpus else
                f"{rec['doc']!r} has {corpus.length(rec['doc'])} characters, it ends at {end}"),
                path=path, line=line)
        return rec["doc"], start, end
    if corpus is None:
        raise DatasetError(f"{what} has no doc, start and end", path=path, line=line,
                           hint="pass --corpus to locate chunks by their text")
    doc = chunk_doc(rec, corpus)
    if doc is None or doc not in corpus:
        raise DatasetError(f"{what} names no document of the corpus ({len(corpus)} documents: "
                           f"{corpus.names()})", path=path, line=line, field="doc")
    if not isinstance(rec.get("text"), str) or not rec["text"].strip():
        raise DatasetError(f"{what} has no text to locate it by", path=path, line=line, field="text")
    found = corpus.locate(doc, rec["text"])
    if found is None:
        raise DatasetError(f"{what}: its text is not in {doc!r} (not even with white space collapsed)",
                           path=path, line=line, field="text")
    return doc, found[0], found[1]


def chunk_doc(chunk: dict[str, Any], corpus: Corpus) -> Optional[str]:
    """The document a chunk comes from: its ``doc``, else its ``source`` when that names a document
    of the corpus, else the part of its ``source`` before ``#`` (``refunds.md#window``) when that
    does; None when none of these is known."""
    if chunk.get("doc") is not None:
        return chunk["doc"]
    source = chunk.get("source")
    if source is None:
        return None
    if source in corpus:
        return source
    head = source.partition("#")[0]
    return head if head in corpus else None


def _chunk(chunk: dict[str, Any], doc: str, start: int, end: int) -> dict[str, Any]:
    """The chunk mapping with its place (in place: ``doc``, ``start`` and ``end`` are a canonical
    chunk's last keys, so its key order stays canonical)."""
    chunk.update(doc=doc, start=start, end=end)
    return chunk


def _span(span: dict[str, Any], start: int, end: int) -> dict[str, Any]:
    out = {"doc": span["doc"], "start": start, "end": end}
    out.update((k, span[k]) for k in ("quote", "grade") if k in span)
    return out


class SpanPlacer:
    """Checks and completes span-labelled records (see the module docstring), counting what is legal
    but suspicious for `warnings`. ``corpus`` may be None: then every chunk and label of a
    span-labelled case must carry its offsets already."""

    def __init__(self, corpus: Optional[Corpus]) -> None:
        self.corpus = corpus
        self.cases = 0  # span-labelled cases
        self.located = 0  # chunks and quotes located by their text
        self.collapsed = 0  # of which found only with white space collapsed
        self.repeated = 0  # of which the text occurs more than once in its document
        self.first_repeated: Optional[str] = None
        self.differing = 0  # chunks whose text is not the document's at their offsets
        self.first_differing: Optional[str] = None

    def place(self, record: dict[str, Any], chunk_ids: Optional[list[str]] = None,
              path: Any = None, line: Optional[int] = None, unit: str = "line") -> dict[str, Any]:
        """``record`` (a canonical record) with its chunks and span labels placed, if it has span labels
        (else ``record`` itself). ``chunk_ids``: the record's chunks when they are ids alone (an
        `~ragbridge.formats.plain_records.ColumnRecord`'s). `DatasetError` at ``path``/``line`` for what
        cannot be placed."""
        spans = record.get("relevant_spans")
        if not spans:
            return record
        self.cases += 1
        case_id = record["id"]

        def error(field: str, message: str, hint: Optional[str] = None) -> DatasetError:
            return DatasetError(f"case {case_id!r}: {message}", path=path, line=line, field=field, hint=hint,
                                unit=unit)

        corpus = self.corpus
        placed_spans = []
        for i, span in enumerate(spans):
            field = f"relevant_spans[{i}]"
            doc = span["doc"]
            if corpus is not None and doc not in corpus:
                raise error(field, f"span label {i} names document {doc!r}, which is not in the corpus "
                                   f"({len(corpus)} documents: {corpus.names()})")
            if span.get("start") is not None:
                if corpus is not None and span["end"] > corpus.length(doc):
                    raise error(field, f"span label {i} ends at {span['end']}, past the end of {doc!r} "
                                       f"({corpus.length(doc)} characters)")
                placed_spans.append(span)
                continue
            if corpus is None:
                raise error(field, f"span label {i} gives a quote but no start and end",
                            "pass --corpus (the documents) to locate quotes, or give start and end")
            where = self._locate(doc, span["quote"], f"case {case_id!r}, span label {i}")
            if where is None:
                raise error(field, f"the quote of span label {i} is not in {doc!r} (not even with white "
                                   "space collapsed)",
                            "quote the document's text exactly, or give start and end")
            placed_spans.append(_span(span, *where))
        record["relevant_spans"] = placed_spans

        if chunk_ids is not None:
            raise error("contexts", f"its chunks are ids alone ({chunk_ids[0]!r}, ...), so they cannot be "
                                    "placed against its span labels",
                        "give each chunk doc, start and end, or its text and doc (with --corpus)")
        chunks = record.get("contexts", [])
        placed = []
        for i, chunk in enumerate(chunks):
            field = f"contexts[{i}]"
            what = f"chunk {chunk['id']!r} (contexts[{i}])"
            if chunk.get("start") is not None:
                doc = chunk["doc"]
                if corpus is not None:
                    if doc not in corpus:
                        raise error(field, f"{what} names document {doc!r}, which is not in the corpus "
                                           f"({len(corpus)} documents: {corpus.names()})")
                    if chunk["end"] > corpus.length(doc):
                        raise error(field, f"{what} ends at {chunk['end']}, past the end of {doc!r} "
                                           f"({corpus.length(doc)} characters)")
                    text = chunk.get("text")
                    if text and not corpus.same_text(doc, chunk["start"], chunk["end"], text):
                        self.differing += 1
                        self.first_differing = self.first_differing or f"case {case_id!r}, {what}"
                placed.append(chunk)
                continue
            if corpus is None:
                raise error(field, f"{what} has no start and end",
                            "pass --corpus (the documents) to locate chunks by their text, or give each "
                            "chunk doc, start and end")
            doc = chunk_doc(chunk, corpus)
            if doc is None:
                named = chunk.get("doc") or chunk.get("source")
                raise error(field, f"{what} " + (f"names {named!r}, which is not a document of the corpus "
                                                 f"({len(corpus)} documents: {corpus.names()})" if named else
                                                 "says no document (neither doc nor source)"),
                            "give each chunk doc, the name of its document in the corpus")
            if doc not in corpus:
                raise error(field, f"{what} names document {doc!r}, which is not in the corpus "
                                   f"({len(corpus)} documents: {corpus.names()})")
            if not chunk.get("text", "").strip():
                raise error(field, f"{what} has no text to locate it by",
                            "give its text, or doc, start and end")
            where = self._locate(doc, chunk["text"], f"case {case_id!r}, {what}")
            if where is None:
                raise error(field, f"{what}: its text is not in {doc!r} (not even with white space "
                                   "collapsed)", "check the chunk's doc, or give its start and end")
            placed.append(_chunk(chunk, doc, *where))
        if chunks:
            record["contexts"] = placed
        return record

    def _locate(self, doc: str, text: str, what: str) -> Optional[tuple[int, int]]:
        found = self.corpus.locate(doc, text)
        if found is None:
            return None
        start, end, exact, again = found
        self.located += 1
        self.collapsed += not exact
        if again:
            self.repeated += 1
            self.first_repeated = self.first_repeated or what
        return start, end

    def warnings(self) -> list[str]:
        """One line per kind of legal but suspicious placement, with its count."""
        out = []
        if self.repeated:
            out.append(f"{self.repeated} chunk(s) or quote(s) of span-labelled cases have text that occurs "
                       f"more than once in their document and were placed at its first occurrence (first: "
                       f"{self.first_repeated}); give them start and end to place them elsewhere")
        if self.differing:
            out.append(f"{self.differing} chunk(s) of span-labelled cases have text that is not their "
                       f"document's text at their start and end (first: {self.first_differing}); their "
                       "start and end are used")
        return out


def place_cases(cases: Sequence[Case], corpus: Optional[Corpus],
                placer: Optional[SpanPlacer] = None) -> list[Case]:
    """The cases with every chunk and label of the span-labelled ones placed against ``corpus``
    (`SpanPlacer`; `DatasetError` naming the case's position, the case and the chunk for what cannot
    be placed); the others as they are."""
    from .plain_records import case_record

    placer = placer or SpanPlacer(corpus)
    return [Case.model_validate(placer.place(case_record(c), line=i, unit="case")) if c.relevant_spans else c
            for i, c in enumerate(cases, 1)]
