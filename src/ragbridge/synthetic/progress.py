"""A generation's progress on stderr: a bar on a terminal, a line every ``RAGBRIDGE_PROGRESS_SECONDS``
(30 s) in a log, as a run shows its own (`ragbridge.run.progress`), counting questions settled."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Optional

from ..run.progress import progress_seconds

__all__ = ["GenerationProgress"]


class GenerationProgress:
    """``advance()`` once per question settled; ``stop()`` at the end (a last line in a log)."""

    def __init__(self, total: int, done: int, gateway: Any) -> None:
        self.total, self.done, self.gateway = total, done, gateway
        self.started = time.monotonic()
        self._bar: Any = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
            from rich.progress import TimeElapsedColumn

            self._bar = Progress(TextColumn("generating"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=Console(stderr=True))
            self._task = self._bar.add_task("generating", total=total, completed=done)
            self._bar.start()
        else:
            self._thread = threading.Thread(target=self._beat, args=(progress_seconds(),), daemon=True,
                                            name="ragbridge-synthesize-progress")
            self._thread.start()

    def advance(self) -> None:
        self.done += 1
        if self._bar is not None:
            self._bar.advance(self._task)

    def line(self) -> str:
        elapsed = int(time.monotonic() - self.started)
        u = self.gateway.usage()
        return (f"progress: {self.done:,} of {self.total:,} questions settled, {u.calls:,} judge calls "
                f"({u.cache_hits:,} cached), {elapsed // 60}m{elapsed % 60:02d}s")

    def _beat(self, every: float) -> None:
        while not self._stop.wait(every):
            print(self.line(), file=sys.stderr, flush=True)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            print(self.line(), file=sys.stderr, flush=True)
