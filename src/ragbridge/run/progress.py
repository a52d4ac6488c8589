"""A run's progress: a bar in a notebook or on a terminal, a line every `progress_seconds` in a log.

`progress_display` picks one (or none); the runner starts it, the recorder advances it with each
score, and the runner stops it at the end of the run. In a Jupyter kernel (`in_notebook`) the bar is
the cell's own output, redrawn in place (an HTML ``<progress>`` with a line of text, through
IPython's display handles: no widget library needed) and left showing how the run ended; the Python
API shows it by default there (``evaluate(progress=None)``) and nowhere else.
"""

from __future__ import annotations

import html
import math
import os
import sys
import threading
import time
from typing import Any, Optional, Union

__all__ = ["PROGRESS_SECONDS", "Bar", "NotebookBar", "Lines", "Steps", "in_notebook", "progress_seconds",
           "progress_display"]

#: how often a run whose stderr is not a terminal prints a progress line (`progress_seconds`)
PROGRESS_SECONDS = 30.0

#: when the command line's command started (a `time.monotonic` reading, set by ``run_cli`` while it
#: runs, else None): the clock of a `Steps`' log lines, so that every part of a command counts from
#: its start, reading the run included
command_started: Optional[float] = None


class Bar:
    """The progress bar on stderr, redrawn at most every 0.1 s."""

    def __init__(self, total: int, label: str = "scoring"):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        from rich.progress import TimeRemainingColumn

        self.progress = Progress(
            TextColumn(label),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.task = self.progress.add_task(label, total=total)
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


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


class NotebookBar:
    """The progress bar of a notebook cell: one output, updated in place at most every
    `NotebookBar.every` seconds (each update is a message to the notebook), ending as the run ended."""

    every = 0.2

    def __init__(self, total: int, label: str = "scoring"):
        from IPython.display import display

        self.total, self.label, self.done, self.errors = total, label, 0, 0
        self.started = self._last = time.monotonic()
        self._handle = display(self._bundle(), raw=True, display_id=True)

    def _bundle(self, finished: bool = False) -> dict[str, str]:
        elapsed = time.monotonic() - self.started
        share = self.done / self.total if self.total else 1.0
        parts = [f"{self.label} {self.done:,}/{self.total:,}", _clock(elapsed)]
        if finished:
            parts[0] = f"{self.label}: {self.done:,} of {self.total:,} done"
            parts[1] = f"in {_clock(elapsed)}"
        elif 0 < share < 1 and elapsed > 1:
            parts.append(f"~{_clock(elapsed / share - elapsed)} left")
        if self.errors:
            parts.append(f"{self.errors:,} error(s)")
        text = ", ".join(parts)
        bar = (f'<progress value="{self.done}" max="{max(self.total, 1)}" '
               f'style="width:20em;vertical-align:middle"></progress>')
        return {"text/plain": text, "text/html": f"<div>{bar} {html.escape(text)}</div>"}

    def advance(self, n: int = 1, errors: int = 0) -> None:
        self.done += n
        self.errors += errors
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            self._handle.update(self._bundle(), raw=True)

    def stop(self) -> None:
        self._handle.update(self._bundle(finished=True), raw=True)


class Lines:
    """Progress in a log (stderr is not a terminal: a CI job, a pipe): one line every
    `progress_seconds`, however long the wait for the judge, then one at the end: the scores done of
    those planned, how many errored, the judge calls (and answers from its cache) and their cost."""

    def __init__(self, total: int, gateway: Any, every: float, noun: str = "scores", label: str = ""):
        self.total, self.done, self.errors, self.gateway, self.noun = total, 0, 0, gateway, noun
        self.label, self._said = label, None
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
        text = f"progress: {self.done:,} of {self.total:,} {self.noun} ({self.done / self.total:.0%}), "
        if self.label:  # an analysis: its steps, no errors or judge to count
            return f"{self.label} {text}{elapsed // 60}m{elapsed % 60:02d}s"
        text += f"{self.errors:,} error(s)" if self.errors else "no error"
        if self.gateway is not None:
            u = self.gateway.usage()
            cost = u.known_cost
            if u.calls or u.cache_hits:
                text += f", {u.calls:,} judge calls ({u.cache_hits:,} cached)"
                text += f", cost {cost:.4f}" if cost else ""
            else:
                text += ", no judge call yet"
        return text + f", {elapsed // 60}m{elapsed % 60:02d}s"

    def say(self, if_moved: bool = False) -> None:
        """Print the line, unless it is the one printed last (``if_moved``: or it says the same but for
        the time: the last line of a log says where the work ended, once)."""
        text = self.line()
        if text != self._said and not (if_moved and self._said is not None
                                        and text.rsplit(", ", 1)[0] == self._said.rsplit(", ", 1)[0]):
            print(text, file=sys.stderr, flush=True)
            self._said = text

    def _beat(self, every: float) -> None:
        while not self._stop.wait(every):
            self.say()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.say(if_moved=True)


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (its output is shown by a notebook, which shows
    HTML), as opposed to a script, a terminal IPython or the command line."""
    ipython = sys.modules.get("IPython")  # a kernel has imported it; nothing else is imported here
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def progress_seconds(floor: float = 0.05) -> float:
    """How often a run in a log prints its progress line: ``RAGBRIDGE_PROGRESS_SECONDS`` (at least
    ``floor``), else 30 s (CI services stop a job that prints nothing for 10 minutes)."""
    try:
        return max(floor, float(os.environ.get("RAGBRIDGE_PROGRESS_SECONDS", PROGRESS_SECONDS)))
    except ValueError:
        return PROGRESS_SECONDS


def progress_display(enabled: Optional[bool], total: int, gateway: Any = None, label: str = "scoring",
                     noun: str = "scores") -> Optional[Union[Bar, NotebookBar, Lines]]:
    """A progress bar in a notebook or on a terminal, progress lines in a log, or nothing.
    ``enabled=None``: a bar in a notebook, nothing elsewhere (the Python API's default)."""
    notebook = in_notebook()
    if not (notebook if enabled is None else enabled) or not total:
        return None
    if notebook:
        return NotebookBar(total, label)
    return Bar(total, label) if sys.stderr.isatty() else Lines(total, gateway, progress_seconds(), noun)


class Steps:
    """The progress of a long analysis (``diff``, ``compare``): `start` with its number of steps (in a
    ``with`` block), one `advance` a step, `stop` at the end; shown (a bar on a terminal, a line every
    `progress_seconds` in a log) only once it has taken `after` seconds (default 2 s, or the progress
    interval when shorter): a quick one prints nothing. A log's lines count the time from the command
    line's command's start (`command_started`); outside a command, from ``since`` (a `time.monotonic`
    reading: the start of a report's several parts), else from `start`."""

    def __init__(self, label: str, noun: str, after: Optional[float] = None, since: Optional[float] = None):
        self.label, self.noun, self.since = label, noun, since  # since: the clock of a log's lines
        self.after = min(2.0, progress_seconds(floor=0.0)) if after is None else after
        self.total, self.done, self._shown = 0, 0, None
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._timer: Optional[threading.Timer] = None

    def start(self, total: int) -> "Steps":
        """Begin ``total`` steps: shown `after` seconds from now if not all done by then (a first step
        that takes minutes is shown at once, not when it ends)."""
        self.total, self.done, self._started = total, 0, time.monotonic()
        if total and math.isfinite(self.after):
            self._timer = threading.Timer(self.after, self._appear)
            self._timer.daemon = True
            self._timer.start()
        return self

    def _appear(self) -> None:
        with self._lock:
            if self._shown is None and self.done < self.total:
                self._show()

    def _show(self) -> None:
        if sys.stderr.isatty():
            self._shown = Bar(self.total, self.label)
            self._shown.advance(self.done)
        else:  # a line at once, then at the interval, its time counted from the start (or ``since``)
            self._shown = Lines(self.total, None, progress_seconds(), self.noun, self.label)
            since = command_started if command_started is not None else self.since
            self._shown.started = self._started if since is None else since
            self._shown.done = self.done
            self._shown.say()

    def advance(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
            if self._shown is not None:
                self._shown.advance(n)
            elif self.done < self.total and time.monotonic() - self._started >= self.after:
                self._show()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        with self._lock:
            if self._shown is not None:
                self._shown.stop()
                self._shown = None

    def __enter__(self) -> "Steps":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @classmethod
    def quiet(cls) -> "Steps":
        """Steps never shown (an analysis called without ``progress``)."""
        return cls("", "", after=float("inf"))
