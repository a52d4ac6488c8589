"""Item-level diff of two run folders, with paired statistics.

Cases are paired by id. For every (backend, metric) scored in both runs, and for every tag, the diff
gives the change in mean over the cases scored in both runs, a paired bootstrap confidence interval
of that change and a paired permutation test p-value; then, case by case, what got worse, what got
better, and what changed status (a score that became an error or undefined, or the reverse).
Nothing is dropped silently: cases present in one run only, metrics scored in one run only, and scores
that are not numbers in one of the runs are all listed.

Statistics (both seeded and reproducible; the seed of each group is derived from ``seed`` and the
group's name, so filtering metrics or tags does not change the other groups' numbers):

- the interval is a percentile bootstrap of the mean paired difference (cases resampled with
  replacement, ``n_resamples`` times, default 2000, numpy's PCG64 generator);
- the p-value is a paired permutation test (the test of ``scipy.stats.permutation_test`` with
  ``permutation_type="samples"``, checked against it in the tests): the two values of a case are
  swapped at random, a sign flip of the difference, ``n_permutations`` times (default 9999). Cases
  with no difference cannot change the statistic and are left out, which makes the test exact
  (every sign pattern enumerated) when at most ``log2(n_permutations)`` cases changed.
"""

from __future__ import annotations

import math
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np

from .run import Run, RunError, load_run
from .schema import Case, Score
from .summary import ALL

__all__ = [
    "RegressionError",
    "IncompleteRunError",
    "RunDiff",
    "diff_runs",
    "run_problems",
    "require_complete",
    "paired_bootstrap_ci",
    "paired_permutation_pvalue",
    "GOLDEN_FIELDS",
]

#: Case fields that define the test itself (as opposed to the system's output: answer, contexts).
GOLDEN_FIELDS = (
    "question", "relevant", "reference", "reference_contexts", "must_contain", "must_not_contain",
    "answerable",
)
_EPS = 1e-12
_BLOCK = 4_000_000  # resampled values held in memory at once
DEFAULT_RESAMPLES = 2000  # bootstrap resamples (interval end points)
DEFAULT_PERMUTATIONS = 9999  # permutation test resamples (p-value resolution 1e-4)
SUMMARY_COLUMNS = [
    "backend", "metric", "tag", "n_paired", "base_mean", "new_mean", "delta", "ci_low", "ci_high",
    "p_value", "n_worse", "n_better", "n_same", "n_status_changed",
]
ITEM_COLUMNS = [
    "backend", "metric", "case_id", "tags", "base_value", "new_value", "delta", "base_status",
    "new_status", "change", "base_error", "new_error",
]


class RegressionError(ValueError):
    """Bad input to a diff or a gate (not a run folder, nothing to compare, a bad gates file)."""


class IncompleteRunError(RegressionError):
    """A run folder whose run did not finish (killed, interrupted, or still running)."""

    def __init__(self, message: str, run: Optional[Run] = None, problems: Sequence[str] = ()):
        super().__init__(message)
        self.run = run
        self.problems = list(problems)


# --------------------------------------------------------------------------------------------
# Statistics


def _group_seed(seed: int, *key: str) -> int:
    return (int(seed) + zlib.crc32("\x1f".join(key).encode())) % (2**32)


def paired_bootstrap_ci(
    base: Sequence[float],
    new: Sequence[float],
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(new - base)``, resampling cases (pairs) with replacement.

    ``(nan, nan)`` with fewer than two pairs. Memory stays bounded for large runs (resampled in blocks).
    """
    d = np.asarray(new, dtype=float) - np.asarray(base, dtype=float)
    n = d.size
    if n < 2:
        return (math.nan, math.nan)
    if np.all(np.abs(d - d[0]) <= _EPS):
        return (float(d[0]), float(d[0]))
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    block = max(1, _BLOCK // n)
    itype = np.int16 if n < 2**15 else np.int32
    for start in range(0, n_resamples, block):
        stop = min(n_resamples, start + block)
        idx = rng.integers(0, n, size=(stop - start, n), dtype=itype)
        means[start:stop] = d[idx].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(means, [tail, 1.0 - tail])
    return (float(lo), float(hi))


def paired_permutation_pvalue(
    base: Sequence[float],
    new: Sequence[float],
    alternative: str = "two-sided",
    shift: float = 0.0,
    n_resamples: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
) -> float:
    """Paired permutation test of ``mean(new - base) == -shift``: the two values of a case are swapped
    at random, i.e. the sign of each paired difference is flipped.

    The same test as ``scipy.stats.permutation_test(..., permutation_type="samples")`` (exact when the
    sign patterns are at most ``n_resamples``; otherwise ``(hits + 1) / (n_resamples + 1)``), computed
    with random bits and a matrix product, which is 20-60 times faster for hundreds of cases.

    ``alternative``: ``"two-sided"``, ``"less"`` (new is lower) or ``"greater"``. ``shift`` moves the
    null: with ``shift=0.02`` and ``"less"`` the test asks whether new is lower than base by more than
    0.02. Returns 1.0 when no case differs (and NaN with no pairs).
    """
    if alternative not in ("two-sided", "less", "greater"):
        raise ValueError(f"alternative must be 'two-sided', 'less' or 'greater', got {alternative!r}")
    b = np.asarray(base, dtype=float)
    x = np.asarray(new, dtype=float)
    if b.size == 0:
        return math.nan
    d = x - b + shift
    d = d[np.abs(d) > _EPS]  # a zero difference is the same under either sign
    m = d.size
    if m == 0:
        return 1.0
    total = float(d.sum())
    observed = total
    gamma = abs(observed) * 1e-12 + 1e-12
    if 2**m <= n_resamples:  # exact: every sign pattern
        bits = (np.arange(2**m)[:, None] >> np.arange(m)) & 1
        null = 2.0 * (bits @ d) - total
        n_less = int(np.count_nonzero(null <= observed + gamma))
        n_greater = int(np.count_nonzero(null >= observed - gamma))
        p_less, p_greater = n_less / 2**m, n_greater / 2**m
    else:
        rng = np.random.default_rng(seed)
        n_less = n_greater = 0
        block = max(1, _BLOCK // m)
        for start in range(0, n_resamples, block):
            k = min(n_resamples, start + block) - start
            bits = np.unpackbits(rng.integers(0, 256, size=(k, (m + 7) // 8), dtype=np.uint8), axis=1, count=m)
            null = 2.0 * (bits @ d) - total
            n_less += int(np.count_nonzero(null <= observed + gamma))
            n_greater += int(np.count_nonzero(null >= observed - gamma))
        p_less, p_greater = (n_less + 1) / (n_resamples + 1), (n_greater + 1) / (n_resamples + 1)
    if alternative == "less":
        return float(p_less)
    if alternative == "greater":
        return float(p_greater)
    return float(min(1.0, 2.0 * min(p_less, p_greater)))


# --------------------------------------------------------------------------------------------
# Run folders


_STATUS_MEANING = {
    "running": "it is still running (a run whose process is gone reads as interrupted)",
    "interrupted": "it was interrupted before it finished",
    "incomplete": "some scores it planned are missing",
}


def _as_run(run: Run | str | Path, what: str) -> Run:
    if isinstance(run, Run):
        return run
    path = Path(run)
    if not path.exists():
        raise RegressionError(f"{what} {path} does not exist")
    if not path.is_dir():
        raise RegressionError(f"{what} {path} is not a run folder (a folder written by `ragbridge run`)")
    try:
        return load_run(path)
    except RunError as exc:
        raise RegressionError(f"{what}: {exc}") from None
    except ValueError as exc:  # a damaged cases.jsonl
        raise RegressionError(f"{what} {path}: {exc}") from None


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
    base_run = _as_run(base, "base run")
    new_run = _as_run(new, "new run")
    warnings: list[str] = []
    for run, what in ((base_run, "base run"), (new_run, "new run")):
        problems = run_problems(run)
        if problems and not allow_incomplete:
            require_complete(run, what, "or pass --allow-incomplete to diff what it holds")
        if problems:
            warnings.append(f"{what} {run.path or ''} is incomplete: {'; '.join(problems)}".replace("  ", " "))

    def index(run: Run) -> dict[tuple[str, str], dict[str, Score]]:
        out: dict[tuple[str, str], dict[str, Score]] = defaultdict(dict)
        for s in run.scores:
            out[(s.backend, s.metric)][s.case_id] = s
        return out

    b_idx, n_idx = index(base_run), index(new_run)

    def planned(run: Run, idx) -> set[tuple[str, str]]:
        keys = {(b, m) for b, ms in run.manifest.metrics.items() for m in ms}
        return keys | set(idx)

    b_keys, n_keys = planned(base_run, b_idx), planned(new_run, n_idx)
    want_b = set(backends) if backends else None
    want_m = set(metrics) if metrics else None
    for label, wanted, have in (
        ("backend", want_b, {k[0] for k in b_keys | n_keys}),
        ("metric", want_m, {k[1] for k in b_keys | n_keys}),
    ):
        if wanted:
            unknown = sorted(wanted - have)
            if unknown:
                raise RegressionError(
                    f"unknown {label} {', '.join(map(repr, unknown))}: the runs have {', '.join(sorted(have))}"
                )

    def keep(key: tuple[str, str]) -> bool:
        return (want_b is None or key[0] in want_b) and (want_m is None or key[1] in want_m)

    common = sorted(k for k in b_keys & n_keys if keep(k))
    only_base = sorted(k for k in b_keys - n_keys if keep(k))
    only_new = sorted(k for k in n_keys - b_keys if keep(k))
    if not common:
        raise RegressionError(
            "the two runs have no (backend, metric) in common"
            + (" among those selected" if (want_b or want_m) else "")
            + f": base has {', '.join(f'{b}:{m}' for b, m in sorted(b_keys)) or 'none'}; "
            f"new has {', '.join(f'{b}:{m}' for b, m in sorted(n_keys)) or 'none'}"
        )

    def case_ids(run: Run) -> list[str]:
        if run.cases:
            return [c.id for c in run.cases]
        return list(dict.fromkeys(s.case_id for s in run.scores))

    base_ids, new_ids = case_ids(base_run), case_ids(new_run)
    base_set, new_set = set(base_ids), set(new_ids)
    paired_ids = [cid for cid in new_ids if cid in base_set]
    only_in_base = [cid for cid in base_ids if cid not in new_set]
    only_in_new = [cid for cid in new_ids if cid not in base_set]

    b_cases = {c.id: c for c in base_run.cases}
    n_cases = {c.id: c for c in new_run.cases}
    tags_of = {
        cid: list((n_cases.get(cid) or b_cases.get(cid)).tags) if (cid in n_cases or cid in b_cases) else []
        for cid in paired_ids
    }
    fp_b = base_run.manifest.dataset.get("fingerprint")
    fp_n = new_run.manifest.dataset.get("fingerprint")
    fingerprint_differs = bool(fp_b and fp_n and fp_b != fp_n)
    golden_changed = [
        cid for cid in paired_ids if cid in b_cases and cid in n_cases and _golden(b_cases[cid]) != _golden(n_cases[cid])
    ]
    if fingerprint_differs:
        warnings.append(dataset_change_message(golden_changed, len(only_in_new), len(only_in_base)))
    b_opts, n_opts = base_run.manifest.options, new_run.manifest.options
    for opt in sorted(set(b_opts) | set(n_opts)):
        if opt != "backend_options" and b_opts.get(opt) != n_opts.get(opt):
            warnings.append(f"the runs used different option {opt}: {b_opts.get(opt)!r} vs {n_opts.get(opt)!r}")
    for b in sorted({k[0] for k in common}):
        vb, vn = base_run.manifest.backends.get(b), new_run.manifest.backends.get(b)
        if vb != vn:
            warnings.append(f"backend {b} version changed: {vb} -> {vn}")
    for (b, m), digests in sorted(definition_changes(base_run, new_run).items()):
        if (b, m) in common:
            warnings.append(definition_change_message(b, m, digests))
    jb, jn = base_run.manifest.judge or {}, new_run.manifest.judge or {}
    if jb and jn and jb.get("model") != jn.get("model"):
        warnings.append(f"the judge model changed: {jb.get('model')} -> {jn.get('model')}")

    item_rows = []
    summary_rows = []
    wanted_tags = set(tags) if tags else None
    if wanted_tags:
        known_tags = {t for ts in tags_of.values() for t in ts}
        unknown = sorted(wanted_tags - known_tags)
        if unknown:
            raise RegressionError(
                f"no paired case carries tag {', '.join(map(repr, unknown))}; tags: {', '.join(sorted(known_tags)) or 'none'}"
            )
    for backend, metric in common:
        bs, ns = b_idx.get((backend, metric), {}), n_idx.get((backend, metric), {})
        groups: dict[str, list[int]] = defaultdict(list)
        rows_here = []
        for cid in paired_ids:
            sb, sn = bs.get(cid), ns.get(cid)
            st_b, st_n = _status(sb), _status(sn)
            if st_b == "scored" and st_n == "scored":
                delta = sn.value - sb.value
                change = "worse" if delta < -_EPS else ("better" if delta > _EPS else "same")
            else:
                delta = math.nan
                change = "same" if st_b == st_n else f"{st_b} -> {st_n}"
            row = {
                "backend": backend,
                "metric": metric,
                "case_id": cid,
                "tags": tags_of[cid],
                "base_value": sb.value if sb is not None else None,
                "new_value": sn.value if sn is not None else None,
                "delta": delta,
                "base_status": st_b,
                "new_status": st_n,
                "change": change,
                "base_error": sb.error if sb is not None else None,
                "new_error": sn.error if sn is not None else None,
            }
            i = len(rows_here)
            rows_here.append(row)
            groups[ALL].append(i)
            if by_tag:
                for t in tags_of[cid]:
                    if wanted_tags is None or t in wanted_tags:
                        groups[t].append(i)
        item_rows.extend(rows_here)
        for tag in [ALL] + sorted(t for t in groups if t != ALL):
            members = [rows_here[i] for i in groups[tag]]
            pairs = [(r["base_value"], r["new_value"]) for r in members if r["change"] in ("worse", "better", "same")
                     and r["base_status"] == "scored" and r["new_status"] == "scored"]
            bv = np.array([p[0] for p in pairs], dtype=float)
            nv = np.array([p[1] for p in pairs], dtype=float)
            gseed = _group_seed(seed, backend, metric, tag)
            lo, hi = paired_bootstrap_ci(bv, nv, confidence, n_resamples, gseed)
            summary_rows.append(
                {
                    "backend": backend,
                    "metric": metric,
                    "tag": tag,
                    "n_paired": len(pairs),
                    "base_mean": float(bv.mean()) if len(pairs) else math.nan,
                    "new_mean": float(nv.mean()) if len(pairs) else math.nan,
                    "delta": float((nv - bv).mean()) if len(pairs) else math.nan,
                    "ci_low": lo,
                    "ci_high": hi,
                    "p_value": paired_permutation_pvalue(bv, nv, "two-sided", 0.0, n_permutations, gseed),
                    "n_worse": sum(r["change"] == "worse" for r in members),
                    "n_better": sum(r["change"] == "better" for r in members),
                    "n_same": sum(r["change"] == "same" for r in members),
                    "n_status_changed": sum(r["change"] not in ("worse", "better", "same") for r in members),
                }
            )
    summary = pd.DataFrame(summary_rows, columns=SUMMARY_COLUMNS)
    if not summary.empty:
        summary["_tagged"] = summary["tag"] != ALL
        summary = summary.sort_values(["_tagged", "tag", "backend", "metric"], kind="stable").drop(columns="_tagged")
        summary = summary.reset_index(drop=True)
    items = pd.DataFrame(item_rows, columns=ITEM_COLUMNS)
    return RunDiff(
        base=base_run,
        new=new_run,
        summary=summary,
        items=items,
        only_in_base=only_in_base,
        only_in_new=only_in_new,
        metrics_only_in_base=only_base,
        metrics_only_in_new=only_new,
        fingerprint_differs=fingerprint_differs,
        golden_changed=golden_changed,
        warnings=warnings,
        confidence=confidence,
        n_resamples=n_resamples,
        n_permutations=n_permutations,
        seed=seed,
    )
