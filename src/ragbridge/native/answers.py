"""The answer checks: deterministic string checks on a case's answer, no judge, no network.

* ``must_contain``: share of the case's ``must_contain`` strings found in the answer (1.0 = all);
  the missing ones are in ``reason``. Undefined when the case lists none.
* ``must_not_contain``: share of the case's ``must_not_contain`` strings absent from the answer
  (1.0 = none present); the present ones are in ``reason``. Undefined when the case lists none.
* ``abstention``: on a case with ``answerable: false``, 1.0 when the answer declines, else 0.0;
  undefined on answerable cases. An answer declines when, after lower-casing and straightening
  apostrophes, it contains one of the decline phrases (`DEFAULT_DECLINE_PHRASES`, replaced by
  the native option ``decline_phrases``, ``--decline-phrase``), or when it is empty.

Matching is case-insensitive by default (the native option ``case_sensitive``, ``--case-sensitive``
for exact matching); white space is collapsed and curly apostrophes straightened either way. A check
passes when its value is 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from ..schema import Case
from .options import NativeOptions

__all__ = ["DEFAULT_DECLINE_PHRASES", "Verdict", "declines", "must_contain", "must_not_contain",
           "abstention", "CHECKS"]

DEFAULT_DECLINE_PHRASES = (
    "i don't know",
    "i do not know",
    "i'm not sure",
    "i am not sure",
    "i don't have",
    "i do not have",
    "i couldn't find",
    "i could not find",
    "i can't find",
    "i cannot find",
    "i was unable to find",
    "i wasn't able to find",
    "i'm unable to",
    "i am unable to",
    "i can't answer",
    "i cannot answer",
    "i can't help with",
    "no information",
    "not covered",
    "isn't covered",
    "not mentioned in",
    "not in the provided",
    "not able to answer",
    "unable to answer",
    "cannot be answered",
    "can't be answered",
)

_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class Verdict:
    """One check on one case: ``value`` in 0..1, or None where the check is undefined for the case;
    ``native_value`` is the check's own result (the share, or whether the answer declined)."""

    value: Optional[float]
    reason: str
    native_value: Any = None

    @property
    def passed(self) -> Optional[bool]:
        return None if self.value is None else self.value == 1.0


def _norm(text: str, case_sensitive: bool) -> str:
    text = _WS.sub(" ", text.replace("\u2019", "'").replace("\u2018", "'")).strip()
    return text if case_sensitive else text.casefold()


def declines(answer: str, phrases: Sequence[str] | None = None, case_sensitive: bool = False) -> bool:
    """Whether ``answer`` declines to answer: it is empty or holds one of ``phrases`` (default
    `DEFAULT_DECLINE_PHRASES`)."""
    text = _norm(answer, case_sensitive)
    if not text:
        return True
    return any(_norm(p, case_sensitive) in text for p in (phrases or DEFAULT_DECLINE_PHRASES))


def _present(case: Case, wanted: Sequence[str], case_sensitive: bool) -> list[str]:
    answer = _norm(case.answer or "", case_sensitive)
    return [w for w in wanted if _norm(w, case_sensitive) in answer]


def must_contain(case: Case, options: NativeOptions) -> Verdict:
    """Share of ``case.must_contain`` found in the answer; the missing ones are the reason."""
    wanted = case.must_contain
    if not wanted:
        return Verdict(None, "case lists no must_contain strings")
    present = _present(case, wanted, options.case_sensitive)
    missing = [w for w in wanted if w not in present]
    value = 1 - len(missing) / len(wanted)
    return Verdict(value, "all present" if not missing else "missing: " + "; ".join(missing), value)


def must_not_contain(case: Case, options: NativeOptions) -> Verdict:
    """Share of ``case.must_not_contain`` absent from the answer; the present ones are the reason."""
    wanted = case.must_not_contain
    if not wanted:
        return Verdict(None, "case lists no must_not_contain strings")
    present = _present(case, wanted, options.case_sensitive)
    value = 1 - len(present) / len(wanted)
    return Verdict(value, "none present" if not present else "present: " + "; ".join(present), value)


def abstention(case: Case, options: NativeOptions) -> Verdict:
    """On an unanswerable case, 1.0 when the answer declines (`declines`), else 0.0."""
    if case.answerable:
        return Verdict(None, "case is answerable")
    ok = declines(case.answer or "", options.decline_phrases, options.case_sensitive)
    return Verdict(1.0 if ok else 0.0, "answer declines" if ok else "answer does not decline", ok)


#: canonical name -> check
CHECKS: dict[str, Callable[[Case, NativeOptions], Verdict]] = {
    "must_contain": must_contain,
    "must_not_contain": must_not_contain,
    "abstention": abstention,
}
