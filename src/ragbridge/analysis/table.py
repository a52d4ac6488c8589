"""Runs as the analyses read them: a run folder opened with an error that says what is wrong, its
scores as a table of (metric, backend) -> case -> score, paired by case id, and runs of the same
cases scored apart joined into one (`join_runs`), each run's backends a column.

Every analysis counts, per backend, the cases that were ``undefined`` (value null, no error),
``errored`` and ``missing`` (no score line at all), so none is dropped silently; only cases both
sides scored enter a figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from ..errors import UserError
from ..run import Run, RunError, load_run
from ..run.case_ids import CaseIds
from ..run.columns import ERROR, CaseIndex, Column, RunColumns
from ..run import progress as clock
from ..run.progress import Steps

__all__ = ["AnalysisError", "ScoreTable", "open_run", "join_runs", "judge_of", "column_named"]


class AnalysisError(UserError, ValueError):
    """An analysis that cannot run as asked (unknown backend or metric, bad labels, nothing to compare)."""


def open_run(run: Union[Run, str, Path, Sequence[Union[Run, str, Path]]], what: str = "",
             error: type = AnalysisError) -> Run:
    """``run`` itself, or the run folder at that path read, or several runs of the same cases read as
    one (`join_runs`); raises ``error`` (its message starting with ``what``, e.g. ``"base run"``) when
    the path is not a run folder."""
    if isinstance(run, Run):
        return run
    if isinstance(run, (list, tuple)):
        return join_runs(run) if len(run) > 1 else open_run(run[0], what, error)
    path = Path(run)
    prefix = f"{what}: " if what else ""
    if not path.exists():
        raise error(f"{prefix}{path} is not a run folder: it does not exist")
    if not path.is_dir():
        raise error(f"{prefix}{path} is not a run folder (a folder written by `ragbridge run`)")
    try:
        return load_run(path)
    except RunError as exc:
        raise error(f"{prefix}{exc}") from None
    except ValueError as exc:  # a damaged cases.jsonl
        raise error(f"{prefix}{path}: {exc}") from None


@dataclass
class ScoreTable:
    """A run's scores as the analyses read them: its columns (`ragbridge.run.columns`), one per
    (backend, metric), each a slot per case in the run's case order."""

    run: Run
    cols: RunColumns

    @classmethod
    def of(cls, run: Run) -> "ScoreTable":
        return cls(run, run.columns)

    @property
    def cases(self) -> CaseIndex:
        return self.cols.cases

    @property
    def case_ids(self) -> CaseIds:
        return self.cols.cases.ids

    def column(self, metric: str, backend: str) -> Optional[Column]:
        return self.cols.column(backend, metric)

    def has(self, metric: str, backend: str) -> bool:
        return (backend, metric) in self.cols.columns

    def keys(self) -> list[tuple[str, str]]:
        """(metric, backend) of every column, in the columns' order."""
        return [(m, b) for b, m in self.cols.columns]

    def metrics(self) -> list[str]:
        return self.cols.metrics()

    def backends(self) -> set[str]:
        return set(self.cols.backends())

    def backends_of(self, metric: str) -> list[str]:
        names = [b for b, m in self.cols.columns if m == metric]
        return sorted(names, key=lambda b: (b != "native", b))

    def status_counts(self, metric: str, backend: str, mask: Optional[np.ndarray] = None) -> dict[str, int]:
        """How many cases (of ``mask``) ``backend`` scored, left undefined, errored or is missing on
        ``metric``."""
        col = self.column(metric, backend)
        if col is None:
            n = len(self.case_ids) if mask is None else int(mask.sum())
            return {"scored": 0, "undefined": 0, "errored": 0, "missing": n}
        return col.counts(mask)

    def select_metrics(self, metrics: Optional[Sequence[str]]) -> list[str]:
        """The metrics asked for (``recall`` names every ``recall@k``); all when none are."""
        have = self.metrics()
        if not metrics:
            return have
        out = []
        for m in metrics:
            hits = [h for h in have if h == m or h.split("@", 1)[0] == m]
            if not hits:
                raise AnalysisError(
                    f"metric {m!r} is not in this run; metrics scored: {', '.join(have) or 'none'}"
                )
            out.extend(h for h in hits if h not in out)
        return out

    def check_backends(self, backends: Optional[Sequence[str]]) -> Optional[set[str]]:
        """The backends asked for, each checked to have scores; None when none are asked for."""
        if not backends:
            return None
        have = self.backends()
        for b in backends:
            if b not in have:
                raise AnalysisError(
                    f"backend {b!r} has no scores in this run; backends: {', '.join(sorted(have)) or 'none'}"
                )
        return set(backends)


# --------------------------------------------------------------------------------------------
# Runs judged apart, read as one


def judge_of(run: Run, backend: str, metric: Optional[str] = None) -> Optional[dict]:
    """The judge ``backend`` (on ``metric``, or on any) was judged by in ``run`` (``model``,
    ``base_url``, ``stub``), or None for a backend no judge scored (native metrics)."""
    judge = run.manifest.judge or {}
    if not judge:
        return None
    if backend == "native" and not any(col.judged for (b, m), col in run.columns.columns.items()
                                       if b == backend and (metric is None or m == metric)):
        return None
    return {k: judge.get(k) for k in ("model", "base_url", "stub") if judge.get(k) is not None}


def join_runs(runs: Sequence[Union[Run, str, Path]]) -> Run:
    """Runs of the same golden set scored apart (two judge servers, two days, two judges), as one run
    whose backends are every run's backends, side by side: what ``compare``, ``validate`` and the
    report read with ``--with``.

    A backend scored in one run keeps its name; one scored in several runs is a column per run,
    named ``BACKEND@FOLDER`` (the run folder's name), unless it was judged by the same judge (or none)
    and scored the cases the runs share the same (a deterministic backend run again): then it is one
    column, each case's score from the first run that holds it. The manifest's ``columns`` say,
    per column, the run folder, the backend and the judge (model and base URL) it was scored by;
    ``judge`` is the one judge of every column, or None when they differ. Cases are joined by id: a
    case whose content differs between runs is left out (counted in ``joined.differing``, the first
    ids in ``joined.differing_ids``); one that only some runs hold is missing in the others' columns.
    Raises `AnalysisError` when the runs share no case.

    The runs are joined in columns (`ragbridge.run.columns`): no score or case is held as an object;
    the joined run's ``scores`` and ``cases`` are read from the runs when asked for."""
    opened = [open_run(r, f"run {i + 1}") for i, r in enumerate(runs)]
    if len(opened) < 2:
        raise AnalysisError("joining runs takes two or more run folders")
    labels = _run_labels(opened)
    cols = [r.columns for r in opened]
    # the cases: one per id, the same in every run that holds it (from the first run that holds it);
    # each run's cases read again to compare them (on the command line, its progress: 35 s a run of a
    # million cases)
    steps = Steps("join", "runs compared") if clock.command_started is not None else Steps.quiet()
    contents = []
    with steps.start(len(cols)):
        for c in cols:
            contents.append(c.cases.contents())
            steps.advance()
    described = [c.cases.ids.taken(np.arange(c.cases.described)) for c in cols]
    firsts: list[np.ndarray] = []  # per run, its cases no run before it holds
    holders = [np.ones(c.cases.described, np.int64) for c in cols]  # per first case, the runs holding it
    differing: list[str] = []
    for k, c in enumerate(cols):
        first_run = np.full(c.cases.described, -1, np.int64)
        first_at = np.full(c.cases.described, -1, np.int64)
        for j in range(k):
            at = cols[j].cases.find(described[k])
            new = (first_run < 0) & (at >= 0) & (at < cols[j].cases.described)
            first_run[new], first_at[new] = j, at[new]
        firsts.append(np.flatnonzero(first_run < 0))
        other = []  # its cases whose content differs from the first run's
        for j in range(k):
            mine = np.flatnonzero(first_run == j)
            np.add.at(holders[j], first_at[mine], 1)
            other.append(mine[(contents[k][mine] != contents[j][first_at[mine]]).any(axis=1)])
        if other:
            differing = list(dict.fromkeys(differing + described[k].take(np.sort(np.concatenate(other)))))
    left_out = set(differing)
    shared = sum(1 for cid in described[0].take(np.flatnonzero(holders[0] == len(opened)))
                 if cid not in left_out)
    if not shared:
        raise AnalysisError(_nothing_shared(opened, labels, differing))
    held = [(k, i) for k in range(len(cols))
            for i, cid in zip(firsts[k].tolist(), described[k].take(firsts[k])) if cid not in left_out]
    only_scored = [cid for c in cols for cid in c.cases.ids[c.cases.described:]
                   if not any(_describes(o.cases, cid) for o in cols)]
    index = CaseIndex.joined([c.cases for c in cols], held, list(dict.fromkeys(only_scored)))
    # the columns: a backend per run, renamed where several runs scored it differently
    runs_of: dict[str, list[int]] = {}
    for i, c in enumerate(cols):
        for b in c.backends():
            runs_of.setdefault(b, []).append(i)
    names = {}
    for b, where in runs_of.items():
        same = _same_everywhere([opened[i] for i in where], b)
        names.update({(i, b): b if same else f"{b}@{labels[i]}" for i in where})
    joined: dict[tuple[str, str], Column] = {}
    sources = [c.cases.find(index.ids) for c in cols]
    columns, backends, metrics, pass_marks, digests, wall = {}, {}, {}, {}, {}, {}
    for (i, b), col in names.items():
        r, m = opened[i], opened[i].manifest
        for (bb, metric), column in cols[i].columns.items():
            if bb == b:
                target = joined.get((col, metric))
                joined[(col, metric)] = column.moved(sources[i], col, target, i, len(opened))
        if col in columns:
            continue
        columns[col] = {"run": str(r.path) if r.path is not None else labels[i], "backend": b,
                        "version": m.backends.get(b), "judge": judge_of(r, b)}
        backends[col] = m.backends.get(b)
        metrics[col] = [metric for bb, metric in cols[i].columns if bb == b]
        for target, source in ((pass_marks, m.pass_marks), (digests, m.digests),
                               (wall, (m.timing or {}).get("wall_seconds") or {})):
            if b in source:
                target[col] = source[b]
    judges = {repr(sorted(j.items())) for j in (c["judge"] for c in columns.values()) if j}
    judge = next((c["judge"] for c in columns.values() if c["judge"]), None) if len(judges) == 1 else None
    both = RunColumns(index, joined, repeats=max(c.repeats for c in cols))
    counts = {"scores": 0, "scored": 0, "undefined": 0, "errored": 0}
    for column in joined.values():
        got = column.counts()
        counts["scores"] += len(index) - got["missing"]
        counts["scored"] += got["scored"]
        counts["undefined"] += got["undefined"]
        counts["errored"] += int((column.status == ERROR).sum())
    m0 = opened[0].manifest
    manifest = m0.model_copy(update={
        "dataset": {**m0.dataset, "n_cases": len(held)}, "backends": backends, "metrics": metrics,
        "judge": judge, "digests": digests, "pass_marks": pass_marks,
        "started_at": min(r.manifest.started_at for r in opened),
        "finished_at": max((r.manifest.finished_at or "" for r in opened), default="") or None,
        "status": next((r.manifest.status for r in opened if r.manifest.status != "complete"), "complete"),
        "counts": counts, "timing": {"wall_seconds": wall}, "process": None,
    }, deep=True)
    from ..run.isolated import changes_of_versions

    manifest.version_changes = changes_of_versions(
        backends, library_of={c: v["backend"] for c, v in columns.items()},
        recorded=[r.manifest.version_changes for r in opened])
    manifest.columns = columns
    manifest.joined = {"runs": [str(r.path) if r.path is not None else labels[i]
                                for i, r in enumerate(opened)],
                       "shared": shared, "only_in_some": len(held) - shared,
                       "differing": len(differing), "differing_ids": differing[:5]}
    return Run(manifest=manifest, columns=both)


def _describes(index: CaseIndex, cid: str) -> bool:
    i = index.place(cid)
    return i is not None and i < index.described


def _nothing_shared(runs: list[Run], labels: list[str], differing: list[str]) -> str:
    """Why runs cannot be joined, and what to run instead: above all, runs of the same case ids whose
    cases differ (two systems' runs of the same questions) are compared, not joined."""
    cols = [r.columns for r in runs]
    held = "; ".join(f"{labels[i]} holds {c.cases.described}" for i, c in enumerate(cols))
    if not differing:
        return f"the runs share no case id ({held}): join runs made on the same golden set"
    digests = [c.cases.golden[i] for c in cols
               if (i := c.cases.place(differing[0])) is not None and i < c.cases.described]
    golden_same = all(bytes(d) == bytes(digests[0]) for d in digests)
    what = ("the same questions, labels and references with other answers or retrieved chunks"
            if golden_same else "other questions, labels or references")
    return (f"the runs hold the same case ids with different content ({held}; {len(differing)} id(s) "
            f"differ, first {differing[0]!r}: {what}): --with joins runs of the same cases scored "
            "apart (other backends or judges), so no case is left to join. To compare two systems' "
            "runs of the same questions, give both runs: ragbridge compare "
            + " ".join(str(r.path or label) for r, label in zip(runs[:2], labels))
            + " (or ragbridge diff BASE NEW)")


def column_named(run: Run, name: str) -> str:
    """The column of runs read side by side that ``name`` means: the name itself, or for
    ``BACKEND@PATH`` (a run folder given by its path, as on the command line: ``native@runs/before``)
    that backend's column of that run (``native@before``)."""
    columns = getattr(run.manifest, "columns", None) or {}
    backend, at, where = name.rpartition("@")
    if name in columns or not at:
        return name
    for col, c in columns.items():
        if c["backend"] == backend and Path(c["run"]).resolve() == Path(where).resolve():
            return col
    return name


def _run_labels(runs: list[Run]) -> list[str]:
    """A short name per run: its folder's name, numbered where two runs share one."""
    names = [r.path.name if r.path is not None else f"run{i + 1}" for i, r in enumerate(runs)]
    return [n if names.count(n) == 1 else f"{n}-{names[:i + 1].count(n)}" for i, n in enumerate(names)]


def _same_everywhere(runs: list[Run], backend: str) -> bool:
    """Whether ``backend`` was judged by the same judge (or none) in every one of ``runs``, and scored
    each case the runs share the same (a deterministic backend run again): then it is one column."""
    judges = {tuple(sorted((judge_of(r, backend) or {}).items())) for r in runs}
    if len(judges) != 1:
        return False
    cols = [r.columns for r in runs]
    for k in range(1, len(cols)):
        for j in range(k):
            here, there = cols[k], cols[j]
            at = there.cases.find(here.cases.ids)
            for (b, metric), col in here.columns.items():
                other = there.column(b, metric) if b == backend else None
                if other is None:
                    continue
                both = (at >= 0) & col.present
                both[both] &= other.present[at[both]]
                a, o = col.value[both], other.value[at[both]]
                same = (col.status[both] == other.status[at[both]]) & ((a == o) | (np.isnan(a) & np.isnan(o)))
                if not same.all():
                    return False
    return True
