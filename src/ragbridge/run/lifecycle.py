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
    whatever the backend does (a fault is the error of each case it did not score; a case it forgot
    is an error too). Each result the backend yields is recorded as the job's: its backend, metric
    and repeat. For repeat r > 0 the backend's judge is the one of that repeat."""
    ids = CaseBatch.of_cases(cases).ids
    pending = set(ids)
    error = "backend returned no score for this case"
    if repeat and ctx.judge is not None:
        ctx = dataclass_replace(ctx, judge=ctx.judge.for_repeat(repeat))
    try:
        if isinstance(ctx.session, _OpenFailed):
            raise _BackendFault(ctx.session.error)
        async for item in backend.score(metric, cases, ctx):
            if isinstance(item, ResultBlock):
                if not pending.issuperset(item.case_ids):
                    raise RuntimeError("backend returned a score block for cases it was not given, or twice")
                pending.difference_update(item.case_ids)
                await queue.put(ScoreBlock.of(item, backend.name, metric))
            else:
                pending.discard(item.case_id)
                await queue.put(Score.of(item, backend.name, metric, repeat))
    except Exception as exc:  # a backend fault: every case it did not score gets the error
        error = str(exc) if isinstance(exc, _BackendFault) else error_text(exc)
    for cid in ids:
        if cid in pending:
            await queue.put(Score(case_id=cid, metric=metric, backend=backend.name, repeat=repeat,
                                  error=error))
