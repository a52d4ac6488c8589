"""Input checks: legal but suspicious input, one warning line per kind with the number of cases it
affects (`input_warnings` for cases in memory, `InputCheck` for a golden set read in batches)."""

from __future__ import annotations

import unicodedata
from itertools import repeat
from typing import Any, Optional, Sequence

from ..schema import Case
from .batches import CaseBatch
from .records import chunk_id_for_text

__all__ = ["input_warnings", "InputCheck"]


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

    def add_batch(self, batch: CaseBatch) -> None:
        columns = zip(batch.ids, batch.chunk_lists(), batch.chunk_texts())
        for i, (case_id, (ids, chunks, relevant), texts) in enumerate(columns):
            if chunks and type(chunks[0]) is not dict:  # `Chunk` objects: their canonical mappings
                chunks = batch.record(i)["contexts"]
            self.add(case_id, ids, chunks, relevant, texts)

    def add(self, case_id: str, ids: list[str], chunks: Optional[list[dict[str, Any]]],
            relevant: Optional[dict[str, int]], texts: Optional[list[str]] = None) -> None:
        """One case: its id, chunk ids, chunk mappings (None: chunks as columns, ``texts`` their
        texts or None) and labels."""
        if relevant and max(relevant.values()) <= 0:
            self.no_relevant += 1
        if not ids or not relevant or max(relevant.values()) <= 0:
            return
        self.labelled += 1
        sources = () if chunks is None else map(dict.get, chunks, repeat("source"))
        if not relevant.keys().isdisjoint(ids) or not relevant.keys().isdisjoint(sources):
            self.matching += 1
        elif self._derived(ids, chunks, texts):
            self.textual += 1
            self.first_textual = self.first_textual or case_id
        else:
            names = ids if chunks is None else [*ids, *(ch["source"] for ch in chunks if ch.get("source"))]
            near = _near_miss(relevant, names)
            if near is not None:
                self.near += 1
                self.first_near = self.first_near or (case_id, *near)

    @staticmethod
    def _derived(ids: list[str], chunks: Optional[list[dict[str, Any]]], texts: Optional[list[str]]) -> bool:
        """Whether every chunk was given as plain text: no source, its id derived from its text."""
        if chunks is not None:
            return all("source" not in ch and ch["id"] == chunk_id_for_text(ch.get("text", ""))
                       for ch in chunks)
        if texts is not None:
            return all(cid == chunk_id_for_text(text) for cid, text in zip(ids, texts))
        return all(cid == _NO_TEXT_ID for cid in ids)

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


