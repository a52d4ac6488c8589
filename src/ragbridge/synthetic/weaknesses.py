"""The three known weaknesses of generated questions, measured on a golden set (`measure`), and a
synthetic set beside a real one (`compare_rows`).

Generated questions copy the passage's wording (so a lexical retriever finds their passage more
easily than a real user's), have exactly one answer passage, and never ask what the documents do not
answer. Per golden set, over the corpus cut into passages (`ragbridge.synthetic.passages`):

* ``copied_terms``: the mean, over the answerable cases with span labels, of the number of the
  labelled text's terms the question repeats (`ragbridge.lexical.copied_terms`: content words,
  lower-cased, lightly stemmed). What the passage's wording gives the question: words added to the
  question (a greeting, filler) do not lower it, as they would lower a share of the question's
  words;
* ``bm25_top1`` and ``bm25_mrr``: BM25 over every passage of the corpus, the question as the query:
  the share of those cases whose labelled passage (any passage a span label overlaps) ranks first,
  and the mean of one over its rank;
* ``one_passage``: the share of those cases whose span labels lie in exactly one passage;
* ``unanswerable``: the share of all cases marked ``answerable: false``.

Cases labelled only by chunk id (no span labels) are counted (``n``) but not measured
(``n_labelled`` says how many were); quotes are placed in the corpus first, as a run places them.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from ..formats.corpus import Corpus, place_cases
from ..schema import Case
from ..lexical import BM25, copied_terms
from .passages import Passages, cut_passages

__all__ = ["measure", "compare_rows", "MEASURES"]

#: the measures, in the order they are shown, with what a higher figure says
MEASURES = (
    ("copied_terms", "terms of its labelled text the question repeats (mean count)"),
    ("bm25_top1", "share whose labelled passage BM25 ranks first"),
    ("bm25_mrr", "mean reciprocal BM25 rank of the labelled passage"),
    ("one_passage", "share with exactly one answer passage"),
    ("unanswerable", "share unanswerable (answerable: false)"),
)


def _mean(values: Sequence[float]) -> Optional[float]:
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else None


def measure(cases: Sequence[Case], corpus: Corpus, passages: Optional[Passages] = None,
            bm25: Optional[BM25] = None) -> dict[str, Any]:
    """The weakness figures of ``cases`` (see the module docstring); a figure over no case is None."""
    passages = passages if passages is not None else cut_passages(corpus)
    bm25 = bm25 or BM25([p.text for p in passages])
    placed = place_cases(list(cases), corpus)
    copied: list[float] = []
    reciprocal: list[float] = []
    single: list[float] = []
    n_labelled = 0
    for case in placed:
        if not case.answerable or not case.relevant_spans:
            continue
        n_labelled += 1
        texts, labelled = [], set()
        for s in case.relevant_spans:
            if s.grade <= 0:
                continue
            texts.append(corpus.texts[s.doc][s.start:s.end])
            labelled.update(passages.covering(s.doc, s.start, s.end))
        copied.append(float(len(copied_terms(case.question, " ".join(texts)))))
        single.append(1.0 if len(labelled) == 1 else 0.0)
        rank = next((r for r, i in enumerate(bm25.ranking(case.question), 1) if i in labelled), None)
        reciprocal.append(1.0 / rank if rank else 0.0)
    n = len(placed)
    return {
        "n": n,
        "n_labelled": n_labelled,
        "copied_terms": _mean(copied),
        "bm25_top1": _mean([1.0 if r == 1.0 else 0.0 for r in reciprocal]),
        "bm25_mrr": _mean(reciprocal),
        "one_passage": _mean(single),
        "unanswerable": sum(1 for c in placed if not c.answerable) / n if n else None,
    }


def compare_rows(synthetic: dict[str, Any], real: Optional[dict[str, Any]] = None) -> list[dict[str, Any]]:
    """A row per measure: ``measure``, ``meaning``, ``synthetic``, and with a real set ``real`` and
    ``difference`` (synthetic minus real)."""
    rows = []
    for key, meaning in MEASURES:
        row: dict[str, Any] = {"measure": key, "meaning": meaning, "synthetic": synthetic.get(key)}
        if real is not None:
            row["real"] = real.get(key)
            both = row["real"] is not None and row["synthetic"] is not None
            row["difference"] = row["synthetic"] - row["real"] if both else None
        rows.append(row)
    return rows
