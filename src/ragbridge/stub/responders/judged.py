"""What a verdict compares: `Ctx` (the query, the evidence, the subject, the items and how each is
judged), and `scaled`, a fraction as a level on a scale."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

from .toy_judge import (
    best_sentence,
    content_words,
    is_noncommittal,
    is_relevant,
    is_supported,
    numbers,
    relevance,
    short,
    split_sentences,
    support,
)

__all__ = ["Ctx", "scaled"]


@dataclass
class Ctx:
    """Which texts the verdicts compare."""

    query: str = ""  # the question
    context: str = ""  # the evidence (retrieved context, source)
    subject: str = ""  # the text being analysed (answer, statement, reference)
    items: Optional[list[str]] = None  # per-item texts (explicit list, else sentences of subject)
    judge: Optional[Callable[[str], bool]] = None  # item -> verdict
    scorer: Optional[Callable[[], float]] = None  # -> fraction 0..1 for score fields
    score_range: Optional[tuple[float, float]] = None
    prompt: str = ""
    item: Optional[str] = None
    reason_prefix: str = ""

    def get_items(self) -> list[str]:
        if self.items is not None:
            return self.items
        base = self.subject or self.context or self.query
        return split_sentences(base)

    def verdict(self, item: Optional[str]) -> bool:
        text = item if item is not None else (self.subject or self.query)
        if self.judge is not None:
            return self.judge(text)
        if is_noncommittal(text) and not self.context:
            return False
        if self.context and text:
            return is_supported(text, self.context)
        if self.query and text:
            return is_relevant(text, self.query)
        return bool(text)

    def fraction(self) -> float:
        if self.scorer is not None:
            return max(0.0, min(1.0, self.scorer()))
        if self.subject and self.context:
            items = split_sentences(self.subject) or [self.subject]
            return sum(1 for s in items if is_supported(s, self.context)) / len(items)
        if self.query and (self.subject or self.context):
            return relevance(self.subject or self.context, self.query)
        return 0.5

    def reason(self, item: Optional[str]) -> str:
        text = item if item is not None else (self.subject or self.query)
        ok = self.verdict(item)
        if self.context and text:
            frac, found, missing = support(text, self.context)
            quote = best_sentence(self.context, text)
            base = (f'"{short(text, 60)}": {len(found)} of {len(found) + len(missing)} content words '
                    f"appear in the context")
            if found:
                base += f" ({', '.join(found[:6])})"
            if ok and quote:
                return base + f'; the context says "{short(quote, 80)}".'
            miss_num = sorted(numbers(text) - numbers(self.context))
            if miss_num:
                return base + f"; the number(s) {', '.join(miss_num)} do not appear in the context."
            return base + (f"; not found: {', '.join(missing[:6])}." if missing else ".")
        if self.query and text:
            shared = sorted(set(content_words(text)) & set(content_words(self.query)))
            if shared:
                return f'"{short(text, 60)}" shares {", ".join(shared[:6])} with the question.'
            return f'"{short(text, 60)}" shares no content words with the question.'
        return "Judged by the ragbridge stub from word overlap."


def scaled(frac: float, lo: float, hi: float, integer: bool) -> float:
    """The point ``frac`` (0..1) of the way from ``lo`` to ``hi``, rounded to an integer or 3 decimals."""
    v = lo + frac * (hi - lo)
    if integer:
        return int(math.floor(v + 0.5))
    return round(v, 3)
