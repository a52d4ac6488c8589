"""The local executor: a run's jobs scored in this process, on the runner's event loop (the default).

Each backend is opened when the first job that needs it arrives (its environment defaults applied,
then ``open``: `ragbridge.run.lifecycle`), once for the run, and every backend opened is closed when
the session ends. So a backend whose every score is resumed or found in the score cache is never
opened, and its library is never imported. A batch's jobs run concurrently; each score is recorded
as it arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator

from ..backend import Backend, ScoringContext
from .executor import Executor, ExecutorSession
from .lifecycle import Job, Record, applied_environment, close_session, drive_job, open_session
from .plan import Plan

__all__ = ["LocalExecutor"]


class LocalExecutor(Executor):
    """Score in this process (see the module docstring)."""

    @contextlib.asynccontextmanager
    async def session(self, plan: Plan, ctx: ScoringContext) -> AsyncIterator["_Backends"]:
        backends = _Backends(ctx)
        try:
            yield backends
        finally:
            await backends.close()


class _Backends(ExecutorSession):
    """The backends of one run, each opened on its first job and kept until `close`."""

    def __init__(self, ctx: ScoringContext):
        self.ctx = ctx
        self.contexts: dict[str, ScoringContext] = {}
        self.opened: list[Backend] = []
        self.environment = contextlib.ExitStack()
        self._opening: dict[str, asyncio.Lock] = {}

    async def context(self, backend: Backend) -> ScoringContext:
        """The backend's context for this run, opening it first if this is its first job."""
        name = backend.name
        if name not in self.contexts:
            async with self._opening.setdefault(name, asyncio.Lock()):
                if name not in self.contexts:
                    self.environment.enter_context(applied_environment(backend.environment()))
                    self.contexts[name] = await open_session(backend, self.ctx)
                    self.opened.append(backend)
        return self.contexts[name]

    async def score(self, jobs: list[Job], record: Record) -> None:
        queue: asyncio.Queue = asyncio.Queue()

        async def run(job: Job) -> None:
            backend, metric, cases, repeat = job
            await drive_job(backend, metric, cases, await self.context(backend), queue, repeat=repeat)

        tasks = [asyncio.create_task(run(job)) for job in jobs]
        try:
            remaining = sum(len(cases) for _, _, cases, _ in jobs)
            while remaining:
                remaining -= record(await queue.get())
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()

    async def close(self) -> None:
        """Close every backend opened (the last opened first), then restore the environment."""
        try:
            for backend in reversed(self.opened):
                await close_session(backend, self.contexts[backend.name])
        finally:
            self.opened = []
            self.environment.close()
