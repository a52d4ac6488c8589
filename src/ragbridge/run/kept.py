"""The scores a resumed run keeps from its earlier sessions, a batch of cases at a time.

A session that resumes a run (or updates it: `ragbridge.run.folder.RunFolder.resume`) keeps every
earlier score that did not fail and was not left unrun by a spent budget, unless its metric was
redefined since; an update keeps only those of its unchanged cases, of the metrics it plans. `Kept`
holds them as the run's columns (`ragbridge.run.recorded.read_columns`: a few bytes a score, its
status and line offset), not as one `Score` object each (a run of 300,000 cases held 1.6 GB that way
when resumed, 3 GB when run again once complete): `batch` reads one batch's kept scores back from
``scores.jsonl``, for the runner to leave out of the batch's jobs and the recorder to count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import numpy as np

from ..schema import Score
from .columns import SCORED, UNDEFINED, RunColumns

__all__ = ["Kept"]


class Kept:
    """The kept scores of a run folder's ``scores.jsonl``, read as ``columns``: those of the columns
    ``wanted(backend, metric)`` says to keep and, when ``cases`` is given, of those case ids only."""

    def __init__(self, path: Path, columns: Optional[RunColumns], wanted: Callable[[str, str], bool],
                 cases: Optional[set[str]] = None):
        # the file as it is now, open: its kept lines are read from it even once an update has put
        # another file in its place
        self._file = open(path, "rb") if columns is not None and columns.columns else None
        self.columns = columns
        self._wanted = {key for key in (columns.columns if columns is not None else ())
                        if wanted(*key)}
        n = len(columns.cases) if columns is not None else 0
        self._case_ok = np.ones(n, bool)
        self._handed = np.zeros(n, bool)  # the cases `batch` handed out
        if cases is not None and n:
            at = columns.cases.find(list(cases))
            self._case_ok[:] = False
            self._case_ok[at[at >= 0]] = True

    def _kept(self, col, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Of the cases at ``at``: each kept score's (case row in ``at``, repeat) and line offset."""
        if col.repeats is not None:
            status, places = col.repeats.status[at], col.repeats.places[at]
        else:
            status, places = col.status[at][:, None], col.places[at][:, None]
        keep = ((status == SCORED) | (status == UNDEFINED)) & self._case_ok[at][:, None]
        rows, repeats = np.nonzero(keep)
        return np.stack([rows, repeats], 1), places[rows, repeats]

    def _all(self) -> Iterator[tuple[tuple[str, str], np.ndarray, np.ndarray]]:
        if self.columns is None:
            return
        at = np.arange(len(self.columns.cases))
        for key in sorted(self._wanted):
            yield (key, *self._kept(self.columns.columns[key], at))

    def __len__(self) -> int:
        return sum(len(places) for _, _, places in self._all())

    def count(self, pairs: set[tuple[str, str]]) -> int:
        """How many of the (backend, metric) ``pairs``' scores are kept."""
        return sum(len(places) for key, _, places in self._all() if key in pairs)

    @property
    def repeated(self) -> bool:
        """Whether a kept score is of a repeat beyond the first."""
        return any(bool((kept[:, 1] > 0).any()) for _, kept, _ in self._all())

    def places(self) -> np.ndarray:
        """The line offset of every kept score, in the order of the file."""
        got = [places for _, _, places in self._all()]
        return np.sort(np.concatenate(got)) if got else np.zeros(0, np.int64)

    def lines(self, places: Sequence[int]) -> list[bytes]:
        """The lines at ``places`` (each without its line break)."""
        from .recorded import lines_at

        got = lines_at(self._file, places)
        return [got[p] for p in places]

    def batch(self, ids: Sequence[str]) -> dict[tuple[str, str, str, int], Score]:
        """The kept scores of the cases ``ids``, by `Score.repeat_key`, read back from the file."""
        from .recorded import scores_from_lines

        if self._file is None or not self._wanted:
            return {}
        at = self.columns.cases.find(list(ids))
        at = at[at >= 0]
        self._handed[at] = True
        places = [self._kept(self.columns.columns[key], at)[1] for key in sorted(self._wanted)]
        wanted = np.sort(np.concatenate(places)) if places else np.zeros(0, np.int64)
        return {s.repeat_key: s for s in scores_from_lines(self.lines(wanted.tolist()))}

    def rest(self, size: int = 2000) -> Iterator[tuple[dict[tuple[str, str, str, int], Score],
                                                      dict[str, tuple[str, ...]]]]:
        """The kept scores of the cases no `batch` asked for (a session interrupted before it reached
        them), ``size`` cases at a time: each block's scores as `batch` gives them, and its cases' tags."""
        if self._file is None or not self._wanted:
            return
        index = self.columns.cases
        left = np.flatnonzero(~self._handed & self._case_ok)
        for i in range(0, len(left), size):
            at = left[i:i + size]
            ids = index.ids.take(at.tolist())
            tags = {cid: index.tags[k] for cid, k in zip(ids, at.tolist()) if index.tags[k]}
            yield self.batch(ids), tags

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
