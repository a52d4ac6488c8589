"""The toy judge: verdicts from word overlap, deterministic (and noisy only inside
`ragbridge.stub.responders.noise.perturbed`).

Texts are reduced to content words (lowercased, stop words dropped, a light suffix stemmer), and

* a statement is *supported* by a context when at least half of its content words occur in the
  context and every number in it does (so "60 days" is not supported by "30 days");
* a text is *relevant* to a query when it contains at least a quarter of the query's content words
  (or two of them);
* an answer is *noncommittal* when it contains a decline phrase ("I don't know", "couldn't find",
  "not sure", ...).

So a faithful answer scores higher than an unfaithful one, and the same request always gets the
same answer. None of this measures judgement quality: it exercises plumbing.
"""

from __future__ import annotations

import re
from typing import Optional

from .noise import noisy

__all__ = ["content_words", "numbers", "support", "is_supported", "relevance", "is_relevant", "usefulness",
           "is_noncommittal", "split_sentences", "short", "make_question", "best_sentence", "STOPWORDS",
           "DECLINE_PHRASES"]

STOPWORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been before
    being below between both but by can can't cannot could couldn't did didn't do does doesn't doing
    don't down during each few for from further had hadn't has hasn't have haven't having he he'd
    he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into
    is isn't it it's its itself let's me more most mustn't my myself no nor not of off on once only
    or other ought our ours ourselves out over own same shan't she she'd she'll she's should
    shouldn't so some such than that that's the their theirs them themselves then there there's
    these they they'd they'll they're they've this those through to too under until up very was
    wasn't we we'd we'll we're we've were weren't what what's when when's where where's which while
    who who's whom why why's will with won't would wouldn't you you'd you'll you're you've your
    yours yourself yourselves also just may might must shall within yes does get got""".split()
)

_WORD_RE = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_NUM_RE = re.compile(r"\d+(?:[.,]\d+)?")

DECLINE_PHRASES = (
    "i don't know",
    "i do not know",
    "don't know",
    "couldn't find",
    "could not find",
    "can't find",
    "cannot find",
    "not sure",
    "unable to answer",
    "unable to find",
    "cannot answer",
    "can't answer",
    "no information",
    "not enough information",
    "i am not able",
    "i'm not able",
    "it depends",
    "i cannot help",
    "i can't help",
    "not mentioned in",
    "does not mention",
    "doesn't mention",
)


def _stem(w: str) -> str:
    if w.isdigit():
        return w
    if w.endswith("'s"):
        w = w[:-2]
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 5 and w.endswith("ing"):
        return w[:-3]
    if len(w) > 4 and w.endswith("ed"):
        return w[:-2]
    if len(w) > 3 and w.endswith("s") and not w.endswith("ss") and not w.endswith("us"):
        return w[:-1]
    return w


def _norm(text: str) -> str:
    return text.lower().replace("\u2019", "'").replace("\u2018", "'")


def content_words(text: str) -> list[str]:
    """Content words of ``text``, lowercased and lightly stemmed, stop words dropped, in order."""
    out = []
    for w in _WORD_RE.findall(_norm(text or "")):
        if w in STOPWORDS or (len(w) < 2 and not w.isdigit()):
            continue
        out.append(_stem(w))
    return out


def numbers(text: str) -> set[str]:
    """The numbers in ``text`` (thousands separators dropped)."""
    return {n.replace(",", "") for n in _NUM_RE.findall(text or "")}


def support(statement: str, context: str) -> tuple[float, list[str], list[str]]:
    """Fraction of the statement's content words found in the context, the found and missing words."""
    words = list(dict.fromkeys(content_words(statement)))
    if not words:
        return 0.0, [], []
    ctx = set(content_words(context))
    found = [w for w in words if w in ctx]
    missing = [w for w in words if w not in ctx]
    return len(found) / len(words), found, missing


def is_supported(statement: str, context: str) -> bool:
    """Half the statement's content words and every number in it occur in the context."""
    frac, _, _ = support(statement, context)
    missing_numbers = numbers(statement) - numbers(context)
    return noisy(frac >= 0.5 and not missing_numbers)


def relevance(text: str, query: str) -> float:
    """Fraction of the query's content words that occur in ``text`` (1.0 when the query has none)."""
    q = list(dict.fromkeys(content_words(query)))
    if not q:
        return 1.0 if text.strip() else 0.0
    t = set(content_words(text))
    return sum(1 for w in q if w in t) / len(q)


def is_relevant(text: str, query: str) -> bool:
    """``text`` shares a quarter of the query's content words, or two of them."""
    q = set(content_words(query))
    t = set(content_words(text))
    inter = q & t
    return noisy(bool(q) and (len(inter) / len(q) >= 0.25 or len(inter) >= 2))


def usefulness(node: str, target: str) -> float:
    """Overlap of a retrieved node with a target text, relative to the shorter of the two."""
    a, b = set(content_words(node)), set(content_words(target))
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


def is_noncommittal(text: str) -> bool:
    """``text`` contains a decline phrase ("I don't know", "couldn't find", ...)."""
    t = _norm(text or "")
    return any(p in t for p in DECLINE_PHRASES)


_SENT_RE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n+")


def split_sentences(text: str) -> list[str]:
    """The sentences (and lines, list bullets dropped) of ``text``."""
    out = []
    for part in _SENT_RE.split(text or ""):
        s = part.strip().lstrip("-*\u2022 ").strip()
        if s and any(ch.isalnum() for ch in s):
            out.append(s)
    return out


def short(text: str, n: int = 80) -> str:
    """``text`` on one line, cut to ``n`` characters with "..."."""
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 3].rstrip() + "..."


def make_question(text: str) -> str:
    """A question built from the answer's own words (so it is lexically close to what was asked)."""
    first = split_sentences(text)[:1]
    surface = [w for w in re.findall(r"[A-Za-z0-9']+", first[0] if first else text or "")
               if _norm(w) not in STOPWORDS and len(w) > 1]
    if not surface:
        return "What is this about?"
    return "What about " + " ".join(surface[:10]) + "?"


def best_sentence(context: str, statement: str) -> Optional[str]:
    """The sentence of ``context`` that overlaps ``statement`` most (None: none overlaps)."""
    best, best_score = None, 0.0
    for s in split_sentences(context):
        score = usefulness(s, statement)
        if score > best_score:
            best, best_score = s, score
    return best
