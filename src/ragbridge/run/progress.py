"""A run's progress on stderr: a bar on a terminal, a line every `progress_seconds` in a log.

`progress_display` picks one (or none); the runner starts it, the recorder advances it with each
score, and the runner stops it at the end of the run.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Optional, Union

__all__ = ["PROGRESS_SECONDS", "Bar", "Lines", "progress_seconds", "progress_display"]

#: how often a run whose stderr is not a terminal prints a progress line (`progress_seconds`)
PROGRESS_SECONDS = 30.0


class Bar:
    """The progress bar on stderr, redrawn at most every 0.1 s."""

    def __init__(self, total: int):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        from rich.progress import TimeRemainingColumn

        self.progress = Progress(
            TextColumn("scoring"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.task = self.progress.add_task("scoring", total=total)
        self.progress.start()
        self._last = 0.0
        self._pending = 0

    def advance(self, n: int = 1, errors: int = 0) -> None:
        self._pending += n
        now = time.monotonic()
        if now - self._last > 0.1:
            self.progress.advance(self.task, self._pending)
            self._pending = 0
            self._last = now

    def stop(self) -> None:
        self.progress.advance(self.task, self._pending)
        self.progress.stop()


class Lines:
    """Progress in a log (stderr is not a terminal: a CI job, a pipe): one line every
    `progress_seconds`, however long the wait for the judge, then one at the end: the scores done of
    those planned, how many errored, the judge calls (and answers from its cache) and their cost."""

    def __init__(self, total: int, gateway: Any, every: float):
        self.total, self.done, self.errors, self.gateway = total, 0, 0, gateway
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(every,), name="ragbridge-progress",
                                        daemon=True)
        self._thread.start()

    def advance(self, n: int = 1, errors: int = 0) -> None:
        self.done += n
        self.errors += errors

    def line(self) -> str:
        elapsed = int(time.monotonic() - self.started)
        text = (f"progress: {self.done:,} of {self.total:,} scores ({self.done / self.total:.0%}), "
                + (f"{self.errors:,} error(s)" if self.errors else "no error"))
        if self.gateway is not None:
            u = self.gateway.usage()
            cost = u.known_cost
            if u.calls or u.cache_hits:
                text += f", {u.calls:,} judge calls ({u.cache_hits:,} cached)"
                text += f", cost {cost:.4f}" if cost else ""
            else:
                text += ", no judge call yet"
        return text + f", {elapsed // 60}m{elapsed % 60:02d}s"

    def _beat(self, every: float) -> None:
        while not self._stop.wait(every):
            print(self.line(), file=sys.stderr, flush=True)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        print(self.line(), file=sys.stderr, flush=True)


def progress_seconds() -> float:
    """How often a run in a log prints its progress line: ``RAGBRIDGE_PROGRESS_SECONDS``, else 30 s
    (CI services stop a job that prints nothing for 10 minutes)."""
    try:
        return max(0.05, float(os.environ.get("RAGBRIDGE_PROGRESS_SECONDS", PROGRESS_SECONDS)))
    except ValueError:
        return PROGRESS_SECONDS


def progress_display(enabled: bool, total: int, gateway: Any = None) -> Optional[Union[Bar, Lines]]:
    """A progress bar on a terminal, progress lines in a log, or nothing."""
    if not enabled or not total:
        return None
    return Bar(total) if sys.stderr.isatty() else Lines(total, gateway, progress_seconds())
