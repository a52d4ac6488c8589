"""Review: a person drops unnatural questions before they enter the golden set, and says why.

With review on, a complete generation writes ``OUT.review.csv`` (for ``--out synth.jsonl``:
``synth.review.csv``) instead of the golden set: a row per question (``id``, ``kind``, ``question``,
``answer``, ``passages``: the labelled text, and two columns to fill, ``decision`` (``keep``, the
default, or ``drop``) and ``why``). Open it in a spreadsheet or an editor, mark what to drop with a
reason, save it, and run the same command again: the kept questions are written to ``OUT``, the
dropped ones to ``OUT.dropped.jsonl`` as canonical cases whose ``metadata.review`` holds the reason
(what reviewers reject is worth keeping: it says what the generator gets wrong).

`read_review` checks the file as any input is checked: a row whose id is not one of the questions,
a decision other than keep or drop, a drop without a reason, or a question missing from the file is
an error naming the line and the column; nothing is written then.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Sequence

from ..formats.files import DatasetError, write_atomic

__all__ = ["review_path", "dropped_path", "write_review", "read_review", "COLUMNS"]

COLUMNS = ("id", "kind", "question", "answer", "passages", "decision", "why")


def review_path(out: Path) -> Path:
    return Path(out).with_suffix(".review.csv")


def dropped_path(out: Path) -> Path:
    return Path(out).with_suffix(".dropped.jsonl")


def write_review(path: Path, cases: Sequence[dict[str, Any]]) -> None:
    """The review file of ``cases`` (canonical records), every decision ``keep``."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for c in cases:
        kind = ((c.get("metadata") or {}).get("synthetic") or {}).get("kind", "")
        labelled = (" | ".join(s.get("quote", "") for s in c.get("relevant_spans", ()))
                    or "(none: unanswerable)")
        w.writerow([c["id"], kind, c["question"], c.get("reference", ""), labelled, "keep", ""])
    write_atomic(path, buf.getvalue())


def read_review(path: Path, ids: Sequence[str]) -> dict[str, str]:
    """The dropped questions' ids and why (`DatasetError` for a file that is not a finished review of
    ``ids``; see the module docstring)."""
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
    dropped: dict[str, str] = {}
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
    missing = [i for i in ids if i not in seen]
    if missing:
        raise DatasetError(f"{len(missing)} question(s) are missing from the file (first: {missing[0]!r})",
                           path=path, hint="keep a row per question; mark the ones to drop")
    return dropped
