"""Lexical measures of a question against the documents: its terms, the terms and phrases it
copies from a passage, and BM25 over the passages.

* `terms`: a text's words, lowercased, English stop words dropped, lightly stemmed (a plural ``s``,
  ``ies``, ``ing``, ``ed``), so "refunds" and "refund" are one term;
* `term_overlap`: the share of a question's distinct terms that occur in a text (1.0: every term of
  the question is in the passage; 0.0: none is). Words added to a question lower it whatever the
  question copies, so it does not measure copying: `copied_terms` and `copied_run` do;
* `copied_terms`: the question's distinct terms that a text holds: what the text's wording gives
  the question, which words added to the question do not change;
* `copied_run`: the longest run of consecutive terms the question repeats in the text's order (a
  phrase copied: "clean and oil the chain" and "how do I clean and oil it" share the run
  ``clean oil``, of 2);
* `BM25`: Okapi BM25 over a list of texts (``k1`` 1.5, ``b`` 0.75, and the idf
  ``ln(1 + (N - df + 0.5) / (df + 0.5))``, which is never negative), ranking them for a query; ties
  go to the earlier text; `BM25.similarity` is the cosine of two of its texts' tf-idf vectors
  (``(1 + ln tf) * idf``), how related two passages are.

Nothing here calls a model: the figures are what a lexical retriever sees, which is what the three
known weaknesses of generated questions are about (`ragbridge.synthetic.weaknesses`, and the
report's real-beside-synthetic view).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Sequence

__all__ = ["terms", "term_overlap", "copied_terms", "copied_run", "BM25", "STOP_WORDS"]

STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below
between both but by can cannot could did do does doing down during each few for from further had has
have having he her here hers herself him himself his how i if in into is it its itself just me more
most my myself no nor not of off on once only or other our ours ourselves out over own same she
should so some such than that the their theirs them themselves then there these they this those
through to too under until up very was we were what when where which while who whom why will with
would you your yours yourself yourselves also may might must shall within yes get got s t don
""".split())

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def _stem(word: str) -> str:
    if word.isdigit():
        return word
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 5 and word.endswith("ing"):
        return word[:-3]
    if len(word) > 4 and word.endswith("ed"):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def terms(text: str) -> list[str]:
    """The terms of ``text`` in order (see the module docstring)."""
    out = []
    for word in _WORD.findall((text or "").lower()):
        if word in STOP_WORDS or (len(word) < 2 and not word.isdigit()):
            continue
        out.append(_stem(word))
    return out


def term_overlap(question: str, text: str) -> float:
    """The share of the question's distinct terms found in ``text`` (NaN for a question without any)."""
    asked = set(terms(question))
    if not asked:
        return math.nan
    held = set(terms(text))
    return len(asked & held) / len(asked)


def copied_terms(question: str, text: str) -> list[str]:
    """The question's distinct terms that occur in ``text``, in the question's order."""
    held = set(terms(text))
    return [t for t in dict.fromkeys(terms(question)) if t in held]


def copied_run(question: str, text: str) -> int:
    """The length, in terms, of the longest run of consecutive terms of the question that occur
    consecutively, in that order, in ``text`` (0: the question holds none of its terms)."""
    asked, held = terms(question), terms(text)
    where: dict[str, list[int]] = {}
    for i, t in enumerate(held):
        where.setdefault(t, []).append(i)
    best = 0
    for i, t in enumerate(asked):
        for j in where.get(t, ()):
            n = 1
            while i + n < len(asked) and j + n < len(held) and asked[i + n] == held[j + n]:
                n += 1
            best = max(best, n)
    return best


class BM25:
    """Okapi BM25 over ``texts`` (see the module docstring)."""

    k1 = 1.5
    b = 0.75

    def __init__(self, texts: Sequence[str]) -> None:
        self.docs = [Counter(terms(t)) for t in texts]
        self.lengths = [sum(d.values()) for d in self.docs]
        n = len(self.docs)
        self.avg = (sum(self.lengths) / n) if n else 0.0
        df: Counter = Counter()
        for d in self.docs:
            df.update(d.keys())
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self._vectors: list[dict[str, float]] = []

    def weight(self, words: Sequence[str]) -> float:
        """The summed idf of ``words`` (terms no text holds weigh nothing): how much of the texts'
        distinctive wording they carry."""
        return sum(self.idf.get(t, 0.0) for t in words)

    def similarity(self, i: int, j: int) -> float:
        """The cosine of texts ``i`` and ``j``'s tf-idf vectors (0: no term in common; 1: the same
        terms in the same proportions)."""
        if not self._vectors:
            for d in self.docs:
                v = {t: (1 + math.log(f)) * self.idf[t] for t, f in d.items()}
                norm = math.sqrt(sum(x * x for x in v.values())) or 1.0
                self._vectors.append({t: x / norm for t, x in v.items()})
        a, b = self._vectors[i], self._vectors[j]
        if len(b) < len(a):
            a, b = b, a
        return sum(x * b.get(t, 0.0) for t, x in a.items())

    def scores(self, query: str) -> list[float]:
        """The score of every text for ``query``, in the texts' order."""
        q = [t for t in dict.fromkeys(terms(query)) if t in self.idf]
        out = []
        for d, length in zip(self.docs, self.lengths):
            norm = self.k1 * (1 - self.b + self.b * length / self.avg) if self.avg else self.k1
            s = 0.0
            for t in q:
                f = d.get(t, 0)
                if f:
                    s += self.idf[t] * f * (self.k1 + 1) / (f + norm)
            out.append(s)
        return out

    def ranking(self, query: str) -> list[int]:
        """The texts' indexes, best first (ties: the earlier text first)."""
        s = self.scores(query)
        return sorted(range(len(s)), key=lambda i: (-s[i], i))
