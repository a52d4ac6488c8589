"""Input checks: legal but suspicious input, one warning line per kind with the number of cases it
affects and the first of them (`input_warnings` for cases in memory, `InputCheck` for a golden set
read in batches). Each line is an `InputWarning`, which says which metrics it concerns, so that a run
reports only those that bear on what it computes (`InputWarning.concerns`, `warnings_for`)."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from itertools import chain, compress, count, repeat
from operator import itemgetter
from typing import Any, Iterable, Optional, Sequence

from ..schema import Case
from .batches import CaseBatch
from .records import chunk_id_for_text

__all__ = ["input_warnings", "InputCheck", "InputWarning", "RANKING", "RETRIEVAL", "JUDGED", "warnings_for"]

#: what a warning concerns: the ranking metrics (labels and chunk ids), every retrieval metric
#: computed from labels (ranking and span metrics), the judged metrics, or (`EVERY`) any run
RANKING, RETRIEVAL, JUDGED = "ranking", "retrieval", "judged"
#: a warning that bears on every run, whatever it computes (tags: the summaries by tag)
EVERY = "every"
#: how many case ids a warning names
SHOWN = 3


@dataclass(frozen=True)
class InputWarning:
    """One warning line: ``text``; ``concerns`` (`RANKING`, `RETRIEVAL`, `JUDGED` or `EVERY`): the
    metrics it bears on; ``data``: it flags the data itself (a run of it aside), as ``convert`` reports."""

    text: str
    concerns: str = RANKING
    data: bool = True

    def __str__(self) -> str:
        return self.text


def warnings_for(warnings: Iterable[InputWarning], ranking: bool, spans: bool, judged: bool) -> list[str]:
    """The lines of ``warnings`` that bear on a run that computes ranking metrics (``ranking``), span
    metrics (``spans``) and judged ones (``judged``)."""
    wanted = {RANKING: ranking, RETRIEVAL: ranking or spans, JUDGED: judged}  # EVERY: always
    return [w.text for w in warnings if wanted.get(w.concerns, True)]


def input_warnings(cases: Sequence[Case]) -> list[str]:
    """One line per kind of legal but suspicious input in ``cases`` (`InputCheck`'s, those that flag
    the data itself)."""
    check = InputCheck()
    check.add_batch(CaseBatch.of_cases(cases))
    return [w.text for w in check.warnings() if w.data]


_NO_TEXT_ID = chunk_id_for_text("")  # the id a chunk given as empty text would get
#: what may follow a label at the start of a chunk id that the label names the section of
_SEPARATORS = frozenset("-_#:/.|@ ")

# why a labelled case's labels match no retrieved chunk, in the order the causes are looked for
_TEXTUAL, _NEAR, _PREFIX, _MISSED = "textual", "near", "prefix", "missed"


def _shown(ids: list[str], n: int) -> str:
    return ", ".join(map(repr, ids)) + (", ..." if n > len(ids) else "")


class InputCheck:
    """`input_warnings`, counted one canonical record at a time (for a golden set read in batches).

    The kinds: labelled cases (a label, by id or span, of grade >= 1) in which no retrieved chunk
    matches a label, so that every ranking metric of the case is 0, each counted under the first
    cause found: the chunks were given as plain text (their ids are derived from the text, they
    have no ``source``); a label differs from a chunk's id or source only in letter case or Unicode
    compatibility form (``Doc#A`` and ``doc#a``); a label is the beginning of a chunk's id
    (``refunds.md#window`` and ``refunds.md#window-1``: labels that name sections or documents,
    which match a chunk only through its ``source``); or none (retrieval missed every labelled
    chunk), a line of its own that describes what a run computes rather than the data, unless no
    labelled case matches at all. And cases whose labels all have grade 0 (their recall, MRR, nDCG
    and MAP are undefined, where trec_eval averages them as 0: ``--no-relevant zero``); chunk ids
    repeated within a case (dropped before ranking); cases whose question is empty (the judged
    metrics skip them); cases with a tag holding a comma (a table's ``"billing, real"``, one tag);
    labelled cases that give no retrieved chunks at all (no ``contexts`` field: their ranking
    metrics are undefined, where an empty list, a retriever that returned nothing, scores 0). A
    warning, not an error: the same cases are good input for other metrics.
    """

    def __init__(self) -> None:
        self.labelled = 0
        self.matching = 0
        # per cause of a labelled case no chunk matches: [cases, first case ids, first (label, chunk)]
        self.missed: dict[str, list] = {}
        self.no_relevant = 0  # labelled, but every grade 0
        self.first_no_relevant: list[str] = []
        self.repeated_ids = 0  # chunk ids repeated within a case
        self.repeated_cases: list[Any] = [0, []]  # cases with a repeat, the first ids
        self.blank_questions: list[Any] = [0, []]
        self.no_contexts: list[Any] = [0, []]  # labelled cases that give no retrieved chunks
        self.retrieved_none = 0  # labelled cases whose retriever returned nothing (contexts: [])
        self.comma_tags: list[Any] = [0, []]  # cases with a tag that holds a comma
        self.comma_tag = ""

    def add_batch(self, batch: CaseBatch) -> None:
        whole = batch.ranked_rows()
        left = self._ranked_at_once(batch, *whole) if whole is not None else None
        rest = None  # each case's chunk texts, span labels and whether it gives chunks, once needed
        columns = zip(count(), batch.ids, batch.chunk_rows(), batch.questions())
        if left is not None:  # the cases counted at once left out
            columns = compress(columns, left)
        for i, case_id, (ids, chunks, relevant, ranked), question in columns:
            if ranked is None or not self._ranked(case_id, relevant, ranked, question):
                if rest is None:
                    rest = list(zip(batch.chunk_texts(), batch.span_lists(), batch.contexts_given()))
                texts, spans, given = rest[i]
                if (chunks and type(chunks[0]) is not dict) or (spans and type(spans[0]) is not dict):
                    record = batch.record(i)  # `Chunk` and `Span` objects: their canonical mappings
                    chunks, spans = record.get("contexts", []), record.get("relevant_spans")
                self.add(case_id, ids, chunks, relevant, texts, spans, question, given, ranked)
        self._tags(batch)

    def _tags(self, batch: CaseBatch) -> None:
        """Count the cases of ``batch`` with a tag that holds a comma."""
        ids = None
        for i in batch.having("tags"):
            for tag in batch.tags(i):
                if "," in tag:
                    if not self.comma_tags[0]:
                        self.comma_tag = tag
                    ids = batch.ids if ids is None else ids
                    _count(self.comma_tags, ids[i])
                    break

    def _ranked_at_once(self, batch: CaseBatch, rels: list, ranked: list) -> Optional[list[bool]]:
        """`_ranked` of the cases of a batch whose every case is ranked (``rels`` and ``ranked``:
        `CaseBatch.ranked_rows`) and no chunk id repeats, at once: the cases it takes (chunks given, a
        question, no labels or a label of grade >= 1 matched) counted, and per case whether it is left
        to count (True: one it does not take); None, having counted nothing, where an id repeats
        (the repeats are counted case by case, in order)."""
        import numpy as np

        if any(map(itemgetter(1), ranked)):
            return None
        n = len(ranked)
        ranks = list(map(itemgetter(2), ranked))
        sizes = np.fromiter(map(len, ranks), dtype=np.int64, count=n)
        taken = np.fromiter(map(itemgetter(0), ranked), dtype=bool, count=n)
        taken &= np.fromiter(map(bool, map(str.strip, batch.questions())), dtype=bool, count=n)
        labelled = sizes > 0
        if labelled.any():
            grades = np.fromiter(chain.from_iterable(map(dict.values, filter(None, rels))), dtype=np.int64)
            at = np.fromiter(chain.from_iterable(ranks), dtype=np.int64)
            owner = np.repeat(np.arange(n), sizes)
            matched = np.bincount(owner[(grades > 0) & (at > 0)], minlength=n) > 0
            taken &= matched | ~labelled
        k = int((taken & labelled).sum())
        self.labelled += k
        self.matching += k
        return (~taken).tolist()

    def add(self, case_id: str, ids: list[str], chunks: Optional[list[dict[str, Any]]],
            relevant: Optional[dict[str, int]], texts: Optional[list[str]] = None,
            spans: Optional[list[dict[str, Any]]] = None, question: str = "?", given: bool = True,
            ranked: Optional[tuple[int, int, list[int]]] = None) -> None:
        """One case: its id, chunk ids, chunk mappings (None: chunks as columns, ``texts`` their
        texts or None), labels, span labels (mappings), question, and whether it gives its retrieved
        chunks at all (``given``: `Case.contexts_given`). With ``ranked`` (`CaseBatch.chunk_rows`'),
        ``ids`` is a string of them joined by line breaks, read through ``ranked`` (split only for a
        labelled case no chunk matches)."""
        if not question.strip():
            _count(self.blank_questions, case_id)
        if not given and ((relevant and max(relevant.values()) > 0)
                          or (spans and any(s.get("grade", 1) > 0 for s in spans))):
            _count(self.no_contexts, case_id)
            return
        if ranked is not None:
            n_ids, repeats, ranks = ranked
            idset = None
        else:
            idset = set(ids)
            n_ids, repeats = len(ids), len(ids) - len(idset)
        if n_ids:
            if repeats:
                self.repeated_ids += repeats
                _count(self.repeated_cases, case_id)
        graded = bool(relevant) and max(relevant.values()) > 0
        spanned = bool(spans) and any(s.get("grade", 1) > 0 for s in spans)
        if relevant and not graded and not spanned:
            self.no_relevant += 1
            if len(self.first_no_relevant) < SHOWN:
                self.first_no_relevant.append(case_id)
        if not (graded or spanned):
            return
        if not n_ids:
            self.retrieved_none += 1  # labelled, its retriever returned nothing: a real 0
            return
        self.labelled += 1
        if not graded:
            labels = set()
        elif min(relevant.values()) > 0:  # the common case: every label relevant, no set to build
            labels = relevant.keys()
        else:
            labels = {k for k, g in relevant.items() if g > 0}
        if ranked is not None:  # ids joined: a label of grade >= 1 ranked among them matches
            if any(r and g > 0 for r, g in zip(ranks, relevant.values())):
                self.matching += 1
                return
            ids = ids.split("\n")
        else:
            sources = () if chunks is None else map(dict.get, chunks, repeat("source"))
            if (labels and (not labels.isdisjoint(idset) or not labels.isdisjoint(sources))) or (
                    spanned and chunks is not None and _span_overlap(spans, chunks)):
                self.matching += 1
                return
        cause, pair = _MISSED, None
        if self._derived(ids, chunks, texts):
            cause = _TEXTUAL
        elif labels:
            names = ids if chunks is None else [*ids, *(ch["source"] for ch in chunks if ch.get("source"))]
            pair = _near_miss(labels, names)
            if pair is not None:
                cause = _NEAR
            else:
                pair = _prefix(labels, ids)
                cause = _PREFIX if pair is not None else _MISSED
        entry = self.missed.setdefault(cause, [0, [], pair])
        _count(entry, case_id)

    def _ranked(self, case_id: str, relevant: Optional[dict[str, int]], ranked: tuple[int, int, list[int]],
                question: str) -> bool:
        """`add` of a case whose chunks are ids alone (``ranked``: `CaseBatch.chunk_rows`'), in the
        common outcomes (no labels, or a label matched); False, having counted nothing, for the
        others, which `add` counts."""
        n_ids, repeats, ranks = ranked
        if not n_ids or not question.strip():
            return False
        if relevant:
            if max(relevant.values()) <= 0 or not any(r and g > 0 for r, g in zip(ranks, relevant.values())):
                return False
            self.labelled += 1
            self.matching += 1
        if repeats:
            self.repeated_ids += repeats
            _count(self.repeated_cases, case_id)
        return True

    @staticmethod
    def _derived(ids: list[str], chunks: Optional[list[dict[str, Any]]], texts: Optional[list[str]]) -> bool:
        """Whether every chunk was given as plain text: no source, its id derived from its text."""
        if chunks is not None:
            return all("source" not in ch and ch["id"] == chunk_id_for_text(ch.get("text", ""))
                       for ch in chunks)
        if texts is not None:
            return all(cid == chunk_id_for_text(text) for cid, text in zip(ids, texts))
        return all(cid == _NO_TEXT_ID for cid in ids)

    def warnings(self) -> list[InputWarning]:
        out = [w for w in (self._unmatched(c) for c in (_TEXTUAL, _NEAR, _PREFIX, _MISSED)) if w]
        n, first = self.no_contexts
        if n:
            labelled = n + self.labelled + self.retrieved_none
            out.insert(0, InputWarning(
                f"{n:,} of {labelled:,} case(s) with relevance labels give no retrieved chunks (no "
                f"'contexts' field: {_shown(first, n)}), so there is no ranking to measure: their "
                "ranking metrics are undefined, not 0; give each case the chunks its retriever returned, "
                "best first ('contexts': [] for a retriever that returned none)", concerns=RETRIEVAL,
                data=False))  # a ground-truth set is good data: it is a run of it that lacks them
        if self.no_relevant:
            out.append(InputWarning(
                f"{self.no_relevant} case(s) have relevance labels but none with grade >= 1 (first: "
                f"{_shown(self.first_no_relevant, self.no_relevant)}): their recall, MRR, nDCG and MAP "
                "are undefined and left out of the means (trec_eval counts such a query as 0: run with "
                "--no-relevant zero for its mean)"))
        n, first = self.repeated_cases
        if n:
            out.append(InputWarning(
                f"{self.repeated_ids:,} repeated chunk id(s) in {n:,} case(s) ({_shown(first, n)}) are "
                "dropped before ranking: a chunk counts at its first rank", data=False))
        n, first = self.comma_tags
        if n:
            parts = [p.strip() for p in self.comma_tag.split(",") if p.strip()]
            out.append(InputWarning(
                f"{n:,} case(s) have a tag holding a comma ({self.comma_tag!r} in {_shown(first, n)}): a tag "
                f"is one name, so such a case is in no slice of {' or '.join(map(repr, parts[:3]))}; give "
                f"tags as a list ({json.dumps(parts[:3], ensure_ascii=False)}), or in a table cell "
                f"separated by '|' ({'|'.join(parts[:3])})", concerns=EVERY))
        n, first = self.blank_questions
        if n:
            out.append(InputWarning(
                f"{n:,} case(s) have an empty question ({_shown(first, n)}): the judged metrics skip them "
                "(undefined), the ranking metrics and answer checks do not read it; give each case its "
                "question", concerns=EVERY))
        return out

    def _unmatched(self, cause: str) -> Optional[InputWarning]:
        if cause not in self.missed:
            return None
        n, first, pair = self.missed[cause]
        head = (f"{n:,} of {self.labelled:,} case(s) with relevance labels have no retrieved chunk that "
                f"matches a label, so their ranking metrics are 0 ({_shown(first, n)})")
        if cause == _TEXTUAL:
            why = ("their chunks are given as plain text (no id, no source), so no chunk can match a "
                   "label; give each chunk the id or source its label names")
        elif cause == _NEAR:
            why = (f"a label differs from a chunk's id or source only in letter case or Unicode form "
                   f"(label {pair[0]!r}, chunk {pair[1]!r}); ids are compared exactly: spell them alike")
        elif cause == _PREFIX:
            why = (f"their labels are the beginnings of chunk ids (label {pair[0]!r}, chunk {pair[1]!r}), as "
                   "sections or documents are: a label matches a chunk's id, or else its 'source'; give "
                   "each chunk the section or document it comes from as 'source'")
        elif not self.matching:
            why = ("in none of the cases does a chunk's id or source match a label: check that "
                   "'relevant' names chunk ids or sources as 'contexts' gives them")
        else:
            return InputWarning(head + ": retrieval found none of their labelled chunks", data=False)
        return InputWarning(f"{head}: {why}")


def _count(entry: list, case_id: str) -> None:
    entry[0] += 1
    if len(entry[1]) < SHOWN:
        entry[1].append(case_id)


def _span_overlap(spans: list[dict[str, Any]], chunks: list[dict[str, Any]]) -> bool:
    """Whether a chunk shares a character with a span label of grade >= 1 (both placed): the span
    rule may ask for more overlap (``--span-min-overlap``), never for less."""
    placed = [(s["doc"], s["start"], s["end"]) for s in spans
              if s.get("grade", 1) > 0 and s.get("start") is not None]
    for ch in chunks:
        doc, start, end = ch.get("doc"), ch.get("start"), ch.get("end")
        if start is not None and any(d == doc and start < e and s < end for d, s, e in placed):
            return True
    return False


def _fold(text: str) -> str:
    """``text`` without the differences ids are not told apart by at a glance: letter case and
    Unicode compatibility forms (full-width letters, ligatures)."""
    return text.lower() if text.isascii() else unicodedata.normalize("NFKC", text).casefold()


def _near_miss(labels: set[str], names: list[str]) -> Optional[tuple[str, str]]:
    """A label and a chunk id or source it equals once folded (`_fold`), if any: the names of the
    chunks folded at once, joined by a line break (no id holds one)."""
    folded = "\n" + _fold("\n".join(names)) + "\n"
    for label in sorted(labels):
        if "\n" + _fold(label) + "\n" in folded:
            return label, next((n for n in names if _fold(n) == _fold(label)), label)
    return None


def _prefix(labels: set[str], ids: list[str]) -> Optional[tuple[str, str]]:
    """A label and a chunk id that begins with it and goes on after a separator (``-``, ``#``, ``/``,
    ...), if any: ``refunds.md#window`` and ``refunds.md#window-1``."""
    joined = "\n" + "\n".join(ids) + "\n"  # no id holds a line break: each id after one
    for label in sorted(labels):
        if "\n" in label:
            continue
        at = joined.find("\n" + label)
        while at >= 0:
            after = at + 1 + len(label)
            if joined[after:after + 1] in _SEPARATORS:
                return label, joined[at + 1:joined.index("\n", after)]
            at = joined.find("\n" + label, at + 1)
    return None
