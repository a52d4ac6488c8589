"""Item-level diff of two run folders, with paired statistics.

Cases are paired by id. For every (backend, metric) scored in both runs, and for every tag, the diff
gives the change in mean over the cases scored in both runs, a paired bootstrap confidence interval
of that change and a paired permutation test p-value; then, case by case, what got worse, what got
better, and what changed status (a score that became an error or undefined, or the reverse).
Nothing is dropped silently: cases present in one run only, metrics scored in one run only, and scores
that are not numbers in one of the runs are all listed.

Statistics (`ragbridge.analysis.stats`; both seeded and reproducible; the seed of each group is
derived from ``seed`` and the group's name, so filtering metrics or tags does not change the other
groups' numbers; both from `stats.mean_shift`, as ``compare A B`` and the report compute them):

- the interval is the paired bootstrap interval of the mean difference (`stats.paired_bootstrap_ci`,
  ``n_resamples`` times, default 2000);
- the p-value is a paired permutation test (`stats.paired_permutation_pvalue`: the two values of a
  case are swapped at random, a sign flip of the difference, ``n_permutations`` times, default
  9999), exact (every sign pattern enumerated) when at most ``log2(n_permutations)`` cases changed.

From Python::

    from ragbridge.analysis import diff_runs
    d = diff_runs("runs/main", "runs/pr")      # RunDiff: .summary, .items (DataFrames), .worse(), .better()

Size: the pairing, the groups by tag, the summary and the case rows are one computation over the
same paired columns (a million cases' rows are made from them a block at a time, never held), so they
stay in one module.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np

from ..run import Run
from ..run.case_ids import CaseIds
from ..run.progress import Steps
from ..run.columns import ERROR, GOLDEN_FIELDS, MISSING, SCORED, STATUS_NAMES, CaseIndex
from ..run.summary import ALL
from ..schema import clean_tags
from .stats import (
    DEFAULT_PERMUTATIONS,
    DEFAULT_RESAMPLES,
    EPS,
    mean_shift,
    thread_pool,
    threads,
)
from .noise import mde, noise_band, noise_figures, repeat_scores, repeats_of, within_judge_noise
from .rows import Rows
from .table import AnalysisError, open_run
from .versions import nothing_in_common, version_change_warnings

__all__ = [
    "RegressionError",
    "IncompleteRunError",
    "RunDiff",
    "diff_runs",
    "run_problems",
    "require_complete",
    "dataset_changes",
    "dataset_change_message",
    "definition_changes",
    "definition_change_message",
    "GOLDEN_FIELDS", "noise_of",
]

SUMMARY_COLUMNS = [
    "backend", "metric", "tag", "n_paired", "base_mean", "new_mean", "delta", "ci_low", "ci_high",
    "p_value", "n_worse", "n_better", "n_same", "n_status_changed", "noise_band", "within_noise", "mde",
]
ITEM_COLUMNS = [
    "backend", "metric", "case_id", "tags", "base_value", "new_value", "delta", "base_status",
    "new_status", "change", "base_error", "new_error",
]


class RegressionError(AnalysisError):
    """Bad input to a diff or a gate (not a run folder, nothing to compare, a bad gates file)."""


class IncompleteRunError(RegressionError):
    """A run folder whose run did not finish (killed, interrupted, or still running)."""

    def __init__(self, message: str, run: Optional[Run] = None, problems: Sequence[str] = ()):
        super().__init__(message)
        self.run = run
        self.problems = list(problems)


# --------------------------------------------------------------------------------------------
# Run folders


_STATUS_MEANING = {
    "running": "it is still running (a run whose process is gone reads as interrupted)",
    "interrupted": "it was interrupted before it finished",
    "incomplete": "some scores it planned are missing",
}


def run_problems(run: Run) -> list[str]:
    """Why ``run`` is not a finished run (an empty list when it is)."""
    problems = []
    status = run.manifest.status
    if status != "complete":
        problems.append(f"status {status!r}: {_STATUS_MEANING.get(status, 'not complete')}")
    cols = run.columns
    described = cols.cases.described
    n = described or len(cols.cases)
    n_cases = run.manifest.dataset.get("n_cases")
    if described and isinstance(n_cases, int) and n_cases != described:
        problems.append(f"run.json says {n_cases} cases but cases.jsonl holds {described}")
    planned = [(b, m) for b, ms in run.manifest.metrics.items() for m in ms]
    expected = len(planned) * n
    missing = 0
    for b, m in planned:
        col = cols.column(b, m)
        missing += n if col is None else int((col.status[:n] == MISSING).sum())
    if missing:
        problems.append(f"{missing} of {expected} planned scores are missing from scores.jsonl")
    return problems


def require_complete(run: Run, what: str = "run", hint: str = "") -> None:
    """Raise `IncompleteRunError` when ``run`` did not finish."""
    problems = run_problems(run)
    if problems:
        where = f" {run.path}" if run.path else ""
        raise IncompleteRunError(
            f"{what}{where} is incomplete ({'; '.join(problems)}); resume it by running the same "
            f"`ragbridge run` command again" + (f", {hint}" if hint else ""),
            run=run,
            problems=problems,
        )


def dataset_change_message(golden_changed: Sequence[str], added: int, removed: int) -> str:
    """What a differing dataset fingerprint means for a comparison, in one sentence."""
    if not golden_changed and not added and not removed:
        return (
            "the dataset fingerprints differ, but the golden items (questions, labels, references, "
            "checks) are the same: only the system outputs (answers, retrieved contexts) changed"
        )
    parts = []
    if golden_changed:
        shown = ", ".join(golden_changed[:10]) + (" ..." if len(golden_changed) > 10 else "")
        parts.append(
            f"the golden items changed on {len(golden_changed)} paired case(s) (a change there is a "
            f"changed test, not a changed system): {shown}"
        )
    if added or removed:
        parts.append(f"{added} case(s) added and {removed} removed")
    return "the runs are over different dataset versions (fingerprints differ): " + "; ".join(parts)


def definition_changes(base: Run, new: Run) -> dict[tuple[str, str], tuple[str, str]]:
    """``(backend, metric) -> (base digest, new digest)`` for each metric both runs judged by a
    different definition (a rubric's content hash, run.json ``digests``)."""
    return {(b, m): (d, new.manifest.digests[b][m]) for b, ds in base.manifest.digests.items()
            for m, d in ds.items() if new.manifest.digests.get(b, {}).get(m, d) != d}


def definition_change_message(backend: str, metric: str, digests: tuple[str, str]) -> str:
    return (f"{backend}:{metric} was judged by a different rubric in the two runs (hash {digests[0]} -> "
            f"{digests[1]}): its change measures the rubric as much as the system; score both runs with "
            "the same rubric (ragbridge rescore ... --rubric FILE)")


def dataset_changes(base: Run, new: Run) -> tuple[bool, list[str], int, int]:
    """(fingerprints differ, ids of paired cases whose golden items differ, cases added, cases removed)."""
    fb, fn = base.manifest.dataset.get("fingerprint"), new.manifest.dataset.get("fingerprint")
    bc, nc = base.columns.cases, new.columns.cases
    changed = _golden_changed(bc, nc, np.arange(nc.described))
    in_base = bc.find(nc.ids.taken(np.arange(nc.described)))
    in_new = nc.find(bc.ids.taken(np.arange(bc.described)))
    added = int(((in_base < 0) | (in_base >= bc.described)).sum())
    removed = int(((in_new < 0) | (in_new >= nc.described)).sum())
    return bool(fb and fn and fb != fn), changed, added, removed


def _golden_changed(bc: CaseIndex, nc: CaseIndex, where: np.ndarray) -> list[str]:
    """The ids of the cases at ``where`` (in order) in ``nc`` that ``bc`` describes too, with other
    golden items."""
    where = where[where < nc.described]
    j = bc.find(nc.ids.taken(where))
    both = (j >= 0) & (j < bc.described)
    where, j = where[both], j[both]
    return nc.ids.take(where[nc.golden_differs(where, bc, j)])


# --------------------------------------------------------------------------------------------
# The diff


#: the change of a paired score, as a code: the same value, worse, better, or another status
_SAME, _WORSE, _BETTER, _STATUS = 0, 1, 2, 3


@dataclass
class _Paired:
    """The paired scores of one (backend, metric): per paired case (in the new run's order) its place
    in each run, both statuses and values, the change (`_SAME` ...) and the value's delta."""

    backend: str
    metric: str
    new_at: np.ndarray
    base_at: np.ndarray
    base_status: np.ndarray
    new_status: np.ndarray
    base_value: np.ndarray
    new_value: np.ndarray
    change: np.ndarray
    delta: np.ndarray
    base_col: Any
    new_col: Any


class RunDiff:
    """The diff of two runs. ``summary`` and ``items`` are pandas DataFrames (``items``, a row per
    paired score, is made when first asked for: `item_rows` gives the same rows one at a time)."""

    def __init__(self, base: Run, new: Run, summary: Any, paired: list[_Paired],
                 tags_of: Callable[[int], list[str]],
                 only_in_base: Optional[list[str]] = None, only_in_new: Optional[list[str]] = None,
                 metrics_only_in_base: Optional[list[tuple[str, str]]] = None,
                 metrics_only_in_new: Optional[list[tuple[str, str]]] = None,
                 fingerprint_differs: bool = False,
                 golden_changed: Optional[list[str]] = None, warnings: Optional[list[str]] = None,
                 confidence: float = 0.95, n_resamples: int = DEFAULT_RESAMPLES,
                 n_permutations: int = DEFAULT_PERMUTATIONS, seed: int = 0):
        self.base, self.new, self.summary = base, new, summary
        self._paired, self._tags_of = paired, tags_of
        self.only_in_base, self.only_in_new = only_in_base or [], only_in_new or []
        self.metrics_only_in_base = metrics_only_in_base or []
        self.metrics_only_in_new = metrics_only_in_new or []
        self.fingerprint_differs = fingerprint_differs
        self.golden_changed = golden_changed or []
        self.warnings = warnings or []
        self.confidence, self.n_resamples, self.n_permutations, self.seed = (
            confidence, n_resamples, n_permutations, seed)
        self._items = None

    def __repr__(self) -> str:  # one line: the frames hold a row per paired score
        t = self.totals()
        return (
            f"RunDiff({str(self.base.path)!r} -> {str(self.new.path)!r}, {t['paired_scores']} paired scores: "
            f"{t['worse']} worse, {t['better']} better, {t['status_changed']} changed status)"
        )

    def totals(self) -> dict[str, int]:
        """How many paired scores there are, and how many got worse, better or changed status."""
        counts = np.zeros(4, np.int64)
        for p in self._paired:
            counts += np.bincount(p.change, minlength=4)
        return {"paired_scores": int(counts.sum()), "worse": int(counts[_WORSE]),
                "better": int(counts[_BETTER]),
                "status_changed": int(counts[_STATUS])}

    @property
    def items(self):
        """Every paired score: one row per (backend, metric, paired case), ``ITEM_COLUMNS``."""
        import pandas as pd

        if self._items is None:
            self._items = pd.DataFrame(list(self.item_rows()), columns=ITEM_COLUMNS)
        return self._items

    def item_rows(self, change: Optional[Sequence[int]] = None, backend: Optional[str] = None,
                  metric: Optional[str] = None, order: Optional[str] = None,
                  top: Optional[int] = None) -> Rows:
        """The rows of `items` (those whose change is one of ``change``, of ``backend`` and ``metric``),
        made as they are read; ``order``: ``"worse"`` (the largest drop first) or ``"better"`` (the
        largest gain first), else the items' order; ``top``: the first so many."""
        parts, picks = [], []
        for p in self._paired:
            if (backend is not None and p.backend != backend) or (metric is not None and p.metric != metric):
                continue
            pick = (np.flatnonzero(np.isin(p.change, change)) if change is not None
                    else np.arange(len(p.change)))
            parts.append(p)
            picks.append(pick.astype(np.int32) if len(p.change) < 2**31 else pick)
        # (the narrowest integers that hold them: a million cases' changed scores are millions of rows)
        part_type = np.int16 if len(parts) < 2**15 else np.int64
        part_of = np.concatenate([np.full(len(k), j, part_type) for j, k in enumerate(picks)]
                                 or [np.empty(0, part_type)])
        row_of = np.concatenate(picks or [np.empty(0, np.int64)])
        del picks
        if order is not None and len(row_of):  # (each part's columns picked at once)
            delta = np.empty(len(row_of))
            names = sorted({(p.backend, p.metric) for p in parts})
            key_rank = {k: r for r, k in enumerate(names)}
            pair_rank = np.empty(len(row_of), part_type)
            ranks = np.asarray(self.new.columns.cases.id_rank())
            id_rank = np.empty(len(row_of), np.int32 if len(ranks) < 2**31 else np.int64)
            for j, p in enumerate(parts):
                mine = np.flatnonzero(part_of == j)
                k = row_of[mine]
                delta[mine] = p.delta[k]
                pair_rank[mine] = key_rank[(p.backend, p.metric)]
                id_rank[mine] = ranks[p.new_at[k]]
            at = np.lexsort((id_rank, pair_rank, delta if order == "worse" else -delta))
            del delta, pair_rank, id_rank
            part_of, row_of = part_of[at], row_of[at]
        if top is not None:
            part_of, row_of = part_of[:top], row_of[:top]
        ids = self.new.columns.cases.ids

        def make(start: int, stop: int) -> list[dict]:
            where = [(parts[j], k) for j, k in zip(part_of[start:stop].tolist(), row_of[start:stop].tolist())]
            rows = _items(parts, part_of[start:stop], row_of[start:stop], ids, self._tags_of)
            _errors(rows, where)
            return rows
        return Rows(len(row_of), make, plain=True)

    def rows(self, kind: str, backend: Optional[str] = None, metric: Optional[str] = None,
             top: Optional[int] = None) -> Rows:
        """The rows of `worse` (``kind`` ``"worse"``), `better` or `status_changes` (``"status"``),
        made as they are read."""
        change, order = {"worse": ([_WORSE], "worse"), "better": ([_BETTER], "better"),
                         "status": ([_STATUS], None)}[kind]
        return self.item_rows(change, backend, metric, order, top)

    def worse(self, backend: Optional[str] = None, metric: Optional[str] = None, top: Optional[int] = None):
        """Cases scored in both runs whose value went down, the largest drop first."""
        return self._frame(self.item_rows([_WORSE], backend, metric, "worse", top))

    def better(self, backend: Optional[str] = None, metric: Optional[str] = None, top: Optional[int] = None):
        """Cases scored in both runs whose value went up, the largest gain first."""
        return self._frame(self.item_rows([_BETTER], backend, metric, "better", top))

    def status_changes(self, backend: Optional[str] = None, metric: Optional[str] = None):
        """Cases whose score changed kind: a number that became an error or undefined, or the reverse."""
        return self._frame(self.item_rows([_STATUS], backend, metric))

    @staticmethod
    def _frame(rows: Rows):
        import pandas as pd

        return pd.DataFrame(list(rows), columns=ITEM_COLUMNS)


def _tag_masks(bc: Any, nc: Any, paired: np.ndarray) -> dict[str, np.ndarray]:
    """For each tag, which paired cases (the new run's cases ``paired``) carry it: the new run's tags,
    or the base run's for a case the new run only scored (no Python object a case)."""
    described = paired < nc.described
    new_tags = set(nc.all_tags())
    tags = set(new_tags)
    rest = paired[~described]
    base_tags = {}
    if len(rest):  # cases the new run holds only scores of: their tags from the base run, if it has them
        places = [bc.place(nc.ids[int(i)]) for i in rest]
        base_tags = {k: tuple(bc.tags[j]) for k, j in enumerate(places) if j is not None and j < bc.described}
        tags |= {t for ts in base_tags.values() for t in ts}
    masks = {}
    for t in sorted(tags):
        mask = np.zeros(len(paired), bool)
        if t in new_tags:
            mask[described] = nc.tag_mask(t)[paired[described]]
        if len(rest):
            mask[np.flatnonzero(~described)] = [t in base_tags.get(k, ()) for k in range(len(rest))]
        masks[t] = mask
    return masks


def _items(parts: list[_Paired], part_of: np.ndarray, row_of: np.ndarray, ids: Any,
           tags_of: Callable[[int], list[str]]) -> list[dict]:
    """The rows of a diff's items for the paired scores ``row_of`` of ``parts[part_of]``, a part's
    columns read at once: JSON-ready as made (plain values, None for a value or delta that is not a
    finite number)."""
    rows: list = [None] * len(row_of)
    for j in np.unique(part_of).tolist():
        sel = np.flatnonzero(part_of == j)
        p, k = parts[j], row_of[sel]
        codes = zip(p.base_status[k].tolist(), p.new_status[k].tolist(), p.change[k].tolist())
        values = (p.base_value[k].tolist(), p.new_value[k].tolist(), p.delta[k].tolist())
        for n, i, (sb, sn, code), bv, nv, delta in zip(sel.tolist(), p.new_at[k].tolist(), codes, *values):
            st_b, st_n = STATUS_NAMES[sb], STATUS_NAMES[sn]
            rows[n] = {
                "backend": p.backend, "metric": p.metric, "case_id": ids[i], "tags": tags_of(i),
                "base_value": bv if bv - bv == 0 else None, "new_value": nv if nv - nv == 0 else None,
                "delta": delta if delta - delta == 0 else None, "base_status": st_b, "new_status": st_n,
                "change": ("same", "worse", "better")[code] if code != _STATUS else f"{st_b} -> {st_n}",
                "base_error": None, "new_error": None,
            }
    return rows


def _errors(rows: list[dict], where: list[tuple[_Paired, int]]) -> None:
    """Fill the rows' ``base_error`` and ``new_error`` from their scores (read for errored ones only)."""
    for side, status, col_of, at_of in (("base", "base_status", "base_col", "base_at"),
                                        ("new", "new_status", "new_col", "new_at")):
        want = [(n, p, k) for n, (p, k) in enumerate(where) if getattr(p, status)[k] == ERROR]
        by_col: dict[int, list] = {}
        for n, p, k in want:
            by_col.setdefault(id(p), []).append((n, p, k))
        for group in by_col.values():
            p = group[0][1]
            got = getattr(p, col_of).scores([int(getattr(p, at_of)[k]) for _, _, k in group])
            for (n, _, _), s in zip(group, got):
                rows[n][f"{side}_error"] = s.error if s is not None else None


def diff_runs(
    base: Run | str | Path,
    new: Run | str | Path,
    *,
    backends: Optional[Iterable[str]] = None,
    metrics: Optional[Iterable[str]] = None,
    tags: Optional[Iterable[str]] = None,
    by_tag: bool = True,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    n_permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
    allow_incomplete: bool = False,
    progress: Optional[Steps] = None,
) -> RunDiff:
    """Diff two run folders (or `Run` objects) case by case.

    Raises `IncompleteRunError` when either run did not finish, unless ``allow_incomplete`` (then
    the problem is in ``warnings``), and `RegressionError` for anything else that cannot be compared.
    """
    import pandas as pd

    if not 0 < confidence < 1:
        raise RegressionError(f"confidence must be between 0 and 1, got {confidence}")
    if n_resamples < 100 or n_permutations < 100:
        raise RegressionError(
            f"resamples and permutations must be at least 100, got {n_resamples} and {n_permutations}"
        )
    base_run = open_run(base, "base run", RegressionError)
    new_run = open_run(new, "new run", RegressionError)
    warnings: list[str] = []
    for run, what in ((base_run, "base run"), (new_run, "new run")):
        problems = run_problems(run)
        if problems and not allow_incomplete:
            require_complete(run, what, "or pass --allow-incomplete to diff what it holds")
        if problems:
            note = f"{what} {run.path or ''} is incomplete: {'; '.join(problems)}"
            warnings.append(note.replace("  ", " "))
    bcols, ncols = base_run.columns, new_run.columns
    common, only_base, only_new = _keys(base_run, bcols, new_run, ncols, backends, metrics)
    bc, nc = bcols.cases, ncols.cases
    base_ids, new_ids = _case_ids(bc), _case_ids(nc)
    b_at = bc.find(new_ids)
    paired = np.flatnonzero(b_at >= 0)
    base_at = b_at[paired]
    in_new = nc.find(base_ids)  # new_ids are the first of nc's ids
    only_in_base = base_ids.take(np.flatnonzero((in_new < 0) | (in_new >= len(new_ids))))
    only_in_new = new_ids.take(np.flatnonzero(b_at < 0))

    def tags_of(i: int) -> list[str]:
        if i < nc.described:
            return list(nc.tags[i])
        j = bc.place(nc.ids[i])
        return list(bc.tags[j]) if j is not None and j < bc.described else []

    fp_b, fp_n = (r.manifest.dataset.get("fingerprint") for r in (base_run, new_run))
    fingerprint_differs = bool(fp_b and fp_n and fp_b != fp_n)
    golden_changed = _golden_changed(bc, nc, paired)
    if fingerprint_differs:
        warnings.append(dataset_change_message(golden_changed, len(only_in_new), len(only_in_base)))
    warnings += _setup_changes(base_run, new_run, common)

    try:
        wanted_tags = set(clean_tags(tags)) if tags else None
    except ValueError as exc:
        raise RegressionError(str(exc)) from None
    masks = _tag_masks(bc, nc, paired)
    known_tags = {t for t, mask in masks.items() if mask.any()}
    if wanted_tags:
        unknown = sorted(wanted_tags - known_tags)
        if unknown:
            raise RegressionError(
                f"no paired case carries tag {', '.join(map(repr, unknown))}; "
                f"tags: {', '.join(sorted(known_tags)) or 'none'}"
            )
    groups = {ALL: np.ones(len(paired), bool)}
    if by_tag:
        for t in sorted(known_tags):
            if wanted_tags is None or t in wanted_tags:
                groups[t] = masks[t]
    parts, groups_of = [], []
    noise = noise_of(base_run, new_run)
    for backend, metric in common:
        p = _pair(backend, metric, bcols.column(backend, metric), ncols.column(backend, metric), paired,
                  base_at)
        parts.append(p)
        groups_of += [(backend, metric, tag, p, members) for tag, members in groups.items()
                      if tag == ALL or members.any()]
    # each group's shift (its bootstrap and permutation test) in a thread of its own, rows in order
    summary_rows = []
    with thread_pool(threads(), "shift") as pool, (progress or Steps.quiet()).start(len(groups_of)) as steps:
        for row in pool.map(lambda g: _summary_row(*g, confidence, n_resamples, n_permutations, seed),
                            groups_of):
            summary_rows.append(row)
            steps.advance()
    for row, (backend, metric, *_) in zip(summary_rows, groups_of):
        row.update(_within_noise(row, noise.get((backend, metric))))
    summary = pd.DataFrame(summary_rows, columns=SUMMARY_COLUMNS)
    if not summary.empty:
        summary["_tagged"] = summary["tag"] != ALL
        summary = summary.sort_values(["_tagged", "tag", "backend", "metric"], kind="stable")
        summary = summary.drop(columns="_tagged").reset_index(drop=True)
    return RunDiff(
        base=base_run, new=new_run, summary=summary, paired=parts, tags_of=tags_of,
        only_in_base=only_in_base, only_in_new=only_in_new, metrics_only_in_base=only_base,
        metrics_only_in_new=only_new, fingerprint_differs=fingerprint_differs,
        golden_changed=golden_changed, warnings=warnings, confidence=confidence,
        n_resamples=n_resamples, n_permutations=n_permutations, seed=seed,
    )


def _case_ids(cases: CaseIndex) -> CaseIds:
    """A run's case ids: those of its cases, or every id its scores name when it has no cases.jsonl."""
    return cases.ids.taken(np.arange(cases.described)) if cases.described else cases.ids


def _pair(backend: str, metric: str, bcol: Any, ncol: Any, paired: np.ndarray,
          base_at: np.ndarray) -> _Paired:
    """The paired scores of one (backend, metric) (a run without the column: every score missing)."""
    def side(col: Any, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if col is None:
            return np.zeros(len(at), np.int8), np.full(len(at), np.nan)
        return col.status[at], col.value[at]

    st_b, v_b = side(bcol, base_at)
    st_n, v_n = side(ncol, paired)
    both = (st_b == SCORED) & (st_n == SCORED)
    delta = np.where(both, v_n - v_b, np.nan)
    change = np.where(st_b == st_n, _SAME, _STATUS).astype(np.int8)
    with np.errstate(invalid="ignore"):
        change[both & (delta < -EPS)] = _WORSE
        change[both & (delta > EPS)] = _BETTER
    change[both & (np.abs(delta) <= EPS)] = _SAME
    return _Paired(backend, metric, paired, base_at, st_b, st_n, v_b, v_n, change, delta, bcol, ncol)


def _keys(base_run: Run, bcols: Any, new_run: Run, ncols: Any, backends, metrics):
    """The (backend, metric) keys selected in both runs, in the base only and in the new run only."""
    def planned(run: Run, cols: Any) -> set[tuple[str, str]]:
        return {(b, m) for b, ms in run.manifest.metrics.items() for m in ms} | set(cols.columns)

    b_keys, n_keys = planned(base_run, bcols), planned(new_run, ncols)
    want_b = set(backends) if backends else None
    want_m = set(metrics) if metrics else None
    for label, wanted, have in (
        ("backend", want_b, {k[0] for k in b_keys | n_keys}),
        ("metric", want_m, {k[1] for k in b_keys | n_keys}),
    ):
        unknown = sorted(wanted - have) if wanted else []
        if unknown:
            hint = difflib.get_close_matches(unknown[0], sorted(have), n=1)
            guess = f" (did you mean {hint[0]!r}?)" if hint else ""
            names = ", ".join(map(repr, unknown))
            raise RegressionError(f"unknown {label} {names}{guess}: the runs have {', '.join(sorted(have))}")

    def keep(key: tuple[str, str]) -> bool:
        return (want_b is None or key[0] in want_b) and (want_m is None or key[1] in want_m)

    common = sorted(k for k in b_keys & n_keys if keep(k))
    if not common:
        raise RegressionError(nothing_in_common(base_run, b_keys, new_run, n_keys, bool(want_b or want_m)))
    only_base = sorted(k for k in b_keys - n_keys if keep(k))
    return common, only_base, sorted(k for k in n_keys - b_keys if keep(k))


def _setup_changes(base_run: Run, new_run: Run, common) -> list[str]:
    """Warnings for what changed between the runs besides the system: options, backend versions,
    rubrics, the judge model."""
    out = []
    b_opts, n_opts = base_run.manifest.options, new_run.manifest.options
    for opt in sorted(set(b_opts) | set(n_opts)):
        if opt != "backend_options" and b_opts.get(opt) != n_opts.get(opt):
            out.append(f"the runs used different option {opt}: {b_opts.get(opt)!r} vs {n_opts.get(opt)!r}")
    out += version_change_warnings(base_run, new_run, {k[0] for k in common})
    for (b, m), digests in sorted(definition_changes(base_run, new_run).items()):
        if (b, m) in common:
            out.append(definition_change_message(b, m, digests))
    jb, jn = base_run.manifest.judge or {}, new_run.manifest.judge or {}
    if jb and jn and jb.get("model") != jn.get("model"):
        out.append(f"the judge model changed: {jb.get('model')} -> {jn.get('model')}")
    return out


def noise_of(base: Run, new: Run) -> dict[tuple[str, str], tuple]:
    """Per (backend, metric): each run's within-case standard deviation (None: not measured, no
    repeats) and repeats, for the judge-noise band of the diff."""
    ra, rb = repeats_of(base), repeats_of(new)
    sd_a = {(r["backend"], r["metric"]): r["within_sd"] for r in noise_figures(repeat_scores(base))}
    sd_b = {(r["backend"], r["metric"]): r["within_sd"] for r in noise_figures(repeat_scores(new))}
    return {key: (sd_a.get(key), ra, sd_b.get(key), rb) for key in set(sd_a) | set(sd_b)}


def _within_noise(row: dict, noise: Optional[tuple]) -> dict:
    """``noise_band`` (how far judge noise alone moves the mean of these paired cases, two-sided 5%),
    ``within_noise`` (the change is smaller) and ``mde`` (the smallest change this many cases can
    detect at power 0.8), or NaN / None where neither run measured its noise (no --repeats)."""
    n = row["n_paired"]
    if noise is None or not n or math.isnan(row["delta"]):
        return {"noise_band": math.nan, "within_noise": None, "mde": math.nan}
    sd_a, ra, sd_b, rb = noise
    band = noise_band(sd_a, ra, sd_b, rb, n)
    sd = sd_a if sd_a is not None else sd_b
    found = mde(sd, n, ra, other_sd=sd_b if sd_b is not None else sd, other_repeats=rb)
    within = within_judge_noise(row["delta"], band)
    return {"noise_band": math.nan if band is None else band, "within_noise": within,
            "mde": found if found is not None else math.nan}


def _summary_row(backend: str, metric: str, tag: str, p: _Paired, members: np.ndarray, confidence: float,
                 n_resamples: int, n_permutations: int, seed: int) -> dict:
    """The change in mean of one group of paired scores (``members``), its interval and p-value, and
    the counts."""
    both = members & (p.base_status == SCORED) & (p.new_status == SCORED)
    bv, nv = p.base_value[both], p.new_value[both]
    n = len(bv)
    lo, hi, p_value = mean_shift(bv, nv, seed, backend, metric, tag, confidence, n_resamples,
                                 n_permutations)
    change = np.bincount(p.change[members], minlength=4)
    return {
        "backend": backend, "metric": metric, "tag": tag, "n_paired": n,
        "base_mean": float(bv.mean()) if n else math.nan,
        "new_mean": float(nv.mean()) if n else math.nan,
        "delta": float((nv - bv).mean()) if n else math.nan,
        "ci_low": lo, "ci_high": hi,
        "p_value": p_value,
        "n_worse": int(change[_WORSE]), "n_better": int(change[_BETTER]), "n_same": int(change[_SAME]),
        "n_status_changed": int(change[_STATUS]),
    }
