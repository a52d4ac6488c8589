"""Review: a person drops unnatural questions before they enter the golden set, and says why.

With review on, a complete generation writes ``OUT.review.csv`` (for ``--out synth.jsonl``:
``synth.review.csv``) instead of the golden set: a row per question (``id``, ``kind``, ``question``,
``answer``, ``passages``: the labelled text, two columns to fill, ``decision`` (``keep``, the
default, or ``drop``) and ``why``, and ``copies``: the labelled text's terms the question repeats,
`ragbridge.lexical.copied_terms`, to spot a question that copies its passage). Open it in a
spreadsheet or an editor, mark what to drop with a reason, save it, and run the same command again:
the kept questions are written to ``OUT``, the dropped ones to ``OUT.dropped.jsonl`` as canonical
cases whose ``metadata.review`` holds the reason (what reviewers reject is worth keeping: it says
what the generator gets wrong).

A kept question whose ``question`` or ``answer`` cell was edited is written as edited (the answer is
its ``reference``), the generated wording kept in ``metadata.review.edited``. The other columns are
what the question was made from (its span labels are placed in the corpus): a change to them is an
error, as is an answer given to an unanswerable question or a question emptied.

`read_review` checks the file as any input is checked: a row whose id is not one of the questions,
a decision other than keep or drop, a drop without a reason, or a question missing from the file is
an error naming the line and the column; nothing is written then.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..formats.files import DatasetError, write_atomic
from ..lexical import copied_terms

__all__ = ["review_path", "dropped_path", "write_review", "read_review", "Review", "COLUMNS"]

COLUMNS = ("id", "kind", "question", "answer", "passages", "decision", "why")
#: what the file shows besides (read back by no one: an edit there changes nothing)
SHOWN = ("copies",)


def review_path(out: Path) -> Path:
    return Path(out).with_suffix(".review.csv")


def dropped_path(out: Path) -> Path:
    return Path(out).with_suffix(".dropped.jsonl")


@dataclass
class Review:
    """A finished review: the dropped questions' ids and why, and the kept ones' edits (by id:
    ``question`` and/or ``reference``, the new text)."""

    dropped: dict[str, str] = field(default_factory=dict)
    edits: dict[str, dict[str, str]] = field(default_factory=dict)


def _row(c: dict[str, Any]) -> list[str]:
    """The review row of a canonical record, decision ``keep``."""
    kind = ((c.get("metadata") or {}).get("synthetic") or {}).get("kind", "")
    labelled = (" | ".join(s.get("quote", "") for s in c.get("relevant_spans", ()))
                or "(none: unanswerable)")
    quoted = " ".join(s.get("quote", "") for s in c.get("relevant_spans", ()))
    return [c["id"], kind, c["question"], c.get("reference") or "", labelled, "keep", "",
            ", ".join(copied_terms(c["question"], quoted)) if quoted else ""]


def write_review(path: Path, cases: Sequence[dict[str, Any]]) -> None:
    """The review file of ``cases`` (canonical records), every decision ``keep``."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS + SHOWN)
    for c in cases:
        w.writerow(_row(c))
    write_atomic(path, buf.getvalue())


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def read_review(path: Path, cases: Sequence[dict[str, Any]]) -> Review:
    """The review of ``cases`` (the canonical records the file was written from): what is dropped and
    why, what is edited (`DatasetError` for a file that is not a finished review of them; see the
    module docstring)."""
    written = {c["id"]: _row(c) for c in cases}
    ids = list(written)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise DatasetError(f"cannot be read: {exc.strerror or exc}", path=path) from None
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or [h.strip().lower() for h in rows[0][:len(COLUMNS)]] != list(COLUMNS):
        raise DatasetError(f"the first line must be the columns {','.join(COLUMNS)}", path=path, line=1,
                           hint="keep the header the review file was written with")
    known = set(ids)
    seen: set[str] = set()
    review = Review()
    dropped = review.dropped
    for line, row in enumerate(rows[1:], 2):
        if not any(cell.strip() for cell in row):
            continue
        row = row + [""] * (len(COLUMNS) - len(row))
        cid, decision, why = row[0].strip(), row[5].strip().lower(), row[6].strip()
        if cid not in known:
            raise DatasetError(f"no generated question has the id {cid!r}", path=path, line=line, field="id",
                               hint="keep the ids as written")
        if cid in seen:
            raise DatasetError(f"question {cid!r} is listed twice", path=path, line=line, field="id")
        seen.add(cid)
        if decision not in ("keep", "drop", ""):
            raise DatasetError(f"must be keep or drop, got {row[5].strip()!r}", path=path, line=line,
                               field="decision")
        if decision == "drop":
            if not why:
                raise DatasetError(f"question {cid!r} is dropped without a reason", path=path, line=line,
                                   field="why", hint="say why in a few words: it is kept with the question")
            dropped[cid] = why
            continue
        was = written[cid]
        for col in (1, 4):
            if not _same(row[col], was[col]):
                raise DatasetError(f"the {COLUMNS[col]} of question {cid!r} cannot be changed here (it is "
                                   "what the question was made from)", path=path, line=line,
                                   field=COLUMNS[col],
                                   hint=f"put back {was[col][:80]!r}; drop the question to leave it out")
        edit = {}
        if not _same(row[2], was[2]):
            if not row[2].strip():
                raise DatasetError(f"question {cid!r} is empty", path=path, line=line, field="question",
                                   hint="write the question, or drop it")
            edit["question"] = " ".join(row[2].split())
        if not _same(row[3], was[3]):
            if was[1] == "unanswerable":
                raise DatasetError(f"question {cid!r} is unanswerable: it has no answer", path=path,
                                   line=line, field="answer",
                                   hint="leave the answer empty, or drop the question")
            if not row[3].strip():
                raise DatasetError(f"the answer of question {cid!r} is empty", path=path, line=line,
                                   field="answer", hint="write the answer, or drop the question")
            edit["reference"] = row[3].strip()
        if edit:
            review.edits[cid] = edit
    missing = [i for i in ids if i not in seen]
    if missing:
        raise DatasetError(f"{len(missing)} question(s) are missing from the file (first: {missing[0]!r})",
                           path=path, hint="keep a row per question; mark the ones to drop")
    return review
