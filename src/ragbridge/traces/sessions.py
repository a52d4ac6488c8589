"""Sessions: the turns of a conversation, one trace each, grouped by the session id they carry.

A trace belongs to the session named by its root span's ``session.id`` (OpenInference's attribute,
which trace formats read a session field into); a span of the trace that carries it does too, when the root
does not. Each trace is a turn, and stays one case: `add_sessions` gives a case of a session
``metadata["session"]``: ``id``, ``turn`` (1 for the first, by start time), ``turns`` (how many the
session has in what was read) and ``previous``, the earlier turns, oldest first, each ``{trace_id,
question, answer}``: as its case reads them when it is a case in hand, else as its root span records
them (``input.value``, ``output.value``), so that a turn without retrieval (small talk) is there
too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

from ..schema import Case
from .spans import Span

__all__ = ["Turn", "session_of", "add_sessions"]


@dataclass
class Turn:
    """One trace of a session, as its root span records it."""

    session: str
    trace_id: str
    start: int
    question: Optional[str] = None
    answer: Optional[str] = None


def session_of(span: Span) -> Optional[str]:
    """The session id a span carries (``session.id``, on the span or its resource), or None."""
    value = span.get("session.id")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    return value if isinstance(value, str) and value.strip() else None


def add_sessions(cases: Iterable[Case], turns: Iterable[Turn]) -> None:
    """Give each case that is a turn of a session its ``metadata["session"]`` (see the module
    docstring). ``turns``: every turn read of the cases' sessions (the cases' own among them;
    `ragbridge.traces.cases.trace_turn` makes one of a trace's spans)."""
    by_session: dict[str, list[Turn]] = {}
    seen: set[str] = set()
    for turn in turns:
        if turn.trace_id not in seen:
            seen.add(turn.trace_id)
            by_session.setdefault(turn.session, []).append(turn)
    cases = list(cases)
    known = {c.id: c for c in cases}
    place: dict[str, tuple[str, int]] = {}
    for session, items in by_session.items():
        items.sort(key=lambda t: (t.start, t.trace_id))
        for k, turn in enumerate(items):
            place[turn.trace_id] = (session, k)
    for case in cases:
        if case.id not in place:
            continue
        session, k = place[case.id]
        items = by_session[session]
        previous: list[dict[str, Any]] = []
        for turn in items[:k]:
            other = known.get(turn.trace_id)
            question, answer = (other.question, other.answer) if other is not None else (turn.question,
                                                                                          turn.answer)
            previous.append({"trace_id": turn.trace_id, "question": question, "answer": answer})
        case.metadata["session"] = {"id": session, "turn": k + 1, "turns": len(items), "previous": previous}
