"""Lexical measures of a question against the documents: its terms, the share of them a passage
holds, and BM25 over the passages.

* `terms`: a text's words, lowercased, English stop words dropped, lightly stemmed (a plural ``s``,
  ``ies``, ``ing``, ``ed``), so "refunds" and "refund" are one term;
* `term_overlap`: the share of a question's distinct terms that occur in a text (1.0: every term of
  the question is in the passage, as a question copied from it; 0.0: none is);
* `BM25`: Okapi BM25 over a list of texts (``k1`` 1.5, ``b`` 0.75, and the idf
  ``ln(1 + (N - df + 0.5) / (df + 0.5))``, which is never negative), ranking them for a query; ties
  go to the earlier text.

Nothing here calls a model: the figures are what a lexical retriever sees, which is what the three
known weaknesses of generated questions are about (`ragbridge.synthetic.weaknesses`, and the
report's real-beside-synthetic view).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Sequence

__all__ = ["terms", "term_overlap", "BM25", "STOP_WORDS"]

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
