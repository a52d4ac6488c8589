"""Judged scores taken several times (``--repeats N``): each case's mean over its repeats.

A run with repeats records every repeat as its own `Score` (``Score.repeat`` = 0..N-1) in
``scores.jsonl``. What summaries, comparisons, diffs, gates and reports read is one score per
case, metric and backend (`collapse_repeats`): the mean of the repeats that were scored, with
``Score.repeats`` holding what each repeat gave and their spread, and ``passed`` true when at least
``pass_at_least`` of the repeats passed (default: a majority of the N planned;
`ragbridge.verdicts.repeats_pass`, the rule every output applies at its threshold). The per-repeat
scores stay available as ``Run.repeat_scores`` (the noise figures of `ragbridge.analysis` read them).

A case's score stands on all its repeats or on none: when one repeat errored, the case's score is
an error (``N of M repeat(s) errored``), with no value and no pass, whatever the others gave; when
one was not run (the budget was spent), the case's score is not run. A mean of the repeats that
happened to survive is never given as the case's score, so every summary, gate and report counts
the case as errored (or not run), as the run's exit code does.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Iterable, Optional, Sequence

from ..schema import Repeats, Score
from ..verdicts import repeats_pass

__all__ = ["has_repeats", "collapse_repeats", "majority"]


def has_repeats(scores: Iterable[Score]) -> bool:
    """Whether any score is a repeat other than the first (a run made with ``--repeats`` > 1)."""
    return any(s.repeat for s in scores)


def majority(n: int) -> int:
    """The default ``pass_at_least`` of N repeats: more than half."""
    return n // 2 + 1


def _sd(values: Sequence[float]) -> Optional[float]:
    if len(values) < 2:
        return None
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def collapse_repeats(scores: Iterable[Score], pass_at_least: Optional[int] = None,
                     n_repeats: Optional[int] = None) -> list[Score]:
    """One score per (case, metric, backend), in first-seen order: a key with one repeat only is
    returned as it is; one with several becomes their mean (see the module docstring).

    ``n_repeats``: the repeats planned (default: the highest repeat index seen + 1, per key).
    The collapsed score is ``error`` when any repeat failed, else ``not_run`` when any was not run,
    else ``scored`` when any repeat was (the mean of the scored ones; a repeat may be undefined),
    else ``undefined``. Judge calls, tokens, cost and seconds are summed over the repeats (cost None
    when any repeat's was unknown)."""
    groups: dict[tuple[str, str, str], list[Score]] = defaultdict(list)
    for s in scores:
        groups[s.key].append(s)
    out = []
    for group in groups.values():
        if len(group) == 1 and group[0].repeat == 0 and (n_repeats or 1) == 1:
            out.append(group[0])
            continue
        group.sort(key=lambda s: s.repeat)
        n = max(n_repeats or 0, group[-1].repeat + 1)
        by_repeat = {s.repeat: s for s in group}
        values = [by_repeat[r].value if r in by_repeat and by_repeat[r].status == "scored" else None
                  for r in range(n)]
        passed = [by_repeat[r].passed if r in by_repeat and by_repeat[r].status == "scored" else None
                  for r in range(n)]
        scored = [s for s in group if s.status == "scored"]
        errored = [s for s in group if s.status == "error"]
        not_run = not errored and any(s.status == "not_run" for s in group)
        whole = not errored and not not_run  # every repeat made: the case's score stands on them all
        m = pass_at_least if pass_at_least is not None else majority(n)
        if errored:
            first = errored[0]
        elif not_run:
            first = next(s for s in group if s.status == "not_run")
        else:
            first = scored[0] if scored else group[0]
        fields = first.model_dump(exclude={"repeat", "repeats", "value", "passed", "error", "not_run",
                                           "judge_calls", "prompt_tokens", "completion_tokens", "seconds",
                                           "cost", "evidence", "reason"})
        nums = [v for v in values if v is not None]
        costs = [s.cost for s in group]
        error = None
        if errored:
            error = (f"{len(errored)} of {n} repeat(s) errored, so the case has no score (repeat "
                     f"{errored[0].repeat}: {errored[0].error})")
        collapsed = Score(
            **fields,
            evidence=first.evidence if whole else None,
            reason=first.reason,
            value=math.fsum(nums) / len(nums) if nums and whole else None,
            passed=repeats_pass(passed, m) if whole else None,
            error=error,
            not_run=not_run,
            judge_calls=sum(s.judge_calls for s in group),
            prompt_tokens=sum(s.prompt_tokens for s in group),
            completion_tokens=sum(s.completion_tokens for s in group),
            seconds=sum(s.seconds for s in group),
            cost=None if any(c is None for c in costs) else math.fsum(costs),
            repeats=Repeats(n=n, values=values, passed=passed, sd=_sd(nums), pass_at_least=m),
        )
        out.append(collapsed)
    return out
