"""Runs as the analyses read them: a run folder opened with an error that says what is wrong, its
scores as a table of (metric, backend) -> case -> score, paired by case id, and runs of the same
cases scored apart joined into one (`join_runs`), each run's backends a column.

Every analysis counts, per backend, the cases that were ``undefined`` (value null, no error),
``errored`` and ``missing`` (no score line at all), so none is dropped silently; only cases both
sides scored enter a figure.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

from ..errors import UserError
from ..run import Run, RunError, load_run
from ..schema import Case, Score
from ..verdicts import verdict

__all__ = ["AnalysisError", "ScoreTable", "open_run", "join_runs", "judge_of"]


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
    """Scores indexed by (metric, backend) -> case_id -> Score, with the run's case order."""

    run: Run
    by_mb: dict[tuple[str, str], dict[str, Score]]
    case_ids: list[str]
    questions: dict[str, str]

    @classmethod
    def of(cls, run: Run) -> "ScoreTable":
        by_mb: dict[tuple[str, str], dict[str, Score]] = defaultdict(dict)
        for s in run.scores:
            by_mb[(s.metric, s.backend)][s.case_id] = s
        case_ids = [c.id for c in run.cases]
        seen = set(case_ids)
        for s in run.scores:
            if s.case_id not in seen:
                seen.add(s.case_id)
                case_ids.append(s.case_id)
        return cls(run, dict(by_mb), case_ids, {c.id: c.question for c in run.cases})

    def metrics(self) -> list[str]:
        return list(dict.fromkeys(m for m, _ in self.by_mb))

    def backends(self) -> set[str]:
        return {b for _, b in self.by_mb}

    def backends_of(self, metric: str) -> list[str]:
        names = [b for m, b in self.by_mb if m == metric]
        return sorted(names, key=lambda b: (b != "native", b))

    def status_counts(self, metric: str, backend: str) -> dict[str, int]:
        got = self.by_mb.get((metric, backend), {})
        counts = {"scored": 0, "undefined": 0, "errored": 0, "missing": 0}
        for cid in self.case_ids:
            s = got.get(cid)
            if s is None:
                counts["missing"] += 1
            else:
                counts[{"scored": "scored", "undefined": "undefined", "error": "errored"}[s.status]] += 1
        return counts

    def values(self, metric: str, backend: str) -> dict[str, float]:
        return {cid: s.value for cid, s in self.by_mb.get((metric, backend), {}).items()
                if s.status == "scored"}

    def verdicts(self, metric: str, backend: str, threshold: float) -> dict[str, bool]:
        """Each scored case's pass/fail at ``threshold`` (`ragbridge.verdicts.verdict`)."""
        return {cid: bool(verdict(s, threshold)) for cid, s in self.by_mb.get((metric, backend), {}).items()
                if s.status == "scored"}

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
    scores = (s for s in run.scores if s.backend == backend and (metric is None or s.metric == metric))
    if not judge or (backend == "native" and not any(s.judge_calls for s in scores)):
        return None
    return {k: judge.get(k) for k in ("model", "base_url", "stub") if judge.get(k) is not None}


def join_runs(runs: Sequence[Union[Run, str, Path]]) -> Run:
    """Runs of the same golden set scored apart (two judge servers, two days, two judges), as one run
    in memory whose backends are every run's backends, side by side: what ``compare``, ``validate``
    and the report read with ``--with``.

    A backend scored in one run keeps its name; one scored in several runs is a column per run,
    named ``BACKEND@FOLDER`` (the run folder's name), unless it was judged by the same judge (or none)
    and scored the cases the runs share the same (a deterministic backend run again): then it is one
    column, each case's score from the first run that holds it. The manifest's ``columns`` say,
    per column, the run folder, the backend and the judge (model and base URL) it was scored by;
    ``judge`` is the one judge of every column, or None when they differ. Cases are joined by id: a
    case whose content differs between runs is left out (counted in ``joined.differing``, the first
    ids in ``joined.differing_ids``); one that only some runs hold is missing in the others' columns.
    Raises `AnalysisError` when the runs share no case."""
    opened = [open_run(r, f"run {i + 1}") for i, r in enumerate(runs)]
    if len(opened) < 2:
        raise AnalysisError("joining runs takes two or more run folders")
    labels = _run_labels(opened)
    # the cases: one per id, the same in every run that holds it
    cases: dict[str, Case] = {}
    seen_in: dict[str, int] = {}
    differing: list[str] = []
    for r in opened:
        for c in r.cases:
            if c.id not in cases:
                cases[c.id] = c
            elif c != cases[c.id] and c.id not in differing:
                differing.append(c.id)
            seen_in[c.id] = seen_in.get(c.id, 0) + 1
    shared = [cid for cid, n in seen_in.items() if n == len(opened) and cid not in differing]
    if not shared:
        raise AnalysisError(
            "the runs share no case: "
            + "; ".join(f"{labels[i]} holds {len(r.cases)}" for i, r in enumerate(opened))
            + (f"; {len(differing)} case id(s) are in several runs with different content (first: "
               f"{differing[0]!r})" if differing else "")
            + ": join runs made on the same golden set")
    # the columns: a backend per run, renamed where several runs scored it differently
    runs_of: dict[str, list[int]] = {}
    for i, r in enumerate(opened):
        for b in dict.fromkeys(s.backend for s in r.scores):
            runs_of.setdefault(b, []).append(i)
    names = {}
    for b, where in runs_of.items():
        same = _same_everywhere([opened[i] for i in where], b)
        names.update({(i, b): b if same else f"{b}@{labels[i]}" for i in where})
    left_out = set(differing)
    scores, repeats, columns = [], [], {}
    m0 = opened[0].manifest
    backends, metrics, pass_marks, digests, wall = {}, {}, {}, {}, {}
    taken: set[tuple[str, str, str]] = set()
    for (i, b), col in names.items():
        r = opened[i]
        m = r.manifest
        new = {(s.case_id, s.metric) for s in r.scores if s.backend == b and s.case_id not in left_out
               and (col, s.case_id, s.metric) not in taken}  # a backend the same in several: once a case
        taken.update((col, *k) for k in new)
        scores += [s.model_copy(update={"backend": col}) for s in r.scores
                   if s.backend == b and (s.case_id, s.metric) in new]
        repeats += [s.model_copy(update={"backend": col}) for s in r.repeat_scores
                    if s.backend == b and (s.case_id, s.metric) in new]
        if col in columns:
            continue
        columns[col] = {"run": str(r.path) if r.path is not None else labels[i], "backend": b,
                        "version": m.backends.get(b), "judge": judge_of(r, b)}
        backends[col] = m.backends.get(b)
        metrics[col] = list(dict.fromkeys(s.metric for s in r.scores if s.backend == b))
        for target, source in ((pass_marks, m.pass_marks), (digests, m.digests),
                               (wall, (m.timing or {}).get("wall_seconds") or {})):
            if b in source:
                target[col] = source[b]
    judges = {repr(sorted(j.items())) for j in (c["judge"] for c in columns.values()) if j}
    judge = next((c["judge"] for c in columns.values() if c["judge"]), None) if len(judges) == 1 else None
    kept = [c for cid, c in cases.items() if cid not in left_out]
    manifest = m0.model_copy(update={
        "dataset": {**m0.dataset, "n_cases": len(kept)}, "backends": backends, "metrics": metrics,
        "judge": judge, "digests": digests, "pass_marks": pass_marks,
        "started_at": min(r.manifest.started_at for r in opened),
        "finished_at": max((r.manifest.finished_at or "" for r in opened), default="") or None,
        "status": next((r.manifest.status for r in opened if r.manifest.status != "complete"), "complete"),
        "counts": {"scores": len(scores), "scored": sum(s.status == "scored" for s in scores),
                   "undefined": sum(s.status == "undefined" for s in scores),
                   "errored": sum(s.status == "error" for s in scores)},
        "timing": {"wall_seconds": wall}, "process": None,
    }, deep=True)
    manifest.columns = columns
    manifest.joined = {"runs": [str(r.path) if r.path is not None else labels[i]
                                for i, r in enumerate(opened)],
                       "shared": len(shared), "only_in_some": len(kept) - len(shared),
                       "differing": len(differing), "differing_ids": differing[:5]}
    return Run(manifest=manifest, scores=scores, cases=kept, repeat_scores=repeats)


def _run_labels(runs: list[Run]) -> list[str]:
    """A short name per run: its folder's name, numbered where two runs share one."""
    names = [r.path.name if r.path is not None else f"run{i + 1}" for i, r in enumerate(runs)]
    return [n if names.count(n) == 1 else f"{n}-{names[:i + 1].count(n)}" for i, n in enumerate(names)]


def _same_everywhere(runs: list[Run], backend: str) -> bool:
    """Whether ``backend`` was judged by the same judge (or none) in every one of ``runs``, and scored
    each case the runs share the same (a deterministic backend run again): then it is one column."""
    judges = {tuple(sorted((judge_of(r, backend) or {}).items())) for r in runs}
    said: dict[tuple[str, str], tuple] = {}
    for r in runs:
        for s in r.scores:
            if s.backend == backend and said.setdefault((s.case_id, s.metric), (s.value, s.status)) != (
                    s.value, s.status):
                return False
    return len(judges) == 1
