"""Where a run's jobs are scored: the one interface every executor implements.

The runner does everything but scoring itself (plan, run folder, target, manifest, recording,
batches) and hands each batch's jobs to an executor's session: `Executor.session` lasts the whole
run, and `ExecutorSession.score` is awaited once per batch with that batch's jobs and the
recorder's ``record``, called with each score (or block of scores) as it arrives. An executor
opens what it needs when the first job that needs it arrives, not before, and closes it when the
session ends: a run with nothing left to score (every score resumed or taken from the score cache)
imports no backend library and starts no cluster.

Two executors: `ragbridge.run.local_executor.LocalExecutor` (this process, the default) and
`ragbridge.run.ray_executor.RayExecutor` (a Ray cluster). Both drive each backend through the
lifecycle of `ragbridge.run.lifecycle`.
"""

from __future__ import annotations

import abc
from typing import AsyncContextManager

from ..backend import ScoringContext
from .lifecycle import Job, Record
from .plan import Plan

__all__ = ["Executor", "ExecutorSession"]


class ExecutorSession(abc.ABC):
    """One run's use of an executor (what `Executor.session` gives)."""

    @abc.abstractmethod
    async def score(self, jobs: list[Job], record: Record) -> None:
        """Score ``jobs`` (one batch), calling ``record`` with every score once, as it arrives; return
        when every case of every job has its score. Faults of a backend are its cases' errors; an
        exception leaves only for a failure of the executor itself (a `RunError`)."""


class Executor(abc.ABC):
    """Where the jobs of a run are scored (see the module docstring)."""

    @abc.abstractmethod
    def session(self, plan: Plan, ctx: ScoringContext) -> AsyncContextManager[ExecutorSession]:
        """The executor for one run of ``plan``, with the run's options and judge (``ctx``): entered
        before the first batch, left after the last (also on a failure or an interrupt), when all
        it opened is closed."""
