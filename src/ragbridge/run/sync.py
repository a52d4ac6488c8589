"""Running a coroutine to the end from synchronous code, whether or not an event loop is running.

`run_sync` is ``asyncio.run`` where no event loop runs in the calling thread (a script, the command
line). Where one does (a Jupyter cell, an async application calling synchronous code) the coroutine
runs in a worker thread, on an event loop of its own, while the calling thread waits: the caller's
loop is neither patched nor re-entered, and it is blocked for as long as the call takes, as by any
synchronous call. The worker thread runs in a copy of the caller's context (`contextvars`).

An interrupt of the waiting thread (Ctrl-C, a notebook's "interrupt kernel") cancels the coroutine,
waits for it to finish cancelling (a run records itself as interrupted, as under ``asyncio.run``),
and is raised. Objects bound to the caller's loop (an async HTTP client made there, say) cannot be
used from the worker's loop: code that has them awaits the coroutine itself instead.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any, Coroutine, TypeVar

__all__ = ["run_sync"]

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """The result of ``coro``, run to the end (see the module docstring)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    return _in_worker_thread(coro)


def _in_worker_thread(coro: Coroutine[Any, Any, T]) -> T:
    box: dict[str, Any] = {}

    async def main() -> T:
        box["loop"], box["task"] = asyncio.get_running_loop(), asyncio.current_task()
        if box.get("cancel"):  # interrupted before the task existed
            coro.close()
            raise asyncio.CancelledError
        return await coro

    def work() -> None:
        try:
            box["result"] = asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = exc

    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(work,), name="ragbridge-run", daemon=True)
    thread.start()
    try:
        thread.join()
    except KeyboardInterrupt:
        box["cancel"] = True
        loop, task = box.get("loop"), box.get("task")
        if loop is not None and task is not None:
            loop.call_soon_threadsafe(task.cancel)
        thread.join()
        raise
    if "error" in box:
        raise box.pop("error")
    return box["result"]
