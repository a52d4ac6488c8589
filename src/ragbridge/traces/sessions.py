"""Sessions: the turns of a conversation, one trace each, grouped by the session id they carry.

A trace belongs to the session named by its root span's ``session.id`` (OpenInference's attribute,
which trace formats read a session field into); a span of the trace that carries it does too, when
the root does not. Each trace is a turn, and stays one case: `add_sessions` gives a case of a
session ``metadata["session"]``: ``id``, ``turn`` (1 for the first, by start time), ``turns`` (how
many the session has in what was read) and ``previous``, the last `PREVIOUS` earlier turns at most
(``turn - 1`` is how many there were), oldest first, each ``{trace_id, question, answer}``: as its
case reads them when it is a case in hand, else as its root span records them (``input.value``,
``output.value``), so that a turn without retrieval (small talk) is there too.

The turns of a session are ordered by ``(start, trace id)``. Reading a sample, the order of a
session's turns is known first (`SessionOrder`: their starts and ids only) and the question and
answer then read of the few turns that come right before the sample's cases (`SessionOrder.needed`),
so that memory holds the sample's sessions' starts, not their texts, however long a session is.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from ..schema import Case
from .spans import Span

__all__ = ["Turn", "SessionOrder", "session_of", "add_sessions", "PREVIOUS"]

#: how many earlier turns a case carries at most (the latest ones)
PREVIOUS = 20


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


@dataclass
class SessionOrder:
    """Every turn read of some sessions, by its start and trace id alone: ``turns[session]``, a list
    of ``(start, trace_id)`` (kept in order once `sort` is called)."""

    turns: dict[str, list[tuple[int, str]]] = field(default_factory=dict)

    def add(self, session: str, start: int, trace_id: str) -> None:
        self.turns.setdefault(session, []).append((start, trace_id))

    def sort(self) -> None:
        for session, items in self.turns.items():
            self.turns[session] = sorted(set(items))

    def before(self, session: str, start: int, trace_id: str) -> tuple[int, list[tuple[int, str]]]:
        """How many turns of the session come before ``(start, trace_id)``, and the last `PREVIOUS`."""
        items = self.turns.get(session, [])
        at = bisect_left(items, (start, trace_id))
        return at, items[max(0, at - PREVIOUS):at]

    def needed(self, turns: Iterable[Turn]) -> set[str]:
        """The trace ids of the earlier turns ``turns`` (the cases' own) carry (`before`)."""
        return {t for turn in turns for _, t in self.before(turn.session, turn.start, turn.trace_id)[1]}


def add_sessions(cases: Iterable[Case], turns: Iterable[Turn], order: Optional[SessionOrder] = None) -> None:
    """Give each case that is a turn of a session its ``metadata["session"]`` (see the module
    docstring). ``turns``: the turns whose question and answer are known (the cases' own among
    them; `ragbridge.traces.cases.trace_turn` makes one of a trace's spans); ``order``: every turn
    of the cases' sessions (default: ``turns``)."""
    turns = list(turns)
    if order is None:
        order = SessionOrder()
        for turn in turns:
            order.add(turn.session, turn.start, turn.trace_id)
    order.sort()
    known = {t.trace_id: t for t in turns}
    cases = {c.id: c for c in cases}
    for trace_id, case in cases.items():
        turn = known.get(trace_id)
        if turn is None:
            continue
        count, earlier = order.before(turn.session, turn.start, turn.trace_id)
        previous: list[dict[str, Any]] = []
        for _, other_id in earlier:
            other, read = cases.get(other_id), known.get(other_id)
            question, answer = ((other.question, other.answer) if other is not None
                                else (read.question, read.answer) if read is not None else (None, None))
            previous.append({"trace_id": other_id, "question": question, "answer": answer})
        case.metadata["session"] = {"id": turn.session, "turn": count + 1,
                                    "turns": len(order.turns.get(turn.session, [])), "previous": previous}
