"""Repeats of a judged score: how the repeat index travels with a judge call.

A judged metric taken ``--repeats N`` times is N distinct judge calls per request, not one call
replayed: the repeat index is part of the cache key (repeat 0 keeps the key it always had, so a
cache recorded without repeats still replays), so a warm re-run replays all N answers and CI can
replay them with no key.

The index reaches the gateway with the case id the call is attributed to: for repeat ``r > 0`` the
runner hands the backend each case under `repeat_case_id` (the id, `REPEAT_MARK`, ``r``), which the
backend uses for ``tag_scope`` / ``base_url`` as it always does; the gateway reads it back with
`split_repeat`. Backends need no change, whether they call the judge from a task, a thread or over
the loopback socket. The gateway tells the upstream which repeat a call is with the header
`REPEAT_HEADER` (ragbridge's stub judge draws its per-repeat noise from it; a real endpoint
ignores it).
"""

from __future__ import annotations

from typing import Optional

__all__ = ["REPEAT_MARK", "REPEAT_HEADER", "repeat_case_id", "split_repeat"]

#: between a case id and its repeat index (a control character: never part of a real case id)
REPEAT_MARK = "\x1frepeat="
REPEAT_HEADER = "X-Ragbridge-Repeat"


def repeat_case_id(case_id: str, repeat: int) -> str:
    """The id a backend sees for ``case_id`` in repeat ``repeat`` (repeat 0: the id itself)."""
    return case_id if not repeat else f"{case_id}{REPEAT_MARK}{int(repeat)}"


def split_repeat(case_id: Optional[str]) -> tuple[Optional[str], int]:
    """(case id, repeat index) of an id made by `repeat_case_id` (any other id: repeat 0)."""
    if case_id is None or REPEAT_MARK not in case_id:
        return case_id, 0
    base, _, r = case_id.rpartition(REPEAT_MARK)
    return (base, int(r)) if r.isdigit() else (case_id, 0)
