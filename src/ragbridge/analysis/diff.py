"""Item-level diff of two run folders, with paired statistics.

Cases are paired by id. For every (backend, metric) scored in both runs, and for every tag, the diff
gives the change in mean over the cases scored in both runs, a paired bootstrap confidence interval
of that change and a paired permutation test p-value; then, case by case, what got worse, what got
better, and what changed status (a score that became an error or undefined, or the reverse).
Nothing is dropped silently: cases present in one run only, metrics scored in one run only, and scores
that are not numbers in one of the runs are all listed.

Statistics (`ragbridge.analysis.stats`; both seeded and reproducible; the seed of each group is
derived from ``seed`` and the group's name, so filtering metrics or tags does not change the other
groups' numbers):

- the interval is the paired bootstrap interval of the mean difference (`stats.paired_bootstrap_ci`,
  ``n_resamples`` times, default 2000);
- the p-value is a paired permutation test (`stats.paired_permutation_pvalue`: the two values of a
  case are swapped at random, a sign flip of the difference, ``n_permutations`` times, default
  9999), exact (every sign pattern enumerated) when at most ``log2(n_permutations)`` cases changed.

From Python::

    from ragbridge.analysis import diff_runs
    d = diff_runs("runs/main", "runs/pr")      # RunDiff: .summary, .items (DataFrames), .worse(), .better()
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np

from ..run import Run
from ..run.summary import ALL
from ..schema import Case, Score, clean_tags
from .stats import (
    DEFAULT_PERMUTATIONS,
    DEFAULT_RESAMPLES,
    EPS,
    group_seed,
    paired_bootstrap_ci,
    paired_permutation_pvalue,
)
from .noise import mde, noise_band, noise_figures, repeats_of, within_judge_noise
from .table import AnalysisError, open_run

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

#: Case fields that define the test itself (as opposed to the system's output: answer, contexts).
GOLDEN_FIELDS = (
    "question", "relevant", "relevant_spans", "reference", "reference_contexts", "must_contain",
    "must_not_contain", "answerable",
)
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
    case_ids = [c.id for c in run.cases] or sorted({s.case_id for s in run.scores})
    n_cases = run.manifest.dataset.get("n_cases")
    if run.cases and isinstance(n_cases, int) and n_cases != len(run.cases):
        problems.append(f"run.json says {n_cases} cases but cases.jsonl holds {len(run.cases)}")
    have = {s.key for s in run.scores}
    expected = sum(len(ms) for ms in run.manifest.metrics.values()) * len(case_ids)
    missing = sum(
        1
        for backend, metrics in run.manifest.metrics.items()
        for metric in metrics
        for cid in case_ids
        if (cid, metric, backend) not in have
    )
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


def _golden(case: Case) -> dict:
    return case.model_dump(mode="json", include=set(GOLDEN_FIELDS))


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
    bc = {c.id: c for c in base.cases}
    nc = {c.id: c for c in new.cases}
    changed = [cid for cid in nc if cid in bc and _golden(nc[cid]) != _golden(bc[cid])]
    added = sum(cid not in bc for cid in nc)
    removed = sum(cid not in nc for cid in bc)
    return bool(fb and fn and fb != fn), changed, added, removed


# --------------------------------------------------------------------------------------------
# The diff


@dataclass
class RunDiff:
    """The diff of two runs. ``summary`` and ``items`` are pandas DataFrames."""

    base: Run
    new: Run
    summary: "object"
    items: "object"
    only_in_base: list[str] = field(default_factory=list)
    only_in_new: list[str] = field(default_factory=list)
    metrics_only_in_base: list[tuple[str, str]] = field(default_factory=list)
    metrics_only_in_new: list[tuple[str, str]] = field(default_factory=list)
    fingerprint_differs: bool = False
    golden_changed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    confidence: float = 0.95
    n_resamples: int = DEFAULT_RESAMPLES
    n_permutations: int = DEFAULT_PERMUTATIONS
    seed: int = 0

    def __repr__(self) -> str:  # one line: the frames hold a row per paired score
        change = self.items["change"]
        return (
            f"RunDiff({str(self.base.path)!r} -> {str(self.new.path)!r}, {len(self.items)} paired scores: "
            f"{int((change == 'worse').sum())} worse, {int((change == 'better').sum())} better, "
            f"{int((~change.isin(['worse', 'better', 'same'])).sum())} changed status)"
        )

    def _select(self, change: Sequence[str], backend: Optional[str], metric: Optional[str]):
        items = self.items
        mask = items["change"].isin(list(change))
        if backend is not None:
            mask &= items["backend"] == backend
        if metric is not None:
            mask &= items["metric"] == metric
        return items[mask]

    def worse(self, backend: Optional[str] = None, metric: Optional[str] = None, top: Optional[int] = None):
        """Cases scored in both runs whose value went down, the largest drop first."""
        rows = self._select(["worse"], backend, metric).sort_values(
            ["delta", "backend", "metric", "case_id"], kind="stable"
        )
        return (rows.head(top) if top else rows).reset_index(drop=True)

    def better(self, backend: Optional[str] = None, metric: Optional[str] = None, top: Optional[int] = None):
        """Cases scored in both runs whose value went up, the largest gain first."""
        rows = self._select(["better"], backend, metric).sort_values(
            ["delta", "backend", "metric", "case_id"], ascending=[False, True, True, True], kind="stable"
        )
        return (rows.head(top) if top else rows).reset_index(drop=True)

    def status_changes(self, backend: Optional[str] = None, metric: Optional[str] = None):
        """Cases whose score changed kind: a number that became an error or undefined, or the reverse."""
        items = self.items
        mask = ~items["change"].isin(["worse", "better", "same"])
        if backend is not None:
            mask &= items["backend"] == backend
        if metric is not None:
            mask &= items["metric"] == metric
        return items[mask].reset_index(drop=True)


def _status(score: Optional[Score]) -> str:
    return "missing" if score is None else score.status


def _index(run: Run) -> dict[tuple[str, str], dict[str, Score]]:
    out: dict[tuple[str, str], dict[str, Score]] = defaultdict(dict)
    for s in run.scores:
        out[(s.backend, s.metric)][s.case_id] = s
    return out


def _case_ids(run: Run) -> list[str]:
    return [c.id for c in run.cases] if run.cases else list(dict.fromkeys(s.case_id for s in run.scores))


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
    b_idx, n_idx = _index(base_run), _index(new_run)
    common, only_base, only_new = _keys(base_run, b_idx, new_run, n_idx, backends, metrics)

    base_ids, new_ids = _case_ids(base_run), _case_ids(new_run)
    base_set, new_set = set(base_ids), set(new_ids)
    paired_ids = [cid for cid in new_ids if cid in base_set]
    only_in_base = [cid for cid in base_ids if cid not in new_set]
    only_in_new = [cid for cid in new_ids if cid not in base_set]
    b_cases = {c.id: c for c in base_run.cases}
    n_cases = {c.id: c for c in new_run.cases}
    tags_of = {cid: list((n_cases.get(cid) or b_cases[cid]).tags) if (cid in n_cases or cid in b_cases)
               else [] for cid in paired_ids}
    fp_b, fp_n = (r.manifest.dataset.get("fingerprint") for r in (base_run, new_run))
    fingerprint_differs = bool(fp_b and fp_n and fp_b != fp_n)
    golden_changed = [cid for cid in paired_ids if cid in b_cases and cid in n_cases
                      and _golden(b_cases[cid]) != _golden(n_cases[cid])]
    if fingerprint_differs:
        warnings.append(dataset_change_message(golden_changed, len(only_in_new), len(only_in_base)))
    warnings += _setup_changes(base_run, new_run, common)

    try:
        wanted_tags = set(clean_tags(tags)) if tags else None
    except ValueError as exc:
        raise RegressionError(str(exc)) from None
    if wanted_tags:
        known_tags = {t for ts in tags_of.values() for t in ts}
        unknown = sorted(wanted_tags - known_tags)
        if unknown:
            raise RegressionError(
                f"no paired case carries tag {', '.join(map(repr, unknown))}; "
                f"tags: {', '.join(sorted(known_tags)) or 'none'}"
            )
    item_rows, summary_rows = [], []
    noise = noise_of(base_run, new_run)
    for backend, metric in common:
        rows = _item_rows(backend, metric, b_idx.get((backend, metric), {}),
                          n_idx.get((backend, metric), {}), paired_ids, tags_of)
        item_rows.extend(rows)
        groups: dict[str, list[dict]] = defaultdict(list)
        for row in rows:
            groups[ALL].append(row)
            for t in row["tags"] if by_tag else ():
                if wanted_tags is None or t in wanted_tags:
                    groups[t].append(row)
        for tag in [ALL] + sorted(t for t in groups if t != ALL):
            gseed = group_seed(seed, backend, metric, tag)
            row = _summary_row(backend, metric, tag, groups[tag], confidence, n_resamples,
                               n_permutations, gseed)
            row.update(_within_noise(row, noise.get((backend, metric))))
            summary_rows.append(row)
    summary = pd.DataFrame(summary_rows, columns=SUMMARY_COLUMNS)
    if not summary.empty:
        summary["_tagged"] = summary["tag"] != ALL
        summary = summary.sort_values(["_tagged", "tag", "backend", "metric"], kind="stable")
        summary = summary.drop(columns="_tagged").reset_index(drop=True)
    return RunDiff(
        base=base_run, new=new_run, summary=summary, items=pd.DataFrame(item_rows, columns=ITEM_COLUMNS),
        only_in_base=only_in_base, only_in_new=only_in_new, metrics_only_in_base=only_base,
        metrics_only_in_new=only_new, fingerprint_differs=fingerprint_differs,
        golden_changed=golden_changed, warnings=warnings, confidence=confidence,
        n_resamples=n_resamples, n_permutations=n_permutations, seed=seed,
    )


def _keys(base_run: Run, b_idx, new_run: Run, n_idx, backends, metrics):
    """The (backend, metric) keys selected in both runs, in the base only and in the new run only."""
    def planned(run: Run, idx) -> set[tuple[str, str]]:
        return {(b, m) for b, ms in run.manifest.metrics.items() for m in ms} | set(idx)

    b_keys, n_keys = planned(base_run, b_idx), planned(new_run, n_idx)
    want_b = set(backends) if backends else None
    want_m = set(metrics) if metrics else None
    for label, wanted, have in (
        ("backend", want_b, {k[0] for k in b_keys | n_keys}),
        ("metric", want_m, {k[1] for k in b_keys | n_keys}),
    ):
        unknown = sorted(wanted - have) if wanted else []
        if unknown:
            raise RegressionError(
                f"unknown {label} {', '.join(map(repr, unknown))}: the runs have {', '.join(sorted(have))}"
            )

    def keep(key: tuple[str, str]) -> bool:
        return (want_b is None or key[0] in want_b) and (want_m is None or key[1] in want_m)

    common = sorted(k for k in b_keys & n_keys if keep(k))
    if not common:
        raise RegressionError(
            "the two runs have no (backend, metric) in common"
            + (" among those selected" if (want_b or want_m) else "")
            + f": base has {', '.join(f'{b}:{m}' for b, m in sorted(b_keys)) or 'none'}; "
            f"new has {', '.join(f'{b}:{m}' for b, m in sorted(n_keys)) or 'none'}"
        )
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
    for b in sorted({k[0] for k in common}):
        vb, vn = base_run.manifest.backends.get(b), new_run.manifest.backends.get(b)
        if vb != vn:
            out.append(f"backend {b} version changed: {vb} -> {vn}")
    for (b, m), digests in sorted(definition_changes(base_run, new_run).items()):
        if (b, m) in common:
            out.append(definition_change_message(b, m, digests))
    jb, jn = base_run.manifest.judge or {}, new_run.manifest.judge or {}
    if jb and jn and jb.get("model") != jn.get("model"):
        out.append(f"the judge model changed: {jb.get('model')} -> {jn.get('model')}")
    return out


def _item_rows(backend: str, metric: str, bs: dict[str, Score], ns: dict[str, Score],
               paired_ids: list[str], tags_of: dict[str, list[str]]) -> list[dict]:
    """One row per paired case: both values, the change and both statuses."""
    rows = []
    for cid in paired_ids:
        sb, sn = bs.get(cid), ns.get(cid)
        st_b, st_n = _status(sb), _status(sn)
        if st_b == "scored" and st_n == "scored":
            delta = sn.value - sb.value
            change = "worse" if delta < -EPS else ("better" if delta > EPS else "same")
        else:
            delta = math.nan
            change = "same" if st_b == st_n else f"{st_b} -> {st_n}"
        rows.append({
            "backend": backend, "metric": metric, "case_id": cid, "tags": tags_of[cid],
            "base_value": sb.value if sb is not None else None,
            "new_value": sn.value if sn is not None else None,
            "delta": delta, "base_status": st_b, "new_status": st_n, "change": change,
            "base_error": sb.error if sb is not None else None,
            "new_error": sn.error if sn is not None else None,
        })
    return rows


def noise_of(base: Run, new: Run) -> dict[tuple[str, str], tuple]:
    """Per (backend, metric): each run's within-case standard deviation (None: not measured, no
    repeats) and repeats, for the judge-noise band of the diff."""
    ra, rb = repeats_of(base), repeats_of(new)
    sd_a = {(r["backend"], r["metric"]): r["within_sd"] for r in noise_figures(base.repeat_scores or [])}
    sd_b = {(r["backend"], r["metric"]): r["within_sd"] for r in noise_figures(new.repeat_scores or [])}
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


def _summary_row(backend: str, metric: str, tag: str, members: list[dict], confidence: float,
                 n_resamples: int, n_permutations: int, seed: int) -> dict:
    """The change in mean of one group of item rows, its interval and p-value, and the counts."""
    pairs = [(r["base_value"], r["new_value"]) for r in members
             if r["base_status"] == "scored" and r["new_status"] == "scored"]
    bv = np.array([p[0] for p in pairs], dtype=float)
    nv = np.array([p[1] for p in pairs], dtype=float)
    lo, hi = paired_bootstrap_ci(bv, nv, confidence, n_resamples, seed)
    return {
        "backend": backend, "metric": metric, "tag": tag, "n_paired": len(pairs),
        "base_mean": float(bv.mean()) if len(pairs) else math.nan,
        "new_mean": float(nv.mean()) if len(pairs) else math.nan,
        "delta": float((nv - bv).mean()) if len(pairs) else math.nan,
        "ci_low": lo, "ci_high": hi,
        "p_value": paired_permutation_pvalue(bv, nv, "two-sided", 0.0, n_permutations, seed),
        "n_worse": sum(r["change"] == "worse" for r in members),
        "n_better": sum(r["change"] == "better" for r in members),
        "n_same": sum(r["change"] == "same" for r in members),
        "n_status_changed": sum(r["change"] not in ("worse", "better", "same") for r in members),
    }
