"""The backend lifecycle, as every executor drives it: the same steps wherever a backend is scored.

For each backend a run uses: its environment defaults applied (`applied_environment`), ``open``
(`open_session`: a failing ``open`` becomes the error of every case the backend is given), its jobs
(`drive_job`: one score per case, whatever the backend does), and ``close`` (`close_session`). A
`Job` is one backend's metric on a batch of cases, for one repeat of a judged metric.

A backend answers with results (`ragbridge.schema.Result`, `ResultBlock`); `drive_job` is where
each becomes the `Score` (or `ScoreBlock`) of its job: the backend, metric and repeat it answered.
The recorder adds the rest of the run's bookkeeping (`ragbridge.run.recorder`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import warnings
from dataclasses import dataclass
from dataclasses import replace as dataclass_replace
from typing import Callable, Iterator, Sequence, Union

from ..backend import Backend, ScoringContext, error_text
from ..formats.batches import CaseBatch
from ..schema import Case, ResultBlock, Score, ScoreBlock

__all__ = ["Job", "Record", "applied_environment", "open_session", "close_session", "drive_job"]

#: (backend, metric, cases, repeat): one backend's metric on cases, for one repeat of a judged metric
Job = tuple[Backend, str, CaseBatch, int]
#: where an executor hands each score (or block of scores) as it arrives; returns how many scores
Record = Callable[[Union[Score, ScoreBlock]], int]


@contextlib.contextmanager
def applied_environment(defaults: dict[str, str]) -> Iterator[None]:
    """Set each of ``defaults`` that is not set in ``os.environ``; unset them again on exit (a
    variable the user set, or one set meanwhile, is left alone)."""
    added = {k: str(v) for k, v in defaults.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k, v in added.items():
            if os.environ.get(k) == v:
                del os.environ[k]


@dataclass(frozen=True)
class _OpenFailed:
    error: str


class _BackendFault(Exception):
    """A backend that cannot score at all (its ``open`` failed): the error of every case it was given."""


async def open_session(backend: Backend, ctx: ScoringContext) -> ScoringContext:
    """The backend's context for this run: ``session`` is what its ``open`` returned. A failing
    ``open`` is kept as the session's error, and every case the backend is given gets it."""
    try:
        return ctx.for_session(await backend.open(ctx.for_session(None)))
    except Exception as exc:
        return ctx.for_session(_OpenFailed(error_text(exc)))


async def close_session(backend: Backend, ctx: ScoringContext) -> None:
    """``close`` of a backend that opened (a failing ``close`` is a warning: the scores are kept)."""
    if isinstance(ctx.session, _OpenFailed):
        return
    try:
        await backend.close(ctx)
    except Exception as exc:  # scores are recorded already: a failing close must not lose the run
        warnings.warn(f"backend {backend.name!r} failed to close: {error_text(exc)}", RuntimeWarning)


async def drive_job(
    backend: Backend, metric: str, cases: CaseBatch | Sequence[Case], ctx: ScoringContext,
    queue: asyncio.Queue, repeat: int = 0,
) -> None:
    """Put every score of one job on ``queue`` (a `Score` or a `ScoreBlock` of them): one per case,
    whatever the backend does (a fault is the error of each case it did not score; a case it did not
    yield gets an error that says so). Each result the backend yields is recorded as the job's: its
    backend, metric and repeat. What the backend got wrong is its plugin's error, naming it
    (`checked`): a value outside 0..1 is that case's error, never recorded; a second result for a case,
    or one for a case it was not given, is refused (a warning; the case keeps its first result). For
    repeat r > 0 the backend's judge is the one of that repeat."""
    ids = CaseBatch.of_cases(cases).ids
    pending = set(ids)
    error = f"PluginError: backend {backend.name} yielded no result for this case; fix the plugin"
    if repeat and ctx.judge is not None:
        ctx = dataclass_replace(ctx, judge=ctx.judge.for_repeat(repeat))
    try:
        if isinstance(ctx.session, _OpenFailed):
            raise _BackendFault(ctx.session.error)
        async for item in backend.score(metric, cases, ctx):
            if isinstance(item, ResultBlock):
                if not pending.issuperset(item.case_ids):
                    raise _BackendFault(
                        f"PluginError: backend {backend.name} returned a result block for cases it was not "
                        "given, or scored already (a backend yields one result per case); fix the plugin")
                pending.difference_update(item.case_ids)
                for score in checked_block(item, backend.name, metric):
                    await queue.put(score)
            elif item.case_id not in pending:
                again = "a second result" if item.case_id in ids else "a result"
                warnings.warn(f"backend {backend.name} yielded {again} for case {item.case_id!r} of {metric}"
                              f"{'' if item.case_id in ids else ', which it was not given'}: refused (a "
                              "backend yields one result per case); fix the plugin", RuntimeWarning)
            else:
                pending.discard(item.case_id)
                await queue.put(checked(Score.of(item, backend.name, metric, repeat)))
    except Exception as exc:  # a backend fault: every case it did not score gets the error
        error = str(exc) if isinstance(exc, _BackendFault) else error_text(exc)
    for cid in ids:
        if cid in pending:
            await queue.put(Score(case_id=cid, metric=metric, backend=backend.name, repeat=repeat,
                                  error=error))


def checked(score: Score) -> Score:
    """``score`` as its backend returned it, or what the backend got wrong as the score's error: a
    value outside 0..1 is refused (the error names the backend, the metric, the value and the case);
    an undefined value the backend gave no reason for gets one that says so."""
    value = score.value
    if value is not None and not 0.0 <= value <= 1.0:
        return score.model_copy(update={
            "value": None, "passed": None,
            "error": f"PluginError: backend {score.backend} returned {score.metric} {value!r} for case "
                     f"{score.case_id}: a value must be in 0..1 (or null); fix the plugin"})
    if value is None and not score.error and not score.reason:
        return score.model_copy(update={"reason": no_reason(score.backend)})
    return score


#: how the reason of an undefined value its backend gave no reason for ends (`no_reason`)
NO_REASON_END = "returned no value (null or NaN) and gave no reason"


def no_reason(backend: str) -> str:
    """The reason of an undefined value its backend gave none for."""
    return f"backend {backend} {NO_REASON_END}"


def checked_block(block: ResultBlock, backend: str, metric: str) -> list[Union[Score, ScoreBlock]]:
    """``block`` recorded as the answer of ``backend`` for ``metric``: one `ScoreBlock`, or one
    `Score` a case (`checked`) when a value is outside 0..1; an undefined value without a reason gets
    one (`no_reason`)."""
    values = block._values()
    defined = [v for v in values if v is not None] if None in values else values
    if not defined or (min(defined) >= 0.0 and max(defined) <= 1.0):
        reasons = list(block.reasons)
        if None in values and any(v is None and not reasons[i] for i, v in enumerate(values)):
            block = dataclass_replace(block, reasons=[r if r or values[i] is not None else no_reason(backend)
                                                      for i, r in enumerate(reasons)])
        return [ScoreBlock.of(block, backend, metric)]
    return [checked(s) for s in ScoreBlock.of(block, backend, metric).scores()]
