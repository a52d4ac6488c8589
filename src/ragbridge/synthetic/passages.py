"""The passages questions are written from: the corpus cut at its paragraphs.

`cut_passages` cuts each document of a `~ragbridge.formats.corpus.Corpus` at blank lines. A heading
(a line starting with ``#``) joins the paragraph after it, a paragraph shorter than `MIN_CHARS` joins
the next one of its document, and a paragraph longer than `MAX_CHARS` is cut after the sentence end
that keeps it under that length. A passage is a stretch of its document as stored (``doc``,
``start``, ``end``, ``end`` exclusive; its ``text`` is ``document[start:end]``), so a quote found in
it is placed in the document by adding ``start``. A byte-order mark that a file starts with (`BOM`)
is in no passage: the document keeps it, so offsets count the characters of the file as stored, as
``ragbridge run --corpus`` counts them.

The same passages serve the weakness measures (`ragbridge.synthetic.weaknesses`): the BM25 rank of
a question's labelled passage is its rank among them, and a span label's passages are those it
overlaps (`Passages.covering`).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Iterable, Optional

from ..formats.corpus import Corpus

__all__ = ["Passage", "Passages", "cut_passages", "MIN_CHARS", "MAX_CHARS"]

MIN_CHARS = 120
MAX_CHARS = 1500
#: the byte-order mark a file may start with: not part of any passage
BOM = "\ufeff"

_BLANK = re.compile(r"\n[ \t\r\f\v]*\n\s*")
_SENTENCE_END = re.compile(r"[.!?][\"')\]]?\s+")


@dataclass(frozen=True)
class Passage:
    """One passage: where it is in its document, and its text."""

    doc: str
    start: int
    end: int
    text: str

    @property
    def key(self) -> str:
        """``doc@start-end``: names the passage in the work log and the cases' metadata."""
        return f"{self.doc}@{self.start}-{self.end}"


def _blocks(text: str) -> list[tuple[int, int]]:
    """The paragraphs of ``text``: (start, end) without surrounding white space."""
    out, at = [], 0
    for m in [*_BLANK.finditer(text), None]:
        end = m.start() if m is not None else len(text)
        chunk = text[at:end]
        lead = len(chunk) - len(chunk.lstrip().lstrip(BOM).lstrip())
        body = chunk.strip().lstrip(BOM).lstrip()
        if body:
            out.append((at + lead, at + lead + len(body)))
        if m is not None:
            at = m.end()
    return out


def _heading(text: str) -> bool:
    return all(line.lstrip().startswith("#") for line in text.splitlines() if line.strip())


def _split_long(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """``start:end`` cut after sentence ends into pieces of at most `MAX_CHARS` (a sentence longer than
    that stays whole)."""
    out = []
    while end - start > MAX_CHARS:
        cut = None
        for m in _SENTENCE_END.finditer(text, start, start + MAX_CHARS + 1):
            if m.start() + 1 > start:
                cut = m.start() + len(m.group().rstrip())
        if cut is None or cut <= start:
            break
        out.append((start, cut))
        start = cut
        while start < end and text[start].isspace():
            start += 1
    out.append((start, end))
    return out


def _document_passages(doc: str, text: str) -> list[Passage]:
    merged: list[list[int]] = []
    pending: Optional[list[int]] = None  # a heading or short paragraph waiting for the next one
    for start, end in _blocks(text):
        if pending is not None:
            start = pending[0]
            pending = None
        piece = text[start:end]
        if _heading(piece) or len(piece) < MIN_CHARS:
            pending = [start, end]
            continue
        merged.append([start, end])
    if pending is not None:  # a trailing heading or short paragraph joins the one before it
        if merged:
            merged[-1][1] = pending[1]
        else:
            merged.append(pending)
    out = []
    for start, end in merged:
        for s, e in _split_long(text, start, end):
            out.append(Passage(doc, s, e, text[s:e]))
    return out


class Passages(list):
    """The passages of a corpus, in document order, with lookups by place."""

    def __init__(self, items: Iterable[Passage]) -> None:
        super().__init__(items)
        self._starts: dict[str, list[int]] = {}
        self._index: dict[str, list[int]] = {}
        for i, p in enumerate(self):
            self._starts.setdefault(p.doc, []).append(p.start)
            self._index.setdefault(p.doc, []).append(i)

    def covering(self, doc: str, start: int, end: int) -> list[int]:
        """The indexes of the passages of ``doc`` that share a character with ``start:end``."""
        starts = self._starts.get(doc)
        if not starts:
            return []
        idx = self._index[doc]
        lo = max(0, bisect.bisect_right(starts, start) - 1)
        found = []
        for j in range(lo, len(starts)):
            p = self[idx[j]]
            if p.start >= end:
                break
            if p.end > start:
                found.append(idx[j])
        return found


def cut_passages(corpus: Corpus) -> Passages:
    """Every passage of ``corpus`` (see the module docstring), documents in name order."""
    out: list[Passage] = []
    for doc in sorted(corpus.texts):
        out.extend(_document_passages(doc, corpus.texts[doc]))
    return Passages(out)
